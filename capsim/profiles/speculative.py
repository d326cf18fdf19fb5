"""Speculative decoding: the drafter's shape and the accepted-token arithmetic.

vLLM V1 (``speculative_config``: ``method`` and ``num_speculative_tokens``;
vllm/v1/spec_decode/eagle.py at f7eef1b, vllm/v1/sample/rejection_sampler.py at
7f6fc1c, vllm/v1/core/sched/scheduler.py at 00024d3) and SGLang
(python/sglang/srt/speculative/eagle_worker.py at fba8ecc, chain drafting with
``speculative_eagle_topk`` 1) run one step as: the target verifies, for each decoding
sequence, its last sampled token plus the k drafted ones (k + 1 query positions), the
rejection sampler keeps the longest accepted prefix plus one token of its own, and the
drafter proposes the next k tokens.

**Acceptance.** With a per-token acceptance rate α (the probability that a draft
token is accepted given that all before it were, the i.i.d. model of Leviathan et al.
2023, "Fast Inference from Transformers via Speculative Decoding", §3.1) the accepted
drafts a of one step follow P(a ≥ i) = α^i for i ≤ k, and the step emits a + 1 tokens:

    E[tokens per step] = Σ_{i=0..k} α^i = (1 − α^(k+1)) / (1 − α)

(their equation 1). α = 0 gives 1 (plain decoding at the verification's price).

**Acceptance by position.** Real drafters accept less the further a draft is from the last
verified token (EAGLE-3, arXiv:2503.01840, figure 7; vLLM's per-position rates). vLLM
reports, per draft position i, the fraction of drafts whose i-th token was accepted
(vllm/v1/spec_decode/metrics.py at 016a858: ``num_accepted_tokens_per_pos[i] /
num_drafts``, a position counted only when every one before it was accepted), i.e. the
survival S_i = P(a ≥ i), non-increasing in i; its mean acceptance length is
1 + Σ_{i≤k} S_i. A chain drafter's first k proposals do not depend on how many more it
would make, so the S_i measured at one k hold for every smaller k. The i.i.d. form is
S_i = α^i.

**Drafters** (:func:`draft_shape`):

- ``eagle`` / ``eagle3``: one decoder layer of the target's shape, sharing the target's
  embedding and LM head (vllm/model_executor/models/llama_eagle.py loads only the
  layer and ``fc`` and shares ``embed_tokens`` / ``lm_head``). Its ``fc`` (2·hidden →
  hidden) is counted in the weights, not priced. EAGLE-3 drafters carry their own LM head
  over a reduced vocabulary, ``draft_vocab_size`` of the drafter's config.json (vllm/
  model_executor/models/llama_eagle3.py at 583507d: ``ParallelLMHead(draft_vocab_size,
  …)`` and a ``draft_id_to_target_id`` map; 32,000 for the EAGLE-3 Llama heads): given
  it, each draft pass's head is priced at that size and its weights counted; without it
  the target's vocabulary (vLLM's fallback when the config has none). EAGLE-3's
  three-layer feature fusion (``fc`` of 3·hidden) and its 2·hidden attention input are
  not modelled. For a mixture-of-experts target the layer is dense (intermediate_size).
- ``mtp``: the model's own ``num_nextn_predict_layers`` multi-token-prediction layers
  (DeepSeek-V3: one MoE decoder layer, ``eh_proj`` and norms, sharing the embedding and
  output head; DeepSeek-V3 technical report §2.2; vllm/model_executor/models/
  deepseek_mtp.py). With k above the layer count vLLM reuses the layers
  (``n_predict`` modulo), so every draft pass runs one of them.
- ``draft_model``: a smaller model of the same vocabulary (its own embedding and head).
- ``ngram``: prompt lookup on the host: no drafter on the GPU and no KV.

Public API:
    METHODS, LOOKAHEAD_METHODS
    expected_tokens_per_step(alpha, k) -> float
    accepted_drafts(u, alpha, k) -> int
    survival_of(alpha, k) -> tuple[float, ...]
    expected_tokens_by_position(survival, k) -> float
    accepted_drafts_by_position(u, survival, k) -> int
    draft_shape(target, method, draft=None, draft_vocab_size=None) -> ModelShape | None
    draft_weight_params(target, method, draft=None, draft_vocab_size=None) -> int
"""

from __future__ import annotations

import math

from capsim.profiles.models import ModelShape

#: vLLM's ``speculative_config.method`` values capsim models.
METHODS = ("eagle", "eagle3", "mtp", "draft_model", "ngram")

#: Methods whose drafter writes KV for its k proposals, so the scheduler allocates
#: ``num_lookahead_tokens = k`` extra slots (vLLM Scheduler.__init__: ``use_eagle()`` —
#: eagle, eagle3, mtp — or ``uses_draft_model()``); ngram allocates none.
LOOKAHEAD_METHODS = ("eagle", "eagle3", "mtp", "draft_model")


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Expected tokens a sequence emits per verification step: ``(1 − α^(k+1)) / (1 − α)``
    (Leviathan et al. 2023, eq. 1); ``k + 1`` at α = 1, 1 at α = 0.

    Args:
        alpha: per-token acceptance rate in [0, 1].
        k: speculative tokens per step (``num_speculative_tokens``), >= 0.
    """
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def accepted_drafts(u: float, alpha: float, k: int) -> int:
    """Drafts accepted in one step for a uniform draw ``u`` in (0, 1]: the largest
    a <= k with u <= α^a (inverse CDF of P(a ≥ i) = α^i), so a step emits a + 1 tokens.

    α = 0 accepts none; ``u`` = 1 accepts none (α^0 = 1 is the only power reaching it).
    """
    if alpha <= 0.0 or u >= 1.0:
        return 0
    if u <= 0.0:
        return k
    a = int(math.log(u) / math.log(alpha))
    return a if a < k else k


def survival_of(alpha: float, k: int) -> tuple[float, ...]:
    """The i.i.d. rate as per-position survival: ``(α, α², …, α^k)`` (module docstring)."""
    return tuple(alpha ** i for i in range(1, k + 1))


def expected_tokens_by_position(survival: tuple[float, ...], k: int) -> float:
    """Expected tokens per verification step with per-position survival S_i = P(a ≥ i):
    ``1 + Σ_{i≤k} S_i`` (vLLM's mean acceptance length, vllm/v1/spec_decode/metrics.py at
    016a858).

    Args:
        survival: S_1 … S_n, n >= k, non-increasing, in [0, 1].
        k: drafts verified per step, 0 <= k <= n.
    """
    return 1.0 + sum(survival[:k])


def accepted_drafts_by_position(u: float, survival: tuple[float, ...], k: int) -> int:
    """Drafts accepted in one step for a uniform draw ``u`` in (0, 1]: the largest a <= k
    with u <= S_a (inverse CDF of P(a ≥ i) = S_i; S non-increasing), so a step emits
    a + 1 tokens. With S_i = α^i it draws what :func:`accepted_drafts` draws."""
    a = 0
    while a < k and u <= survival[a]:
        a += 1
    return a


def draft_shape(target: ModelShape, method: str, draft: ModelShape | None = None,
                draft_vocab_size: int | None = None) -> ModelShape | None:
    """The shape the drafter's forward passes are priced with (module docstring), or
    None for ``ngram`` (no GPU drafter). ``draft_vocab_size``: an EAGLE-3 head's own LM
    head size (None: the target's vocabulary).

    Raises:
        ValueError: ``mtp`` on a model without MTP layers; ``draft_model`` without a
            draft model, or one of another vocabulary size.
    """
    if method == "ngram":
        return None
    if method == "draft_model":
        if draft is None:
            raise ValueError("method draft_model needs a draft model (speculative.model)")
        if draft.vocab_size != target.vocab_size:
            raise ValueError(f"the draft model {draft.name} has vocab_size {draft.vocab_size:,}, "
                             f"the target {target.name} {target.vocab_size:,}: vLLM needs the "
                             "same vocabulary")
        return draft
    if method == "mtp":
        layers = target.num_nextn_predict_layers
        if not layers:
            raise ValueError(f"method mtp needs a model with multi-token-prediction layers "
                             f"(num_nextn_predict_layers > 0); {target.name} has none: use "
                             "eagle, draft_model or ngram")
        # One pass runs one MTP layer (vLLM reuses them round-robin): price one, hold all.
        return _layers_of(target, 1, moe=target.is_moe, name=f"{target.name}-mtp")
    shape = _layers_of(target, 1, moe=False, name=f"{target.name}-{method}")
    if method == "eagle3" and draft_vocab_size is not None:
        shape = shape.model_copy(update={"vocab_size": draft_vocab_size})
    return shape


def draft_weight_params(target: ModelShape, method: str, draft: ModelShape | None = None,
                        draft_vocab_size: int | None = None) -> int:
    """Parameters the drafter adds to each replica's weights: the whole draft model, the
    EAGLE layer, or every MTP layer (their embedding and head are the target's; the
    ``fc`` / ``eh_proj`` projection of 2·hidden × hidden is counted), plus an EAGLE-3
    head's own LM head when ``draft_vocab_size`` is given. 0 for ngram."""
    if method == "ngram":
        return 0
    if method == "draft_model":
        return draft_shape(target, method, draft).params_total
    layers = target.num_nextn_predict_layers if method == "mtp" else 1
    one = draft_shape(target, method)
    per_layer = one.params_total - one.embedding_params - one.lm_head_params
    own_head = draft_vocab_size * target.hidden_size \
        if method == "eagle3" and draft_vocab_size is not None else 0
    return layers * (per_layer + 2 * target.hidden_size * target.hidden_size) + own_head


def _layers_of(target: ModelShape, layers: int, *, moe: bool, name: str) -> ModelShape:
    """``target`` cut to ``layers`` decoder layers (MoE ones if ``moe``), full attention."""
    update = {"name": name, "num_hidden_layers": layers, "sliding_window_layers": 0,
              "chunked_attention_layers": 0, "num_nextn_predict_layers": 0}
    if target.is_moe:
        update["num_moe_layers"] = layers if moe else 0
    return target.model_copy(update=update)

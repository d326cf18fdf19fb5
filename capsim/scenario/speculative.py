"""The engine's ``speculative`` block: vLLM's ``speculative_config`` (vllm/config/speculative.py:
``method``, ``num_speculative_tokens``, ``model``) plus the acceptance rate capsim needs in
place of real drafts.

```yaml
engine:
  speculative:
    method: eagle                 # eagle | eagle3 | mtp | draft_model | ngram
    num_speculative_tokens: 3     # k drafts verified per step
    model: llama-3.1-8b           # draft_model only: a preset or an HF config.json path
    draft_vocab_size: 32000       # eagle3 only: the head's own LM head (its config.json)
    acceptance_rate: 0.7          # per-token α in [0, 1), every class unless overridden
    acceptance_rate_by_class: {code: 0.8}   # workload class name → α (or a by-position list)
```

The acceptance is given one of three ways: ``acceptance_rate`` (the i.i.d. α of Leviathan
et al.), ``acceptance_rate_by_position: [0.73, 0.52, 0.35]`` (vLLM's "Per-position acceptance
rate", as its SpecDecoding metrics line prints it: the fraction of drafts whose i-th token was
accepted; at least k values, non-increasing, in [0, 1]) or ``acceptance: NAME``, a published
row of ``capsim/profiles/data/speculative/acceptance.yaml``
(:mod:`capsim.profiles.acceptance`), whose method must be the engine's and which must have
been measured at k or more drafts (a row measured on a model its ``models:`` do not list is
warned about). With ``acceptance_rate_by_class`` naming every workload class, the default
may be left out.

Under an SGLang preset the drafts may be given by SGLang's names instead of
``num_speculative_tokens``: ``speculative_num_steps`` (k), ``speculative_eagle_topk`` (1:
capsim models a chain of drafts, not a tree) and ``speculative_num_draft_tokens`` (set to
k + 1 with topk 1, as SGLang's ``_handle_speculative_decoding`` does); ``method`` keeps
vLLM's names (SGLang's EAGLE on DeepSeek's NextN layer is ``mtp``, EAGLE3 ``eagle3``).

α belongs to the drafter and the content together (a draft model accepts less than
EAGLE on the same text; code accepts more than chat), so it lives here, per class,
and a variant with another drafter gives its own. See
:mod:`capsim.profiles.speculative` for what each method costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from capsim.common.schema import Float, Int, StrictModel
from capsim.profiles.acceptance import acceptance_row, check_positions
from capsim.profiles.models import ModelShape
from capsim.profiles.speculative import (LOOKAHEAD_METHODS, METHODS, draft_shape,
                                         draft_weight_params, expected_tokens_by_position,
                                         expected_tokens_per_step)


class SpeculativeConfig(StrictModel):
    """Speculative decoding of one engine (vLLM ``--speculative-config``)."""

    # in error messages
    yaml_example: ClassVar[str] = "{method: eagle, num_speculative_tokens: 3, acceptance_rate: 0.7}"

    method: Literal[METHODS]  # type: ignore[valid-type]
    num_speculative_tokens: Int = Field(gt=0)
    # SGLang's --speculative-num-steps / --speculative-eagle-topk /
    # --speculative-num-draft-tokens (module docstring)
    speculative_num_steps: Int | None = Field(default=None, gt=0)
    speculative_eagle_topk: Int | None = Field(default=None, gt=0)
    speculative_num_draft_tokens: Int | None = Field(default=None, gt=0)
    model: str | None = Field(default=None, min_length=1)
    # an EAGLE-3 head's own LM head (its config.json draft_vocab_size)
    draft_vocab_size: Int | None = Field(default=None, gt=0)
    acceptance_rate: float | None = Field(default=None, ge=0, lt=1)
    acceptance_rate_by_position: list[Float] | None = Field(default=None, min_length=1,
                                                            examples=["[0.73, 0.52, 0.35]"])
    acceptance: str | None = Field(default=None, min_length=1,
                                   examples=["eagle3-llama31-8b-mtbench"])
    # lists checked in _check_acceptance, so a bad rate is named by class and position
    acceptance_rate_by_class: dict[str, Float | list[Any]] = Field(
        default_factory=dict, examples=["{code: 0.8}"])

    @model_validator(mode="before")
    @classmethod
    def _sglang_names(cls, data: Any) -> Any:
        """SGLang's knobs: k = speculative_num_steps, with topk 1."""
        if not isinstance(data, dict) or not any(k in data for k in SGLANG_KNOBS):
            return data
        steps = data.get("speculative_num_steps")
        if steps is None:
            raise ValueError("speculative_num_steps is needed with SGLang's speculative knobs "
                             "(the drafts per step, k)")
        if data.get("num_speculative_tokens", steps) != steps:
            raise ValueError("give num_speculative_tokens (vLLM's name) or "
                             "speculative_num_steps (SGLang's), not both")
        topk = data.get("speculative_eagle_topk", 1)
        if topk != 1:
            raise ValueError(f"speculative_eagle_topk {topk}: capsim models a chain of drafts "
                             "(SGLang's topk 1), not a tree of candidates; valid: 1")
        drafts = data.get("speculative_num_draft_tokens")
        if drafts is not None and isinstance(steps, int) and drafts != steps + 1:
            # SGLang overrides it with a warning (server_args.py _handle_speculative_decoding)
            raise ValueError(f"speculative_num_draft_tokens {drafts!r}: with "
                             f"speculative_eagle_topk 1 SGLang verifies "
                             f"speculative_num_steps + 1 tokens (valid: {steps + 1})")
        return {**data, "num_speculative_tokens": steps}

    @model_validator(mode="after")
    def _check(self) -> "SpeculativeConfig":
        if self.method == "draft_model" and self.model is None:
            raise ValueError("method draft_model needs model: the draft model (a preset "
                             "name or a config.json path)")
        if self.method != "draft_model" and self.model is not None:
            raise ValueError(f"model names a draft model, used by method draft_model only; "
                             f"method {self.method} drafts with "
                             f"{'the model' if self.method != 'ngram' else 'prompt lookup'}")
        if self.draft_vocab_size is not None and self.method != "eagle3":
            raise ValueError(f"draft_vocab_size is an EAGLE-3 head's own LM head size; "
                             f"method {self.method} has none: remove it or use eagle3")
        self._check_acceptance()
        return self


    def _check_acceptance(self) -> None:
        """One of acceptance_rate / acceptance_rate_by_position / acceptance (or none, when
        acceptance_rate_by_class is to name every class); by-position lists of at least k
        valid rates; a shipped row of this method measured at >= k."""
        given = [f for f in ("acceptance_rate", "acceptance_rate_by_position", "acceptance")
                 if getattr(self, f) is not None]
        # none with a by-class map: every class must be in it (resolve_speculative checks)
        if len(given) > 1 or not given and not self.acceptance_rate_by_class:
            raise ValueError("give the acceptance one way: acceptance_rate (per-token α), "
                             "acceptance_rate_by_position (vLLM's per-position rates) or "
                             "acceptance (a shipped table's name)"
                             + (f"; got {' and '.join(given)}" if given else ""))
        k = self.num_speculative_tokens
        if self.acceptance_rate_by_position is not None:
            _check_list(self.acceptance_rate_by_position, k, "acceptance_rate_by_position")
        if self.acceptance is not None:
            row = acceptance_row(self.acceptance)
            if row.method != self.method:
                raise ValueError(f"acceptance {row.name} was measured with method "
                                 f"{row.method}; this engine's method is {self.method}")
            if row.k < k:
                raise ValueError(f"acceptance {row.name} was measured at {row.k} drafts; "
                                 f"num_speculative_tokens {k} needs as many; valid: 1 to "
                                 f"{row.k}")
        for name, value in self.acceptance_rate_by_class.items():
            if isinstance(value, list):
                _check_list(value, k, f"acceptance_rate_by_class.{name}")
            elif not 0 <= value < 1:
                raise ValueError(f"acceptance_rate_by_class.{name} must be in [0, 1), "
                                 f"got {value}")

    def base_positions(self) -> tuple[float, ...] | None:
        """The by-position rates every class uses unless overridden (None: i.i.d. α)."""
        if self.acceptance is not None:
            return tuple(acceptance_row(self.acceptance).acceptance_rate_by_position)
        if self.acceptance_rate_by_position is not None:
            return tuple(self.acceptance_rate_by_position)
        return None


def _check_list(rates: list[float], k: int, field: str) -> None:
    """``rates`` valid per-position rates covering k drafts, or ValueError naming ``field``."""
    if len(rates) < k:
        raise ValueError(f"{field} has {len(rates)} rates; num_speculative_tokens {k} needs "
                         f"one per draft position ({k} or more)")
    try:
        check_positions(rates)
    except ValueError as exc:
        raise ValueError(str(exc).replace("acceptance_rate_by_position", field, 1)) from None


#: SGLang's names for the drafts (:class:`SpeculativeConfig`).
SGLANG_KNOBS = ("speculative_num_steps", "speculative_eagle_topk",
                "speculative_num_draft_tokens")

#: Drafters vLLM does not schedule asynchronously: ``async_scheduling`` left unset turns
#: off for them, set on is refused (vllm/config/vllm.py ``VllmConfig`` at v0.19.0: only
#: EAGLE / MTP types and the GPU n-gram drafter run with it).
SERIAL_DRAFTERS = ("draft_model", "ngram")


@dataclass(frozen=True)
class SpecDecoding:
    """A variant's speculative decoding, resolved (on its ``Pool``).

    Attributes:
        method: vLLM's ``method``.
        k: ``num_speculative_tokens``.
        lookahead_tokens: extra KV slots allocated per decoding sequence each step
            (vLLM's ``num_lookahead_tokens``: k for drafters that write KV, else 0).
        alpha_by_class: acceptance rate per workload class, in ``class_id`` order (for a
            class given by position: the drafts' mean rate Σ S_i / k, vLLM's "Avg Draft
            acceptance rate").
        draft: the shape one draft pass is priced with (None: ngram).
        draft_weight_bytes_per_gpu: the drafter's weights on each GPU of the replica.
        draft_kv_bytes_per_token: the drafter's KV per token, all TP shards together
            (vLLM allocates the drafter's attention layers in the same paged pool and
            block table as the target's).
        seed: the run's seed (each request draws its acceptances from it).
        class_names: the workload's class names, in ``class_id`` order (for the log line).
        survival_by_class: per class, vLLM's per-position rates S_1 … S_k the draws use,
            or None where the class is i.i.d. α (empty: every class i.i.d.).
        acceptance_name: the shipped acceptance row used, if any (for the log line).
    """

    method: str
    k: int
    lookahead_tokens: int
    alpha_by_class: tuple[float, ...]
    draft: ModelShape | None
    draft_weight_bytes_per_gpu: int
    draft_kv_bytes_per_token: int
    seed: int
    class_names: tuple[str, ...] = ()
    survival_by_class: tuple[tuple[float, ...] | None, ...] = ()
    acceptance_name: str | None = None

    def _rate(self, c: int) -> tuple[str, float]:
        """(class c's acceptance as text, its expected tokens per step)."""
        survival = self.survival_by_class[c] if self.survival_by_class else None
        if survival is None:
            alpha = self.alpha_by_class[c]
            return f"{alpha:g}", expected_tokens_per_step(alpha, self.k)
        text = "by position " + "/".join(f"{s:.2f}" for s in survival)
        return text, expected_tokens_by_position(survival, self.k)

    def log_line(self) -> str:
        """``speculative eagle, k 3: acceptance 0.7, 2.53 tokens per step expected; drafter
        …`` with one rate for every class (``acceptance eagle3-llama31-8b-mtbench, by
        position 0.73/0.52/0.35, 2.60 tokens …`` for a shipped row), else ``acceptance by
        class: chat 0.7 (2.53 tokens per step expected), code 0.8 (2.95); drafter 0.47 GiB
        per GPU, 4,096 KV bytes per token``."""
        drafter = "no GPU drafter" if self.draft is None else (
            f"drafter {self.draft_weight_bytes_per_gpu / 2**30:.2f} GiB per GPU, "
            f"{self.draft_kv_bytes_per_token:,} KV bytes per token")
        head = f"speculative {self.method}, k {self.k}"
        rates = [self._rate(c) for c in range(len(self.alpha_by_class))]
        if len(set(rates)) == 1:
            name = f"{self.acceptance_name}, " if self.acceptance_name else ""
            return (f"{head}: acceptance {name}{rates[0][0]}, {rates[0][1]:.2f} tokens per "
                    f"step expected; {drafter}")
        names = self.class_names or tuple(f"class {i}" for i in range(len(rates)))
        parts = [f"{name} {text} ({tokens:.2f}"
                 + (" tokens per step expected)" if i == 0 else ")")
                 for i, (name, (text, tokens)) in enumerate(zip(names, rates))]
        return f"{head}: acceptance by class: {', '.join(parts)}; {drafter}"


def resolve_speculative(cfg: SpeculativeConfig, model: ModelShape, class_names: tuple[str, ...],
                        seed: int, load_draft, kv_bytes_per_token, weight_bytes: int,
                        tensor_parallel_size: int) -> SpecDecoding:
    """``cfg`` for ``model`` with the scenario's classes.

    Args:
        load_draft: ``name → ModelShape`` (the scenario's model loader).
        kv_bytes_per_token: ``ModelShape → int``, the replica's KV bytes per token rule.
        weight_bytes: bytes per weight of the engine's dtype.

    Raises:
        ValueError: ``(field, message)`` args: an unknown class name, or a drafter the
            model cannot have (:func:`~capsim.profiles.speculative.draft_shape`).
    """
    _check_classes(cfg, class_names)
    if cfg.draft_vocab_size is not None and cfg.draft_vocab_size > model.vocab_size:
        raise ValueError("draft_vocab_size",
                         f"draft_vocab_size {cfg.draft_vocab_size:,} is more than the target's "
                         f"vocabulary: an EAGLE-3 head drafts from a subset of it (valid: 1 to "
                         f"{model.vocab_size:,})")
    draft_model = load_draft(cfg.model) if cfg.model is not None else None
    try:
        shape = draft_shape(model, cfg.method, draft_model, cfg.draft_vocab_size)
    except ValueError as exc:
        raise ValueError("model" if cfg.method == "draft_model" else "method", str(exc)) from None
    if shape is None:
        kv = 0
    elif cfg.method == "mtp":
        kv = kv_bytes_per_token(shape) * model.num_nextn_predict_layers
    else:
        kv = kv_bytes_per_token(shape)
    params = draft_weight_params(model, cfg.method, draft_model, cfg.draft_vocab_size)
    alphas, survivals = _acceptance_by_class(cfg, class_names)
    return SpecDecoding(
        method=cfg.method, k=cfg.num_speculative_tokens,
        lookahead_tokens=cfg.num_speculative_tokens if cfg.method in LOOKAHEAD_METHODS else 0,
        alpha_by_class=alphas,
        draft=shape, draft_weight_bytes_per_gpu=params * weight_bytes // tensor_parallel_size,
        draft_kv_bytes_per_token=kv, seed=seed, class_names=tuple(class_names),
        survival_by_class=survivals if any(s is not None for s in survivals) else (),
        acceptance_name=cfg.acceptance)


def _check_classes(cfg: SpeculativeConfig, class_names: tuple[str, ...]) -> None:
    """Every class of ``acceptance_rate_by_class`` exists, and every class has a rate (its
    own or the default), else ValueError ``(field, message)``."""
    unknown = sorted(set(cfg.acceptance_rate_by_class) - set(class_names))
    if unknown:
        raise ValueError("acceptance_rate_by_class",
                         f"no workload class named {unknown[0]!r}; classes: "
                         f"{', '.join(class_names)}")
    uncovered = [c for c in class_names if c not in cfg.acceptance_rate_by_class]
    if uncovered and cfg.acceptance_rate is None and cfg.base_positions() is None:
        raise ValueError("acceptance_rate",
                         f"class{'es' if len(uncovered) > 1 else ''} {', '.join(uncovered)} "
                         f"not in acceptance_rate_by_class and no default given: add "
                         f"acceptance_rate (or acceptance_rate_by_position, or acceptance), "
                         f"the default for classes the map leaves out, or list every class")


def _acceptance_by_class(cfg: SpeculativeConfig, class_names: tuple[str, ...]
                         ) -> tuple[tuple[float, ...], tuple[tuple[float, ...] | None, ...]]:
    """(α per class, per-position rates per class or None) in class order; a by-position
    class's α is its drafts' mean rate Σ S_i / k, its rates cut to k."""
    k, base = cfg.num_speculative_tokens, cfg.base_positions()
    alphas, survivals = [], []
    for c in class_names:
        value = cfg.acceptance_rate_by_class.get(c)
        if value is None:
            value = list(base) if base is not None else cfg.acceptance_rate
        if isinstance(value, list):
            survival = tuple(float(v) for v in value[:k])
            alphas.append(sum(survival) / k)
            survivals.append(survival)
        else:
            alphas.append(value)
            survivals.append(None)
    return tuple(alphas), tuple(survivals)

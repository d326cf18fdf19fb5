"""The speculative step's price (capsim/cost/speculative.py, StepPricer.price with a width)."""

from __future__ import annotations

from capsim.cost.operators import windowed
from capsim.cost.pricer import StepPricer
from capsim.cost.terms import StepInput
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

import pytest


def test_verifying_one_token_prices_exactly_a_decode_step():
    """StepPricer.price's verification keys at width 1 are the decode step's, bit for
    bit, and a step priced through the one entry equals the keyword form, with prompt
    chunks alongside too (dense, MoE + MLA, windowed layers)."""
    host = load_engine_preset("vllm-v1").host_overhead
    for name, tp in (("llama-3.1-8b", 1), ("deepseek-v3", 8), ("gpt-oss-120b", 2)):
        p = StepPricer(load_model(name), load_hardware("h200-sxm"), tp, host=host)
        t = p.terms
        ctx = windowed(51_234, 37 * t.win_tokens, t.win_frac) if t.window else 51_234
        assert p._verify_keys(37, 51_234, 1) == (ctx, ctx), name
        for prefill in (0, 700):
            pairs = 700 * 300 + 700 * 701 / 2 if prefill else 0.0
            kv = 1000 if prefill else 0
            plain = p.cost(prefill_tokens=prefill, prefill_attn_pairs=pairs,
                           prefill_kv_tokens=kv, decode_seqs=37, decode_ctx_tokens=51_234,
                           logits_seqs=38, prefill_seqs=1 if prefill else 0)
            step = StepInput(prefill, pairs, kv, 37, 51_234, [None] * (1 if prefill else 0))
            assert p.price(step, 38, width=1) == plain, (name, prefill)


def _eagle3_pool(k=3, draft_vocab_size=32000):
    from capsim.scenario.load import load
    from conftest import REPO
    over = [f"variants.1.engine.speculative.num_speculative_tokens={k}"]
    if draft_vocab_size is None:
        over.append("variants.1.engine.speculative.draft_vocab_size=null")
    loaded = load(REPO / "benchmarks" / "spec_speedup" / "eagle3_llama31_8b_h100_bs1_k2.yaml",
                  over)
    return loaded.runs[1].pool(), load_model("llama-3.1-8b")


def test_each_draft_pass_pays_the_forward_overhead_beside_its_kernels():
    """vLLM's EAGLE proposer runs each of its k passes as its own forward with an argmax
    (vllm/v1/spec_decode/eagle.py at f7eef1b), so a batch-1 step of k = 3 costs the
    verification plus three passes, each its kernels plus the H100's per-forward
    step_overhead_s (0.3 ms)."""
    from capsim.cost.speculative import SpecPricer
    from capsim.cost.terms import StepInput
    pool, model = _eagle3_pool(k=3)
    target, draft = pool.pricer(model), pool.draft_pricer()
    spec = SpecPricer(target, draft, 3)
    step = StepInput(0, 0.0, 0, 1, 400, [])
    cost, *_ = spec.price(step, 1, 4)
    verify = target.price(step, 4, 4).seconds
    passes = [draft.price(step, 1, 4)] + [draft.cost(decode_seqs=1, logits_seqs=1,
                                                     decode_ctx_tokens=400 + j)
                                          for j in (1, 2)]
    kernels = sum(p.seconds - p.overhead_s for p in passes)
    assert draft.rates.step_overhead_s == 3e-4
    assert cost.seconds - verify == pytest.approx(kernels + 3 * 3e-4, rel=1e-12)


def test_an_eagle3_head_prices_and_holds_its_own_32000_token_lm_head():
    """Eagle3LlamaForCausalLM's lm_head is ParallelLMHead(draft_vocab_size, hidden)
    (vllm/model_executor/models/llama_eagle3.py at 583507d); the EAGLE-3 Llama heads have
    draft_vocab_size 32000 (against the target's 128,256): 131 M more parameters held, and
    each pass reads a quarter of the full head's bytes."""
    (small, _), (full, _) = _eagle3_pool(), _eagle3_pool(draft_vocab_size=None)
    assert (small.spec.draft.vocab_size, full.spec.draft.vocab_size) == (32_000, 128_256)
    extra = small.spec.draft_weight_bytes_per_gpu - full.spec.draft_weight_bytes_per_gpu
    assert extra == 32_000 * 4096 * 2
    one = dict(decode_seqs=1, logits_seqs=1, decode_ctx_tokens=400)
    saved = full.draft_pricer().cost(**one).bytes - small.draft_pricer().cost(**one).bytes
    assert saved == pytest.approx((128_256 - 32_000) * 4096 * 2, rel=0.01)

"""The speculative step's price (capsim/cost/speculative.py, StepPricer.price with a width)."""

from __future__ import annotations

from capsim.cost.operators import windowed
from capsim.cost.pricer import StepPricer
from capsim.cost.terms import StepInput
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model


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

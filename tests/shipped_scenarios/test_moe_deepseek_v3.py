"""scenarios/moe_deepseek_v3.yaml end to end: DeepSeek-V3 on 8 × H200 under vLLM V1, TP 8 vs
DP attention + EP 8 vs a prefill/decode split over two nodes, chat + reasoning at 8 req/s."""

from __future__ import annotations

import pandas as pd
import pytest

from capsim.cli.main import main
from capsim.scenario.load import load

#: AWS p5en.48xlarge, 8 × H200: $63.296/h (capsim/profiles/data/hardware/h200-sxm.yaml).
NODE_USD_PER_HOUR = 63.28


@pytest.fixture(scope="module")
def moe(tmp_path_factory, scenarios_dir):
    out = tmp_path_factory.mktemp("moe") / "report"
    with pytest.raises(SystemExit) as exc:
        main(["run", str(scenarios_dir / "moe_deepseek_v3.yaml"), "-o", str(out), "--no-charts"])
        raise SystemExit(0)
    assert exc.value.code == 0
    summary = pd.read_csv(out / "summary.csv")
    return summary[summary.cls == "all"].set_index("variant")


def test_kv_cache_of_each_layout(scenarios_dir):
    """The MLA latent (70,272 bytes per token in bf16) is held whole by every TP rank, so TP 8
    caches one copy in 8 GPUs' spare memory; DP attention keeps each request's latent on one
    GPU: 6.4× the tokens (less than 8×: each GPU also holds the attention weights whole)."""
    runs = {rc.variant: rc for rc in load(scenarios_dir / "moe_deepseek_v3.yaml", []).runs}
    tp8, dp = runs["tp8"].pool().kv.num_tokens, runs["dp-attn-ep8"].pool().kv.num_tokens
    assert tp8 == 649_088 and dp == 4_144_240
    split = {p.role: p.kv.num_tokens for p in runs["1P1D"].pools}
    assert split == {"prefill": tp8, "decode": dp}
    assert runs["1P1D"].num_gpus == 16


def test_tp8_runs_out_of_kv_cache_and_fails_the_slo(moe):
    """0.65 M tokens of KV against ~2,800 tokens per reasoning request in flight for ~100 s:
    the cache fills, requests are preempted and recomputed, TTFT p99 reaches tens of seconds."""
    tp8 = moe.loc["tp8"]
    assert tp8.kv_peak_frac == pytest.approx(1.0)
    assert tp8.preemptions > 100
    assert tp8.ttft_p99_ms > 10_000
    assert not tp8.slo_pass and "goodput" in tp8.slo_failed


def test_dp_attention_is_cheapest_per_token_and_only_the_split_meets_the_slo(moe):
    """With the MoE experts priced from vLLM's fp8 fused-MoE kernel table (PR 24700) the
    co-located steps are slow enough that DP attention, cheapest per token and without
    preemption, misses ITL p99 (its decodes share steps with 8,192-token prompt chunks);
    the second node's flat ITL tail is what meets the SLO, at about 1.8x the price per token."""
    tp8, dp, split = moe.loc["tp8"], moe.loc["dp-attn-ep8"], moe.loc["1P1D"]
    assert dp.preemptions == 0 and dp.kv_peak_frac < 0.3
    assert not dp.slo_pass and "ITL p99" in dp.slo_failed
    assert split.slo_pass
    assert dp.cost_per_hour_usd == pytest.approx(NODE_USD_PER_HOUR, rel=1e-3)
    assert dp.cost_per_million_output_tokens_usd < tp8.cost_per_million_output_tokens_usd
    assert dp.output_throughput_tok_per_s > 1.05 * tp8.output_throughput_tok_per_s
    # The second node buys a flat ITL tail and a little throughput, within 10 % of DP's.
    assert split.output_throughput_tok_per_s == pytest.approx(dp.output_throughput_tok_per_s,
                                                              rel=0.1)
    assert split.cost_per_million_output_tokens_usd > 1.8 * dp.cost_per_million_output_tokens_usd


def test_the_split_keeps_8192_token_prefill_chunks_out_of_the_decode_steps(moe):
    """Co-located, a step that carries an 8,192-token prompt chunk stretches every decode in
    it (ITL p99 over 100 ms, stalls over 200 ms); the decode node of the split only decodes."""
    dp, split = moe.loc["dp-attn-ep8"], moe.loc["1P1D"]
    assert dp.itl_p99_ms > 100 and dp.itl_stalls > 0
    assert split.itl_p99_ms < 50 and split.itl_stalls == 0
    assert split.cost_per_hour_usd == pytest.approx(2 * NODE_USD_PER_HOUR, rel=1e-3)

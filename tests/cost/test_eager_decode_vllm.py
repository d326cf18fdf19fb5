"""vLLM V1 runs a decode batch above its largest CUDA-graph capture size without graphs
(``host_overhead.eager_decode_above_graph_bs`` with ``memory.cudagraph_capture``, the vLLM V1
presets), held to a launch floor of ``host_overhead.eager_decode_op_s`` per operator.

Sources (the v0.11.0 wheel, f71952c1c): vllm/config/scheduler.py ``cuda_graph_sizes``
defaults to [min(2 x max_num_seqs, 512)]; vllm/config/__init__.py ``_set_cudagraph_sizes``
captures 1, 2, 4 and multiples of 8 up to it, none above max_num_batched_tokens, and "If
batch size > largest cudagraph_capture_sizes, cudagraph will not be used";
vllm/v1/cudagraph_dispatcher.py ``dispatch`` returns CUDAGraphMode.NONE for such a batch. The
floor: vllm-project/vllm PR 1440 (Llama-2-7B eager vs graphed decode, 58.9 us per operator in
capsim, benchmarks/calibration/v0_eager_prefill_op.py), the V0 presets' eager figure.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model
from capsim.scenario.load import load

PR1440_OP_S = 5.890e-5        # s per operator (v0_eager_prefill_op.py: 11.31 ms / 192)
VLLM = load_engine_preset("vllm-0.11")
B200 = load_hardware("b200")
GPTOSS = load_model("gpt-oss-120b")
CTX = 400                     # tokens of context per sequence (a ShareGPT request's)
CASE = (Path(__file__).parents[2] / "benchmarks" / "fidelity" / "supplementary"
        / "load_vllm_pr23696_8xb200_gptoss120b_tp8_sharegpt_rate_inf.yaml")
V1_PRESETS = ("vllm-0.8", "vllm-0.9", "vllm-0.11", "vllm-v1", "vllm-0.21")


def _pricer(limit: int | None, preset=VLLM) -> StepPricer:
    return StepPricer(GPTOSS, B200, 8, quantization="mxfp4", host=preset.host_overhead,
                      decode_graph_max_seqs=limit)


def _decode_s(pricer: StepPricer, seqs: int) -> float:
    return pricer.cost(decode_seqs=seqs, decode_ctx_tokens=seqs * CTX).seconds


def test_one_above_the_largest_capture_size_prices_the_ungraphed_forward():
    """gpt-oss-120b at TP 8 on B200 (the PR 23696 case): at 513 sequences the kernels take
    ~9.7 ms, under the launches of its 216 operators + 74 collectives at 58.9 us (17.08 ms),
    so the step costs those launches + the GPU's step overhead + vLLM 0.11's serial host
    step (1.05 ms); at 512 it replays its graph, the same as with no limit."""
    pricer = _pricer(512)
    ops = pricer.terms.eager_operators + pricer.terms.eager_all_reduces
    assert (pricer.terms.eager_operators, pricer.terms.eager_all_reduces) == (216, 74)
    host_s = VLLM.host_overhead.per_step_s
    assert _decode_s(pricer, 513) == pytest.approx(
        PR1440_OP_S * ops + B200.step_overhead_s + host_s, rel=1e-9)
    assert _decode_s(pricer, 512) == _decode_s(_pricer(None), 512)
    graphed_513 = _decode_s(_pricer(None), 513) - B200.step_overhead_s - host_s
    assert 0.009 < graphed_513 < 0.011          # the kernels alone: the floor binds
    assert _decode_s(pricer, 513) > _decode_s(pricer, 512) + 0.006


def test_a_decode_run_is_priced_as_its_steps():
    """The vectorised run (the macro-steps' path) equals ``cost`` of each step, segments
    above the limit floored and those at or below it not."""
    pricer = _pricer(512)
    seqs, lengths = [900, 513, 512, 100], [2, 2, 3, 2]
    ctx0 = [n * CTX for n in seqs]
    secs, _ = pricer.decode_costs(seqs, ctx0, lengths)
    want = [pricer.cost(decode_seqs=n, decode_ctx_tokens=c + n * j, logits_seqs=n).seconds
            for n, c, m in zip(seqs, ctx0, lengths) for j in range(m)]
    assert list(secs) == want
    floor_s = PR1440_OP_S * 290
    assert secs[0] == secs[1] == pytest.approx(
        floor_s + B200.step_overhead_s + VLLM.host_overhead.per_step_s, rel=1e-9)
    assert all(s < floor_s for s in secs[4:])


def test_a_prefill_step_keeps_no_floor():
    """vLLM V1 prefills in its piecewise graphs (no eager prefill floor): a 600-token
    prefill is priced as before, however large the decode floor."""
    short = dict(prefill_tokens=600, prefill_attn_pairs=600 * 301, decode_seqs=0)
    assert _pricer(512).cost(**short).seconds == _pricer(None).cost(**short).seconds
    assert _pricer(512).eager_floor_s == 0.0


def test_the_pool_reads_vllms_largest_capture_size():
    """The case's vllm-v1 pool on B200 (1,024 sequences, 8,192 tokens by default): 512;
    max_num_seqs 100: min(200, 512) = 200; a budget of 300 tokens drops the sizes above it
    (296 the largest multiple of 8); 0.11's grid of every 8 gives 504 at 252 sequences
    where 0.19's steps by 16 above 256 give 496."""
    pool = load(CASE).runs[0].pools[0]
    assert pool.preset.name == "vllm-v1" and pool.decode_graph_max_seqs == 512

    def limit(preset: str, seqs: int, tokens: int) -> int | None:
        eng = pool.engine.model_copy(update={"max_num_seqs": seqs,
                                             "max_num_batched_tokens": tokens})
        return dataclasses.replace(pool, engine=eng,
                                   preset=load_engine_preset(preset)).decode_graph_max_seqs
    assert limit("vllm-0.11", 100, 8192) == 200
    assert limit("vllm-0.11", 1024, 300) == 296
    assert limit("vllm-0.11", 252, 8192) == 504
    assert limit("vllm-v1", 252, 8192) == 496
    assert limit("sglang-0.5", 1024, 8192) == 512     # SGLang's own table (unchanged)
    assert limit("trtllm", 1024, 8192) is None


@pytest.mark.parametrize("name", V1_PRESETS)
def test_every_v1_preset_floors_its_ungraphed_decode(name):
    """Every vLLM V1 preset says so, at the same sourced figure, collectives counted (the
    custom all-reduce copies into its buffer outside capture), with no prefill floor."""
    host = load_engine_preset(name).host_overhead
    assert host.eager_decode_above_graph_bs and host.eager_all_reduce_ops
    assert host.eager_decode_op_s == PR1440_OP_S and host.eager_prefill_op_s == 0


def test_sglangs_decode_floor_is_its_prefill_floor():
    """SGLang gives no eager_decode_op_s: its ungraphed decode keeps the eager prefill's
    per-operator figure, bit for bit as before the field existed."""
    sglang = load_engine_preset("sglang-0.5")
    pricer = StepPricer(load_model("deepseek-v3"), load_hardware("h200-sxm"), 8,
                        quantization="fp8_block", host=sglang.host_overhead,
                        decode_graph_max_seqs=512)
    eager = pricer.cost(decode_seqs=1000, decode_ctx_tokens=1000 * CTX).seconds
    assert eager == pytest.approx(
        pricer.eager_floor_s + load_hardware("h200-sxm").step_overhead_s, rel=1e-12)

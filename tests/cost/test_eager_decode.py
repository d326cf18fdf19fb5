"""Decode batches above the captured CUDA-graph sizes run eagerly
(``host_overhead.eager_decode_above_graph_bs``, the sglang-0.5 preset): such a step lasts at
least the eager forward's launches, the floor eager prefills already have.

Sources: python/sglang/srt/model_executor/cuda_graph_runner.py of the sglang 0.5.3 and 0.5.7
wheels, ``CudaGraphRunner.can_run`` (a decode batch, with DP attention the largest rank's,
replays a graph only up to ``max_bs``; model_runner.py ``forward_decode`` otherwise runs the
model eagerly); server_args.py ``_handle_gpu_memory_settings`` (``cuda_graph_max_bs`` 512 at
TP >= 4 on GPUs of 90-160 GB such as the H200, 256 below TP 4). The floor: sgl-project/sglang
PR 12160, 82.64 ms for one eager DeepSeek-V3 forward under TP (546 operators in capsim).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model
from capsim.scenario.load import load

PR12160_EAGER_S = 82.64e-3
SGLANG = load_engine_preset("sglang-0.5")
H200 = load_hardware("h200-sxm")
DSV3 = load_model("deepseek-v3")
CTX = 400                     # tokens of context per sequence (a ShareGPT request's)
CASE = (Path(__file__).parents[2] / "benchmarks" / "fidelity" / "supplementary"
        / "load_vllm0110_sglang053_trtllm100_8xh200_dsr1_sharegpt_rate_inf_engines.yaml")


def _pricer(limit: int | None) -> StepPricer:
    return StepPricer(DSV3, H200, 8, quantization="fp8_block", host=SGLANG.host_overhead,
                      decode_graph_max_seqs=limit)


def _decode_s(pricer: StepPricer, seqs: int) -> float:
    return pricer.cost(decode_seqs=seqs, decode_ctx_tokens=seqs * CTX).seconds


def test_a_decode_batch_above_the_graphs_costs_the_eager_forward():
    """1,000 sequences of DeepSeek-V3 at TP 8 on H200: the kernels take ~71 ms, under the
    eager launches (82.64 ms, PR 12160), so the step costs the launches plus the profile's
    step overhead (SGLang's overlap scheduler hides its host work behind them)."""
    graphed, eager = _decode_s(_pricer(None), 1000), _decode_s(_pricer(512), 1000)
    assert 0.055 < graphed - H200.step_overhead_s < 0.075
    assert eager == pytest.approx(PR12160_EAGER_S + H200.step_overhead_s, rel=1e-4)


def test_batches_up_to_the_limit_replay_their_graph():
    """At 512 (the largest captured size) and below nothing changes, bit for bit."""
    for seqs in (1, 64, 512):
        assert _decode_s(_pricer(512), seqs) == _decode_s(_pricer(None), seqs)


def test_the_floor_only_raises_a_step():
    """Above the limit a step whose kernels outlast the launches keeps its price (a small
    limit puts 600 sequences with long contexts above it): max(kernels, launches)."""
    pricer, plain = _pricer(8), _pricer(None)
    long = dict(decode_seqs=600, decode_ctx_tokens=600 * 60_000)
    assert plain.cost(**long).seconds - H200.step_overhead_s > PR12160_EAGER_S
    assert pricer.cost(**long).seconds == plain.cost(**long).seconds


@pytest.mark.parametrize("limit", [None, 512, 700])
def test_a_decode_run_is_priced_as_its_steps(limit):
    """The vectorised run (the macro-steps' path) is bit for bit ``cost`` of each step,
    segments above and below the limit alike."""
    pricer = _pricer(limit)
    seqs, lengths = [1000, 800, 512, 300], [3, 2, 4, 2]
    ctx0 = [n * CTX for n in seqs]
    secs, _ = pricer.decode_costs(seqs, ctx0, lengths)
    want = [pricer.cost(decode_seqs=n, decode_ctx_tokens=c + n * j, logits_seqs=n).seconds
            for n, c, m in zip(seqs, ctx0, lengths) for j in range(m)]
    assert np.array_equal(secs, np.array(want))
    floored = PR12160_EAGER_S + H200.step_overhead_s
    assert (secs[:3] == pytest.approx(floored, rel=1e-4)) == (limit is not None)


def test_the_pool_reads_sglangs_cuda_graph_max_bs():
    """The measured case's SGLang variants: 512 at TP 8 on H200 (141 GB: the 90-160 GB row);
    with DP attention the limit is per rank, 8 ranks of 512; vLLM 0.11's largest capture size
    (min(2 x 1,024, 512), tests/cost/test_eager_decode_vllm.py); the TensorRT-LLM preset
    leaves decode graphed (no limit)."""
    runs = {rc.variant: rc for rc in load(CASE).runs}
    assert runs["sglang_tp8"].pools[0].decode_graph_max_seqs == 512
    assert runs["sglang_tp8_dp_attention"].pools[0].decode_graph_max_seqs == 8 * 512
    assert runs["vllm_tp8"].pools[0].decode_graph_max_seqs == 512
    assert runs["trtllm_tp8_ep8"].pools[0].decode_graph_max_seqs is None
    sf = SGLANG.memory.static_fraction
    assert sf.cuda_graph_max_bs(H200.memory_total_bytes / 2**20, 1) == 256


@pytest.mark.parametrize("name", ["sglang-0.5", "sglang-0.5.10"])
def test_sglang_presets_run_large_decode_batches_eagerly(name):
    """Both SGLang 0.5 presets (CudaGraphRunner.can_run is the same in the 0.5.3, 0.5.7 and
    0.5.10 wheels), at their eager prefill's per-operator floor (no eager_decode_op_s of their
    own); the TensorRT-LLM presets do not say so (the vLLM V1 presets:
    tests/cost/test_eager_decode_vllm.py)."""
    host = load_engine_preset(name).host_overhead
    assert host.eager_decode_above_graph_bs and host.eager_decode_op_s == 0
    for other in ("trtllm", "trtllm-bench"):
        assert not load_engine_preset(other).host_overhead.eager_decode_above_graph_bs

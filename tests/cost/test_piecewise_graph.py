"""SGLang's piecewise CUDA graph for prefill (the sglang-0.5.10 preset's ``piecewise_cuda_graph``):
a prefill step of at most ``mla_max_tokens`` tokens of an MLA model is not held to the eager
launch floor, a larger one is, and where SGLang turns the graph off every prefill is.

Sources: python/sglang/srt/server_args.py of the sglang 0.5.12 wheel (piecewise_cuda_graph_max_tokens
2048 for an MLA backend; _handle_piecewise_cuda_graph: off on is_hip(), with DP attention, with
pp_size > 1; off for the flashinfer_trtllm MoE runner SGLang picks for DeepSeek-V3 FP8 on sm100),
model_executor/piecewise_cuda_graph_runner.py can_run (len(input_ids) <= max_num_tokens). The
floor itself: sgl-project/sglang PR 12160, 82.64 ms for a 1-token eager DeepSeek-V3 forward.
"""

from __future__ import annotations

import pytest

from capsim.cost.pipeline import PipelinePricer
from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

PR12160_EAGER_S = 82.64e-3
PRESET = load_engine_preset("sglang-0.5.10")
GRAPH = PRESET.piecewise_cuda_graph
DSV3 = load_model("deepseek-v3")


def _pricer(gpu: str = "h200-sxm", graph=GRAPH, model=DSV3, tp: int = 8, **kw) -> StepPricer:
    return StepPricer(model, load_hardware(gpu), tp, quantization="fp8_block",
                      host=PRESET.host_overhead, piecewise_cuda_graph=graph, **kw)


def _prefill_s(pricer, n: int, decode_seqs: int = 0) -> float:
    return pricer.cost(prefill_tokens=n, prefill_attn_pairs=n * n / 2, prefill_kv_tokens=n,
                       decode_seqs=decode_seqs, decode_ctx_tokens=decode_seqs * 1000).seconds


def test_the_preset_reads_sglangs_limit():
    """2,048 tokens for MLA models, CUDA only, off for DeepSeek-V3 FP8 / FP4 on B200."""
    assert GRAPH.mla_max_tokens == 2048
    assert GRAPH.platforms == ["cuda"]
    assert [(o.model_types, o.hardware) for o in GRAPH.off_on] == [(["deepseek_v3"], ["b200"])]


def test_a_short_graphed_prefill_has_no_eager_floor():
    """1 token on 8 x H200: the graph-run forward (~14 ms), not PR 12160's 82.64 ms eager one."""
    graphed, eager = _pricer(), _pricer(graph=None)
    assert _prefill_s(eager, 1) == pytest.approx(
        PR12160_EAGER_S + load_hardware("h200-sxm").step_overhead_s, rel=1e-4)
    plain = StepPricer(DSV3, load_hardware("h200-sxm"), 8, quantization="fp8_block",
                       host=PRESET.host_overhead.model_copy(update={"eager_prefill_op_s": 0.0}))
    assert _prefill_s(graphed, 1) == _prefill_s(plain, 1)
    assert _prefill_s(graphed, 1) < 0.25 * PR12160_EAGER_S


def test_the_limit_counts_the_whole_batch():
    """A forward replays the graph while len(input_ids) (prompt and decode tokens) is at most
    the limit. On 8 x H200 a 2,048-token DeepSeek prefill outlasts its launches anyway, so the
    boundary is shown at a limit of 64: 64 prompt tokens are graphed, 63 + 1 decode token too,
    64 + 1 decode token and 65 prompt tokens pay the eager floor."""
    graphed = _pricer(graph=GRAPH.model_copy(update={"mla_max_tokens": 64}))
    eager = _pricer(graph=None)
    assert _prefill_s(graphed, 64) < 0.5 * _prefill_s(eager, 64)
    assert _prefill_s(graphed, 63, decode_seqs=1) < 0.5 * _prefill_s(eager, 63, decode_seqs=1)
    assert _prefill_s(graphed, 64, decode_seqs=1) == _prefill_s(eager, 64, decode_seqs=1)
    assert _prefill_s(graphed, 65) == _prefill_s(eager, 65)


def test_at_sglangs_limit_a_1k_prompt_is_graphed():
    """The InferenceX 1k/1k H200 case's prompts (819-1,024 tokens): graphed, ~64 ms instead of
    the eager floor's ~83 ms; 2,049 tokens are eager, but their kernels outlast the launches."""
    graphed, eager = _pricer(), _pricer(graph=None)
    assert _prefill_s(graphed, 1024) == pytest.approx(0.0640, abs=0.001)
    assert _prefill_s(eager, 1024) == pytest.approx(0.0829, abs=0.001)
    assert _prefill_s(graphed, 2049) == _prefill_s(eager, 2049)


@pytest.mark.parametrize("gpu, kw", [("b200", {}), ("mi325x", {}),
                                     ("h200-sxm", {"dp_attention": True})])
def test_where_sglang_turns_the_graph_off_prefills_stay_eager(gpu, kw):
    """B200 (flashinfer_trtllm MoE for DeepSeek FP8), ROCm, DP attention: the 1-token prefill
    costs the eager floor, as under the sglang-0.5 preset."""
    if kw.get("dp_attention"):
        kw.update(attention_tp=1)
    priced = _pricer(gpu, **kw)
    assert priced._graph_tokens == 0.0
    assert _prefill_s(priced, 1) == _prefill_s(_pricer(gpu, graph=None, **kw), 1)


def test_a_model_without_mla_is_graphed_at_every_length():
    """Not MLA: the limit is chunked_prefill_size, so no prefill step is eager."""
    llama = load_model("llama-3.1-70b")
    assert _pricer(model=llama, tp=4)._graph_tokens == float("inf")


def test_pipeline_parallel_keeps_the_floor():
    """pp_size > 1 turns the graph off: every stage keeps the eager floor."""
    pp = PipelinePricer(DSV3, load_hardware("h200-sxm"), 4, 2, host=PRESET.host_overhead,
                        quantization="fp8_block", piecewise_cuda_graph=GRAPH)
    assert all(s._graph_tokens == 0.0 for s in pp.stages)

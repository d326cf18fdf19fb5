"""``capsim engines`` says which presets run decode batches above their CUDA graphs eagerly
(``host_overhead.eager_decode_above_graph_bs``: SGLang's CudaGraphRunner.can_run and vLLM
V1's CUDA-graph dispatcher, see tests/cost/test_eager_decode.py)."""

from __future__ import annotations

from capsim.cli.engines import _host_text
from capsim.profiles.engines import load_engine_preset

PHRASE = "decode batches above cuda_graph_max_bs eager"
VLLM_PHRASE = "decode batches above the largest capture size eager (58.9 us/operator floor)"


def test_the_host_column_names_the_eager_decode_rule():
    assert PHRASE in _host_text(load_engine_preset("sglang-0.5").host_overhead)
    assert PHRASE not in _host_text(load_engine_preset("vllm-0.11").host_overhead)


def test_the_host_column_gives_vllms_own_decode_floor():
    """vLLM V1 presets floor an ungraphed decode step at their own per-operator figure
    (vllm-project/vllm PR 1440's 58.9 us, the V0 presets' eager_prefill_op_s)."""
    assert VLLM_PHRASE in _host_text(load_engine_preset("vllm-0.11").host_overhead)
    assert "capture size" not in _host_text(load_engine_preset("sglang-0.5").host_overhead)
    assert "capture size" not in _host_text(load_engine_preset("trtllm").host_overhead)

"""``capsim engines`` says which presets run decode batches above their CUDA graphs eagerly
(``host_overhead.eager_decode_above_graph_bs``: SGLang's CudaGraphRunner.can_run, see
tests/cost/test_eager_decode.py)."""

from __future__ import annotations

from capsim.cli.engines import _host_text
from capsim.profiles.engines import load_engine_preset

PHRASE = "decode batches above cuda_graph_max_bs eager"


def test_the_host_column_names_the_eager_decode_rule():
    assert PHRASE in _host_text(load_engine_preset("sglang-0.5").host_overhead)
    assert PHRASE not in _host_text(load_engine_preset("vllm-0.11").host_overhead)

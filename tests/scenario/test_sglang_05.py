"""A scenario under the sglang-0.5 preset: the defaults SGLang 0.5 picks from the GPU, the TP
and the drafter (python/sglang/srt/server_args.py of the sglang 0.5.7 wheel), and its
overlap scheduler hiding the host step (managers/scheduler.py event_loop_overlap)."""

from __future__ import annotations

import pytest
import yaml

from capsim.cost.pricer import StepPricer
from capsim.scenario.load import load

DOC = {
    "name": "sgl", "model": "deepseek-v3", "hardware": "h200-sxm",
    "engine": {"preset": "sglang-0.5", "tensor_parallel_size": 8},
    "workload": {"num_requests": 20, "arrival": {"process": "concurrency", "users": 4,
                                                 "think_time_s": 0.0},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 500},
                              "output_tokens": {"dist": "fixed", "value": 30}}]},
    "variants": [{"name": "default"},
                 {"name": "set", "engine": {"mem_fraction_static": 0.82}},
                 {"name": "chunk", "engine": {"max_num_batched_tokens": 32768}}],
}


def _pools(tmp_path, doc=DOC):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return {rc.variant: rc.pool() for rc in load(path).runs}


def test_mem_fraction_static_follows_sglangs_heuristic(tmp_path):
    """H200 (139.8 GiB = 143,155 MiB) TP 8, chunk 8,192: 14,848 MiB reserved, 0.896; a chunk
    of 32,768 reserves 512 + 49,152 + 1,024 + 1,024 = 51,712 MiB: 0.639; a value the scenario
    gives is kept."""
    pools = _pools(tmp_path)
    assert pools["default"].engine.max_num_batched_tokens == 8192
    assert pools["default"].engine.mem_fraction_static == 0.896
    assert pools["set"].engine.mem_fraction_static == 0.82
    assert pools["chunk"].engine.mem_fraction_static == 0.639


def test_overlap_scheduler_hides_the_host_step(tmp_path):
    """disable_overlap_schedule False: a step costs max(GPU, host), not their sum."""
    pool = _pools(tmp_path)["default"]
    host = pool.host_overhead
    assert host.overlap == "async" and host.per_step_s == pytest.approx(0.58e-3)
    m = load(tmp_path / "s.yaml").runs[0].model
    with_host = StepPricer(m, pool.hardware, 8, host=host)
    gpu = StepPricer(m, pool.hardware, 8)
    tiny = {"decode_seqs": 1, "decode_ctx_tokens": 10}
    assert with_host.cost(**tiny).seconds == pytest.approx(
        max(gpu.cost(**tiny).seconds, host.per_step_s), rel=1e-9)

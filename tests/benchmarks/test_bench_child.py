"""The speed benchmarks' child process still runs against the code it times: it reaches
into ``capsim.sim.simulate`` to note the run's peak memory, so a refactor that moves what it
patches would break every benchmark silently (no test runs them). Benchmark 3's scenario
(``benchmarks/saturated.yaml``), cut to 10 s of arrivals."""

from __future__ import annotations

from support.scripts import load_script


def _common():
    return load_script("benchmarks/common.py", "bench_common")


def test_the_benchmark_child_simulates_and_reports_its_figures():
    figures = _common().child({"scenario": "benchmarks/saturated.yaml",
                               "sets": ["workload.duration_s=10"], "macro": True})
    assert figures["requests"] > 100                       # 17.5 req/s for 10 s
    assert figures["steps"] > 0 and figures["events"] > figures["requests"]
    assert figures["out_tokens"] > 0 and figures["sim_s"] > 10
    assert figures["state_mib"] >= 0 and figures["wall_s"] > 0

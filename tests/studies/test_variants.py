"""``capsim run``'s variants side by side in worker processes (capsim.studies.variants)."""

from __future__ import annotations

import logging

from capsim.scenario.load import load
from capsim.studies import variants
from capsim.studies.task import RunTask
from capsim.workload import TraceCache

SCENARIO = {
    "name": "variants", "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "engine": {"max_model_len": 4096},
    "workload": {"num_requests": 60, "arrival": {"process": "poisson", "rate_per_s": 8},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "lognormal", "mean": 400, "sigma": 0.6,
                                                "min": 16, "max": 2048},
                              "output_tokens": {"dist": "lognormal", "mean": 60, "sigma": 0.5,
                                                "min": 4, "max": 512}}]},
    "variants": [{"name": "a"}, {"name": "b", "engine": {"max_num_batched_tokens": 512}},
                 {"name": "c", "cluster": {"num_replicas": 2}}],
}


def test_run_on_two_processes_writes_the_same_report_as_one(tmp_path, run_cli,
                                                             write_scenario):
    """Every CSV byte for byte, and the page but for the wall time it measured."""
    path = write_scenario(tmp_path, SCENARIO)
    outs = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        code, stdout, _ = run_cli(["run", str(path), "-o", str(out), "--workers", str(workers),
                                   "--no-charts"])         # the CSVs are compared
        assert code == 0
        outs[workers] = out
    assert "3 variants, 2 processes" in stdout
    for name in ("summary.csv", "requests.csv"):
        assert (outs[1] / name).read_bytes() == (outs[2] / name).read_bytes()
    assert len((outs[1] / "summary.csv").read_text().splitlines()) == 4


def test_a_worker_s_warnings_are_logged_again_here(tmp_path, write_scenario, monkeypatch,
                                                  caplog):
    """A warning the simulation logs in a worker reaches this process's capsim logger (there
    no handler would print it as capsim's other warnings are printed)."""
    loaded = load(write_scenario(tmp_path, SCENARIO), [])
    traces = TraceCache(loaded.base_dir)
    tasks = [RunTask({"variant": rc.variant}, rc, traces.get(rc.workload, rc.seed),
                     loaded.spec.slo) for rc in loaded.runs[:2]]
    real = variants.simulate

    def warning_simulate(run, trace, **options):     # options: trace_window
        logging.getLogger("capsim.sim").warning("odd thing in %s", run.variant)
        return real(run, trace, **options)

    monkeypatch.setattr(variants, "simulate", warning_simulate)
    outcome = variants.simulate_variant(tasks[0])
    assert outcome.warnings == ["odd thing in a"]
    assert [r.cls for r in outcome.rows] == ["all"] and outcome.rows[0].num_finished == 60
    with caplog.at_level(logging.WARNING, logger="capsim"):
        outcomes = variants.simulate_variants(tasks, workers=1)     # in this process
    assert [o.result.variant for o in outcomes] == ["a", "b"]
    assert [r.getMessage() for r in caplog.records if r.name == "capsim"] == \
        ["odd thing in a", "odd thing in b"]


def test_an_interrupted_process_pool_stops_at_once():
    """Ctrl-C (or a task's error) inside a process pool kills the running tasks instead of
    waiting for them: a day's simulation took 35 s to notice a Ctrl-C."""
    import time

    import pytest

    from capsim.studies.parallel import ExecutorSpec, open_runner

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with open_runner(ExecutorSpec("process", workers=2)) as runner:
            running = runner.pool.submit(time.sleep, 60)
            while not running.running():
                time.sleep(0.05)
            raise KeyboardInterrupt
    assert time.monotonic() - t0 < 20

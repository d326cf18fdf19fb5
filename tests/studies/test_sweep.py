"""capsim sweep: grid expansion, validation, shared traces, executors, confidence intervals."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml

from capsim.studies import sweep
from capsim.studies.confidence import aggregate, mean_ci
from capsim.metrics.summary import summarize
from capsim.studies.parallel import ExecutorSpec, open_runner
from capsim.sim.simulate import simulate
from capsim.studies.task import RUN_COLUMNS

BASE = {
    "name": "tiny", "seed": 5, "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "engine": {"max_model_len": 4096, "max_num_seqs": 32},
    "workload": {"num_requests": 60, "arrival": {"process": "poisson", "rate_per_s": 4},
                 "classes": [{"name": "chat", "weight": 3,
                              "prompt_tokens": {"dist": "uniform", "min": 32, "max": 1500},
                              "output_tokens": {"dist": "uniform", "min": 4, "max": 64}},
                             {"name": "rag", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 2000},
                              "output_tokens": {"dist": "fixed", "value": 16}}]},
    "slo": {"targets": {"itl_p99_ms": 40, "ttft_p99_ms": 800}},
    "sweep": {"workload.arrival.rate_per_s": [2, 8],
              "engine.max_num_batched_tokens": [256, 1024]},
    "variants": [{"name": "one"}, {"name": "two", "cluster": {"num_replicas": 2}}],
}


def edited(**changes) -> dict:
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    for key, value in changes.items():
        node = doc
        *parents, last = key.split("__")
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[last] = value
    return doc


def test_grid_is_the_cartesian_product_in_yaml_order():
    pts = sweep.grid_points({"a.x": [1, 2], "b": ["p", "q", "r"]})
    assert [p.values for p in pts[:4]] == [{"a.x": 1, "b": "p"}, {"a.x": 1, "b": "q"},
                                           {"a.x": 1, "b": "r"}, {"a.x": 2, "b": "p"}]
    assert len(pts) == 6 and [p.index for p in pts] == list(range(6))
    assert pts[5].overrides == ['a.x=2', 'b="r"']
    assert pts[5].label == "a.x=2, b=r"


def test_plan_resolves_every_point(tmp_path, write_scenario):
    plan = sweep.plan(write_scenario(tmp_path, BASE))
    assert len(plan.points) == 4 and plan.num_runs_per_seed == 8
    budgets = [loaded.runs[0].pool().engine.max_num_batched_tokens for _, loaded in plan.points]
    rates = [loaded.spec.workload.arrival.rate_per_s for _, loaded in plan.points]
    assert budgets == [256, 1024, 256, 1024] and rates == [2, 2, 8, 8]
    assert [rc.num_replicas for rc in plan.points[0][1].runs] == [1, 2]


def test_one_trace_per_load_level(tmp_path, write_scenario):
    """Common random numbers: every point and variant at one rate and seed replays the very
    same trace object; another rate rescales the same arrival stream."""
    plan = sweep.plan(write_scenario(tmp_path, BASE))
    tasks = sweep.tasks(plan, [5, 6])
    assert len(tasks) == 16
    by_level = {}
    for t in tasks:
        by_level.setdefault((t.labels["offered_rate_per_s"], t.labels["seed"]), set()).add(
            id(t.trace))
    assert len(by_level) == 4 and all(len(ids) == 1 for ids in by_level.values())
    slow, fast = (next(t.trace for t in tasks if t.labels["offered_rate_per_s"] == rate
                       and t.labels["seed"] == 5) for rate in (2, 8))
    np.testing.assert_allclose(slow.arrival_s, fast.arrival_s * 4)
    np.testing.assert_array_equal(slow.prompt_tokens, fast.prompt_tokens)


def test_a_sweep_run_equals_a_direct_run(tmp_path, write_scenario):
    """A point's numbers are exactly those of simulating that configuration directly."""
    plan = sweep.plan(write_scenario(tmp_path, BASE))
    with open_runner(ExecutorSpec("serial")) as runner:
        result = sweep.run(plan, [5], runner)
    _, loaded = plan.points[3]                       # rate 8, budget 1024
    task = next(t for t in sweep.tasks(plan, [5]) if t.labels["point"] == 3
                and t.labels["variant"] == "two")
    direct = summarize(simulate(loaded.runs[1], task.trace), loaded.spec.slo, loaded.class_slos)
    row = result.runs.query("point == 3 and variant == 'two' and cls == 'all'").iloc[0]
    assert row["itl_p99_ms"] == direct[0].itl_p99_ms
    assert row["ttft_p99_ms"] == direct[0].ttft_p99_ms
    assert row["num_gpus"] == 2 and row["engine.max_num_batched_tokens"] == 1024


@pytest.fixture(scope="module")
def small_plan(tmp_path_factory, write_scenario):
    return sweep.plan(write_scenario(tmp_path_factory.mktemp("exec"), BASE))


def _numbers(result: sweep.SweepResult) -> pd.DataFrame:
    return result.runs.drop(columns=["wall_s"])


def test_process_pool_and_dask_give_the_serial_answer(small_plan):
    """Same tasks, same numbers, same order, on every backend (Dask: a LocalCluster)."""
    results = {}
    for spec in (ExecutorSpec("serial"), ExecutorSpec("process", workers=2),
                 ExecutorSpec("dask", workers=2)):
        with open_runner(spec) as runner:
            results[spec.backend] = sweep.run(small_plan, [5, 6], runner)
    serial = _numbers(results["serial"])
    assert len(serial) == 8 * 2 * 3          # point-variants × seeds × (all + 2 classes)
    pd.testing.assert_frame_equal(_numbers(results["process"]), serial)
    pd.testing.assert_frame_equal(_numbers(results["dask"]), serial)


def test_confidence_interval_narrows_as_seeds_grow(small_plan):
    """95 % half-width of the mean over K replications (t · s / √K). Its expectation falls
    ~5.7× from K = 2 to 4 and ~3× from 4 to 16 (×0.12 overall): the stable metrics narrow at
    every step; over all metrics (tails included, whose s varies a lot between draws — a K = 2
    interval is not to be trusted) the typical width shrinks far below half."""
    one_point = sweep.SweepPlan(small_plan.base, small_plan.grid, small_plan.points[:1])
    with open_runner(ExecutorSpec("process", workers=2)) as runner:
        runs = sweep.run(one_point, sweep.replication_seeds(5, 16), runner).runs
    totals = runs[runs["cls"] == "all"]
    assert len(totals) == 32 and sorted(set(totals["seed"])) == list(range(5, 21))
    for variant, rows in totals.groupby("variant"):
        # (Not itl_p50: one decode step in every run, ±0.01 ms apart, whose few outliers
        # make s from 4 runs no guide to s from 16.)
        for metric in ("ttft_mean_ms", "output_throughput_tok_per_s"):
            widths = [mean_ci(rows[metric].to_numpy()[:k])[1] for k in (2, 4, 16)]
            assert widths[0] > widths[1] > widths[2] > 0, (variant, metric, widths)
        ratios = []
        for metric in sweep.METRICS:
            w2, w16 = (mean_ci(rows[metric].to_numpy(np.float64)[:k])[1] for k in (2, 16))
            if w2 > 0:
                ratios.append(w16 / w2)
        assert len(ratios) > 30 and np.median(ratios) < 0.3, (variant, np.median(ratios))


def test_mean_ci_is_student_t():
    mean, half = mean_ci([1.0, 3.0])                 # s = √2, t(0.975, 1) = 12.706
    assert mean == 2.0 and half == pytest.approx(12.7062 * math.sqrt(2) / math.sqrt(2), rel=1e-4)
    assert mean_ci([4.0, 4.0, 4.0]) == (4.0, 0.0)
    m, h = mean_ci([7.0])
    assert m == 7.0 and math.isnan(h)
    frame = pd.DataFrame({"k": ["a", "a", "b"], "x": [1.0, 3.0, 5.0],
                          "slo_pass": [True, False, True]})
    agg = aggregate(frame, ["k"], ["x"]).set_index("k")
    assert agg.loc["a", "x"] == 2.0 and agg.loc["a", "slo_pass_runs"] == 1
    assert not agg.loc["a", "slo_pass_all"] and agg.loc["b", "slo_pass_all"]


def test_cli_sweep_writes_every_run_and_the_report(tmp_path, run_cli, write_scenario):
    out = tmp_path / "report"
    code, stdout, err = run_cli(["sweep", str(write_scenario(tmp_path, BASE)), "-o", str(out),
                                 "--seeds", "2", "--workers", "2"])
    assert code == 0, err
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 4 * 2 * 2 * 3             # points × variants × seeds × classes
    assert set(summary["seed"]) == {5, 6}
    for col in ("point", "variant", "engine.max_num_batched_tokens", "offered_rate_per_s",
                "replication", "itl_p99_ms", "slo_pass", *RUN_COLUMNS):
        assert col in summary
    points = pd.read_csv(out / "points.csv")
    assert len(points) == 8 and (points["replications"] == 2).all()
    assert "itl_p99_ms_ci95" in points
    html = (out / "index.html").read_text()
    for text in ("Cheapest configuration per load level", "latency_vs_load.png",
                 "cost_vs_tail.png", "± ", "summary.csv"):
        assert text in html
    assert (out / "latency_vs_load.png").stat().st_size > 10_000
    assert "cheapest configuration meeting every SLO target" in stdout
    # How far to trust it (issue 'Fidelity II'): the preset x GPU every point ran, from
    # capsim/profiles/data/trust.yaml, in the terminal and on the page.
    from capsim.profiles.trust import coverage
    line = coverage("vllm-v1", BASE["hardware"]).text()
    assert f"how far to trust it: {line}" in " ".join(stdout.split())
    assert f"How far to trust it: {line}" in html


BAD = [
    ({"sweep": {"engine.max_num_seqs": []}}, "sweep.engine.max_num_seqs: empty list"),
    ({"sweep": {"engine.max_num_seqs": 8}}, "sweep.engine.max_num_seqs: give a list of values"),
    ({"sweep": {}}, "sweep: empty sweep"),
    ({"sweep": {"seed": [1, 2]}}, "'seed' cannot be swept (use --seeds K"),
    ({"sweep": {"engine.max_num_seq": [8, 16]}},
     "engine.max_num_seq: unknown key 'max_num_seq' (did you mean 'max_num_seqs'?)"),
    ({"sweep": {"engine.max_num_batched_tokens": [8, 512]}},
     "must be >= max_num_seqs (32) (sweep point engine.max_num_batched_tokens=8)"),
    ({"sweep": {"hardware": ["h100-sxm", "h900"]}},
     "sweep.hardware: unknown hardware 'h900'"),
    ({"sweep": {"cluster.num_replicas": [1, 2]}},
     "sweep.cluster.num_replicas: variant 'two' (variants.1) sets cluster.num_replicas itself"),
    ({"slo": {"targets": {"itl_p98_ms": 5}}}, "unknown SLO metric 'itl_p98_ms'"),
    ({"sweep": None}, "sweep: no sweep: section"),
]


@pytest.mark.parametrize("change,expected", BAD)
def test_bad_sweep_is_one_line_and_writes_nothing(tmp_path, run_cli, write_scenario, change,
                                                 expected):
    doc = {**yaml.safe_load(yaml.safe_dump(BASE)), **change}
    if doc.get("sweep") is None:
        doc.pop("sweep")
    path = write_scenario(tmp_path, doc)
    out = tmp_path / "report"
    code, _, err = run_cli(["sweep", str(path), "-o", str(out), "--workers", "1"])
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: "), err
    assert expected in err
    assert not out.exists()


def test_bad_executor_options_are_one_line(tmp_path, run_cli, write_scenario):
    path = write_scenario(tmp_path, BASE)
    code, _, err = run_cli(["sweep", str(path), "--workers", "0"])
    assert code == 2 and err == "error: --workers must be >= 1, got 0\n"
    code, _, err = run_cli(["sweep", str(path), "--seeds", "0"])
    assert code == 2 and err == ("error: --seeds must be in 1..1,000 (independent traces per "
                                  "configuration), got 0\n")


def test_shipped_sweep_scenario_plans(tmp_path, scenarios_dir):
    plan = sweep.plan(scenarios_dir / "rag_mix_chunk_sweep.yaml")
    assert len(plan.points) == 20 and plan.num_runs_per_seed == 40
    unique, _ = sweep.dedupe(sweep.tasks(plan, [42]))
    assert len(unique) == 24                  # the unchunked variant is simulated once per rate


def test_cli_sweep_on_an_existing_dask_scheduler(tmp_path, run_cli, write_scenario):
    """--scheduler ADDRESS: the runs go to a cluster that was already running."""
    from distributed import LocalCluster

    doc = edited(sweep={"workload.arrival.rate_per_s": [2, 8]}, variants=[{"name": "one"}])
    out = tmp_path / "report"
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster:
        code, stdout, err = run_cli(["sweep", str(write_scenario(tmp_path, doc)), "-o", str(out),
                                     "--scheduler", cluster.scheduler_address])
    assert code == 0, err
    assert f"Dask scheduler {cluster.scheduler_address}" in stdout
    with open_runner(ExecutorSpec("serial")) as runner:
        serial = sweep.run(sweep.plan(write_scenario(tmp_path, doc, "again.yaml")), [5],
                           runner).runs
    remote = pd.read_csv(out / "summary.csv")
    np.testing.assert_allclose(remote["itl_p99_ms"], serial["itl_p99_ms"])
    np.testing.assert_allclose(remote["ttft_p99_ms"], serial["ttft_p99_ms"])


def test_heaviest_runs_start_first_but_results_keep_input_order():
    from capsim.studies.parallel import heaviest_first

    assert heaviest_first(4, [1.0, 5.0, 3.0, 5.0]) == [1, 3, 2, 0]
    assert heaviest_first(3, None) == [0, 1, 2]
    with open_runner(ExecutorSpec("process", workers=2)) as runner:
        assert runner.map(abs, [-3, 1, -2], weights=[0.0, 2.0, 1.0]) == [3, 1, 2]


def test_progress_counts_every_finished_run():
    import time

    calls = []
    with open_runner(ExecutorSpec("process", workers=2)) as runner:
        runner.map(time.sleep, [0.0, 0.4, 0.8], lambda done, total: calls.append((done, total)))
    assert calls[0] == (1, 3) and calls[-1] == (3, 3)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_a_billion_seeds_or_a_week_of_runs_is_refused_before_anything_is_built(
        tmp_path, run_cli, scenarios_dir):
    # Issue 31: --seeds 1000000000 built a list of a billion seeds (MemoryError).
    chunk = scenarios_dir / "rag_mix_chunk_sweep.yaml"
    code, _, err = run_cli(["sweep", str(chunk), "--seeds", "1000000000", "-o",
                            str(tmp_path / "o")])
    assert (code, err) == (2, "error: --seeds must be in 1..1,000 (independent traces per "
                              "configuration), got 1,000,000,000\n")
    code, _, err = run_cli(["sweep", str(chunk), "--seeds", "1000", "-o", str(tmp_path / "o")])
    assert code == 2 and err == (
        f"error: {chunk}: sweep: 20 point(s) × 2 variant(s) × 1,000 seed(s) = 40,000 runs, "
        "more than 10,000 (a one-minute scenario's 10,000 runs are a week of one CPU); sweep "
        "fewer values or seeds\n")
    grid = '{"engine.max_num_seqs": %s, "workload.arrival.rate_per_s": %s}' % (
        list(range(1, 41)), list(range(1, 31)))
    code, _, err = run_cli(["validate", str(chunk), "--set", f"sweep={grid}"])
    assert code == 2 and err == (
        "error: --set sweep: the grid has 40 × 30 = 1,200 points, more than 1,000 (each is "
        "resolved before the first run and run once per variant and seed); sweep fewer "
        "values\n")
    assert not (tmp_path / "o").exists()

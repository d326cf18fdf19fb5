"""capsim size: monotone searches, the fewest GPUs, capacity, noise, floors and bad input."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from capsim.studies import sizing
from capsim.scenario.load import load
from capsim.studies.parallel import ExecutorSpec, open_runner
from capsim.studies.search import drive, fewest_passing, highest_passing
from capsim.studies.task import RunTask, execute

DOC = {
    "name": "sz", "seed": 2, "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "engine": {"max_model_len": 4096, "max_num_seqs": 32},
    "cluster": {"router": "least_outstanding_tokens"},
    "workload": {"num_requests": 120, "arrival": {"process": "poisson", "rate_per_s": 20},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "uniform", "min": 64, "max": 2000},
                              "output_tokens": {"dist": "uniform", "min": 8, "max": 96}}]},
    "slo": {"targets": {"itl_p99_ms": 30, "ttft_p99_ms": 600}},
    "sizing": {"max_gpus": 8},
    "variants": [{"name": "chunked", "engine": {"max_num_batched_tokens": 512}},
                 {"name": "unchunked", "engine": {"enable_chunked_prefill": False}}],
}


def with_(**sections) -> dict:
    doc = yaml.safe_load(yaml.safe_dump(DOC))
    doc.update(sections)
    return doc


# --------------------------------------------------------------------------
# The searches
# --------------------------------------------------------------------------


@given(need=st.integers(1, 70), max_count=st.integers(1, 64))
def test_fewest_passing_finds_the_threshold_in_log_steps(need, max_count):
    result = drive(fewest_passing(max_count), lambda n: n >= need)
    assert result.best == (need if need <= max_count else None)
    assert len(result.tested) <= 2 * max_count.bit_length() + 1
    assert all(ok == (n >= need) for n, ok in result.tested.items())


@given(cap_rate=st.floats(0.05, 5000.0))
def test_highest_passing_brackets_the_capacity_within_tolerance(cap_rate):
    result = drive(highest_passing(10.0, 0.02, 10.0 / 64, 640.0), lambda r: r <= cap_rate)
    if cap_rate < 10.0 / 64:
        assert result.best is None
    elif cap_rate >= 640.0:
        assert result.best == 640.0 and result.capped
    else:
        assert cap_rate / 1.02 <= result.best <= cap_rate


# --------------------------------------------------------------------------
# Fewest GPUs
# --------------------------------------------------------------------------


def scan(plan: sizing.SizingPlan, key, counts) -> list[bool]:
    """Pass/fail of every replica count on the plan's first trace (a full scan)."""
    opt = next(o for o in plan.options if o.key == key)
    trace = plan.traces.get(plan.workload_at(opt.run.workload, plan.rate_per_s), plan.seeds[0])
    tasks = [RunTask({"n": n}, sizing.fleet_at(opt.run, n), trace, plan.base.spec.slo)
             for n in counts]
    with open_runner(ExecutorSpec("process", workers=2)) as runner:
        return [o.total.slo_pass for o in runner.map(execute, tasks)]


@pytest.fixture(scope="module")
def sized(tmp_path_factory, write_scenario):
    path = write_scenario(tmp_path_factory.mktemp("size"), DOC)
    plan = sizing.plan(load(path), [])
    with open_runner(ExecutorSpec("serial")) as runner:
        serial = sizing.run(plan, runner)
    with open_runner(ExecutorSpec("process", workers=2)) as runner:
        parallel = sizing.run(sizing.plan(load(path), []), runner)
    return plan, serial, parallel


def test_more_gpus_never_fail_what_fewer_met_and_the_search_finds_the_first(sized):
    plan, serial, _ = sized
    for row in serial.rows:
        passes = scan(plan, (row.variant, row.hardware, row.tensor_parallel_size,
                              row.pipeline_parallel_size), range(1, 9))
        first = passes.index(True) + 1 if True in passes else None
        assert passes == [n >= first for n in range(1, 9)] if first else not any(passes)
        assert row.num_replicas == first and row.status == "met"
    # Chunked prefill keeps every gap short: far fewer GPUs than unchunked for the ITL SLO.
    by = {r.variant: r for r in serial.rows}
    assert by["chunked"].num_gpus < by["unchunked"].num_gpus
    assert serial.rows[0].variant == "chunked" and serial.rows[0].rank == 1


def test_serial_and_parallel_search_agree(sized):
    _, serial, parallel = sized
    assert serial.rows == parallel.rows
    cols = [c for c in serial.runs.columns if c != "wall_s"]
    pd.testing.assert_frame_equal(serial.runs[cols], parallel.runs[cols])


def test_sizing_row_figures(sized):
    _, serial, _ = sized
    row = serial.rows[0]
    assert row.num_gpus == row.num_replicas * row.tensor_parallel_size
    assert row.cost_per_hour_usd == pytest.approx(6.88 * row.num_gpus)       # H100 $/GPU-h
    assert row.within_noise is None                                         # one seed
    runs = serial.runs[(serial.runs["cls"] == "all") & (serial.runs["variant"] == row.variant)]
    assert row.evaluations == runs["num_replicas"].nunique() <= 7          # ≤ 2·log2(8) + 1


def test_the_binding_target_is_the_one_that_fails_one_replica_fewer(sized):
    """Issue 16: a target with headroom (goodput 100 % vs ≥ 95 %) was named binding because
    its relative margin was smallest; the binding target is the one that decided the answer,
    failing at one replica fewer (the worst miss there)."""
    _, serial, _ = sized
    by = {r.variant: r for r in serial.rows}
    one = by["chunked"]                       # one replica passes: nothing smaller to fail
    assert one.num_replicas == 1 and one.binding == "" and "no target binds" in one.note
    row = by["unchunked"]
    assert row.num_replicas > 1
    runs = serial.runs[(serial.runs["cls"] == "all") & (serial.runs["variant"] == "unchunked")]
    fewer = runs[runs["num_replicas"] == row.num_replicas - 1].iloc[0]
    at = runs[runs["num_replicas"] == row.num_replicas].iloc[0]
    targets = DOC["slo"]["targets"]
    misses = {k: (fewer[k] - b) / b for k, b in targets.items() if fewer[k] > b}
    assert misses and row.binding == max(misses, key=misses.get)
    assert row.binding_failed_value == fewer[row.binding]
    assert row.binding_failed_at == row.num_gpus - 1
    assert row.binding_value == at[row.binding] <= targets[row.binding]
    assert row.margin_frac == pytest.approx((targets[row.binding] - at[row.binding])
                                            / targets[row.binding])


def test_a_fraction_target_margin_is_in_points():
    """goodput_fraction 97 % against ≥ 95 %: +2.0 pts, not "+2.1 %" of a fraction."""
    from capsim.report.sweep.tables import _binding, _margin

    row = sizing.SizingRow(rank=1, variant="v", hardware="h100-sxm", tensor_parallel_size=1,
                           status="met", binding="goodput_fraction", binding_value=0.97,
                           binding_bound=0.95, binding_failed_value=0.9,
                           binding_failed_at=3, margin_frac=(0.97 - 0.95) / 0.95)
    assert _margin(row) == "+2.0 pts"
    assert _binding(row, "gpus") == "goodput_fraction 97.0% (≥ 95.0%); 90.0% at 3 GPUs"


def test_seeds_pass_in_every_replication_and_flag_noise(tmp_path, write_scenario):
    """With K seeds the answer must pass in all K; the noise flag looks one replica lower and
    at the binding target's 95 % interval."""
    path = write_scenario(tmp_path, with_(variants=[DOC["variants"][1]]))
    plan = sizing.plan(load(path), [], num_seeds=3)
    assert plan.seeds == [2, 3, 4]
    with open_runner(ExecutorSpec("process", workers=2)) as runner:
        result = sizing.run(plan, runner)
    row = result.rows[0]
    runs = result.runs[(result.runs["cls"] == "all")]
    at = runs[runs["num_replicas"] == row.num_replicas]
    assert len(at) == 3 and at["slo_pass"].all()
    below = runs[runs["num_replicas"] == row.num_replicas - 1]
    assert len(below) == 3 and not below["slo_pass"].all()
    # Within noise: one replica fewer passed in some seed, or the binding target's Student-t
    # interval at the answer contains the bound.
    values = at[row.binding].to_numpy()
    half = stats.t.ppf(0.975, 2) * values.std(ddof=1) / np.sqrt(3)
    straddles = abs(values.mean() - row.binding_bound) <= half
    assert row.within_noise == (bool(below["slo_pass"].any()) or straddles)
    assert row.binding_value == (values.max() if row.binding.endswith("_ms") else values.min())


# --------------------------------------------------------------------------
# Capacity of N GPUs
# --------------------------------------------------------------------------


def test_capacity_of_n_gpus_is_the_highest_passing_rate(tmp_path, write_scenario):
    doc = with_(variants=[DOC["variants"][0]])
    plan = sizing.plan(load(write_scenario(tmp_path, doc)), [], gpus=2)
    with open_runner(ExecutorSpec("serial")) as runner:
        result = sizing.run(plan, runner)
    row = result.rows[0]
    assert result.mode == "rate" and row.status == "met" and row.num_gpus == 2
    runs = result.runs[result.runs["cls"] == "all"]
    assert (runs["num_replicas"] == 2).all()
    passing = runs[runs["slo_pass"]]["offered_rate_per_s"]
    failing = runs[~runs["slo_pass"]]["offered_rate_per_s"]
    assert row.rate_per_s == passing.max()
    assert failing.min() > row.rate_per_s and failing.min() <= row.rate_per_s * 1.02 + 1e-9


# --------------------------------------------------------------------------
# Infeasible options and bad input
# --------------------------------------------------------------------------


def test_floors_are_single_request_step_times(scenarios_dir):
    rc = load(scenarios_dir / "rag_mix.yaml").runs[0]
    floors = sizing.slo_floors_ms(rc, 100)
    assert 3 < floors["itl"] < 10 and floors["tpot"] == floors["itl"]
    assert floors["ttft"] > floors["itl"]
    assert sizing.unreachable({"itl_p99_ms": 1.0, "ttft_p99_ms": 1e4}, floors) == [
        f"slo.targets.itl_p99_ms ≤ 1 but one decode step takes {floors['itl']:.3g} ms"]


def test_unreachable_target_is_one_line_before_running(tmp_path, run_cli, write_scenario):
    path = write_scenario(tmp_path, with_(slo={"targets": {"itl_p99_ms": 1}}))
    out = tmp_path / "r"
    code, _, err = run_cli(["size", str(path), "-o", str(out)])
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: {path}: no configuration can be sized; ")
    assert "slo.targets.itl_p99_ms ≤ 1 but one decode step takes" in err
    assert not out.exists()


@pytest.mark.parametrize("change,args,expected", [
    ({"slo": {"targets": {}}}, [], "slo.targets: capsim size needs at least one run-level target"),
    ({"slo": {"targets": {"itl_p98_ms": 5}}}, [], "unknown SLO metric 'itl_p98_ms'"),
    ({"sizing": {"hardware": ["h100-sxm", "h900"]}}, [], "sizing.hardware.1: unknown hardware"),
    ({"sizing": {"max_gpus": 0}}, [], "sizing.max_gpus: "),
    ({}, ["--rate", "-3"], "--rate must be a finite number > 0 requests/s, got -3"),
    ({}, ["--rate", "inf"], "--rate must be a finite number > 0 requests/s, got inf"),
    ({}, ["--rate", "nan"], "--rate must be a finite number > 0 requests/s, got nan"),
    # Issue 16: 1e308 req/s answered "met with 1 GPU" with a 309-digit rate. No fleet of
    # max_gpus 8 H100s computes that many tokens even at the fp8 peak (1,979 TFLOP/s).
    ({}, ["--rate", "1e308"], "--rate 1e+308 requests/s: valid: 0 < rate <= "),
    ({}, ["--rate", "1e308"], "beyond it even 8 h100-sxm GPUs at their 1,979 TFLOP/s peak "
                              "could not compute the "),
    ({"sizing": {"rate_per_s": 1e300}}, [], "sizing.rate_per_s 1e+300 requests/s: valid: "),
    ({}, ["--gpus", "0"], "--gpus must be >= 1, got 0"),
    # N+k: 8 GPUs of TP1 are 8 replicas; 8 down leaves none.
    ({}, ["--headroom", "8"], "sizing.max_gpus: --headroom 8 is not smaller than the fleet: "
                              "max_gpus = 8 makes at most 8 replica(s) of TP1"),
    ({}, ["--gpus", "2", "--headroom", "2"], "--headroom 2 is not smaller than the fleet: --gpus = 2"),
    ({}, ["--headroom", "-1"], "--headroom must be >= 0 replicas, got -1"),
    # Pipeline stages: more than Llama-3.1-8B's 32 layers; a replica wider than the GPUs.
    # A PP from the sizing list is named where the user wrote it.
    ({"sizing": {"pipeline_parallel_size": [33]}}, [],
     "sizing.pipeline_parallel_size: pipeline_parallel_size 33 exceeds the model's 32 layers"),
    ({"sizing": {"pipeline_parallel_size": [0]}}, [], "sizing.pipeline_parallel_size.0: "),
    ({"sizing": {"pipeline_parallel_size": [2], "max_gpus": 1}}, [],
     "max_gpus 1 is below TP 1 × PP 2 = 2 GPUs"),
    ({"sizing": {"pipeline_parallel_size": [2]}}, ["--gpus", "3"],
     "3 GPUs is not a multiple of TP 1 × PP 2 = 2 GPUs"),
])
def test_bad_size_input_is_one_line(tmp_path, run_cli, write_scenario, change, args, expected):
    path = write_scenario(tmp_path, with_(**change))
    out = tmp_path / "r"
    code, _, err = run_cli(["size", str(path), "-o", str(out), *args])
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ")
    assert expected in err
    assert not out.exists()


def test_bound_that_never_meets_the_slo_reports_the_best_found(tmp_path, run_cli, write_scenario):
    """max_gpus 2 cannot carry this load: the report says so (best found) and the CLI exits 2."""
    doc = with_(sizing={"max_gpus": 2}, variants=[DOC["variants"][1]])
    out = tmp_path / "r"
    code, stdout, err = run_cli(["size", str(write_scenario(tmp_path, doc)), "-o", str(out),
                                 "--workers", "1"])
    assert code == 2 and err.count("\n") == 1
    assert "sizing.max_gpus: no configuration meets every SLO target" in err
    assert "cannot meet the SLO targets within max_gpus = 2; best found: 2 GPUs" in err
    table = pd.read_csv(out / "sizing.csv")
    assert list(table["status"]) == ["not met"] and table["num_gpus"][0] == 2
    html = (out / "index.html").read_text()
    assert "no configuration meets the SLO targets" in html
    assert "not met" in stdout


def test_cli_size_compares_hardware_and_writes_the_report(tmp_path, run_cli, write_scenario):
    doc = with_(sizing={"hardware": ["a100-80gb", "h100-sxm"], "max_gpus": 8},
                variants=[DOC["variants"][0]])
    out = tmp_path / "r"
    code, stdout, err = run_cli(["size", str(write_scenario(tmp_path, doc)), "-o", str(out),
                                 "--rate", "10", "--workers", "2"])
    assert code == 0, err
    table = pd.read_csv(out / "sizing.csv")
    assert set(table["hardware"]) == {"a100-80gb", "h100-sxm"}
    assert (table["rate_per_s"] == 10).all()
    assert list(table["rank"]) == sorted(table["rank"])       # ranked by $/h
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["hardware"]) == {"a100-80gb", "h100-sxm"}
    assert {"num_replicas", "offered_rate_per_s", "seed", "itl_p99_ms"} <= set(summary.columns)
    html = (out / "index.html").read_text()
    assert "Fewest GPUs meeting every SLO target at 10 requests/s" in html
    assert (out / "search.png").exists() and (out / "cost_vs_tail.png").exists()
    # The search chart's x axis is the GPU count, and its caption says so (issue 16 item 8).
    assert "x is the fleet&#39;s GPU count" in html and "x is the offered load" not in html
    assert "binding SLO" in stdout


def test_shipped_sizing_scenario_plans(scenarios_dir):
    """scenarios/size_chat_h100_vs_a100.yaml: 2 variants × 2 GPUs × TP 1, 3 seeds, 40 req/s."""
    path = scenarios_dir / "size_chat_h100_vs_a100.yaml"
    plan = sizing.plan(load(path), [])
    assert plan.mode == "gpus" and plan.rate_per_s == 40 and plan.seeds == [7, 8, 9]
    assert sorted(o.label for o in plan.options) == [
        "chunked-2048 · a100-80gb TP1", "chunked-2048 · h100-sxm TP1",
        "chunked-512 · a100-80gb TP1", "chunked-512 · h100-sxm TP1"]
    assert all(o.run is not None for o in plan.options) and plan.max_gpus == 32
    assert sizing.plan(load(path), [], gpus=4).mode == "rate"


def test_a_replayed_trace_is_rescaled_to_the_sizing_rate(tmp_path, write_scenario):
    """For a trace workload, --rate sets workload.trace.rate_scale: same requests, closer."""
    rows = "\n".join(f"{i * 0.5},{200 + i},{20}" for i in range(41))      # 2 req/s for 20 s
    (tmp_path / "t.csv").write_text("arrival_s,prompt,output\n" + rows + "\n")
    doc = with_(workload={"trace": {"path": "t.csv", "format": "columns", "columns": {
        "arrival": "arrival_s", "prompt_tokens": "prompt", "output_tokens": "output"}}},
        variants=[DOC["variants"][0]])
    plan = sizing.plan(load(write_scenario(tmp_path, doc)), [], rate_per_s=8.0)
    wl = plan.workload_at(plan.options[0].run.workload, 8.0)
    assert wl.trace.rate_scale == pytest.approx(4.0)
    trace = plan.traces.get(wl, plan.seeds[0])
    assert len(trace) == 41 and trace.duration_s == pytest.approx(5.0)
    again = write_scenario(tmp_path, doc, "b.yaml")
    assert sizing.plan(load(again), []).rate_per_s == pytest.approx(2.0)


def test_disaggregated_variants_are_sized_at_a_rate_but_not_for_capacity(tmp_path,
                                                                          write_scenario):
    """Split pools get a (P, D) search at a rate (tests/studies/test_split_sizing.py); the
    capacity of N GPUs (--gpus) is not searched for them: infeasible, saying why."""
    disagg = {"name": "1P1D", "disaggregation": {
        "prefill": {"num_replicas": 1}, "decode": {"num_replicas": 1}, "link": "nvlink-4"}}
    doc = with_(variants=[DOC["variants"][0], disagg])
    by = {o.variant: o for o in sizing.plan(load(write_scenario(tmp_path, doc)), []).options}
    assert by["1P1D"].run is not None and by["1P1D"].split.ratio == (1, 1)
    by = {o.variant: o for o in sizing.plan(load(write_scenario(tmp_path, doc)), [],
                                            gpus=4).options}
    assert by["1P1D"].run is None and by["1P1D"].problem == sizing.DISAGG_NOT_SIZED
    assert by["chunked"].run is not None


def test_an_option_that_cannot_resolve_names_the_file_once(tmp_path, run_cli, write_scenario):
    """TP 3 does not divide Llama-3.1-8B's 32 heads: the error says so with its YAML path
    and names the scenario once (it used to repeat it inside the message); the path is
    the sizing list's, where the 3 was written, not the engine field it was set into."""
    doc = with_(sizing={"tensor_parallel_size": [3]})
    path = write_scenario(tmp_path, doc)
    code, _, err = run_cli(["size", str(path), "-o", str(tmp_path / "r")])
    assert code == 2 and err.count("\n") == 1 and err.count(str(path)) == 1
    assert "TP3: sizing.tensor_parallel_size: tensor_parallel_size 3 must divide" in err


@pytest.mark.parametrize("edge", ["median", "max"])
def test_trust_edge_sizes_against_the_pessimistic_edge(tmp_path, write_scenario, sized, edge):
    """--trust-edge median|max: every bound moved by that |error| of vllm-v1 on h100-sxm (the
    fidelity benchmark's table); the answer needs at least as many GPUs, and says why. The max
    edge moves the 30 ms ITL p99 bound by the table's max TPOT/ITL error (57.5 %, the
    InferenceX gpt-oss-120b TP 8 case's 1k/8k row at 64 users) to 19.0 ms, which the search
    still meets."""
    from capsim.profiles.trust import coverage

    _, nominal, _ = sized
    path = write_scenario(tmp_path, with_(variants=[DOC["variants"][0]]))
    plan = sizing.plan(load(path), [], trust_edge=edge)
    with open_runner(ExecutorSpec("serial")) as runner:
        edged = sizing.run(plan, runner)
    row = edged.rows[0]
    before = next(r for r in nominal.rows if r.variant == "chunked")
    cov = coverage("vllm-v1", "h100-sxm")
    e_itl, e_ttft = cov.edge_pct("tpot_itl", edge), cov.edge_pct("ttft", edge)
    assert plan.slo(row_key := ("chunked", "h100-sxm", 1, 1)).slo.targets == {
        "itl_p99_ms": pytest.approx(30 / (1 + e_itl / 100)),
        "ttft_p99_ms": pytest.approx(600 / (1 + e_ttft / 100))}
    assert edged.trust_edge == edge and row.trust.startswith(f"SLO bounds moved by the {edge}")
    if edge == "max":
        assert e_itl == pytest.approx(57.5)
    assert row.status == "met" and row.num_gpus >= before.num_gpus
    if row.binding:              # the target failing one replica fewer, at its moved bound
        assert row.binding_bound == plan.slo(row_key).slo.targets[row.binding]
    else:                        # one replica passes: nothing smaller failed
        assert row.num_replicas == 1 and "no target binds" in row.note


def test_headroom_adds_k_replicas_to_the_fewest_that_meet_the_slos(sized, tmp_path,
                                                                  write_scenario):
    """N+1: the search runs candidates on N − 1 replicas, so the answer is the plain
    answer + 1, priced for all N (the same tokens: $/M tokens scale with $/h)."""
    _, plain, _ = sized
    path = write_scenario(tmp_path, DOC)
    with open_runner(ExecutorSpec("serial")) as runner:
        n1 = sizing.run(sizing.plan(load(path), [], headroom=1), runner)
    by = {r.variant: r for r in plain.rows}
    for row in n1.rows:
        base = by[row.variant]
        assert row.num_replicas == base.num_replicas + 1 and row.headroom_replicas == 1
        assert row.cost_per_hour_usd == pytest.approx(6.88 * row.num_gpus)
        scale = row.num_replicas / base.num_replicas
        assert row.cost_per_million_output_tokens_usd == pytest.approx(
            base.cost_per_million_output_tokens_usd * scale)
        assert f"N+1: meets the SLOs with 1 of {row.num_replicas} replicas down" in row.note
        # a steady load has no day view: no violation minutes, with or without headroom
        assert math.isnan(row.violation_min_with_headroom)
        assert math.isnan(row.violation_min_without_headroom)
    assert "headroom_replicas" in sizing.rows_frame(n1.rows).columns
    assert "headroom_replicas" not in sizing.rows_frame(plain.rows).columns


def test_a_sized_count_outside_the_autoscaler_bounds_is_said():
    """Issue 17: sizing an autoscaled variant runs candidates from N replicas, but its
    autoscaler keeps the fleet in [min_replicas, max_replicas] (day_in_the_life: 1-4 and,
    N+1, 2-5), so an answer outside them is named with the bound to move."""
    from pathlib import Path

    runs = load(Path(__file__).parents[2] / "scenarios/day_in_the_life.yaml").runs
    fixed, autoscaled, n_plus_1 = runs[0], runs[1], runs[3]
    assert sizing._autoscaler_note(fixed, 9) == ""
    assert [sizing._autoscaler_note(autoscaled, n) for n in (1, 4)] == ["", ""]
    assert sizing._autoscaler_note(autoscaled, 5) == (
        "5 replicas is outside the autoscaler's [min_replicas, max_replicas] = [1, 4]: it "
        "would not keep 5; raise cluster.autoscaling.max_replicas to 5")
    assert sizing._autoscaler_note(n_plus_1, 1).endswith(
        "= [2, 5]: it would not keep 1; lower cluster.autoscaling.min_replicas to 1 to pay "
        "for fewer")


def test_headroom_reports_violation_minutes_with_and_without_it(tmp_path, write_scenario):
    """Issue 17: N+1 sizing over a load that surges: with one replica down, the answer
    (N − 1 serving) breaks the targets for fewer day-view windows than the plain answer
    would (N − 2 serving); both figures in the row, its note and sizing.csv."""
    doc = with_(workload={**DOC["workload"], "num_requests": None, "duration_s": 900,
                          "schedule": {"kind": "piecewise", "step_s": 300,
                                       "factors": [0.3, 1.0, 0.3]}},
                variants=[DOC["variants"][0]])
    del doc["workload"]["num_requests"]
    path = write_scenario(tmp_path, doc)
    with open_runner(ExecutorSpec("serial")) as runner:
        res = sizing.run(sizing.plan(load(path), [], headroom=1), runner)
    row = res.rows[0]
    assert row.status == "met" and row.headroom_replicas == 1
    spare, none = row.violation_min_with_headroom, row.violation_min_without_headroom
    # A 15-minute run has 1-minute windows (issue 31 item 10), the last 30–90 s long.
    assert 0 <= spare < none <= 15.0 + 1e-9
    assert (f"SLO-violation minutes with 1 down: {spare:g} with the headroom, "
            f"{none:g} without it") in row.note
    frame = sizing.rows_frame(res.rows)
    assert frame.violation_min_without_headroom[0] == none


def test_pipeline_parallel_options_are_sized_in_replicas_of_tp_times_pp(tmp_path,
                                                                        write_scenario):
    """sizing.pipeline_parallel_size [1, 2]: each variant is sized as TP1 and as TP1×PP2;
    a PP-2 replica is 2 GPUs (the search counts replicas of 2, max_gpus 8 allows 4) and
    costs two H100s per hour."""
    doc = with_(sizing={"max_gpus": 8, "pipeline_parallel_size": [1, 2]},
                variants=[DOC["variants"][0]])
    plan = sizing.plan(load(write_scenario(tmp_path, doc)), [])
    assert [(o.label, o.gpus_per_replica) for o in plan.options] == [
        ("chunked · h100-sxm TP1", 1), ("chunked · h100-sxm TP1×PP2", 2)]
    assert plan.options[1].run.num_gpus == 2
    with open_runner(ExecutorSpec("serial")) as runner:
        result = sizing.run(plan, runner)
    by = {r.pipeline_parallel_size: r for r in result.rows}
    assert by[2].status == "met" and by[2].num_gpus == 2 * by[2].num_replicas
    assert by[2].num_replicas <= 4
    assert by[2].cost_per_hour_usd == pytest.approx(6.88 * by[2].num_gpus)
    assert set(result.runs[result.runs["variant"] == "chunked"]["num_replicas"]) <= set(range(1, 9))


def test_sizing_csv_keeps_replica_counts_whole_where_an_option_has_none(tmp_path):
    """An option that met nothing has no replica or GPU count; the others' stay 2, not 2.0."""
    rows = [sizing.SizingRow(rank=1, variant="v", hardware="h100-sxm", tensor_parallel_size=1,
                             status="met", num_replicas=2, num_gpus=2),
            sizing.SizingRow(rank=0, variant="v", hardware="a100-80gb", tensor_parallel_size=1,
                             status="unreachable")]
    sizing.rows_frame(rows).to_csv(tmp_path / "s.csv", index=False)
    text = pd.read_csv(tmp_path / "s.csv", dtype=str, keep_default_na=False)
    assert list(text.num_replicas) == ["2", ""] and list(text.num_gpus) == ["2", ""]


def test_headroom_prices_k_spare_replicas_on_top_of_the_answer_s_fleet():
    """N+k adds k replicas paid all the time: a fixed fleet of 3 (3 × $6.88/h H100s, TP 1)
    becomes 4 at 4/3 the price; an autoscaled fleet that started from 1 replica but paid a
    mean of 2.6 GPUs ($17.89/h) becomes $17.89 + $6.88, not twice its price (a fresh-user
    check found $27.46/h for a fleet that averaged $13.73)."""
    from capsim.studies.sizing import _with_headroom

    fixed = {"num_replicas": 3, "num_gpus": 3, "cost_per_hour_usd": 3 * 6.88,
             "cost_per_million_output_tokens_usd": 9.0}
    out, note = _with_headroom(fixed, 1, 1, 6.88)
    assert (out["num_replicas"], out["num_gpus"]) == (4, 4)
    assert out["cost_per_hour_usd"] == pytest.approx(4 * 6.88)
    assert out["cost_per_million_output_tokens_usd"] == pytest.approx(12.0)
    assert note == "N+1: meets the SLOs with 1 of 4 replicas down"
    scaled = {"num_replicas": 1, "num_gpus": 4, "cost_per_hour_usd": 17.89,
              "cost_per_million_output_tokens_usd": 5.0}
    out, _ = _with_headroom(scaled, 1, 1, 6.88)
    assert (out["num_replicas"], out["num_gpus"]) == (2, 5)
    assert out["cost_per_hour_usd"] == pytest.approx(17.89 + 6.88)
    assert out["cost_per_million_output_tokens_usd"] == pytest.approx(5.0 * (17.89 + 6.88) / 17.89)


def test_headroom_below_the_autoscaler_s_minimum_is_said():
    """day_in_the_life's N+1 variant (min_replicas 2) sized 1 serving + 1 spare: the one
    left serving was lifted to 2 at the autoscaler's first tick, so "1 down" was not held."""
    from types import SimpleNamespace

    from capsim.studies.sizing import _below_min_note

    run = SimpleNamespace(autoscaling=SimpleNamespace(min_replicas=2))
    assert _below_min_note(run, 1, 1) == (
        "the 1 replica(s) left serving are below the autoscaler's min_replicas 2: its first "
        "tick starts more, so 1 down was not held for the run")
    assert _below_min_note(run, 2, 1) == ""
    assert _below_min_note(SimpleNamespace(autoscaling=None), 1, 1) == ""

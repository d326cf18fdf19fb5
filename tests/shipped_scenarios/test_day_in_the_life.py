"""scenarios/day_in_the_life.yaml, shortened to 40 minutes that stand for the day's
08:40-09:20 (the whole day takes minutes of CPU per variant): the chat curve at its
trough (``peak_hour`` 12 puts the trough at t = 0, as at 08:00 in the day), office-hours
RAG from 20 minutes in (its hourly factors on 20-minute steps: 1.5 from 1,200 s, as from
09:00), and the failure at 1,200 s (09:01 in the day) with its replacement 10 minutes
later (30 in the day). The figures asserted are this short run's, seed 11; the whole
day's are in the scenario's header and docs/whole-day.md ("What scenarios/day_in_the_life.yaml
shows")."""

from __future__ import annotations

import pandas as pd
import pytest

from capsim.cli.main import main

SHORT = ["--set", "workload.duration_s=2400", "--set", "workload.schedule.peak_hour=12",
         "--set", "workload.classes.1.schedule.step_s=1200",
         "--set", "workload.classes.1.schedule.factors.1=1.5",
         "--set", "variants.2.cluster.failures.at.0.at_s=1200",
         "--set", "variants.3.cluster.failures.at.0.at_s=1200",
         "--set", "variants.2.cluster.failures.at.0.repair_s=600",
         "--set", "variants.3.cluster.failures.at.0.repair_s=600"]


@pytest.fixture(scope="module")
def day(tmp_path_factory, scenarios_dir):
    out = tmp_path_factory.mktemp("day") / "report"
    with pytest.raises(SystemExit) as exc:
        main(["run", str(scenarios_dir / "day_in_the_life.yaml"), "-o", str(out), *SHORT,
              "--no-charts"])            # the tables are read; day.png: test_day_report.py
        raise SystemExit(0)
    assert exc.value.code == 0
    return (pd.read_csv(out / "summary.csv").set_index(["variant", "cls"]),
            pd.read_csv(out / "day.csv"), pd.read_csv(out / "requests.csv"),
            (out / "index.html").read_text())


def test_every_variant_serves_every_request(day):
    summary, _, requests, _ = day
    for variant in ("fixed-peak", "autoscaled", "autoscaled-failure", "autoscaled-failure-n+1"):
        row = summary.loc[(variant, "all")]
        assert row.num_finished == row.num_requests == (requests.variant == variant).sum()


def test_the_failure_empties_the_one_replica_fleet_and_n_plus_1_rides_it_out(day):
    """At the trough (~1 req/s, ~1.5 sequences running) the autoscaler on 6 running
    sequences per replica keeps one replica; losing it at 1,200 s leaves none serving:
    the router holds the requests and, like Kubernetes HPA, the autoscaler counts the
    failed replica until its replacement serves at 1,800 s (no scale-up 62 s later).
    This 40-minute run has 2-minute windows (issue 31 item 10: 5-minute ones from an
    hour's run). The windows from 1,200 s to 1,920 s violate (the last one: the held
    requests' TTFT, then the backlog on the replacement breaks ITL); the replacement's
    backlog asks for max_replicas. The N+1 fleet (min_replicas 2) serves on the survivor
    alone (HPA again waits for the replacement) and violates no window."""
    _, windows, _, html = day
    by = {v: w.set_index("window_start_s") for v, w in windows.groupby("variant")}
    assert (by["fixed-peak"].window_s.iloc[:-1] == 120).all()
    assert (by["fixed-peak"].replicas_serving == 3).all()
    assert (by["autoscaled"].replicas_serving[:1080.0] == 1).all()
    assert not by["autoscaled"].violation.any()
    failing = by["autoscaled-failure"]
    assert (failing.replicas_serving[:1080.0] == 1).all()
    assert (failing.replicas_serving[1200.0:1680.0] == 0).all()   # 1,200-1,800 s: none serves
    assert (failing.replicas_serving[1920.0:] >= 3).all()          # the backlog scales it up
    assert failing.violation.tolist() == [1200 <= t < 1920 for t in failing.index]
    assert failing.ttft_p99_ms[1200.0] > 500_000                   # held ~10 minutes
    spare = by["autoscaled-failure-n+1"]
    assert not spare.violation.any()
    assert spare.replicas_serving.tolist() == [2] * 10 + [1] * 5 + [2] * 5
    # The fleet table names the failure on both failing variants, the request it held
    # (retried) and the violation minutes: the six 2-minute windows, none.
    table = html[html.index("The day: fleet, cost and SLO-violation minutes"):]
    for variant, minutes in (("autoscaled-failure", 12), ("autoscaled-failure-n+1", 0)):
        row = table[table.index(f"</span>{variant}</td>"):]
        cells = row[:row.index("</tr>")].split("<td>")[1:]
        assert cells[7].startswith("1<")                    # one failure
        assert cells[8].startswith("1<")                    # one request retried
        assert cells[10].startswith("0<")                   # none timed out at the router
        assert cells[11].startswith(f"{minutes}<")
        # Mean GPUs = GPU-hours ÷ the run's hours: a failed replica is paid for until its
        # repair, so at least one GPU is paid at every moment.
        mean_gpus, peak = float(cells[5].split("<")[0]), int(cells[4].split("<")[0])
        assert 1.0 <= mean_gpus < peak + 1, (variant, mean_gpus, peak)

"""scenarios/day_in_the_life.yaml, shortened to the 40 minutes around a failure (the whole
day takes minutes; the same variants, the failure moved to 20 minutes in and its
replacement to 10 minutes later)."""

from __future__ import annotations

import pandas as pd
import pytest

from capsim.cli.main import main

SHORT = ["--set", "workload.duration_s=2400", "--set", "workload.schedule.peak_hour=0.33",
         "--set", "variants.2.cluster.failures.at.0.at_s=1200",
         "--set", "variants.3.cluster.failures.at.0.at_s=1200",
         "--set", "variants.2.cluster.failures.at.0.repair_s=600",
         "--set", "variants.3.cluster.failures.at.0.repair_s=600"]


@pytest.fixture(scope="module")
def day(tmp_path_factory, scenarios_dir):
    out = tmp_path_factory.mktemp("day") / "report"
    with pytest.raises(SystemExit) as exc:
        main(["run", str(scenarios_dir / "day_in_the_life.yaml"), "-o", str(out), *SHORT])
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


def test_the_failure_is_replaced_and_counted(day):
    """The failure at 1,200 s empties the one-replica autoscaled fleet: the router holds
    the requests and, like Kubernetes HPA, the autoscaler counts the failed replica
    until its replacement serves at 1,800 s (no scale-up 62 s later): both windows
    violate the SLOs; the N+1 fleet keeps a replica serving throughout and violates
    none."""
    _, windows, _, html = day
    by = {v: w.reset_index(drop=True) for v, w in windows.groupby("variant")}
    assert (by["fixed-peak"].replicas_serving == 3).all()
    failing = by["autoscaled-failure"]
    assert (failing.replicas_serving[4:6] < 0.1).all()      # 1,200-1,800 s: none serves
    assert (failing.replicas_serving[6:] >= 1).all()
    assert failing.violation[4:6].all()
    assert not by["autoscaled-failure-n+1"].violation.any()
    assert (by["autoscaled-failure-n+1"].replicas_serving >= 1).all()
    assert (by["autoscaled-failure-n+1"].replicas_serving[:4] == 2).all()
    # The fleet table names the failure on both failing variants.
    table = html[html.index("The day: fleet, cost and SLO-violation minutes"):]
    for variant in ("autoscaled-failure", "autoscaled-failure-n+1"):
        row = table[table.index(f"</span>{variant}</td>"):]
        cells = row[:row.index("</tr>")].split("<td>")[1:]
        assert cells[7].startswith("1<")                    # one failure
        # Mean GPUs = GPU-hours ÷ the run's hours: a failed replica is paid for until its
        # repair, so at least one GPU is paid at every moment (1.62 on a peak of 4 serving
        # while the backlog drains; N+1 more).
        mean_gpus, peak = float(cells[5].split("<")[0]), int(cells[4].split("<")[0])
        assert 1.0 <= mean_gpus < peak + 1, (variant, mean_gpus, peak)

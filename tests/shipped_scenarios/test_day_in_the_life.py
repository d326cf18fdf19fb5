"""scenarios/day_in_the_life.yaml, shortened to the 40 minutes around a failure (the whole
day takes minutes; the same variants, the failure moved to 20 minutes in)."""

from __future__ import annotations

import pandas as pd
import pytest

from capsim.cli.main import main

SHORT = ["--set", "workload.duration_s=2400", "--set", "workload.schedule.peak_hour=0.33",
         "--set", "variants.2.cluster.failures.at.0.at_s=1200",
         "--set", "variants.3.cluster.failures.at.0.at_s=1200"]


@pytest.fixture(scope="module")
def day(tmp_path_factory, scenarios_dir):
    out = tmp_path_factory.mktemp("day") / "report"
    with pytest.raises(SystemExit) as exc:
        main(["run", str(scenarios_dir / "day_in_the_life.yaml"), "-o", str(out), *SHORT])
        raise SystemExit(0)
    assert exc.value.code == 0
    return (pd.read_csv(out / "summary.csv").set_index(["variant", "cls"]),
            pd.read_csv(out / "day.csv"), pd.read_csv(out / "requests.csv"))


def test_every_variant_serves_every_request(day):
    summary, _, requests = day
    for variant in ("fixed-peak", "autoscaled", "autoscaled-failure", "autoscaled-failure-n+1"):
        row = summary.loc[(variant, "all")]
        assert row.num_finished == row.num_requests == (requests.variant == variant).sum()


def test_the_failure_dips_the_fleet_and_the_spare_keeps_it_serving(day):
    _, windows, _ = day
    by = {v: w.reset_index(drop=True) for v, w in windows.groupby("variant")}
    # The failure at 1,200 s (window 4) takes one replica out until 3,000 s.
    fail, spare = by["autoscaled-failure"], by["autoscaled-failure-n+1"]
    assert fail.replicas_serving[4] < by["autoscaled"].replicas_serving[4]
    assert (spare.replicas_serving >= 1).all() and spare.replicas_serving[4] >= 1
    assert (by["fixed-peak"].replicas_serving == 3).all()

"""The sizing front (issue 33, item 2): front.csv's per-GPU and per-user throughput, the
SLO-feasible front and the chosen answer, and front.png in the size report."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from capsim.report.sweep.front import FRONT_COLUMNS, front_frame
from capsim.report.sweep.page import sizing_points, write_sizing
from capsim.scenario.load import load
from capsim.studies import sizing
from capsim.studies.parallel import ExecutorSpec, open_runner
from tests.conftest import _write_scenario
from tests.studies.test_split_sizing import with_


@pytest.fixture(scope="module")
def sized(tmp_path_factory):
    path = _write_scenario(tmp_path_factory.mktemp("front"), with_())
    plan = sizing.plan(load(path), [])
    with open_runner(ExecutorSpec("process", workers=2)) as runner:
        result = sizing.run(plan, runner)
    return result, front_frame(result, sizing_points(result))


def test_every_configuration_tried_is_a_point_with_both_axes(sized):
    result, front = sized
    runs = result.runs[result.runs["cls"] == "all"]
    assert len(front) == len(runs)                      # one seed: a point per run
    assert list(front.columns[-len(FRONT_COLUMNS):]) == list(FRONT_COLUMNS)
    per_gpu = front.output_throughput_tok_per_s / front.num_gpus
    assert front.output_tokens_per_s_per_gpu.tolist() == pytest.approx(per_gpu.tolist())
    assert front.output_tokens_per_s_per_user.tolist() == pytest.approx(
        (1000.0 / front.tpot_mean_ms).tolist())
    assert set(front.split) == {"", *{f"{p}P{d}D" for p, d in zip(
        runs.prefill_replicas.dropna().astype(int), runs.decode_replicas.dropna().astype(int))}}


def test_the_chosen_point_is_the_rank_one_answer_and_feasible(sized):
    result, front = sized
    top = result.rows[0]
    chosen = front[front.chosen]
    assert len(chosen) == 1 and bool(chosen.slo_feasible.iloc[0])
    assert chosen.configuration.iloc[0] == top.label
    assert int(chosen.num_gpus.iloc[0]) == top.num_gpus
    assert front.sized.sum() == sum(r.status == "met" for r in result.rows)


def test_the_front_is_feasible_and_undominated(sized):
    _, front = sized
    ok = front[front.slo_feasible]
    on = front[front.on_front]
    assert len(on) >= 1 and on.slo_feasible.all()
    for r in on.itertuples():
        better = ok[(ok.output_tokens_per_s_per_gpu >= r.output_tokens_per_s_per_gpu)
                    & (ok.output_tokens_per_s_per_user >= r.output_tokens_per_s_per_user)]
        assert len(better) == 1                          # only itself
    best_gpu = ok.output_tokens_per_s_per_gpu.max()      # the most per GPU is on the front
    assert on.output_tokens_per_s_per_gpu.max() == best_gpu


def test_the_size_report_writes_front_csv_and_chart(sized, tmp_path):
    result, front = sized
    index = write_sizing(tmp_path / "r", result, resolved_yaml="", executor="test")
    written = pd.read_csv(tmp_path / "r" / "front.csv", keep_default_na=False)
    assert len(written) == len(front) and (tmp_path / "r" / "front.png").stat().st_size > 0
    assert "front.png" in index.read_text() and "front.csv" in index.read_text()
    assert not math.isnan(float(written.output_tokens_per_s_per_gpu.iloc[0]))

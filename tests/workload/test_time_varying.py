"""Time-varying load: rate schedules, bursts and a trace replayed at a time-varying scale."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from capsim.scenario.workload import WorkloadConfig
from capsim.workload.build import build
from capsim.workload.rate import Pieces, burst_pieces, schedule_pieces
from capsim.scenario.load_shape import DiurnalSchedule, OnOffBursts

CHAT = {"name": "chat", "weight": 3, "prompt_tokens": {"dist": "fixed", "value": 100},
        "output_tokens": {"dist": "fixed", "value": 10}}
RAG = {"name": "rag", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 2000},
       "output_tokens": {"dist": "fixed", "value": 10}}


def _wl(**kw) -> WorkloadConfig:
    doc = {"duration_s": 86400, "arrival": {"process": "poisson", "rate_per_s": 2.0},
           "classes": [CHAT]}
    doc.update(kw)
    return WorkloadConfig.model_validate(doc)


def _per_hour(t: np.ndarray) -> np.ndarray:
    return np.bincount((t // 3600).astype(int), minlength=24)[:24]


def test_piecewise_schedule_sets_each_hours_rate():
    """Hour k gets rate_per_s × factors[k] × 3600 arrivals, within Poisson noise (4 σ)."""
    factors = [0.1 * (k % 12 + 1) for k in range(24)]
    trace = build(_wl(schedule={"kind": "piecewise", "step_s": 3600, "factors": factors}),
                  1, Path("."))
    expected = 2.0 * 3600 * np.array(factors)
    assert np.all(np.abs(_per_hour(trace.arrival_s) - expected) < 4 * np.sqrt(expected))
    assert trace.arrival_s.max() < 86400 and np.all(np.diff(trace.arrival_s) >= 0)


def test_diurnal_peak_trough_and_peak_hour():
    """peak 1, trough 0.2, peak at 20:00: 20:00-21:00 carries ≈ 0.99 × 7200, 08:00-09:00
    ≈ 0.21 × 7200 (the cosine averaged over the hour)."""
    sched = {"kind": "diurnal", "peak": 1.0, "trough": 0.2, "peak_hour": 20}
    trace = build(_wl(schedule=sched), 2, Path("."))
    hours = _per_hour(trace.arrival_s)
    d = DiurnalSchedule.model_validate(sched)
    grid = np.arange(0, 86400, 1.0) + 0.5
    expected = 2.0 * np.add.reduceat(d.factor_at(grid), np.arange(0, 86400, 3600))
    assert expected[19] == pytest.approx(7200 * 0.99, rel=0.01)
    assert np.all(np.abs(hours - expected) < 4 * np.sqrt(expected) + 2)
    assert np.argmax(expected) in (19, 20) and np.argmin(expected) in (7, 8)


def test_rate_factor_integral_and_inverse_are_exact():
    p = Pieces(np.array([0.0, 10.0, 20.0, 30.0]), np.array([1.0, 0.0, 3.0]))
    assert p.integral(25.0) == 10.0 + 0.0 + 15.0
    # No arrival falls in the zero-rate piece [10, 20): u = 10 maps to its end.
    np.testing.assert_allclose(p.invert(np.array([5.0, 10.0, 13.0])), [5.0, 20.0, 21.0])


def test_on_off_bursts_spend_their_share_of_time_on_and_reproduce():
    """Mean on 100 s, off 900 s: ≈ 10 % of a long horizon is on; same seed, same path."""
    b = OnOffBursts(kind="on_off", on_s=100, off_s=900, factor=4)
    p1 = burst_pieces(b, np.random.default_rng(5), 2e6)
    p2 = burst_pieces(b, np.random.default_rng(5), 1e6)
    widths = np.diff(p1.edges_s)
    on = widths[p1.factors == 4].sum() / widths.sum()
    assert on == pytest.approx(0.1, abs=0.01)
    assert np.array_equal(p1.edges_s[:len(p2.edges_s)], p2.edges_s)   # a longer path extends
    assert p1.factors[0] == 1.0                                         # starts off


def test_bursts_raise_the_arrival_count_and_are_seeded():
    """On/off bursts of factor 5, on 10 % of the time: mean factor 0.9 + 0.5 = 1.4."""
    wl = _wl(bursts={"kind": "on_off", "on_s": 60, "off_s": 540, "factor": 5})
    a, b = build(wl, 3, Path(".")), build(wl, 3, Path("."))
    assert np.array_equal(a.arrival_s, b.arrival_s)
    assert len(a) / (2.0 * 86400) == pytest.approx(1.4, rel=0.05)
    assert not np.array_equal(a.arrival_s[:100], build(wl, 4, Path(".")).arrival_s[:100])


def test_markov_bursts_three_states():
    wl = _wl(bursts={"kind": "markov", "states": [{"factor": 1, "mean_s": 600},
                                                  {"factor": 3, "mean_s": 60},
                                                  {"factor": 0, "mean_s": 60}]})
    trace = build(wl, 1, Path("."))
    # Uniform transitions: time shares ∝ mean holding times (600, 60, 60) → mean factor 0.9.
    assert len(trace) / (2.0 * 86400) == pytest.approx((600 + 180) / 720, rel=0.06)


def test_per_class_schedule_moves_the_class_mix_over_the_day():
    """RAG only between 09:00 and 18:00: its share is 1/4 then and ~0 otherwise."""
    rag = dict(RAG, schedule={"kind": "piecewise", "factors": [0.0] * 9 + [1.0] * 9 + [0.0] * 6})
    trace = build(_wl(classes=[CHAT, rag]), 1, Path("."))
    hour = (trace.arrival_s // 3600).astype(int)
    is_rag = trace.class_id == 1
    assert not is_rag[(hour < 9) | (hour >= 18)].any()
    day = (hour >= 9) & (hour < 18)
    assert is_rag[day].mean() == pytest.approx(0.25, abs=0.01)
    # Chat keeps its 3/4 × 2 req/s all day.
    assert (~is_rag).sum() / 86400 == pytest.approx(1.5, rel=0.02)


def test_no_schedule_keeps_the_stationary_stream():
    """The time warp is only taken when a schedule or bursts is given: the plain stream is
    the same as without these fields (the shipped scenarios' outputs do not move)."""
    a = build(_wl(duration_s=600), 1, Path("."))
    flat = _wl(duration_s=600, schedule={"kind": "piecewise", "factors": [1.0]})
    b = build(flat, 1, Path("."))
    np.testing.assert_allclose(a.arrival_s, b.arrival_s, rtol=1e-12)
    assert np.array_equal(a.class_id, b.class_id)


def test_trace_schedule_is_a_time_varying_rate_scale(tmp_path):
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"] + \
           [f"{t},100,10" for t in np.arange(0, 7200, 2.0)]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    doc = {"trace": {"path": "t.csv", "rate_scale": 2.0,
                     "schedule": {"kind": "piecewise", "step_s": 600, "factors": [1.0, 3.0]}}}
    trace = build(WorkloadConfig.model_validate(doc), 0, tmp_path)
    gaps = np.diff(trace.arrival_s)
    # Rows 2 s apart at scale 2 × 1 → 1 s gaps for the first 600 s, then 2 × 3 → 1/3 s.
    assert gaps[:590] == pytest.approx(1.0)
    assert gaps[610:1000] == pytest.approx(1.0 / 3.0)


@pytest.mark.parametrize("field,value,expected", [
    ("schedule", {"kind": "piecewise", "factors": [1.0, -0.5]},
     "factors.1\n  Input should be greater than or equal to 0"),
    ("schedule", {"kind": "diurnal", "peak": 1.0, "trough": 2.0, "peak_hour": 3},
     "trough (2) must be <= peak (1)"),
    ("schedule", {"kind": "sine"}, "unknown kind 'sine'; valid: piecewise, diurnal"),
    ("bursts", {"kind": "markov", "states": [{"factor": 1, "mean_s": 1},
                                             {"factor": 2, "mean_s": 1}],
                "transitions": [[0, 1], [0.5, 0.5]]}, "transitions row 1"),
])
def test_bad_shapes_say_what_would_be_valid(field, value, expected):
    with pytest.raises(ValueError, match=None) as err:
        _wl(**{field: value})
    assert expected in str(err.value)


def test_schedule_needs_an_open_loop():
    with pytest.raises(ValueError, match="open loop"):
        _wl(arrival={"process": "concurrency", "users": 4},
            schedule={"kind": "piecewise", "factors": [1.0]})


def test_piecewise_durations_are_a_benchmarks_load_stages():
    """inference-perf's load.stages (rate × duration): 15 QPS for 50 s, then 3 for 20 s and
    60 for 25 s (llm-d's 73-capacity ladder, its first and last stages); the pieces repeat
    after 95 s."""
    sched = {"kind": "piecewise", "factors": [15, 3, 60], "durations_s": [50, 20, 25]}
    from capsim.scenario.load_shape import PiecewiseSchedule
    p = schedule_pieces(PiecewiseSchedule.model_validate(sched), 190)
    assert p.edges_s.tolist() == [0, 50, 70, 95, 145, 165, 190]
    assert p.factors.tolist() == [15, 3, 60, 15, 3, 60]
    trace = build(_wl(duration_s=95, arrival={"process": "poisson", "rate_per_s": 1.0},
                      schedule=sched), 3, Path("."))
    counts = np.histogram(trace.arrival_s, bins=[0, 50, 70, 95])[0]
    expected = np.array([750, 60, 1500])
    assert np.all(np.abs(counts - expected) < 4 * np.sqrt(expected))


@pytest.mark.parametrize("sched, words", [
    ({"kind": "piecewise", "factors": [1, 2], "durations_s": [10]},
     "durations_s has 1 lengths for 2 factors"),
    ({"kind": "piecewise", "factors": [1], "durations_s": [10], "step_s": 5},
     "give step_s (every piece as long) or durations_s"),
    ({"kind": "piecewise", "factors": [1], "durations_s": [0]}, "greater than 0"),
])
def test_bad_durations_are_refused(sched, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        _wl(schedule=sched)

"""The sweep report's figure helpers: the cost / tail-latency Pareto front, one line per
distinct curve (capsim.report.sweep)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def test_pareto_front_keeps_only_undominated_points():
    from capsim.report.sweep.figures import pareto_front

    cost = np.array([1.0, 1.0, 2.0, 3.0, 3.0, np.nan, 0.5])
    tail = np.array([5.0, 3.0, 2.0, 2.0, 1.0, 0.1, np.nan])
    assert list(pareto_front(cost, tail)) == [1, 2, 4]


def test_identical_lines_of_a_variant_are_drawn_once():
    """An unchunked variant under a chunk-size sweep gives the same curve for every budget."""
    from capsim.report.sweep.page import series_of

    rows = []
    for variant in ("chunked", "unchunked"):
        for budget in (256, 512):
            for rate in (1.0, 2.0):
                itl = rate * (budget if variant == "chunked" else 1000)
                rows.append({"variant": variant, "budget": budget, "offered_rate_per_s": rate,
                             "itl_p50_ms": itl, "itl_p99_ms": itl, "itl_max_ms": itl,
                             "ttft_p99_ms": itl, "cost_per_million_output_tokens_usd": 1 / rate})
    series = series_of(pd.DataFrame(rows), ["variant", "budget"], "offered_rate_per_s")
    assert [s.label for s in series] == ["chunked · budget=256", "chunked · budget=512",
                                         "unchunked"]
    assert list(series[2].rows["offered_rate_per_s"]) == [1.0, 2.0]
    assert len({s.colour for s in series}) == 3

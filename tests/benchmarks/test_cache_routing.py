"""benchmarks/cache_routing.py: llm-d's published ratios and capsim's, read the same way (the
mean of each load stage's output tokens/s, the warm-up stage left out)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from support.scripts import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/cache_routing.py")


def _rows(variant: str, arrivals, e2el_ms, tokens=1000, status="finished") -> pd.DataFrame:
    n = len(arrivals)
    return pd.DataFrame({"variant": variant, "arrival_s": arrivals, "e2el_ms": e2el_ms,
                         "output_tokens": tokens, "n": 1, "status": [status] * n})


def test_stage_throughput_is_the_mean_of_each_stages_tokens_over_its_span(bench):
    """Stages [0, 10) warm-up, [10, 20), [20, 30): stage 1 holds two requests of 1,000 tokens
    from 10 s to 15 s (400 tok/s), stage 2 one from 20 s to 24 s (250 tok/s): mean 325."""
    df = pd.concat([_rows("v", [5.0], [1000.0]), _rows("v", [10.0, 12.0], [2000.0, 3000.0]),
                    _rows("v", [20.0], [4000.0]), _rows("v", [21.0], [1.0], status="rejected")])
    edges = np.array([0.0, 10.0, 20.0, 30.0])
    assert bench.stage_throughput(df, edges) == pytest.approx((2000 / 5 + 1000 / 4) / 2)
    assert bench.stage_throughput(df, np.array([0.0, 10.0, 20.0, 30.0, 40.0])) == \
        pytest.approx((400 + 250 + 0) / 3)                  # an empty stage counts 0


def test_the_published_ratios_come_from_the_case_record(bench):
    """llm-d's 73-capacity report: precise 8,730.0, estimated 6,944.4, load 4,266.4 output
    tok/s; capsim figures of 2,000 / 1,500 / 1,000 give 2.00x against the published 2.05x."""
    case = bench.read_case()
    figures = {v: {"output_tok_s": t, "prefix_hit_rate": 0.5, "ttft_p90_s": 1.0}
               for v, t in (("load-scheduling", 1000.0), ("estimated-scheduling", 1500.0),
                            ("precise-scheduling", 2000.0))}
    lines = bench.report(case, figures)
    assert lines[-1] == ("cache-aware routing (llm-d precise prefix-cache scheduling, 8 x 2 "
                         "H100, Qwen3-32B): published output-throughput ratio 2.05x, capsim "
                         "2.00x, error -2.3 %")
    assert "published output-throughput ratio 1.63x, capsim 1.50x, error -7.8 %" in lines[-3]
    assert "published output-throughput ratio 1.26x, capsim 1.33x, error +6.1 %" in lines[-2]


def test_a_missing_run_is_one_line_and_exit_2(bench, tmp_path, capsys):
    assert bench.main(["--reuse", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {tmp_path}: not a finished capsim run") and "\n" not in err

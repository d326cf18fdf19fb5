"""--percentiles and --trace-events: bad values get one line and exit code 2, before any run."""

from __future__ import annotations

import pytest

BAD_PERCENTILES = [
    ("101", "101 is not a percentile"),
    ("abc", "'abc' is not a number"),
    ("", "empty"),
    ("50,,99", "'' is not a number"),
    ("-1", "-1 is not a percentile"),
    ("nan", "nan is not a percentile"),
    ("99,99.0", "99.0 is given twice"),
    # 999 values were accepted and took a 5-s run past 50 s (a bad-input sweep)
    pytest.param(",".join(str(i / 10) for i in range(1, 1000)), "999 percentiles; at most 20",
                 id="999-values"),
]

BAD_WINDOWS = [
    ("abc", "'abc' is not a window"),
    ("5:5", "5:5: give START:END"),
    ("10:2", "10:2: give START:END"),
    ("-1:3", "-1:3: give START:END"),
    ("3", "'3' is not a window"),
    ("0:inf", "'0:inf' is not a window"),
    ("", "'' is not a window"),
]


@pytest.mark.parametrize("command", ["run", "sweep", "size"])
@pytest.mark.parametrize("value,message", BAD_PERCENTILES)
def test_bad_percentiles(run_cli, scenarios_dir, tmp_path, command, value, message):
    code, out, err = run_cli([command, str(scenarios_dir / "rag_mix.yaml"), "-o",
                              str(tmp_path / "r"), "--percentiles", value])
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: Invalid value for '--percentiles': ")
    assert message in lines[0] and "e.g. 50,90,99,99.9" in lines[0]
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("value,message", BAD_WINDOWS)
def test_bad_trace_windows(run_cli, scenarios_dir, tmp_path, value, message):
    code, out, err = run_cli(["run", str(scenarios_dir / "rag_mix.yaml"), "-o",
                              str(tmp_path / "r"), "--trace-events", value])
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: Invalid value for '--trace-events': ")
    assert message in lines[0] and "0 <= START < END" in lines[0]
    assert not (tmp_path / "r").exists()

"""``capsim run`` draws its report's charts in a process forked before the simulation
(capsim.report.charts; issue 31 item 13): a failing chart is one line and exit 1 with no
report written; SIGTERM / Ctrl-C leave no process behind; ``--workers 1`` draws in process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from capsim.report import charts
from capsim.report.charts import ChartProcess
from capsim.report.run import figures

DOC = {
    "name": "charts", "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "engine": {"max_model_len": 4096},
    "workload": {"num_requests": 30, "arrival": {"process": "poisson", "rate_per_s": 5},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 200},
                              "output_tokens": {"dist": "fixed", "value": 20}}]},
}


@pytest.fixture
def forking(monkeypatch) -> None:
    """Skip where ``capsim run`` draws in process; ``capsim run`` forks with no other
    thread running (it has none then), a pytest-xdist worker has its own, which the child
    never touches: let the in-process runs fork there."""
    if not sys.platform.startswith("linux") or charts._cpus() < 2:
        pytest.skip("not Linux or a single CPU: the charts are drawn in process")
    monkeypatch.setattr(charts.threading, "active_count", lambda: 1)


def _boom(*args, **kwargs):
    raise ValueError("no room for the legend")


def test_a_failing_chart_is_one_line_exit_1_and_no_report(tmp_path, run_cli, write_scenario,
                                                          monkeypatch, forking):
    monkeypatch.setattr(figures, "plot_itl_cdf", _boom)
    before = psutil.Process().children()
    out = tmp_path / "report"
    code, _, err = run_cli(["run", str(write_scenario(tmp_path, DOC)), "-o", str(out)])
    assert (code, err) == (1, "error: drawing the report's charts failed: ValueError: no room "
                              "for the legend\n")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
    assert psutil.Process().children() == before


def test_workers_1_draws_the_charts_in_this_process(tmp_path, run_cli, write_scenario,
                                                    monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("forked a chart process")

    monkeypatch.setattr(ChartProcess, "start", refuse)
    out = tmp_path / "report"
    code, _, err = run_cli(["run", str(write_scenario(tmp_path, DOC)), "--workers", "1",
                            "-o", str(out)])
    assert (code, err) == (0, "")
    assert (out / "itl_cdf.png").exists() and len(list(out.glob("timeline_*.png"))) == 1


@pytest.mark.parametrize("signum, code, line", [
    (signal.SIGTERM, 143, "terminated (SIGTERM): stopped; its worker processes were ended\n"),
    (signal.SIGINT, 130, "interrupted (SIGINT): stopped; its worker processes were ended\n"),
])
def test_a_signal_during_the_run_leaves_no_chart_process(tmp_path, write_scenario, signum,
                                                         code, line, forking):
    """SIGTERM to capsim alone, SIGINT to its process group (a terminal's Ctrl-C) once the
    chart process is there: one line, 128 + the signal, no process left, no report."""
    doc = {**DOC, "workload": {**DOC["workload"], "num_requests": 200_000}}
    out = tmp_path / "report"
    proc = subprocess.Popen(
        [sys.executable, "-m", "capsim", "run", str(write_scenario(tmp_path, doc)),
         "-o", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not psutil.Process(proc.pid).children() and time.monotonic() < deadline:
            time.sleep(0.1)
        started = psutil.Process(proc.pid).children(recursive=True)
        assert started, "the chart process never started"
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, err) == (code, line)
    _, alive = psutil.wait_procs(started, timeout=10)
    assert alive == []
    assert not out.exists()


def test_what_capsim_run_imports_itself_needs_no_matplotlib():
    """The parent writes the tables and pages; only the chart process imports matplotlib
    (~0.9 s of a run's start-up that was on the critical path)."""
    code = ("import sys\n"
            "import capsim.cli.main, capsim.report\n"
            "from capsim.report.run import console, day, html, page, pools, split_table, table\n"
            "from capsim.report.run.cdf import itl_distribution\n"
            "from capsim.report import style, terminal\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out == "[]\n"

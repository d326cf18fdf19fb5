"""The report's chart process (capsim.report.charts, issue 31 item 13): a child forked before
the simulation draws the PNGs while the parent writes the rest. It must write the same
bytes as drawing in process, turn a failing chart into one line with nothing half-written,
and leave no process behind (closed early, failed, or its parent killed)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from capsim.report import charts as charts_module
from capsim.report.charts import ChartError, ChartProcess, InProcess
from capsim.report.run import figures
from tests.report.test_report import _results, _rows, write


@pytest.fixture(autouse=True)
def _fork_beside_the_test_runner(monkeypatch):
    """``capsim run`` forks with no other thread running (it has none then); a pytest-xdist
    worker has its own, which the child never touches: let these tests fork there."""
    monkeypatch.setattr(charts_module.threading, "active_count", lambda: 1)


def _start(**kw) -> ChartProcess:
    process = ChartProcess.start(**kw)
    if process is None:
        pytest.skip("not Linux or a single CPU: the charts are drawn in process")
    return process


def _reaped(pid: int) -> bool:
    """True once ``pid`` (a child of this process) has been waited for."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def _boom(*args, **kwargs):
    raise RuntimeError("figure failed\nsecond line")


def _files(folder):
    out = {p.name: p.read_bytes() for p in folder.iterdir()}
    # The page says when it was generated (to the minute) and each run's wall time.
    out["index.html"] = re.sub(rb"generated [^<]*UTC|in [0-9.,]+ s wall", b"",
                               out["index.html"])
    return out


def test_forked_charts_write_the_same_bytes_as_in_process(tmp_path):
    results = _results()
    write(tmp_path / "here", results, _rows(results))
    with _start() as charts:
        pid = charts.pid
        write(tmp_path / "forked", results, _rows(results), charts=charts)
    assert _reaped(pid)
    here, forked = _files(tmp_path / "here"), _files(tmp_path / "forked")
    assert sorted(forked) == sorted(here) and len([n for n in here if n.endswith(".png")]) == 6
    assert forked == here                       # every PNG, CSV and JSON byte


def test_a_failing_chart_is_one_line_and_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "plot_ttft_cdf", _boom)     # before the fork: the child's too
    results = _results()
    charts = _start()
    pid = charts.pid
    with pytest.raises(ChartError) as err:
        write(tmp_path / "r", results, _rows(results), charts=charts)
    assert str(err.value) == "drawing the report's charts failed: RuntimeError: figure failed"
    assert _reaped(pid)
    assert list(tmp_path.iterdir()) == []       # no report, no temporary directory


def test_a_chart_process_that_dies_says_how(tmp_path):
    with _start(warm=()) as charts:
        charts.submit([("os:_exit", (3,), {})])
        with pytest.raises(ChartError, match=r"ended without drawing \(exit code 3\)$"):
            charts.wait()


def test_an_error_in_the_parent_kills_the_chart_process_before_removing_the_report(
        tmp_path, monkeypatch):
    """Killed and reaped before the temporary directory is removed: nothing writes into it
    afterwards."""
    results = _results()
    charts = _start()
    pid = charts.pid
    monkeypatch.setattr("capsim.report.run.page.render", _boom)
    with pytest.raises(RuntimeError, match="figure failed"):
        write(tmp_path / "r", results, _rows(results), charts=charts)
    assert _reaped(pid)
    assert list(tmp_path.iterdir()) == []


def test_closing_before_submitting_kills_and_reaps_it():
    charts = _start()
    pid = charts.pid
    charts.close()
    charts.close()                              # idempotent
    assert _reaped(pid)


def test_the_chart_process_ignores_ctrl_c_and_dies_with_its_parent():
    """Ctrl-C reaches the whole process group: the child ignores it (the parent decides);
    a parent killed outright (SIGKILL: no ``finally``) takes the child with it."""
    code = ("import os, signal, sys\n"
            "from capsim.report.charts import ChartProcess\n"
            "c = ChartProcess.start(warm=())\n"
            "print(c.pid if c else 0, flush=True)\n"
            "sys.stdin.readline()\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        pid = int(proc.stdout.readline())
        if not pid:
            pytest.skip("not Linux or a single CPU")
        child = psutil.Process(pid)
        os.kill(pid, signal.SIGINT)
        time.sleep(0.3)
        assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(timeout=30) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if child.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the chart process outlived its parent")
    finally:
        if proc.poll() is None:
            proc.kill()


def test_one_cpu_draws_in_process(monkeypatch):
    monkeypatch.setattr(charts_module, "_cpus", lambda: 1)
    assert ChartProcess.start() is None


def test_in_process_draws_when_waited_for(tmp_path):
    drawn = []
    charts = InProcess()
    charts.submit([(f"{__name__}:_record", (drawn, 1), {})])
    assert drawn == []
    charts.wait()
    assert drawn == [1]


def _record(into: list, value) -> None:
    into.append(value)


def test_no_fork_while_other_threads_run(monkeypatch):
    """A fork copies the calling thread only: with others running, the charts are drawn in
    process."""
    monkeypatch.setattr(charts_module.threading, "active_count", lambda: 2)
    assert ChartProcess.start() is None

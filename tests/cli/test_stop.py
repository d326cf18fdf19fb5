"""SIGTERM and SIGINT end a command's worker processes and print one line (capsim.cli.stop,
capsim.studies.parallel). Issue 31: SIGTERM to capsim size left its forkserver and both
pool workers computing under PID 1; a Dask sweep's Ctrl-C printed ~45 lines of
tracebacks and every Dask sweep left dask-scratch-space/ in the temp folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from capsim.studies.parallel import ExecutorSpec, open_runner


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@pytest.mark.parametrize("signum, code, line", [
    (signal.SIGTERM, 143, "terminated (SIGTERM): stopped; its worker processes were ended\n"),
    (signal.SIGINT, 130, "interrupted (SIGINT): stopped; its worker processes were ended\n"),
])
def test_a_signal_ends_capsim_size_and_every_process_it_started(tmp_path, scenarios_dir,
                                                                signum, code, line):
    """The signal goes to capsim alone (SIGTERM: a CI timeout, a process manager) or, for
    SIGINT, to its whole process group as a terminal's Ctrl-C does; once two pool workers
    compute, capsim exits 128 + the signal with one line, and no process it started is
    left (forkserver, resource tracker, workers)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "capsim", "size", str(scenarios_dir / "size_chat_h100_vs_a100.yaml"),
         "--workers", "2", "-o", str(tmp_path / "out")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 180
        while len(_descendants(proc.pid)) < 4 and time.monotonic() < deadline:  # 2 workers
            time.sleep(0.2)                 # + forkserver + resource tracker
        started = _descendants(proc.pid)
        assert len(started) >= 4, "the pool never started"
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, err) == (code, line)
    gone, alive = psutil.wait_procs(started, timeout=10)
    assert alive == []
    assert not (tmp_path / "out").exists()


def test_pool_workers_leave_ctrl_c_to_the_parent():
    """The terminal's SIGINT reaches every process of the group: the workers ignore it (no
    traceback from each); the parent's handler ends them."""
    with open_runner(ExecutorSpec("process", workers=2)) as runner:
        assert runner.pool.submit(signal.getsignal, signal.SIGINT).result() == signal.SIG_IGN


def test_a_dask_cluster_spills_to_a_private_folder_it_removes(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with open_runner(ExecutorSpec("dask", workers=1)) as runner:
        assert runner.map(abs, [-1, -2]) == [1, 2]
        [folder] = tmp_path.iterdir()
        assert folder.name.startswith("capsim-dask-")
        handlers = runner.client.run(signal.getsignal, signal.SIGINT)
        assert list(handlers.values()) == [signal.SIG_IGN]     # Ctrl-C left to capsim
    assert list(tmp_path.iterdir()) == []                      # no dask-scratch-space/

"""capsim.report.background: a report's figures drawn in forked processes beside the rest of
it, the same bytes as drawn inline, failures raised in the parent, inline where a fork is
unsafe (another thread running)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from capsim.report import background
from capsim.report.background import start

needs_fork = pytest.mark.skipif(not hasattr(os, "fork") or (
    hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) < 2),
    reason="forks only with os.fork and two usable CPUs")


def _pid_to(path: Path):
    return lambda: path.write_text(str(os.getpid()))


def _boom():
    raise ValueError("figure 2 failed")


@needs_fork
def test_each_group_runs_in_its_own_child_and_is_waited_for(tmp_path, monkeypatch):
    monkeypatch.setattr(background.threading, "active_count", lambda: 1)
    with start([[_pid_to(tmp_path / "a")], [_pid_to(tmp_path / "b"), _pid_to(tmp_path / "c")]]):
        pass
    pids = {name: int((tmp_path / name).read_text()) for name in "abc"}
    assert pids["b"] == pids["c"] and len({pids["a"], pids["b"], os.getpid()}) == 3


@needs_fork
def test_a_failure_in_a_child_is_raised_after_the_block(tmp_path, monkeypatch):
    monkeypatch.setattr(background.threading, "active_count", lambda: 1)
    done = []
    with pytest.raises(ValueError, match="figure 2 failed"):
        with start([[_pid_to(tmp_path / "a")], [_boom]]):
            done.append("rest of the report")
    assert done and (tmp_path / "a").exists()


@needs_fork
def test_a_failure_in_the_block_wins_and_the_children_are_reaped(tmp_path, monkeypatch):
    monkeypatch.setattr(background.threading, "active_count", lambda: 1)
    with pytest.raises(KeyError):
        with start([[_pid_to(tmp_path / "a")], [_boom]]) as drawing:
            raise KeyError("csv")
    assert drawing.children == [] and (tmp_path / "a").exists()


def test_with_another_thread_running_everything_is_drawn_here(tmp_path):
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not background.can_fork()
        with start([[_pid_to(tmp_path / "a")], [_pid_to(tmp_path / "b")]]):
            assert (tmp_path / "b").exists()            # drawn before the block, inline
    finally:
        stop.set()
        thread.join()
    assert {int((tmp_path / n).read_text()) for n in "ab"} == {os.getpid()}


def test_inline_a_failure_is_raised_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(background, "can_fork", lambda: False)
    with pytest.raises(ValueError, match="figure 2 failed"):
        start([[_pid_to(tmp_path / "a")], [_boom]])

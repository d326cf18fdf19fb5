"""Drawing a report's charts: in this process, or in a child forked before the simulation.

A report's PNGs (matplotlib, ~1–2 CPU-s for ``azure_conv_replay``) and importing
matplotlib for them (~0.9 s) were on the critical path of ``capsim run`` after the
simulation, on one CPU of a machine that usually has two. :class:`ChartProcess` forks a
child (Linux only) before the simulation: the child imports matplotlib and the plotting
modules while the parent simulates, then waits; after the simulation the parent hands it
the chart jobs (pickled over a pipe) and writes the CSVs, results.json and index.html while
the child draws. The child forks a helper of its own (sharing its imports and the jobs at
no cost) and the two draw about half of the charts each, by their weights. The same
functions draw the same PNGs either way. :class:`InProcess` is the serial path (one CPU, no
``fork``, ``capsim run --workers 1``, every other report); :class:`NoCharts` draws none
(``capsim run --no-charts``).

A job is ``("module:function", args, kwargs)``; every chart function writes one file and
returns nothing. The caller submits once and then waits; an error in a chart comes back as
one line (:class:`ChartError`). No process outlives the parent: the child runs in a process
group of its own with its helper, which the parent kills (SIGKILL) and reaps on any error
or signal (:meth:`ChartProcess.close`) before the report's temporary directory is removed;
a terminal's Ctrl-C reaches the parent alone (the child ignores SIGINT too); each is sent
SIGKILL when its parent dies without closing it (``PR_SET_PDEATHSIG``).

Public API: ChartJob, ChartError, InProcess, ChartProcess, NoCharts, draw, halves.
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import sys
import threading
from typing import Any

#: ("module:function", positional args, keyword args) of one chart.
ChartJob = tuple[str, tuple, dict]

#: Imported by the chart child while the parent simulates (everything a run report draws).
WARM_MODULES = ("capsim.report.run.figures", "capsim.report.run.timeline",
                "capsim.report.run.day", "capsim.report.run.disagg",
                "matplotlib.backends.backend_agg", "PIL.PngImagePlugin")

_PR_SET_PDEATHSIG = 1          # linux/prctl.h
_SIGNALS = {signal.SIGINT, signal.SIGTERM}


class ChartError(Exception):
    """Drawing a chart failed in the chart process; ``str()`` is one line."""


def draw(jobs: list[ChartJob]) -> None:
    """Run each chart job in this process, in order."""
    for target, args, kwargs in jobs:
        module, function = target.split(":")
        getattr(importlib.import_module(module), function)(*args, **kwargs)


class NoCharts:
    """No chart drawn (``capsim run --no-charts``): the report leaves its figures out."""

    draws = False

    def __enter__(self) -> "NoCharts":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def submit(self, jobs: list[ChartJob], weights: list[float] | None = None) -> None:
        return None

    def wait(self) -> None:
        return None

    def close(self) -> None:
        return None


class InProcess:
    """Charts drawn here, when waited for."""

    draws = True

    def __init__(self) -> None:
        self._jobs: list[ChartJob] = []

    def submit(self, jobs: list[ChartJob], weights: list[float] | None = None) -> None:
        self._jobs = list(jobs)

    def wait(self) -> None:
        jobs, self._jobs = self._jobs, []
        draw(jobs)

    def close(self) -> None:
        self._jobs = []


class ChartProcess:
    """A forked child that draws the submitted charts (see the module docstring).

    Use :meth:`start` (None where it cannot fork) as a context manager: leaving it kills
    and reaps the child if it is still there. One :meth:`submit`, then :meth:`wait`.
    """

    draws = True

    def __init__(self, pid: int, jobs_fd: int, reply_fd: int) -> None:
        self.pid = pid
        self._jobs_fd: int | None = jobs_fd
        self._reply_fd: int | None = reply_fd

    @classmethod
    def start(cls, warm: tuple[str, ...] = WARM_MODULES) -> ChartProcess | None:
        """Fork the chart child, which imports ``warm`` and waits for its jobs; None
        off Linux (macOS's system libraries are not safe to use in a forked child, which
        is why Python's own multiprocessing spawns there), with fewer than two CPUs to run
        on, with other threads running (a fork copies only the calling thread) or when
        the fork fails."""
        if not sys.platform.startswith("linux") or _cpus() < 2 or \
                threading.active_count() > 1:
            return None
        for stream in (sys.stdout, sys.stderr):     # or the child holds a copy of their buffers
            if stream is not None:
                stream.flush()
        parent = os.getpid()
        jobs_r, jobs_w = os.pipe()
        reply_r, reply_w = os.pipe()
        # Signals held over the fork: the child sets its own handlers before any arrives.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            pid = os.fork()
        except OSError:                                   # no room for a process: here
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            for fd in (jobs_r, jobs_w, reply_r, reply_w):
                os.close(fd)
            return None
        if pid == 0:                                      # the child never returns
            code = 1
            try:
                os.close(jobs_w)
                os.close(reply_r)
                code = _child(parent, jobs_r, reply_w, warm, mask)
            finally:
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _own_group(pid)
        os.close(jobs_r)
        os.close(reply_w)
        return cls(pid, jobs_w, reply_r)

    def submit(self, jobs: list[ChartJob], weights: list[float] | None = None) -> None:
        """Hand the child its jobs (blocks until it has read them); it shares them with a
        helper by ``weights`` (their relative cost; default: equal)."""
        fd, self._jobs_fd = self._jobs_fd, None
        if fd is None:
            raise RuntimeError("chart jobs already submitted")
        try:
            with os.fdopen(fd, "wb") as pipe:
                pickle.dump((list(jobs), list(weights or [1.0] * len(jobs))), pipe,
                            protocol=pickle.HIGHEST_PROTOCOL)
        except BrokenPipeError:
            pass                           # the child is gone: wait() says how

    def wait(self) -> None:
        """Wait until the child has drawn every chart.

        Raises:
            ChartError: a chart failed (its exception type and message), or the child
                ended without an answer (how: its exit code or signal).
        """
        fd, self._reply_fd = self._reply_fd, None
        reply: Any = None
        if fd is not None:
            with os.fdopen(fd, "rb") as pipe:
                try:
                    reply = pickle.load(pipe)
                except (EOFError, pickle.UnpicklingError):
                    reply = EOFError
        status = self._reap()
        if reply is EOFError:
            raise ChartError(f"the report's chart process ended without drawing "
                             f"({_how(status)})")
        if reply is not None:
            raise ChartError(f"drawing the report's charts failed: {reply}")

    def close(self) -> None:
        """Kill and reap the child if it is still there; close the pipes. Idempotent."""
        for name in ("_jobs_fd", "_reply_fd"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                os.close(fd)
        if self.pid:
            for kill, target in ((os.killpg, self.pid), (os.kill, self.pid)):
                try:                      # the child's group: the child and its helper
                    kill(target, signal.SIGKILL)
                    break
                except (ProcessLookupError, PermissionError):
                    continue
            self._reap()

    def _reap(self) -> int | None:
        pid, self.pid = self.pid, 0
        if not pid:
            return None
        while True:
            try:
                return os.waitpid(pid, 0)[1]
            except InterruptedError:
                continue
            except ChildProcessError:
                return None

    def __enter__(self) -> ChartProcess:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


def _how(status: int | None) -> str:
    if status is None:
        return "no exit status"
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


def _child(parent: int, jobs_fd: int, reply_fd: int, warm: tuple[str, ...], mask) -> int:
    """The chart child's whole life: import ``warm``, read the jobs, draw (with a helper
    forked from itself for part of them), answer. ``mask``: the signal mask to restore
    once its own handlers are set."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # Out of the terminal's foreground group: a warning on stderr must not stop it (tostop).
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    _own_group(0)
    _die_with(parent)
    warm_error = None
    try:
        for module in warm:
            importlib.import_module(module)
    except Exception as exc:                     # said when the jobs come (if they do)
        warm_error = exc
    try:
        with os.fdopen(jobs_fd, "rb") as pipe:
            jobs, weights = pickle.load(pipe)
    except (EOFError, pickle.UnpicklingError, OSError):
        return 0                                  # the parent gave up on the charts
    mine, theirs = halves(jobs, weights)
    helper = _fork_helper(theirs) if theirs and warm_error is None else None
    reply = _draw_reply(mine if helper else jobs, warm_error)
    if helper is not None:
        reply = reply or _helper_reply(*helper)
    with os.fdopen(reply_fd, "wb") as pipe:
        pickle.dump(reply, pipe)
    return 0


def halves(jobs: list[ChartJob], weights: list[float]) -> tuple[list[ChartJob], list[ChartJob]]:
    """``jobs`` in two lists of about equal total weight (heaviest first, each to the
    lighter list), each in the jobs' order."""
    load, out = [0.0, 0.0], ([], [])
    for i in sorted(range(len(jobs)), key=lambda i: -weights[i]):
        side = 0 if load[0] <= load[1] else 1
        load[side] += weights[i]
        out[side].append(i)
    return [jobs[i] for i in sorted(out[0])], [jobs[i] for i in sorted(out[1])]


def _draw_reply(jobs: list[ChartJob], error: Exception | None = None) -> str | None:
    """Draw ``jobs``; None, or the first error as one line."""
    try:
        if error is not None:
            raise error
        draw(jobs)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


def _fork_helper(jobs: list[ChartJob]) -> tuple[int, int] | None:
    """A helper forked from the chart child (it shares its imports and jobs) that draws
    ``jobs`` and answers on a pipe: (its pid, the pipe's read end); None if the fork fails."""
    reply_r, reply_w = os.pipe()
    me = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        os.close(reply_r)
        os.close(reply_w)
        return None
    if pid == 0:
        try:
            os.close(reply_r)
            _die_with(me)
            reply = _draw_reply(jobs)
            with os.fdopen(reply_w, "wb") as pipe:
                pickle.dump(reply, pipe)
        finally:
            os._exit(0)
    os.close(reply_w)
    return pid, reply_r


def _helper_reply(pid: int, reply_fd: int) -> str | None:
    with os.fdopen(reply_fd, "rb") as pipe:
        try:
            reply = pickle.load(pipe)
        except (EOFError, pickle.UnpicklingError):
            reply = EOFError
    status = os.waitpid(pid, 0)[1]
    if reply is EOFError:
        return f"its helper ended without drawing ({_how(status)})"
    return reply


def _own_group(pid: int) -> None:
    """Put the chart child (``pid``; 0: this process) in a process group of its own, so
    that :meth:`ChartProcess.close` kills it and its helper at once; called on both sides
    of the fork, whichever runs first. A terminal's Ctrl-C then reaches the parent only."""
    try:
        os.setpgid(pid, 0)
    except (OSError, AttributeError):       # already done by the other side, or exited
        pass


def _die_with(parent: int) -> None:
    """SIGKILL this process when its parent dies (Linux); if it already has, exit."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(0)

"""Draw a report's figures in forked processes while this one writes the rest of it.

A report's PNGs take as long as its CSVs, JSON and HTML together several times over (the
azure_conv_replay report: 2.8 s of CPU for five figures against 0.6 s for the rest), and
none of them reads another's output. :func:`start` runs each group of drawing jobs in a
child of this process made by ``fork`` (the child has the results in memory already:
nothing is pickled but a failure), so on two CPUs the figures and the other files are
written at once. The files are the same bytes either way: the same code draws them.

Inline (one group after the other, in :func:`start`, as before) when ``fork`` would be
unsafe or useless: no ``os.fork`` (Windows), one usable CPU, or another thread running in
this process (a forked child holds only the calling thread, and a lock another thread held
stays locked there for ever; capsim.studies.parallel never forks such a process either).

Public API:
    start(groups) -> Drawing           ``with start(groups): ...write the rest...``
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
from collections.abc import Callable, Sequence

Job = Callable[[], None]


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:          # no affinity call (macOS): every CPU
        return os.cpu_count() or 1


def can_fork() -> bool:
    """``fork`` is available, more than one CPU is usable, and no other thread runs here."""
    return hasattr(os, "fork") and _usable_cpus() > 1 and threading.active_count() == 1


class Drawing:
    """The started groups; leaving the ``with`` block waits for every child and raises
    the first failure (the exception raised in the child, or a RuntimeError naming it when
    it cannot be pickled; RuntimeError when a child died without a word). A failure in
    the block itself propagates unchanged after the children are reaped."""

    def __init__(self, children: list[tuple[int, int]]):
        self.children = children           # (pid, read end of its pipe)

    def __enter__(self) -> Drawing:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        failure = self.wait()
        if failure is not None and exc_type is None:
            raise failure

    def wait(self) -> BaseException | None:
        """Reap every child; the first failure, None when all succeeded."""
        failures = []
        for pid, fd in self.children:
            with os.fdopen(fd, "rb") as pipe:
                report = pipe.read()
            _, status = os.waitpid(pid, 0)
            if report:
                failures.append(_loads(report))
            elif status != 0:
                failures.append(RuntimeError(f"a figure process ended with status {status} "
                                             "before writing its figures"))
        self.children = []
        return failures[0] if failures else None


def start(groups: Sequence[Sequence[Job]]) -> Drawing:
    """Run each group's jobs (in order) in its own forked child, or every group here and
    now when :func:`can_fork` is false or there is one group.

    Returns:
        A :class:`Drawing` to leave (``with``) once the rest of the report is written.

    Raises:
        Exception: inline, whatever a job raises (as before).
    """
    groups = [list(g) for g in groups if g]
    if len(groups) < 2 or not can_fork():
        for group in groups:
            for job in group:
                job()
        return Drawing([])
    sys.stdout.flush()                      # nothing buffered is written twice
    sys.stderr.flush()
    children = []
    try:
        for group in groups:
            children.append(_fork(group))
    except BaseException:
        Drawing(children).wait()
        raise
    return Drawing(children)


def _loads(report: bytes) -> BaseException:
    try:
        return pickle.loads(report)
    except Exception as exc:                # noqa: BLE001 - a class this side cannot build
        return RuntimeError(f"a figure failed (its exception could not be read: {exc})")


def _fork(jobs: list[Job]) -> tuple[int, int]:
    read, write = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write)
        return pid, read
    os.close(read)                          # the child: draw, report, leave at once
    report = b""
    try:
        for job in jobs:
            job()
    except BaseException as exc:            # noqa: BLE001 - handed to the parent
        try:
            report = pickle.dumps(exc)
        except Exception:                   # noqa: BLE001
            report = pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))
    try:
        with os.fdopen(write, "wb") as pipe:
            pipe.write(report)
    finally:
        os._exit(0)                         # no atexit handlers, no second flush of stdio

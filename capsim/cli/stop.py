"""SIGTERM and SIGINT stop a command cleanly.

Python's default SIGTERM ends the process at once, skipping every ``finally``: a CI
timeout or a process manager stopping ``capsim size`` left its forkserver and pool
workers computing under PID 1. Here both signals raise :class:`Stopped` in the main
thread instead, so the runners' context managers (:func:`capsim.studies.parallel.
open_runner`) kill their workers, the report's temporaries are left for the next run to
remove, and :func:`capsim.cli.main.main` prints one line and exits 128 + the signal's
number (143 for SIGTERM, 130 for SIGINT, as a shell reports a job the signal ended).
A second signal during that teardown is ignored: the teardown only terminates processes.

Public API:
    Stopped, stop_on_signals()
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopped(BaseException):
    """A SIGTERM or SIGINT arrived (a BaseException, like KeyboardInterrupt: nothing that
    catches ``Exception`` swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def line(self) -> str:
        """The one line the CLI prints."""
        what = "terminated (SIGTERM)" if self.signum == signal.SIGTERM else \
            "interrupted (SIGINT)"
        return f"{what}: stopped; its worker processes were ended"


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT raise :class:`Stopped` (main thread only: a
    handler cannot be installed elsewhere); the previous handlers come back on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in _SIGNALS}

    def stop(signum, _frame):
        for s in _SIGNALS:                 # a second one must not cut the teardown short
            signal.signal(s, signal.SIG_IGN)
        raise Stopped(signum)

    for s in _SIGNALS:
        if previous[s] is not signal.SIG_IGN:      # e.g. nohup's SIGINT stays ignored
            signal.signal(s, stop)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)

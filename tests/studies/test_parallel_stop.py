"""Stopping a process pool (SIGTERM, Ctrl-C, a task's error) ends every worker the
forkserver forked, also one the pool had not yet registered (issue 31 item 7: a SIGTERM
to ``capsim size`` while its pool started a worker left the command waiting for ever on
the forkserver, the half-started worker holding the forkserver's alive pipe)."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

from capsim.studies import parallel


@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"),
                    reason="the forkserver's children are listed in /proc on Linux only")
def test_stopping_a_pool_ends_a_forked_worker_it_had_not_registered():
    ctx = parallel._mp_context()
    if ctx.get_start_method() != "forkserver":
        pytest.skip("no forkserver on this platform")
    # Forked by the forkserver, so it holds the forkserver's alive pipe, as a worker
    # caught half-started does; the pool does not know it.
    straggler = ctx.Process(target=time.sleep, args=(600,))
    straggler.start()
    pool = ProcessPoolExecutor(max_workers=1, mp_context=ctx)
    stopped = threading.Event()
    stopper = threading.Thread(target=lambda: (parallel._stop_now(pool), stopped.set()),
                               daemon=True)
    try:
        stopper.start()
        stopper.join(timeout=60)
        assert stopped.is_set(), "HANG: _stop_now still waits on the forkserver after 60 s"
        straggler.join(timeout=10)
        assert not straggler.is_alive()
    finally:
        if straggler.is_alive():
            straggler.kill()

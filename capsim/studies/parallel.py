"""Run independent tasks serially, on a local process pool, or on a Dask cluster.

Three backends behind one :class:`Runner` (open it with :func:`open_runner`):

- ``serial``: in this process, one task after the other.
- ``process`` (default): :class:`concurrent.futures.ProcessPoolExecutor`
  with one worker per CPU, started with the ``forkserver`` method where the
  platform has it (``spawn`` elsewhere) — never a bare ``fork`` of a process
  that may already run threads.
- ``dask``: :mod:`distributed` — a :class:`distributed.Client` on an existing
  scheduler (``scheduler="tcp://host:8786"``), or on a
  :class:`distributed.LocalCluster` of worker processes started for the run.
  Needs the ``dask`` extra (``pip install 'capsim[dask]'``).

Results come back in the order of the inputs, whatever order workers finish
in, so a task list gives the same answers on every backend as long as the
function is deterministic (:func:`capsim.studies.task.execute` is).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.forkserver
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from capsim.common.errors import ScenarioError

Progress = Callable[[int, int], None]
BACKENDS = ("process", "serial", "dask")


@dataclass(frozen=True)
class ExecutorSpec:
    """Where tasks run.

    Attributes:
        backend: "process", "serial" or "dask".
        workers: worker processes (None: one per CPU, :func:`os.cpu_count`).
            Ignored with ``scheduler`` (the cluster has its own workers).
        scheduler: address of a running Dask scheduler (implies "dask").
    """

    backend: Literal["process", "serial", "dask"] = "process"
    workers: int | None = None
    scheduler: str | None = None

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ScenarioError(f"unknown executor '{self.backend}'; valid: {', '.join(BACKENDS)}")
        if self.workers is not None and self.workers < 1:
            raise ScenarioError(f"--workers must be >= 1, got {self.workers}")
        if self.scheduler is not None and self.backend != "dask":
            object.__setattr__(self, "backend", "dask")

    @property
    def num_workers(self) -> int:
        return self.workers or os.cpu_count() or 1

    def describe(self) -> str:
        """E.g. "process pool, 2 workers" or "Dask scheduler tcp://10.0.0.5:8786"."""
        if self.backend == "serial" or (self.backend == "process" and self.num_workers == 1):
            return "serial"
        if self.backend == "process":
            return f"process pool, {self.num_workers} workers"
        if self.scheduler:
            return f"Dask scheduler {self.scheduler}"
        return f"Dask LocalCluster, {self.num_workers} workers"


class Runner:
    """Maps a function over tasks on one backend; reuse it for several batches."""

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any],
            progress: Progress | None = None,
            weights: Sequence[float] | None = None) -> list[Any]:
        """``[fn(x) for x in items]``, in input order; ``progress(done, total)`` after each.

        ``weights`` (expected cost of each item, any unit) makes the parallel
        backends start the heaviest items first (longest-processing-time
        first), so one long run does not finish alone at the end. The first
        exception raised by ``fn`` propagates (pending tasks are cancelled
        where the backend allows).
        """
        raise NotImplementedError


def heaviest_first(n: int, weights: Sequence[float] | None) -> list[int]:
    """Indices ``0..n-1`` by descending weight (stable; input order without weights)."""
    if weights is None:
        return list(range(n))
    return sorted(range(n), key=lambda i: -weights[i])


class _SerialRunner(Runner):
    def map(self, fn, items, progress=None, weights=None):
        out = []
        for i, item in enumerate(items):
            out.append(fn(item))
            if progress is not None:
                progress(i + 1, len(items))
        return out


class _PoolRunner(Runner):
    def __init__(self, pool: ProcessPoolExecutor):
        self.pool = pool

    def map(self, fn, items, progress=None, weights=None):
        futures: list = [None] * len(items)
        for i in heaviest_first(len(items), weights):
            futures[i] = self.pool.submit(fn, items[i])
        pending, done = set(futures), 0
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                if fut.exception() is not None:
                    for other in pending:
                        other.cancel()
                    raise fut.exception()
            done += len(finished)
            if progress is not None:
                progress(done, len(items))
        return [f.result() for f in futures]


class _DaskRunner(Runner):
    def __init__(self, client):
        self.client = client

    def map(self, fn, items, progress=None, weights=None):
        from distributed import as_completed

        # Dask runs higher priorities first; its map keeps the input order.
        futures = self.client.map(fn, list(items), pure=False, priority=0) if weights is None \
            else [self.client.submit(fn, item, pure=False, priority=float(w))
                  for item, w in zip(items, weights)]
        try:
            for done, fut in enumerate(as_completed(futures), start=1):
                if fut.status == "error":
                    fut.result()                     # raises the task's exception
                if progress is not None:
                    progress(done, len(items))
            return self.client.gather(futures)
        finally:
            self.client.cancel(futures)


@contextmanager
def open_runner(spec: ExecutorSpec) -> Iterator[Runner]:
    """A :class:`Runner` for ``spec``; pools and clusters are shut down on exit.

    Raises:
        ScenarioError: ``dask`` requested but :mod:`distributed` is not installed,
            or the scheduler address cannot be reached.
    """
    if spec.backend == "serial" or (spec.backend == "process" and spec.num_workers == 1):
        yield _SerialRunner()
    elif spec.backend == "process":
        pool = ProcessPoolExecutor(max_workers=spec.num_workers, mp_context=_mp_context(),
                                   initializer=_worker_init)
        try:
            yield _PoolRunner(pool)
        except BaseException:
            _stop_now(pool)
            raise
        pool.shutdown(wait=True)
    else:
        with _dask_client(spec) as client:
            yield _DaskRunner(client)


def _stop_now(pool: ProcessPoolExecutor) -> None:
    """Stop a pool whose caller gave up (Ctrl-C, SIGTERM, a task's error): pending tasks
    cancelled, running ones killed — ``shutdown(wait=True)`` would wait for each running
    simulation to end (a day's: a minute) — and the forkserver they were forked from
    stopped (the next pool starts another). Python 3.14's ``terminate_workers`` does the
    first; before it, the pool's worker processes are only reachable through
    ``_processes``, and the forkserver through ``_stop``, the method CPython's own tests
    stop it with."""
    workers = list((getattr(pool, "_processes", None) or {}).values())
    for proc in workers:
        proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in workers:
        proc.join(timeout=5)
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    if server is not None and hasattr(server, "_stop"):
        _end_forked_children(getattr(server, "_forkserver_pid", None))
        server._stop()


def _end_forked_children(server_pid: int | None) -> None:
    """Kill every process the forkserver forked. Each holds the forkserver's "alive" pipe,
    and the forkserver exits only when no process does: a worker being started when the
    signal came (not yet in the pool's ``_processes``) waits for start-up data that will
    never come, so ``_stop``'s ``waitpid`` on the forkserver waited for ever (SIGTERM to
    ``capsim size`` during a pool's start-up). The forkserver is this process's own, so its
    children are this pool's workers. Linux lists them in ``/proc``; elsewhere nothing."""
    if server_pid is None:
        return
    try:
        with open(f"/proc/{server_pid}/task/{server_pid}/children") as f:
            pids = [int(pid) for pid in f.read().split()]
    except (OSError, ValueError):
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _worker_init() -> None:
    """A pool worker: one BLAS thread (:func:`one_blas_thread`) and Ctrl-C ignored — the
    terminal sends SIGINT to the whole foreground process group, and the parent, which
    gets it too, ends the workers (:func:`_stop_now`) without each printing a
    KeyboardInterrupt traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    one_blas_thread()


def one_blas_thread() -> None:
    """Limit BLAS / OpenMP thread pools to one thread in this worker process.

    The workers already fill the cores; numpy's OpenBLAS would otherwise add
    a thread per core to every worker, spinning beside the simulations (Dask's
    nanny sets OMP/MKL/OPENBLAS_NUM_THREADS=1 for the same reason).
    """
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)


def _mp_context():
    """forkserver (workers fork from a clean server that preloaded capsim), else spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["capsim.studies.task"])
        return ctx
    return multiprocessing.get_context("spawn")


@contextmanager
def _dask_client(spec: ExecutorSpec):
    try:
        from distributed import Client
    except ImportError:
        raise ScenarioError("the Dask executor needs dask.distributed: "
                            "pip install 'capsim[dask]'") from None
    if spec.scheduler:
        try:
            client = Client(spec.scheduler, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise ScenarioError(f"cannot reach the Dask scheduler at {spec.scheduler}: {exc}") \
                from None
        with client:
            yield client
        return
    with _local_cluster(spec.num_workers) as client:
        yield client


@contextmanager
def _local_cluster(workers: int):
    """A :class:`distributed.LocalCluster` of ``workers`` processes and its client, for
    one command:

    - its workers spill to a private temporary folder removed at the end (Dask's default,
      ``<tmp>/dask-scratch-space``, stayed behind after every sweep);
    - its worker processes start with SIGINT ignored (children keep an ignored signal),
      so Ctrl-C reaches only this process, which closes the cluster: each worker and
      nanny printed its own KeyboardInterrupt traceback (~45 lines);
    - Dask's own loggers are silenced while a stopped command tears it down.
    """
    import dask
    from distributed import Client, LocalCluster

    scratch = tempfile.mkdtemp(prefix="capsim-dask-")
    try:
        with dask.config.set({"temporary-directory": scratch}), _sigint_ignored_by_children():
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None, silence_logs=logging.ERROR,
                                   local_directory=scratch)
        try:
            with Client(cluster) as client:
                yield client
        except BaseException:
            _silence_dask()                   # the teardown's warnings are not news
            raise
        finally:
            cluster.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextmanager
def _sigint_ignored_by_children():
    """SIGINT ignored while child processes start (main thread only), restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _silence_dask() -> None:
    for name in ("distributed", "tornado", "asyncio"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)

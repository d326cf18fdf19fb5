"""The seam between a run and its topology: :class:`Cluster`.

A run sends each arriving request to its cluster and, at the end, lets the cluster
assemble its part of the result. Four topologies implement it:

- :class:`FixedPool`: a fixed count of co-located replicas behind the router;
- :class:`~capsim.engine.fleet.Fleet`: a co-located pool that autoscales and/or fails;
- :class:`~capsim.engine.disagg.DisaggCluster`: a prefill and a decode pool and the KV
  link between them;
- :class:`~capsim.engine.pooled.PooledCluster`: several pools (fixed, autoscaled or
  failing; GPUs, engines and models of their own) behind one router.

The rules the co-located ones share are here too: :func:`colocated_reject_reason` (what
an engine can never serve), :func:`enter` (the engine's server path before a request
reaches a replica), :func:`hand_to` (a replica takes a request, or its request limits
turn it away) and :func:`pool_fields` (a pool's labels and peaks in the result).
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence, runtime_checkable

from capsim.engine.clock import Environment
from capsim.engine.replica import Replica
from capsim.engine.request import Request
from capsim.engine.router import make_router
from capsim.kv.blocks import blocks_needed
from capsim.results.model import RunResult
from capsim.scenario.describe import engine_label, pool_log_lines, scheduler_label
from capsim.scenario.routing import RouterOptions
from capsim.scenario.run_config import Pool, RunConfig

#: ``reject(req, reason)``: the request ends now, rejected (never served).
Reject = Callable[[Request, str], None]


@runtime_checkable
class Cluster(Protocol):
    """What a run needs from its topology.

    Attributes:
        replicas: every replica started so far (index order; a fleet's grow).
        serving: the replicas taking new requests now (the day view's count).
        held: requests waiting outside any replica now (a fleet with none serving).
        owns_end_s: the result's ``sim_end_s`` is the cluster's (a single autoscaled or
            failing fleet: its last request's end); else a day-view run ends with its
            last request.
    """

    replicas: list[Replica]
    owns_end_s: bool

    @property
    def serving(self) -> list[Replica]: ...

    @property
    def held(self) -> int: ...

    def admit(self, req: Request) -> None:
        """``req`` arrives now: reject it (the cluster's ``reject``) if no replica could
        ever serve it, else hand it to a replica after the engine's server path."""

    def invariant_problems(self) -> list[str]:
        """Conservation problems the cluster found at the end of the run; [] if none."""

    def assemble(self, run: RunConfig, fields: dict) -> RunResult:
        """The run's result from ``fields`` (what every topology shares: variant, seed,
        replica and GPU counts, class names, end time, wall time, requests, ITL runs,
        replica stats, timelines) and the cluster's own part (labels, price, peaks, log;
        a fleet's history, a disaggregated split's transfers, a pooled fleet's pools)."""


def enter(env: Environment, req: Request, before_s: float,
          submit: Callable[[Request], None]) -> None:
    """``submit(req)`` once the engine's server path (``request_before_s`` of its preset:
    HTTP, tokenization, wake-up, s) has passed; at once without one."""
    if before_s > 0:
        env.timeout(before_s).callbacks.append(lambda _: submit(req))
    else:
        submit(req)


def hand_to(rep: Replica, req: Request, reject: Reject) -> None:
    """Submit ``req`` to ``rep``, or, when that engine turns it away now (its own request
    limits, :meth:`Replica.refusal`), reject it at once with the reason (the replica noted
    as the one that refused it)."""
    reason = rep.refusal()
    if reason:
        req.replica = rep.index
        reject(req, reason)
    else:
        rep.submit(req)


def colocated_reject_reason(req: Request, pool: Pool) -> str:
    """Why a co-located pool's engine can never serve ``req`` ("" if it can): longer than
    ``max_model_len``, a prompt over the token budget without chunked prefill, more KV
    than the whole cache (or, contiguous layouts, a reservation larger than it)."""
    eng = pool.engine
    max_len = eng.max_model_len
    if req.prompt_tokens + req.output_tokens > max_len:
        return (f"prompt + output = {req.prompt_tokens + req.output_tokens} tokens "
                f"exceeds max_model_len {max_len}")
    if not eng.chunked and req.prompt_tokens > eng.max_num_batched_tokens:
        return (f"its {req.prompt_tokens}-token prompt exceeds max_num_batched_tokens "
                f"{eng.max_num_batched_tokens} without chunked prefill")
    bs, blocks = eng.block_size, pool.kv.num_gpu_blocks
    if eng.kv_allocator != "paged":
        if req.n > 1:
            return "parallel sampling (n > 1) needs the paged KV allocator"
        want = max_len if eng.kv_allocator == "contiguous_max_model_len" else \
            req.prompt_tokens + req.output_tokens
        if want > blocks * bs:
            return f"reserves {want} KV tokens; the whole cache has {blocks * bs}"
    shared = req.prompt_tokens // bs              # full prompt blocks all samples share
    need = shared + req.n * (blocks_needed(req.total_tokens, bs) - shared)
    if need > blocks:
        return f"needs {need} KV blocks; the whole cache has {blocks}"
    return ""


def pool_fields(run: RunConfig, pool: Pool) -> dict:
    """The result's fields a run served by ``pool`` takes from it: scheduler label,
    hardware, model, price per hour (the run's GPUs at the pool's price, $/h), per-GPU
    peaks (FLOP/s at the pool's matmul dtype, HBM bytes/s), its log lines and preset."""
    hw = pool.hardware
    return dict(
        scheduler=scheduler_label(pool), hardware=hw.name, model=run.model.name,
        price_per_hour_usd=hw.price_per_gpu_hour_usd * run.num_gpus,
        peak_flops_per_gpu=hw.peak_flops(pool.matmul_dtype),
        hbm_bandwidth_per_gpu_bytes_per_s=hw.hbm_bandwidth_bytes_per_s,
        log=pool_log_lines(pool), engine=engine_label(run),
        preset="disaggregated" if run.disaggregated else pool.preset.name)


class FixedPool:
    """A fixed count of co-located replicas behind the run's router (``cluster.router``:
    :func:`~capsim.engine.router.make_router`).

    Args:
        env: the simulation.
        pool: the replicas' pool.
        router: ``cluster.router`` (:func:`~capsim.engine.router.make_router`).
        replicas: the replicas, index order.
        reject: ends a request no replica could serve.
        router_options: ``cluster.router_options`` (the cache-aware routers' knobs).
    """

    owns_end_s = False
    held = 0

    def __init__(self, env: Environment, pool: Pool, router: str, replicas: Sequence[Replica],
                 reject: Reject, router_options: RouterOptions | None = None):
        self.env, self.pool, self.reject = env, pool, reject
        self.replicas = list(replicas)
        self._route = make_router(router, self.replicas, router_options, pool.engine.block_size)
        self._before_s = pool.preset.host_overhead.request_before_s

    @property
    def serving(self) -> list[Replica]:
        return self.replicas

    def admit(self, req: Request) -> None:
        reason = colocated_reject_reason(req, self.pool)
        if reason:
            self.reject(req, reason)
            return
        enter(self.env, req, self._before_s, self.submit)

    def submit(self, req: Request) -> None:
        """Hand ``req`` to the replica the router picks now (:func:`hand_to`)."""
        hand_to(self._route(req), req, self.reject)

    def invariant_problems(self) -> list[str]:
        return []

    def assemble(self, run: RunConfig, fields: dict) -> RunResult:
        return RunResult(**fields, **pool_fields(run, run.serving_pool))

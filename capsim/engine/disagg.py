"""Prefill/decode disaggregation: a prefill pool, a decode pool and the KV link between them.

The path of one request (DistServe, OSDI'24; Splitwise, ISCA'24; vLLM's
disaggregated prefilling):

1. The variant's ``cluster.router`` sends the arrival to a prefill replica
   (scheduler role ``prefill``), which prefills it, chunked or whole, with
   its own token budget and emits token 1 (TTFT). Its KV blocks stay
   allocated there (``req.handoff_blocks``).
2. The request joins a FIFO of prefilled requests. The head is placed on the
   first decode replica, in the decode router's order (``least_kv``: lowest
   fraction of KV blocks in use; ``round_robin``), that has a free slot and
   blocks for its KV (``reserve_transfer``). If none has, it waits, and so do
   the ones behind it, still holding their prefill-side blocks: back-pressure
   that can fill the prefill pool's KV cache and stall its admissions.
3. The KV crosses the link (:mod:`capsim.engine.transfer`: fixed latency, then
   bytes shared max-min fairly with every concurrent transfer on the same
   ports). Bytes = prompt tokens × the model's KV bytes per token (all layers,
   K and V, the cache dtype); each replica's port carries TP × the link
   bandwidth, one link per GPU, each GPU moving its own shard.
4. On arrival the prefill replica frees the blocks and the decode replica
   decodes the request from its next step. Its first decode gap runs from
   token 1, so the transfer and the wait show in ITL as clients measure it.

Layer-wise overlap (``layerwise_overlap``, off by default; Splitwise §IV-C
streams the KV layer by layer while the prompt is computed): when a decode
replica takes the request at once, the part of the transfer that fits in the
request's final prefill step (the whole prefill when unchunked) at the pair's
unshared rate, at most all layers but the last, counts as already sent, and
the fixed latency is hidden up to that step's length. Approximation: that
overlapped part does not contend with other transfers.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Callable


from capsim.scenario.describe import pool_log_lines
from capsim.scenario.run_config import Pool, RunConfig
from capsim.engine.clock import Environment
from capsim.engine.cluster import Reject, enter, pool_fields
from capsim.engine.recorder import ItlRecorder
from capsim.engine.replica import Replica
from capsim.engine.request import FINISHED, Request
from capsim.engine.router import make_router
from capsim.kv.blocks import blocks_needed
from capsim.engine.transfer import KVLink
from capsim.results.model import DisaggResult, LinkPortStats, RunResult, TransferRecords

_NAN = float("nan")


def reject_reason(req: Request, run: RunConfig) -> str:
    """Why a disaggregated variant can never serve ``req`` ("" if it can).

    The prompt must fit the prefill pool (``max_model_len``, KV blocks for
    the prompt); prompt + reply must fit the decode pool (``max_model_len``,
    KV blocks for prompt + output − 1 tokens).
    """
    total = req.prompt_tokens + req.output_tokens
    for pool in run.pools:
        if total > pool.engine.max_model_len:
            return (f"prompt + output = {total} tokens exceeds the {pool.role} pool's "
                    f"max_model_len {pool.engine.max_model_len}")
    p, d = run.pool("prefill"), run.pool("decode")
    need = blocks_needed(req.prompt_tokens, p.engine.block_size)
    if need > p.kv.num_gpu_blocks:
        return f"its prompt needs {need} KV blocks; a prefill replica has {p.kv.num_gpu_blocks}"
    need = blocks_needed(req.total_tokens, d.engine.block_size)
    if need > d.kv.num_gpu_blocks:
        return f"needs {need} KV blocks; a decode replica has {d.kv.num_gpu_blocks}"
    return ""


@dataclass(eq=False)
class Transfer:
    """One request's KV on its way from a prefill replica to a decode replica (times in s).

    ``req`` is dropped (None) once the KV has arrived: the decode replica holds the
    request from then on, and the transfer's record needs only ``rid`` and ``class_id``.
    """

    req: Request | None
    rid: int
    class_id: int
    source: Replica
    tokens: int
    nbytes: float
    last_step_s: float                 # duration of the step that emitted token 1
    handoff_s: float
    target: Replica | None = None
    overlapped_bytes: float = 0.0
    reserved_s: float = _NAN
    arrived_s: float = _NAN
    second_token_s: float = _NAN


class PoolMonitor:
    """Integrates saturation and stranded GPU-seconds of the two pools over time.

    ``touch()`` must be called at every instant the state can change (a
    replica starts or stops running steps, a request queues or is admitted, a
    transfer waits or is placed); the state found then holds until the next
    touch that finds another. Each integral adds one term per stretch of constant
    state, so touches that change nothing (a decode replica's steps, skipped or
    not by macro-steps) change no figure, not even its rounding; ``flush()`` adds
    the stretch in progress. Definitions: :class:`capsim.results.model.DisaggResult`.
    """

    def __init__(self, env: Environment, prefill: list[Replica], decode: list[Replica],
                 pending: deque):
        self.env, self.prefill, self.decode, self.pending = env, prefill, decode, pending
        self.prefill_saturated_s = 0.0
        self.decode_saturated_s = 0.0
        self.stranded_prefill_gpu_s = 0.0
        self.stranded_decode_gpu_s = 0.0
        self._t = 0.0
        self._state = (False, False, 0, 0)
        self._prefill_gpus = [r.pool_cfg.engine.tensor_parallel_size for r in prefill]
        self._decode_gpus = [r.pool_cfg.engine.tensor_parallel_size for r in decode]

    def touch(self) -> None:
        prefill = self.prefill
        state = (
            all(r.busy for r in prefill) and any(r.num_waiting for r in prefill),
            bool(self.pending),
            sum(g for r, g in zip(prefill, self._prefill_gpus) if not r.busy),
            sum(g for r, g in zip(self.decode, self._decode_gpus) if not r.busy))
        if state != self._state:
            self.flush()
            self._state = state

    def flush(self) -> None:
        """Integrate the current state from its start up to now."""
        now = self.env.now
        dt = now - self._t
        if dt > 0:
            p_sat, d_sat, idle_p, idle_d = self._state
            if p_sat:
                self.prefill_saturated_s += dt
                self.stranded_decode_gpu_s += idle_d * dt
            if d_sat:
                self.decode_saturated_s += dt
                self.stranded_prefill_gpu_s += idle_p * dt
        self._t = now


class _Hooks:
    """What the cluster observes on one replica (:class:`~capsim.engine.replica.ReplicaHooks`):
    busy / idle and queue changes (pool monitor, dispatch), handoffs after token 1 on the
    prefill side, token 2 of transferred requests on the decode side."""

    __slots__ = ("cluster", "replica", "joining", "awaiting")

    def __init__(self, cluster: "DisaggCluster", replica: Replica):
        self.cluster, self.replica = cluster, replica
        self.joining: list[tuple[Request, int]] = []    # KV arrived, joins at next schedule
        self.awaiting: list[tuple[Request, int]] = []   # joined, token 2 not yet emitted

    def scheduled(self, busy: bool, queue_changed: bool) -> None:
        if self.joining:
            self.awaiting.extend(self.joining)
            self.joining.clear()
        if busy != self.replica.busy:
            self.replica.busy = busy
            self.cluster._observe()
        if busy and queue_changed:
            self.cluster._observe()             # admissions changed the queue others watch

    def stepped(self, step, step_s: float) -> None:
        rep = self.replica
        if self.awaiting and step.decode_seqs:
            if rep.scheduler.streamed:
                for req, preemptions in self.awaiting:
                    if req.num_preemptions == preemptions:     # it decoded in this step
                        self.cluster._second_token(req, rep.env.now)
                self.awaiting.clear()
            else:                  # inside a multi-step window: only a finish streams
                self._window_step(rep.env.now)
        handoff = rep.scheduler.handoff
        if handoff:
            for req in handoff:
                self.cluster._handoff(rep, req, step_s)
            handoff.clear()

    def _window_step(self, now: float) -> None:
        """A step inside a multi-step window: token 2 reaches the client of a request that
        finished in it; the others wait for the window's end (a preempted one drops out)."""
        keep = []
        for req, preemptions in self.awaiting:
            if req.num_preemptions != preemptions:
                continue
            if req.state == FINISHED:
                self.cluster._second_token(req, now)
            else:
                keep.append((req, preemptions))
        self.awaiting[:] = keep

    def ran(self, first_end_s: float) -> None:
        if self.awaiting:                       # joined decoders emitted token 2 in step 0
            for req, _ in self.awaiting:
                self.cluster._second_token(req, first_end_s)
            self.awaiting.clear()

    def changed(self) -> None:
        self.cluster._observe()

    def transfers_waiting(self) -> bool:
        return bool(self.cluster.pending)


class DisaggCluster:
    """The replicas, link and bookkeeping of one disaggregated run (a
    :class:`~capsim.engine.cluster.Cluster`).

    Args:
        env: the simulation.
        run: a disaggregated RunConfig (a prefill and a decode pool, ``run.transfer``).
        itl: the run's ITL recorder (shared by both pools: token 1→2 gaps are
            recorded by the decode replica).
        num_classes: request classes.
        on_finish: called once per finished request (either pool).
        macro_steps: decode replicas advance decode-only stretches in one event (same
            results; False is the step-by-step reference).
        reject: ends a request the split could never serve (:func:`reject_reason`).

    ``replicas`` lists prefill replicas (indices 0..P−1) then decode replicas
    (P..P+D−1); :meth:`admit` sends an arrival to the prefill replica the variant's
    ``cluster.router`` picks.
    """

    owns_end_s = False
    held = 0    # none outside a replica: prefilled requests wait on their prefill replica

    def __init__(self, env: Environment, run: RunConfig, itl: ItlRecorder,
                 num_classes: int, on_finish: Callable[[Request], None],
                 macro_steps: bool = True, reject: Reject | None = None):
        d = run.transfer
        self.prefill_pool, self.decode_pool = run.pool("prefill"), run.pool("decode")
        self.macro_steps = macro_steps
        self.env, self.run, self.disagg, self._on_finish = env, run, d, on_finish   # disagg: the KV transfer
        p_n, d_n = self.prefill_pool.num_replicas, self.decode_pool.num_replicas
        self.prefill = self._pool(self.prefill_pool, range(p_n), itl, num_classes)
        self.decode = self._pool(self.decode_pool, range(p_n, p_n + d_n), itl, num_classes)
        self.replicas = self.prefill + self.decode
        # Port i = replica i's port: egress for prefill replicas, ingress for decode ones.
        self.capacities = [d.link.bandwidth_bytes_per_s * r.pool_cfg.engine.tensor_parallel_size
                           for r in self.replicas]
        self.link = KVLink(env, self.capacities, d.link.latency_s)
        self.kv_bytes_per_token = run.model.kv_bytes_per_token(
            self.decode_pool.engine.kv_dtype_bytes)
        self.pending: deque[Transfer] = deque()
        self.transfers: dict[int, Transfer] = {}
        self.duplicates: list[int] = []
        self._problems: list[str] = []   # broken invariants noticed as requests finished
        self.monitor = PoolMonitor(env, self.prefill, self.decode, self.pending)
        self._prefill_router = make_router(run.router, self.prefill, run.router_options,
                                           run.pool("prefill").engine.block_size)
        self._rr = 0
        self.reject = reject
        self._before_s = run.pools[0].preset.host_overhead.request_before_s

    def _pool(self, pool: Pool, indices: range, itl: ItlRecorder,
              num_classes: int) -> list[Replica]:
        pricer = pool.pricer(self.run.model)
        reps = []
        for i in indices:
            rep = Replica(self.env, i, pool, pricer, itl, num_classes, self._finished,
                          macro_steps=self.macro_steps)
            rep.hooks = _Hooks(self, rep)
            reps.append(rep)
        return reps

    # ---------------------------------------------------------------- routing
    @property
    def serving(self) -> list[Replica]:
        return self.replicas

    def admit(self, req: Request) -> None:
        """An arrival: rejected if the split could never serve it, else sent to a prefill
        replica after the engine's server path."""
        reason = reject_reason(req, self.run)
        if reason:
            self.reject(req, reason)
            return
        enter(self.env, req, self._before_s, self.submit)

    def submit(self, req: Request) -> None:
        """Hand ``req`` to the prefill replica the router picks now; note the queue."""
        self._prefill_router(req).submit(req)
        self.monitor.touch()

    def _decode_order(self) -> list[Replica]:
        """Decode replicas in the order the router tries them (``least_kv``: KV use and
        running sequences as of now, :meth:`Replica.kv_load`)."""
        if self.disagg.router == "round_robin":
            k = self._rr % len(self.decode)
            return self.decode[k:] + self.decode[:k]
        keys = []
        for r in self.decode:
            used, running = r.kv_load()
            keys.append((used / r.alloc.num_blocks, running, r.index))
        return [self.replicas[i] for *_, i in sorted(keys)]

    # ------------------------------------------------------------- lifecycle
    def _observe(self) -> None:
        self.monitor.touch()
        if self.pending:
            self._dispatch()

    def _finished(self, req: Request) -> None:
        if req.output_tokens > 1 and req.rid not in self.transfers:
            self._problems.append(f"request {req.rid} finished without a KV transfer")
        if req.handoff_blocks:
            self._problems.append(f"request {req.rid} still holds prefill-side blocks")
        self._on_finish(req)
        if self.pending:
            self._dispatch()

    def _handoff(self, source: Replica, req: Request, step_s: float) -> None:
        """Token 1 is out; queue the request's KV for a decode replica."""
        source.outstanding_tokens -= req.prompt_tokens + req.output_tokens
        if req.rid in self.transfers:
            self.duplicates.append(req.rid)
        tokens = req.num_computed
        t = Transfer(req=req, rid=req.rid, class_id=req.class_id, source=source, tokens=tokens,
                     nbytes=float(tokens * self.kv_bytes_per_token), last_step_s=step_s,
                     handoff_s=self.env.now)
        self.transfers[req.rid] = t
        self.pending.append(t)
        self._dispatch()
        self.monitor.touch()

    def _dispatch(self) -> None:
        """Place waiting transfers, oldest first, while a decode replica has room (FIFO).

        When some must wait, every finish on a decode replica is observed (it may make
        room): decode runs that planned to go on through finishes end."""
        placed = False
        while self.pending:
            t = self.pending[0]
            target = next((r for r in self._decode_order() if r.reserve_transfer(t.req)), None)
            if target is None:
                for r in self.decode:
                    r.runner.cut_through_finishes()
                break
            self.pending.popleft()
            if self.disagg.router == "round_robin":
                self._rr = self.decode.index(target) + 1
            self._send(t, target)
            placed = True
        if placed:
            self.monitor.touch()            # the queue shrank (decode saturation may have ended)

    def _send(self, t: Transfer, target: Replica) -> None:
        t.target, t.reserved_s = target, self.env.now
        latency = self.disagg.link.latency_s
        if self.disagg.layerwise_overlap and t.reserved_s == t.handoff_s:
            t.overlapped_bytes, latency = self._overlap(t, target, latency)
        ports = (t.source.index, target.index)
        self.link.send(t.nbytes - t.overlapped_bytes, ports,
                       lambda _end, t=t: self._arrived(t), latency_s=latency)

    def _overlap(self, t: Transfer, target: Replica, latency_s: float) -> tuple[float, float]:
        """(bytes already sent during the final prefill step, latency still to pay)."""
        layers = self.run.model.num_hidden_layers
        rate = min(self.capacities[t.source.index], self.capacities[target.index])
        window = max(0.0, t.last_step_s - latency_s)
        sent = min(t.nbytes * (layers - 1) / layers, rate * window)
        return sent, max(0.0, latency_s - t.last_step_s)

    def _arrived(self, t: Transfer) -> None:
        t.arrived_s = self.env.now
        t.source.scheduler.release_handoff(t.req)
        t.source.wake()
        t.target.admit_transferred(t.req)
        t.target.hooks.joining.append((t.req, t.req.num_preemptions))
        t.req = None
        self.monitor.touch()

    def _second_token(self, req: Request, now: float) -> None:
        self.transfers[req.rid].second_token_s = now

    # ------------------------------------------------------------ end of run
    def invariant_problems(self) -> list[str]:
        """Conservation across the link; [] when everything adds up.

        Every finished request with more than one output token crossed the
        link exactly once and arrived, and held no prefill-side blocks when it
        finished (both checked as it finished, :meth:`_finished`); nothing is
        still queued, in flight, reserved on a decode replica or held on a
        prefill replica.
        """
        self.monitor.flush()
        out = [f"request {rid} was handed off twice" for rid in self.duplicates]
        if self.pending:
            out.append(f"{len(self.pending)} prefilled requests never reached a decode replica")
        if self.link.in_flight or self.link.started != self.link.completed:
            out.append(f"{self.link.in_flight} KV transfers still in flight")
        out += self._problems
        for rid, t in self.transfers.items():
            if math.isnan(t.arrived_s):
                out.append(f"request {rid}'s KV never arrived")
            if t.req is not None and t.req.handoff_blocks:
                out.append(f"request {rid} still holds prefill-side blocks")
        out += [f"replica {r.index} still has {len(r.scheduler.incoming)} reserved transfers"
                for r in self.decode if r.scheduler.incoming]
        return out

    def assemble(self, run: RunConfig, fields: dict) -> RunResult:
        """The result as a co-located run's (:func:`~capsim.engine.cluster.pool_fields` of
        the serving pool), completed with the pools' figures (:meth:`finish`)."""
        return self.finish(RunResult(**fields, **pool_fields(run, run.serving_pool)))

    def finish(self, result: RunResult) -> RunResult:
        """Complete ``result`` (built as for a co-located run) with the pools' figures."""
        pre, dec = self.prefill_pool, self.decode_pool
        pools = (pre, dec)
        gpus = sum(p.num_gpus for p in pools)
        hw = {p.hardware.name for p in pools}
        return result.model_copy(update={
            "scheduler": f"disaggregated {self.run.label}: prefill {_sched(pre)}, "
                         f"decode {_sched(dec)}, KV over {self.disagg.link.name}",
            "hardware": pre.hardware.name if len(hw) == 1 else
                        f"{pre.hardware.name}/{dec.hardware.name}",
            "price_per_hour_usd": sum(p.hardware.price_per_gpu_hour_usd * p.num_gpus for p in pools),
            "peak_flops_per_gpu": sum(p.hardware.peak_flops(p.matmul_dtype) * p.num_gpus
                                      for p in pools) / gpus,
            "hbm_bandwidth_per_gpu_bytes_per_s": sum(p.hardware.hbm_bandwidth_bytes_per_s
                                                     * p.num_gpus for p in pools) / gpus,
            "log": [f"{p.role}: {line}" for p in pools for line in pool_log_lines(p)],
            "disagg": self._result(),
        })

    def _result(self) -> DisaggResult:
        d, m, pre, dec = self.disagg, self.monitor, self.prefill_pool, self.decode_pool
        ts = sorted(self.transfers.values(), key=lambda t: t.rid)
        records = TransferRecords(
            request_id=[t.rid for t in ts], class_id=[t.class_id for t in ts],
            prefill_replica=[t.source.index for t in ts],
            decode_replica=[t.target.index if t.target else -1 for t in ts],
            tokens=[t.tokens for t in ts], bytes=[t.nbytes for t in ts],
            overlapped_bytes=[t.overlapped_bytes for t in ts],
            handoff_s=[t.handoff_s for t in ts], reserved_s=[t.reserved_s for t in ts],
            arrived_s=[t.arrived_s for t in ts], second_token_s=[t.second_token_s for t in ts])
        net = self.link.net
        ports = [LinkPortStats(replica=r.index, pool=r.pool, capacity_bytes_per_s=cap,
                               bytes=net.port_bytes[i], busy_s=net.port_busy_s[i])
                 for i, (r, cap) in enumerate(zip(self.replicas, self.capacities))]
        return DisaggResult(
            label=self.run.label, link=d.link.name, link_bandwidth_bytes_per_s=d.link.bandwidth_bytes_per_s,
            link_latency_s=d.link.latency_s, router=d.router, layerwise_overlap=d.layerwise_overlap,
            prefill_replicas=len(self.prefill), decode_replicas=len(self.decode),
            prefill_gpus=pre.num_gpus, decode_gpus=dec.num_gpus,
            prefill_hardware=pre.hardware.name, decode_hardware=dec.hardware.name,
            prefill_peak_flops_per_gpu=pre.hardware.peak_flops(pre.matmul_dtype),
            decode_hbm_bandwidth_per_gpu_bytes_per_s=dec.hardware.hbm_bandwidth_bytes_per_s,
            transfers=records, ports=ports,
            prefill_saturated_s=m.prefill_saturated_s, decode_saturated_s=m.decode_saturated_s,
            stranded_prefill_gpu_s=m.stranded_prefill_gpu_s,
            stranded_decode_gpu_s=m.stranded_decode_gpu_s)


def _sched(pool: Pool) -> str:
    eng = pool.engine
    mode = f"chunked({eng.max_num_batched_tokens})" if eng.chunked else "unchunked"
    return f"{pool.num_replicas}×{pool.hardware.name} TP{eng.tensor_parallel_size} {mode}"

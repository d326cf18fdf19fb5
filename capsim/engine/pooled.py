"""Several pools of replicas behind one router (``cluster.pools``): a heterogeneous and/or
multi-model fleet (:mod:`capsim.scenario.pools`).

:class:`PooledCluster` is one :class:`~capsim.engine.fleet.Fleet` per pool (fixed, autoscaled
or failing, each on its own GPU, TP, engine and model) and the router in front of them.
A request's route, decided when it arrives:

1. **model**: only pools serving the model its class asks for are candidates — a gateway
   filters its endpoints by the request's ``model`` before it scores them (Gateway API
   Inference Extension: one InferencePool per base model, the basis of llm-d's inference
   scheduler; vLLM production-stack's router keeps the endpoints serving the requested
   model). Pools whose engine could never serve the request (longer than its
   ``max_model_len``, more KV than its cache) are dropped; none left: rejected with the
   first candidate's reason.
2. **route rules** (``cluster.route``, first match wins): a class, or prompts of at least
   ``min_prompt_tokens``, go to one pool (SGLang router's ``bucket`` policy assigns
   requests by length the same way).
3. **policy** among what is left (``cluster.router``):

   - ``least_outstanding_tokens``: the pool holding the replica with the fewest prompt +
     output tokens still to serve, over every candidate replica (ties: the first pool) —
     the least-loaded choice of vLLM production-stack's ``llq`` routing and of SGLang
     router's shortest-queue fallback, here not normalised by replica speed, as they are
     not;
   - ``round_robin``: replicas in turn over the candidate pools (a pool's turn comes as
     often as it has serving replicas);
   - ``cost``: the pools in order of $/h per replica; the first whose estimated queueing
     keeps the class's TTFT limit takes the request, else the one with the smallest
     estimate. The estimate on a pool's least-loaded replica is its waiting prompt tokens
     plus this prompt over the pool's prefill rate (one chunked-prefill step of
     ``max_num_batched_tokens`` from the roofline) — the queued prefill work NVIDIA
     Dynamo's KV router scores (new prefill blocks + active blocks, without the prefix
     term) in time units, as llm-d's predicted-latency scorer compares it with the SLO.

The pool chosen, the request passes that pool's server path (``request_before_s`` of its
engine preset) and the pool's fleet picks its replica (``least_outstanding_tokens`` or
``round_robin`` within the pool; ``cost`` routing uses least outstanding there). A
failure's retries stay in the pool of the failed replica.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from capsim.cost.operators import attn_pairs
from capsim.engine.clock import Environment
from capsim.engine.cluster import Reject, colocated_reject_reason, enter
from capsim.engine.fleet import Fleet
from capsim.engine.recorder import ItlRecorder
from capsim.engine.replica import Replica
from capsim.engine.request import Request
from capsim.results.model import PoolResult, RunResult
from capsim.scenario.describe import engine_label, kv_log_lines, scheduler_label
from capsim.scenario.run_config import Pool, PooledFleet, RunConfig


class PoolItl:
    """Pool ``p``'s view of the run's ITL recorder: its classes are recorded at ids
    shifted by ``offset`` (= p × the run's ITL classes), so one recorder keeps every gap
    in order (the day view slices it by time) and each gap's pool."""

    __slots__ = ("base", "offset", "pad")

    def __init__(self, base: ItlRecorder, offset: int):
        self.base, self.offset, self.pad = base, offset, [0] * offset

    def add(self, gaps_s, class_counts: list[int]) -> None:
        self.base.add(gaps_s, self.pad + list(class_counts))

    def add_one(self, gap_s: float, class_id: int) -> None:
        self.base.add_one(gap_s, class_id + self.offset)


class PooledCluster:
    """The pools of ``fleet`` as one :class:`Fleet` each, and the router in front (a
    :class:`~capsim.engine.cluster.Cluster`).

    Args:
        env: the simulation.
        fleet: the resolved pools, route rules and class models.
        seed: the run's seed (pool k's failure draws: stream ``(6,)`` for pool 0, as a
            single fleet's, ``(6, k)`` after).
        num_classes: the trace's request classes (a warm-up request's class id is shifted
            by it).
        num_requests: rows of the trace (the routing log's length; grows for a closed loop).
        make_fleet: ``make_fleet(k, stream)`` builds pool k's :class:`Fleet`.
        reject: ends a request no pool serving its model can serve.
        itl_classes: ITL classes per pool (pool k's are recorded at ids shifted by k ×
            this: :class:`PoolItl`).
    """

    owns_end_s = False

    def __init__(self, env: Environment, fleet: PooledFleet, num_classes: int,
                 num_requests: int, make_fleet: Callable[[int, tuple], Fleet],
                 reject: Reject, itl_classes: int):
        self.env, self.cfg, self.num_classes = env, fleet, num_classes
        self.reject, self.itl_classes = reject, itl_classes
        self.fleets = [make_fleet(k, (6,) if k == 0 else (6, k))
                       for k in range(len(fleet.pools))]
        self.pool_of = np.full(num_requests, -1, dtype=np.int16)
        self._rr = 0
        models = [p.model.name for p in fleet.pools]
        self._candidates = [tuple(k for k, m in enumerate(models) if m == want)
                            for want in fleet.class_models]
        self._prefill_tok_per_s = [_prefill_rate(p.pool, p.model) for p in fleet.pools]
        self._by_price = sorted(range(len(fleet.pools)),
                                key=lambda k: fleet.pools[k].price_per_replica_hour_usd)

    # ------------------------------------------------------------ admission
    def admit(self, req: Request) -> None:
        """Route ``req`` (it arrives now): reject it with the reason when no pool serving
        its model can, else hand it to the chosen pool after that pool's server path."""
        k, reason = self.choose(req)
        if k < 0:
            self.reject(req, reason)
            return
        if req.rid >= len(self.pool_of):
            self.pool_of = np.concatenate([self.pool_of, np.full(
                max(req.rid + 1, 2 * len(self.pool_of)) - len(self.pool_of), -1, np.int16)])
        self.pool_of[req.rid] = k
        enter(self.env, req, self.cfg.pools[k].pool.preset.host_overhead.request_before_s,
              self.fleets[k].submit)

    def choose(self, req: Request) -> tuple[int, str]:
        """(pool index, "") for ``req``, or (-1, why no pool can serve it)."""
        cid = req.class_id % self.num_classes
        pools = self.cfg.pools
        cands = self._candidates[cid]
        for rule in self.cfg.routes:
            if rule.pool in cands and rule.matches(cid, req.prompt_tokens):
                cands = (rule.pool,)
                break
        if not cands:            # a mix (capsim size) with no replica in its model's pools
            return -1, "no pool serving this request's model has a replica"
        ok = [k for k in cands if not colocated_reject_reason(req, pools[k].pool)]
        if not ok:
            return -1, colocated_reject_reason(req, pools[cands[0]].pool)
        if len(ok) == 1:
            return ok[0], ""
        policy = self.cfg.policy
        if policy == "cost":
            return self._cheapest_in_time(req, ok, self.cfg.class_ttft_s[cid]), ""
        if policy == "round_robin":
            return self._round_robin(ok), ""
        return self._least_outstanding(ok), ""

    def _least_outstanding(self, ok: list[int]) -> int:
        best, best_k = None, ok[0]
        for k in ok:
            for rep in self.fleets[k].serving:
                tokens = rep.outstanding_tokens
                if best is None or tokens < best:
                    best, best_k = tokens, k
        return best_k

    def _round_robin(self, ok: list[int]) -> int:
        sizes = [len(self.fleets[k].serving) for k in ok]
        total = sum(sizes)
        if total == 0:
            return ok[0]
        turn = self._rr % total
        self._rr += 1
        for k, n in zip(ok, sizes):
            if turn < n:
                return k
            turn -= n
        return ok[-1]

    def _cheapest_in_time(self, req: Request, ok: list[int], ttft_s: float | None) -> int:
        best, best_k = None, ok[0]
        for k in (k for k in self._by_price if k in ok):
            serving = self.fleets[k].serving
            if not serving:
                continue
            rep = min(serving, key=lambda r: r.outstanding_tokens)
            queued = sum(max(0, r.prompt_tokens - r.num_computed)
                         for r in rep.waiting_requests())
            wait_s = (queued + req.prompt_tokens) / self._prefill_tok_per_s[k]
            if ttft_s is None or wait_s <= ttft_s:
                return k
            if best is None or wait_s < best:
                best, best_k = wait_s, k
        return best_k

    # ------------------------------------------------------------ views
    @property
    def replicas(self) -> list[Replica]:
        """Every replica of every pool (pool order, then index)."""
        return [rep for f in self.fleets for rep in f.replicas]

    @property
    def serving(self) -> list[Replica]:
        return [rep for f in self.fleets for rep in f.serving]

    @property
    def held(self) -> int:
        return sum(len(f.pending) for f in self.fleets)

    # ------------------------------------------------------------ result
    def invariant_problems(self) -> list[str]:
        return []

    def assemble(self, run: RunConfig, fields: dict) -> RunResult:
        """The run's result: labels of every pool joined (one pool: exactly a single
        fleet's), peaks per GPU as the GPU-weighted mean of the pools' (so MFU / MBU
        divide by the fleet's summed peak), then its pools (:meth:`_with_pools`)."""
        pools = [fp.pool for fp in run.fleet.pools]
        gpus = [p.num_gpus for p in pools]
        total = max(sum(gpus), 1)

        def per_gpu(value) -> float:
            if len(pools) == 1:             # exactly the one pool's figure
                return value(pools[0])
            return sum(value(p) * g for p, g in zip(pools, gpus)) / total

        def joined(values) -> str:
            return "+".join(dict.fromkeys(values))

        base = RunResult(
            **fields, scheduler=joined(scheduler_label(p) for p in pools),
            hardware=joined(p.hardware.name for p in pools),
            model=joined(fp.model.name for fp in run.fleet.pools),
            price_per_hour_usd=sum(p.hardware.price_per_gpu_hour_usd * p.num_gpus for p in pools),
            peak_flops_per_gpu=per_gpu(lambda p: p.hardware.peak_flops(p.matmul_dtype)),
            hbm_bandwidth_per_gpu_bytes_per_s=per_gpu(
                lambda p: p.hardware.hbm_bandwidth_bytes_per_s),
            log=kv_log_lines(run), engine=engine_label(run),
            preset=joined(p.preset.name for p in pools))
        return self._with_pools(base, run)

    def _with_pools(self, result: RunResult, run: RunConfig) -> RunResult:
        """``result`` with its pools: per pool a :class:`PoolResult` (an autoscaled or
        failing pool's fleet history and mean price), requests' and ITL runs' pool indices,
        replicas labelled by pool name; fleet totals (replicas, GPUs, price per hour) summed
        over pools."""
        pools, names = [], []
        n = len(result.requests.request_id)
        pool_of = self.pool_of[:n]
        routed = np.bincount(pool_of[pool_of >= 0], minlength=len(self.fleets))
        for k, (fp, fleet) in enumerate(zip(run.fleet.pools, self.fleets)):
            pool, gpr = fp.pool, fp.gpus_per_replica
            price_gpu = pool.hardware.price_per_gpu_hour_usd
            history, replicas, price = None, pool.num_replicas, price_gpu * pool.num_gpus
            if _changes(fp):
                history = fleet.result(fleet.label, gpr, price_gpu)
                replicas = max(history.serving)
                hours = fleet.last_end_s / 3600.0
                price = history.cost_usd / hours if hours > 0 else 0.0
            names += [fp.name] * len(fleet.replicas)
            eng = pool.engine
            pools.append(PoolResult(
                name=fp.name, model=fp.model.name, hardware=pool.hardware.name,
                tensor_parallel_size=eng.tensor_parallel_size,
                pipeline_parallel_size=eng.pipeline_parallel_size, gpus_per_replica=gpr,
                engine=pool.engine_label, preset=pool.preset.name,
                scheduler=scheduler_label(pool), num_replicas=replicas,
                num_gpus=replicas * gpr, price_per_gpu_hour_usd=price_gpu,
                price_per_hour_usd=price,
                peak_flops_per_gpu=pool.hardware.peak_flops(pool.matmul_dtype),
                hbm_bandwidth_per_gpu_bytes_per_s=pool.hardware.hbm_bandwidth_bytes_per_s,
                routed_requests=int(routed[k]), fleet=history))
        update = {"pools": pools,
                  "requests": result.requests.model_copy(
                      update={"pool": pool_of.astype(np.int16)}),
                  "replicas": [s.model_copy(update={"pool": name})
                               for s, name in zip(result.replicas, names)],
                  "timelines": [t.model_copy(update={"pool": name})
                                for t, name in zip(result.timelines, names)]}
        if len(pools) > 1:
            ids, itl_classes = np.asarray(result.itl.class_id), self.itl_classes
            update["itl"] = result.itl.model_copy(update={
                "class_id": (ids % itl_classes).astype(ids.dtype),
                "pool": (ids // itl_classes).astype(np.int16)})
        if any(_changes(fp) for fp in run.fleet.pools):
            update.update(num_replicas=sum(p.num_replicas for p in pools),
                          num_gpus=sum(p.num_gpus for p in pools),
                          price_per_hour_usd=sum(p.price_per_hour_usd for p in pools),
                          sim_end_s=max(f.last_end_s for f in self.fleets))
        return result.model_copy(update=update)


def _changes(fp) -> bool:
    """Whether pool ``fp`` autoscales or fails (then it has a fleet history)."""
    return fp.autoscaling is not None or fp.failures is not None


def _prefill_rate(pool: Pool, model) -> float:
    """Prompt tokens/s of one replica prefilling full ``max_num_batched_tokens`` chunks
    (the roofline price of one such step, the chunk attending to itself)."""
    tokens = pool.engine.max_num_batched_tokens
    step_s = pool.pricer(model).cost(prefill_tokens=tokens, prefill_attn_pairs=attn_pairs(tokens, 0),
                                     prefill_kv_tokens=tokens, logits_seqs=1).seconds
    return tokens / step_s

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
from capsim.engine.fleet import Fleet
from capsim.engine.recorder import ItlRecorder
from capsim.engine.replica import Replica
from capsim.engine.request import Request
from capsim.kv.blocks import blocks_needed
from capsim.scenario.run_config import Pool, PooledFleet


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
    """The pools of ``fleet`` as one :class:`Fleet` each, and the router in front.

    Args:
        env: the simulation.
        fleet: the resolved pools, route rules and class models.
        seed: the run's seed (pool k's failure draws: stream ``(6,)`` for pool 0, as a
            single fleet's, ``(6, k)`` after).
        num_classes: the trace's request classes (a warm-up request's class id is shifted
            by it).
        num_requests: rows of the trace (the routing log's length; grows for a closed loop).
        make_fleet: ``make_fleet(k, stream)`` builds pool k's :class:`Fleet`.
    """

    def __init__(self, env: Environment, fleet: PooledFleet, num_classes: int,
                 num_requests: int, make_fleet: Callable[[int, tuple], Fleet]):
        self.env, self.cfg, self.num_classes = env, fleet, num_classes
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
    def admit(self, req: Request, reject: Callable[[str], None]) -> None:
        """Route ``req`` (it arrives now): reject it with the reason when no pool serving
        its model can, else hand it to the chosen pool after that pool's server path."""
        k, reason = self.choose(req)
        if k < 0:
            reject(reason)
            return
        if req.rid >= len(self.pool_of):
            self.pool_of = np.concatenate([self.pool_of, np.full(
                max(req.rid + 1, 2 * len(self.pool_of)) - len(self.pool_of), -1, np.int16)])
        self.pool_of[req.rid] = k
        before_s = self.cfg.pools[k].pool.preset.host_overhead.request_before_s
        fleet = self.fleets[k]
        if before_s > 0:
            self.env.timeout(before_s).callbacks.append(lambda _: fleet.submit(req))
        else:
            fleet.submit(req)

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


def _prefill_rate(pool: Pool, model) -> float:
    """Prompt tokens/s of one replica prefilling full ``max_num_batched_tokens`` chunks
    (the roofline price of one such step, the chunk attending to itself)."""
    tokens = pool.engine.max_num_batched_tokens
    step_s = pool.pricer(model).cost(prefill_tokens=tokens, prefill_attn_pairs=attn_pairs(tokens, 0),
                                     prefill_kv_tokens=tokens, logits_seqs=1).seconds
    return tokens / step_s

"""Routers that see the KV cache: they pick a replica by what it holds, not by load alone.

- ``prefix_aware``: SGLang router's ``cache_aware`` policy
  (``sgl-router/src/policies/cache_aware.rs`` at 026f853ba7ae08a457a2e127b85a26256a29e300).
  The router keeps its own approximate tree of what it sent where (:class:`ApproxTree`;
  SGLang keeps a radix tree of request text per worker, capsim the prompt's KV block
  hashes, :mod:`capsim.kv.prefix`). The fleet is *imbalanced* when the busiest replica's
  requests in flight exceed the idlest's by more than ``balance_abs_threshold`` and are
  more than ``balance_rel_threshold`` times them; then the idlest replica takes the
  request. Otherwise, if more than ``cache_threshold`` of the prompt's blocks match some
  replica's tree, the replica with the longest match takes it (the least busy of those
  that tie); else the replica with the smallest tree. Either way the prompt is inserted
  into the chosen replica's tree. SGLang evicts each tree to ``max_tree_size`` every
  ``eviction_interval_secs`` (30 s); capsim evicts on insertion, least recently sent leaf
  first, so the tree never exceeds it.
- ``kv_scorer``: llm-d inference-scheduler's weighted scorers (llm-d-inference-scheduler at
  520af47896e5f06e43d09aca281a1149187b0ffd, ``pkg/epp/framework/plugins/scheduling/
  scorer/``): ``queuedepth/queue.go`` ((max − waiting) ÷ (max − min), 1 when equal),
  ``kvcacheutilization/kvcache_utilization.go`` (1 − KV use), ``prefix/plugin.go``
  (matched blocks ÷ prompt blocks, from the approximate prefix producer,
  ``requestcontrol/dataproducer/approximateprefix/``, which records the blocks on the
  chosen endpoint). The highest weighted sum wins (``max-score-picker``; its random
  tie-break is the lowest replica index here, so runs stay deterministic).
  ``prefix_match: precise`` is llm-d's precise prefix-cache scorer instead
  (``scorer/preciseprefixcache/precise_prefix_cache.go`` and ``utils.go`` at the same
  commit; its index is fed by vLLM's KV events, llm-d-kv-cache-manager
  ``pkg/kvcache/kvblock_scorer.go`` at a378f5b's ``LongestPrefixScorer``): each replica's
  score is the leading prompt blocks its prefix cache holds *now* (what it computed and
  has not evicted, not what the router sent it), min-max normalised over the replicas
  holding at least the first block (1 when they tie), 0 for the others. Speculative
  indexing (off by default there) is not modelled: a prompt still waiting is not seen.
- ``session_affinity``: a conversation's later turns go to the replica that served its
  first (llm-d's ``sessionaffinity`` scorer, sticky routing); the first turn goes to the
  replica with the fewest outstanding tokens, and so does a turn whose replica no longer
  serves.

Routing work per request is O(prompt blocks + replicas): the tree maps each block hash to
a bit mask of the replicas it was sent to, so one walk down the prompt finds every
replica's match. The precise scorer walks each replica's cache until its first miss:
O(replicas + the blocks matched), the blocks matched being what prefill then skips.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

from capsim.engine.replica import Replica
from capsim.engine.request import Request
from capsim.kv.prefix import extend_hashes
from capsim.scenario.routing import RouterOptions


def prompt_hashes(req: Request, block_size: int) -> list[int]:
    """The content hashes of ``req``'s full prompt blocks (computed once into
    ``req.hashes``, the same chain the replica's prefix cache reads)."""
    full = req.prompt_tokens // block_size
    extend_hashes(req.hashes, req.segments, block_size, full)
    return req.hashes[:full]


class ApproxTree:
    """The router's view of which prompt blocks it sent to which replica.

    ``owners`` maps a block hash to a bit mask of replica indices; each replica's hashes
    sit in an LRU (oldest first) capped at ``max_blocks``. A prompt is inserted leaf first,
    so its root is the most recent and eviction takes leaves before their parents.
    """

    __slots__ = ("max_blocks", "owners", "lru")

    def __init__(self, max_blocks: int):
        self.max_blocks = max_blocks
        self.owners: dict[int, int] = {}
        self.lru: dict[int, OrderedDict[int, None]] = {}

    def size(self, index: int) -> int:
        """Blocks remembered for replica ``index``."""
        lru = self.lru.get(index)
        return len(lru) if lru is not None else 0

    def match(self, hashes: list[int], allowed: int) -> tuple[int, int]:
        """(longest match in blocks, bit mask of the ``allowed`` replicas holding it);
        (0, ``allowed``) when no replica holds the first block."""
        owners, mask, k = self.owners, allowed, 0
        for h in hashes:
            m = mask & owners.get(h, 0)
            if not m:
                break
            mask, k = m, k + 1
        return k, mask

    def match_lengths(self, hashes: list[int], indices: Sequence[int]) -> list[int]:
        """Each replica's (``indices``) matched leading blocks of ``hashes``."""
        owners = self.owners
        mask = 0
        for i in indices:
            mask |= 1 << i
        depth: dict[int, int] = {}          # replica index → its match, once it stops
        k = 0
        for h in hashes:
            m = mask & owners.get(h, 0)
            dropped = mask & ~m
            while dropped:                      # each replica drops out once
                low = dropped & -dropped
                depth[low.bit_length() - 1] = k
                dropped ^= low
            mask = m
            if not mask:
                break
            k += 1
        return [depth.get(i, k) for i in indices]

    def insert(self, hashes: list[int], index: int) -> None:
        """Remember ``hashes`` as sent to replica ``index``, evicting its least recently
        sent blocks beyond ``max_blocks``."""
        owners, bit = self.owners, 1 << index
        lru = self.lru.get(index)
        if lru is None:
            lru = self.lru[index] = OrderedDict()
        for h in reversed(hashes):
            owners[h] = owners.get(h, 0) | bit
            lru[h] = None
            lru.move_to_end(h)
        while len(lru) > self.max_blocks:
            h, _ = lru.popitem(last=False)
            m = owners[h] & ~bit
            if m:
                owners[h] = m
            else:
                del owners[h]


def _mask(serving: Sequence[Replica]) -> int:
    mask = 0
    for r in serving:
        mask |= 1 << r.index
    return mask


class PrefixAwareRouter:
    """SGLang router's ``cache_aware`` policy over the serving replicas (module docstring).

    Attributes:
        num_balanced: decisions taken by load because the fleet was imbalanced.
        num_matched: decisions taken by a match above ``cache_threshold``.
    """

    def __init__(self, options: RouterOptions, block_size: int):
        self.opts, self.block_size = options, block_size
        self.tree = ApproxTree(options.max_tree_size_blocks)
        self.num_balanced = self.num_matched = 0

    def pick(self, req: Request, serving: Sequence[Replica]) -> Replica:
        """The replica for ``req`` among ``serving`` (non-empty); its prompt is recorded
        there."""
        hashes = prompt_hashes(req, self.block_size)
        opts = self.opts
        loads = [r.num_inflight for r in serving]
        hi, lo = max(loads), min(loads)
        if hi - lo > opts.balance_abs_threshold and hi > lo * opts.balance_rel_threshold:
            self.num_balanced += 1
            rep = serving[loads.index(lo)]
        else:
            k, mask = self.tree.match(hashes, _mask(serving))
            if hashes and k / len(hashes) > opts.cache_threshold:
                self.num_matched += 1
                rep = min((r for r in serving if mask >> r.index & 1),
                          key=lambda r: r.num_inflight)
            else:
                size = self.tree.size
                rep = min(serving, key=lambda r: size(r.index))
        self.tree.insert(hashes, rep.index)
        return rep


def precise_scores(hashes: list[int], serving: Sequence[Replica]) -> list[float]:
    """llm-d's precise prefix-cache scores (module docstring): each replica's cached leading
    blocks of ``hashes``, min-max normalised over the replicas that hold the first one."""
    matched = [r.alloc.match_length(hashes) for r in serving] if hashes \
        else [0] * len(serving)
    held = [k for k in matched if k > 0]
    if not held:
        return [0.0] * len(serving)
    lo, hi = min(held), max(held)
    if lo == hi:
        return [1.0 if k else 0.0 for k in matched]
    return [(k - lo) / (hi - lo) if k else 0.0 for k in matched]


class ScorerRouter:
    """llm-d's weighted scorers over the serving replicas (module docstring)."""

    def __init__(self, options: RouterOptions, block_size: int):
        w = options.scorer_weights
        self.w_queue, self.w_kv, self.w_prefix = w.queue, w.kv_cache_utilization, w.prefix_cache
        self.block_size = block_size
        self.precise = options.prefix_match == "precise"
        self.tree = None if self.precise else ApproxTree(options.max_tree_size_blocks)

    def _prefix_scores(self, hashes: list[int], serving: Sequence[Replica]) -> list[float]:
        if not self.w_prefix:
            return [0.0] * len(serving)
        if self.precise:
            return precise_scores(hashes, serving)
        if not hashes:
            return [0.0] * len(serving)
        n = len(hashes)
        return [k / n for k in self.tree.match_lengths(hashes, [r.index for r in serving])]

    def pick(self, req: Request, serving: Sequence[Replica]) -> Replica:
        hashes = prompt_hashes(req, self.block_size)
        queues = [r.num_waiting for r in serving]
        qmax, qmin = max(queues), min(queues)
        spread = qmax - qmin
        prefix = self._prefix_scores(hashes, serving)
        best, best_score = serving[0], -1.0
        for r, q, p in zip(serving, queues, prefix):
            queue = (qmax - q) / spread if spread else 1.0
            kv = 1.0 - r.kv_load()[0] / r.alloc.num_blocks
            score = self.w_queue * queue + self.w_kv * kv + self.w_prefix * p
            if score > best_score:
                best, best_score = r, score
        if self.tree is not None:
            self.tree.insert(hashes, best.index)
        return best


class SessionAffinityRouter:
    """Sticky routing by conversation (module docstring)."""

    def __init__(self):
        self.home: dict[int, int] = {}      # conversation → replica index

    def pick(self, req: Request, serving: Sequence[Replica]) -> Replica:
        idx = self.home.get(req.conversation)
        if idx is not None:
            for r in serving:
                if r.index == idx:
                    return r
        rep = min(serving, key=lambda r: r.outstanding_tokens)
        self.home[req.conversation] = rep.index
        return rep


def make_kv_router(policy: str, options: RouterOptions | None, block_size: int):
    """The router object of ``policy`` (``prefix_aware``, ``kv_scorer`` or
    ``session_affinity``); its ``pick(req, serving)`` returns the replica.

    Raises:
        ValueError: another policy (a bug: the schema allows only these).
    """
    options = options if options is not None else RouterOptions()
    if policy == "prefix_aware":
        return PrefixAwareRouter(options, block_size)
    if policy == "kv_scorer":
        return ScorerRouter(options, block_size)
    if policy == "session_affinity":
        return SessionAffinityRouter()
    raise ValueError(f"unknown router {policy!r}")

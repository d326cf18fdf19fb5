"""llm-d's precise prefix-cache scorer (``router_options.prefix_match: precise``): replicas
scored by the blocks their prefix caches hold now, min-max normalised over the replicas that
hold the first block (llm-d-inference-scheduler at 520af47,
scorer/preciseprefixcache/utils.go), driven with stand-in replicas over real allocators."""

from __future__ import annotations

from types import SimpleNamespace

from capsim.engine.cache_router import ScorerRouter, precise_scores, prompt_hashes
from capsim.engine.request import Request
from capsim.kv.allocator import BlockAllocator
from capsim.kv.prefix import PREFIX, USER
from capsim.scenario.routing import RouterOptions, ScorerWeights

BS = 16


def _rep(index: int, cached: list[int] = (), waiting: int = 0):
    """A replica whose prefix cache holds ``cached`` (content hashes, each in its own block)."""
    alloc = BlockAllocator(64, BS, enable_caching=True)
    for h, block in zip(cached, alloc.allocate(len(cached))):
        alloc.register(block, h)
    return SimpleNamespace(index=index, num_waiting=waiting, kv_load=lambda: (0, 0),
                           alloc=alloc)


def _req(rid: int, prefix_id: int, prefix: int, own: int) -> Request:
    return Request(rid, 0, 0.0, prefix + own, 32, ((PREFIX, prefix_id, prefix), (USER, rid, own)))


def test_scores_are_min_max_over_the_replicas_holding_the_first_block():
    """Matches 8, 4 and 0 of 10 blocks: (8 − 4) / (8 − 4) = 1, 0 for the shorter holder (the
    minimum), 0 for the replica without the first block; one holder alone scores 1."""
    hashes = list(range(100, 110))
    reps = [_rep(0, hashes[:4]), _rep(1, hashes[:8]), _rep(2, hashes[5:])]
    assert precise_scores(hashes, reps) == [0.0, 1.0, 0.0]
    reps.append(_rep(3, hashes[:6]))
    assert precise_scores(hashes, reps) == [0.0, 1.0, 0.0, 0.5]
    assert precise_scores(hashes, [_rep(0, hashes[:2]), _rep(1)]) == [1.0, 0.0]
    assert precise_scores(hashes, [_rep(0), _rep(1)]) == [0.0, 0.0]
    assert precise_scores([], [_rep(0, hashes)]) == [0.0]


def test_precise_follows_the_cache_not_what_the_router_sent():
    """Both modes see one prompt go to replica 0, but only replica 1 has its blocks cached
    (say, replica 0 evicted them): the approximate scorer sends the repeat to 0 (its record),
    the precise one to 1 (prefix weight 3 outweighs nothing else: queues and KV use tie)."""
    first, again = _req(1, 7, 320, 16), _req(2, 7, 320, 16)
    held = prompt_hashes(first, BS)[:20]              # the 320 shared tokens: 20 blocks
    weights = ScorerWeights(queue=2, kv_cache_utilization=2, prefix_cache=3)
    approx = ScorerRouter(RouterOptions(scorer_weights=weights), BS)
    precise = ScorerRouter(RouterOptions(scorer_weights=weights, prefix_match="precise"), BS)
    for router in (approx, precise):
        assert router.pick(first, [_rep(0), _rep(1)]).index == 0     # nothing cached: index 0
    reps = [_rep(0), _rep(1, held)]
    assert approx.pick(again, reps).index == 0
    assert precise.pick(again, reps).index == 1
    assert precise.tree is None                        # precise keeps no record of its own


def test_queue_weight_still_wins_over_a_weak_prefix_score():
    """Replica 1 holds the prefix but has 4 waiting, replica 0 none: queue 2 × 1 + kv 2 × 1
    = 4 for replica 0 against 0 + 2 + 3 × 1 = 5 for replica 1 (prefix wins); at prefix weight
    1, 4 against 3 (the queue wins)."""
    req = _req(1, 7, 320, 16)
    held = prompt_hashes(req, BS)[:20]
    reps = [_rep(0, waiting=0), _rep(1, held, waiting=4)]
    opts = RouterOptions(prefix_match="precise")
    assert ScorerRouter(opts, BS).pick(req, reps).index == 1
    weak = RouterOptions(prefix_match="precise", scorer_weights=ScorerWeights(prefix_cache=1))
    assert ScorerRouter(weak, BS).pick(req, reps).index == 0

"""The cache-aware routers (capsim.engine.cache_router), driven directly with stand-in
replicas: SGLang router's cache_aware rule (cache_aware.rs at 026f853), llm-d's weighted
scorers (llm-d-inference-scheduler at 520af47), sticky sessions."""

from __future__ import annotations

from types import SimpleNamespace

from capsim.engine.cache_router import (ApproxTree, PrefixAwareRouter, ScorerRouter,
                                        SessionAffinityRouter, prompt_hashes)
from capsim.engine.request import Request
from capsim.kv.prefix import PREFIX, USER
from capsim.scenario.routing import RouterOptions, ScorerWeights

BS = 16


def _rep(index: int, inflight: int = 0, waiting: int = 0, used: int = 0, blocks: int = 100,
         outstanding: int = 0):
    return SimpleNamespace(index=index, num_inflight=inflight, num_waiting=waiting,
                           kv_load=lambda: (used, 0), alloc=SimpleNamespace(num_blocks=blocks),
                           outstanding_tokens=outstanding)


def _req(rid: int, own: int, prefix_id: int = -1, prefix: int = 0, after: Request | None = None):
    """A first turn (``prefix`` shared tokens + ``own``), or the turn after ``after``."""
    if after is not None:
        segs = after.segments + ((USER, rid, own),)
        req = Request(rid, 0, 0.0, after.prompt_tokens + after.output_tokens + own, 32, segs)
        req.conversation = after.conversation
        return req
    segs = ((PREFIX, prefix_id, prefix), (USER, rid, own)) if prefix else None
    return Request(rid, 0, 0.0, prefix + own, 32, segs)


def test_prompt_hashes_cover_the_full_prompt_blocks_and_match_the_cache_chain():
    req = _req(1, own=40, prefix_id=7, prefix=300)             # 340 tokens: 21 full blocks
    hashes = prompt_hashes(req, BS)
    assert len(hashes) == 340 // BS == 21
    other = _req(2, own=40, prefix_id=7, prefix=300)
    # The 300 shared tokens fill 18 blocks (288 tokens); block 18 straddles into the
    # user's own tokens, so it is never shared (as in vLLM).
    assert [a == b for a, b in zip(hashes, prompt_hashes(other, BS))] == [True] * 18 + [False] * 3


def test_the_tree_finds_each_replicas_match_in_one_walk():
    tree = ApproxTree(max_blocks=100)
    a, b = list(range(10)), [0, 1, 2, 3, 99]
    tree.insert(a, 0)
    tree.insert(b, 2)
    assert tree.match(a, allowed=0b111) == (10, 0b001)
    assert tree.match([0, 1, 2, 3, 4], allowed=0b101) == (5, 0b001)
    assert tree.match([0, 1, 2, 3, 99], allowed=0b101) == (5, 0b100)
    assert tree.match([50], allowed=0b111) == (0, 0b111)
    assert tree.match_lengths([0, 1, 2, 3, 99], [0, 1, 2]) == [4, 0, 5]
    assert tree.match_lengths([0, 1, 2, 3, 4, 5], [0, 2]) == [6, 4]


def test_the_tree_forgets_least_recently_sent_leaves_first():
    tree = ApproxTree(max_blocks=6)
    tree.insert([1, 2, 3, 4], 0)
    tree.insert([1, 2, 7, 8], 0)           # 6 blocks: 1, 2, 3, 4, 7, 8
    tree.insert([1, 2, 9], 0)              # one over: the oldest leaf (4) goes
    assert tree.size(0) == 6
    assert tree.match([1, 2, 3, 4], 0b1) == (3, 0b1)
    assert tree.match([1, 2, 7, 8], 0b1) == (4, 0b1)


def test_prefix_aware_keeps_a_conversation_on_its_replica():
    """Turn 2's prompt holds turn 1's prompt (20 of its 26 blocks): a 77 % match, above the
    0.5 threshold, so it goes where turn 1 went; a new conversation goes to the replica
    with the smallest tree."""
    router = PrefixAwareRouter(RouterOptions(), BS)
    reps = [_rep(0), _rep(1), _rep(2)]
    first = _req(1, own=320)                                   # 20 blocks
    assert router.pick(first, reps).index == 0                 # every tree empty: index 0
    second = _req(2, own=96, after=first)                      # 320 + 32 + 96 = 448: 28 blocks
    assert router.pick(second, reps).index == 0
    assert router.num_matched == 1
    other = _req(3, own=320)
    assert router.pick(other, reps).index == 1                 # trees: 28, 0, 0 blocks


def test_prefix_aware_goes_by_load_when_the_fleet_is_imbalanced():
    """SGLang's guard: max − min > 32 and max > 1.1 × min → the least loaded replica."""
    router = PrefixAwareRouter(RouterOptions(), BS)
    first = _req(1, own=320)
    router.pick(first, [_rep(0), _rep(1)])
    second = _req(2, own=96, after=first)
    balanced = [_rep(0, inflight=40), _rep(1, inflight=8)]     # 32 apart: not over
    assert router.pick(second, balanced).index == 0
    third = _req(3, own=96, after=second)
    imbalanced = [_rep(0, inflight=41), _rep(1, inflight=8)]   # 33 apart and 5.1×
    assert router.pick(third, imbalanced).index == 1
    assert router.num_balanced == 1
    same_ratio = [_rep(0, inflight=330), _rep(1, inflight=300)]   # 30 apart: balanced
    fourth = _req(4, own=96, after=third)
    assert router.pick(fourth, same_ratio).index in (0, 1)
    assert router.num_balanced == 1


def test_a_low_match_goes_to_the_smallest_tree():
    """Only the 288 shared system-prompt tokens match (18 of 40 blocks, 45 %): not above
    0.5, so the request goes to the replica the router has sent the fewest blocks."""
    router = PrefixAwareRouter(RouterOptions(), BS)
    reps = [_rep(0), _rep(1)]
    router.pick(_req(1, own=340, prefix_id=5, prefix=300), reps)     # 40 blocks to 0
    router.pick(_req(2, own=20, prefix_id=9, prefix=20), reps)        # 2 blocks to 1
    assert router.pick(_req(3, own=340, prefix_id=5, prefix=300), reps).index == 1


def test_the_scorer_weighs_queue_kv_use_and_prefix_as_llm_d_does():
    """Default weights 2 / 2 / 3 (llm-d's epplib chart). Replica 0 holds the whole prompt
    but has the longest queue and 60 % KV use: 2·0 + 2·0.4 + 3·1 = 3.8; replica 1, empty
    queue, 10 % KV use, no match: 2·1 + 2·0.9 + 0 = 3.8 as well — the lower index wins
    the tie; with prefix weight 4 replica 0 wins clearly, with 2 replica 1 does."""
    first = _req(1, own=320)
    for weight, want in ((3.0, 0), (4.0, 0), (2.0, 1)):
        router = ScorerRouter(RouterOptions(scorer_weights=ScorerWeights(prefix_cache=weight)),
                              BS)
        router.tree.insert(prompt_hashes(first, BS), 0)
        reps = [_rep(0, waiting=4, used=60), _rep(1, waiting=0, used=10)]
        assert router.pick(_req(1, own=320), reps).index == want


def test_session_affinity_sticks_until_the_replica_leaves():
    router = SessionAffinityRouter()
    reps = [_rep(0, outstanding=500), _rep(1, outstanding=100)]
    first = _req(1, own=100)
    assert router.pick(first, reps).index == 1                 # fewest outstanding tokens
    second = _req(2, own=50, after=first)
    busy = [_rep(0, outstanding=0), _rep(1, outstanding=9000)]
    assert router.pick(second, busy).index == 1                # sticky despite the load
    third = _req(3, own=50, after=second)
    assert router.pick(third, [busy[0]]).index == 0            # its replica left

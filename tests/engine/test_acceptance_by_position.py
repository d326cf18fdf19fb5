"""Speculative acceptance by draft position (``acceptance_rate_by_position`` / ``acceptance``).

The rates are vLLM's per-position acceptance rates S_i (vllm/v1/spec_decode/metrics.py at
016a8587: drafts whose i-th token was accepted / drafts), so a step accepts a >= i drafts with
probability S_i and the mean acceptance length is 1 + Σ S_i. The EAGLE-3 figures are the
``llama3-8b-eagle3`` row of vLLM's tests/v1/spec_decode/test_acceptance_length.py at 029ba375
(Llama-3.1-8B-Instruct, MT-Bench, k = 3: 0.7296, 0.5208, 0.3545; mean length 2.60).
"""

from __future__ import annotations

import random
from itertools import product

import pytest
from pydantic import ValidationError

from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import Request
from capsim.engine.scheduler.speculative import SpeculativeScheduler
from capsim.kv.allocator import BlockAllocator
from capsim.profiles.speculative import (accepted_drafts, accepted_drafts_by_position,
                                         expected_tokens_by_position, survival_of)
from capsim.scenario.speculative import SpecDecoding, SpeculativeConfig, resolve_speculative

EAGLE3 = (0.7296, 0.5208, 0.3545)


def test_iid_rates_as_positions_draw_exactly_what_alpha_draws():
    rng = random.Random(3)
    survival = survival_of(0.7, 4)
    assert survival == pytest.approx((0.7, 0.49, 0.343, 0.2401))
    for _ in range(20_000):
        u = rng.random()
        assert accepted_drafts_by_position(u, survival, 4) == accepted_drafts(u, 0.7, 4)


def test_mean_length_is_one_plus_the_sum_and_matches_every_outcome():
    """P(a = i) = S_i − S_{i+1} (S_0 = 1, S_{k+1} = 0): the step emits a + 1 tokens."""
    s = (1.0, *EAGLE3, 0.0)
    mean = sum((s[i] - s[i + 1]) * (i + 1) for i in range(4))
    assert mean == pytest.approx(expected_tokens_by_position(EAGLE3, 3))
    assert expected_tokens_by_position(EAGLE3, 3) == pytest.approx(2.6049)   # vLLM: 2.60
    assert expected_tokens_by_position(EAGLE3, 2) == pytest.approx(2.2504)   # first two


def test_drawn_acceptances_reproduce_each_position():
    rng, n = random.Random(7), 200_000
    at_least = [0] * 4
    for _ in range(n):
        a = accepted_drafts_by_position(rng.random(), EAGLE3, 3)
        for i in range(a + 1):
            at_least[i] += 1
    for i, s in enumerate(EAGLE3, start=1):
        assert at_least[i] / n == pytest.approx(s, abs=0.004)


def _cfg(**acceptance):
    return SpeculativeConfig(method="eagle3", num_speculative_tokens=3, **acceptance)


@pytest.mark.parametrize("acceptance,message", [
    ({"acceptance_rate_by_position": [0.7, 0.5]}, "has 2 rates; num_speculative_tokens 3"),
    ({"acceptance_rate_by_position": [0.7, 0.8, 0.3]}, "[1] 0.8 is above position 0's 0.7"),
    ({"acceptance_rate_by_position": [1.2, 0.8, 0.3]}, "[0] is 1.2; each rate is a fraction"),
    ({"acceptance_rate_by_position": [0.7, 0.5, 0.3], "acceptance_rate": 0.7},
     "got acceptance_rate and acceptance_rate_by_position"),
    ({}, "give the acceptance one way"),
    ({"acceptance": "eagle3-llama3-70b"}, "valid: eagle3-gpt-oss-20b-mtbench, "),
    ({"acceptance": "mtp-deepseek-v3"}, "measured with method mtp; this engine's method is "
                                        "eagle3"),
    ({"acceptance_rate": 0.7, "acceptance_rate_by_class": {"code": [0.9, 0.6]}},
     "acceptance_rate_by_class.code has 2 rates"),
    # named by class and position (was "expected a number (got a list ...)")
    ({"acceptance_rate": 0.7, "acceptance_rate_by_class": {"code": [0.7, float("inf"), 0.3]}},
     "acceptance_rate_by_class.code[1] is inf; each rate is a fraction of drafts"),
    ({"acceptance_rate": 0.7, "acceptance_rate_by_class": {"code": [0.7, "x", 0.3]}},
     "acceptance_rate_by_class.code[1] is 'x'; each rate is a fraction of drafts, a number"),
])
def test_bad_acceptance_is_refused_in_one_line(acceptance, message):
    with pytest.raises(ValidationError) as err:
        _cfg(**acceptance)
    assert message in str(err.value)


def _resolve(cfg, classes=("chat",)):
    from capsim.profiles.models import load_model
    return resolve_speculative(cfg, load_model("llama-3.1-8b"), classes, 0, None,
                               lambda shape: 0, 2, 1)


def test_a_shipped_row_and_class_overrides_resolve_per_class():
    spec = _resolve(_cfg(acceptance="eagle3-llama31-8b-mtbench",
                         acceptance_rate_by_class={"code": 0.8}), ("chat", "code"))
    assert spec.survival_by_class == (EAGLE3, None)
    assert spec.alpha_by_class == pytest.approx((sum(EAGLE3) / 3, 0.8))
    assert "chat by position 0.73/0.52/0.35 (2.60 tokens per step expected)" in spec.log_line()
    # by position cut to k; an i.i.d. rate everywhere keeps the old form (no survival)
    two = SpeculativeConfig(method="eagle3", num_speculative_tokens=2,
                            acceptance_rate_by_position=[0.8, 0.6, 0.1])
    assert _resolve(two).survival_by_class == ((0.8, 0.6),)
    assert _resolve(_cfg(acceptance_rate=0.7)).survival_by_class == ()


def _steps_per_token(survival, seed):
    """Decode steps of one 6,001-token request under ``survival`` (k = 3)."""
    spec = SpecDecoding(method="eagle3", k=3, lookahead_tokens=3,
                        alpha_by_class=(sum(survival) / 3,), draft=None,
                        draft_weight_bytes_per_gpu=0, draft_kv_bytes_per_token=0, seed=seed,
                        survival_by_class=(survival,))
    sched = SpeculativeScheduler(spec=spec, max_num_seqs=8, max_num_batched_tokens=8192,
                                 chunked=True, allocator=BlockAllocator(2000, 16, enable_caching=False),
                                 num_classes=1, itl=ItlRecorder(1))
    req = Request(0, 0, 0.0, 100, 6001)
    sched.add(req)
    sched.complete(sched.schedule(0.0), 0.0)          # the prompt and the first token
    steps, t = 0, 0.0
    while req.num_generated < req.output_tokens:
        t += 0.01
        sched.complete(sched.schedule(t), t)
        steps += 1
    return steps, req.rid


def test_a_run_emits_vllms_mean_acceptance_length_and_is_deterministic():
    steps, _ = _steps_per_token(EAGLE3, seed=5)
    assert 6000 / steps == pytest.approx(2.6049, rel=0.02)
    assert _steps_per_token(EAGLE3, seed=5)[0] == steps       # same seed, same draws
    # falling acceptance emits less than the i.i.d. rate of the same first position
    iid, _ = _steps_per_token(survival_of(0.7296, 3), seed=5)
    assert iid < steps


def test_draft_vocab_size_belongs_to_eagle3_only():
    """Only an EAGLE-3 head has its own LM head (vllm/model_executor/models/llama_eagle3.py
    at 583507d); EAGLE-1 and MTP share the target's."""
    assert _cfg(acceptance_rate=0.7, draft_vocab_size=32000).draft_vocab_size == 32000
    with pytest.raises(ValidationError, match="draft_vocab_size is an EAGLE-3 head's own LM "
                                              "head size; method eagle has none"):
        SpeculativeConfig(method="eagle", num_speculative_tokens=3, acceptance_rate=0.7,
                          draft_vocab_size=32000)


def test_a_draft_vocabulary_above_the_targets_is_refused():
    """An EAGLE-3 head drafts from a subset of the target's vocabulary (Llama-3.1-8B's
    128,256): 1,000,000 was accepted and priced an 8 GiB drafter (a new user's sweep)."""
    assert _resolve(_cfg(acceptance_rate=0.7, draft_vocab_size=128_256)).k == 3
    with pytest.raises(ValueError) as err:
        _resolve(_cfg(acceptance_rate=0.7, draft_vocab_size=1_000_000))
    assert err.value.args == ("draft_vocab_size", "draft_vocab_size 1,000,000 is more than "
                              "the target's vocabulary: an EAGLE-3 head drafts from a subset "
                              "of it (valid: 1 to 128,256)")

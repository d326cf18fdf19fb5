"""Conversations read from a trace's ``session_id`` (workload/sessions.py) in whole runs:
session_affinity keeps each conversation's turns on one replica of four, and the prefix
cache hits the history that the same requests without ids do not share."""

from __future__ import annotations

import json

import numpy as np
import pytest

from capsim.common.errors import ScenarioError
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import build

SESSIONS, TURNS = 12, 4
FIRST_TOKENS, NEW_TOKENS, OUTPUT_TOKENS = 640, 96, 64


def _lines(with_ids: bool, whole: bool = False) -> list[dict]:
    """12 conversations of 4 turns, first turns 400 ms apart, 1 s think time. Without ids:
    each turn alone, at the time it arrived with ids, holding the same tokens (history +
    new message) under hash ids of its own. ``whole``: with ids, each turn's input_length
    and hash_ids cover its whole context (Dynamo's exporter), the full 512-token blocks
    of the turn before named alike."""
    out, prompt = [], {}
    for s in range(SESSIONS):
        for t in range(TURNS):
            new = FIRST_TOKENS if t == 0 else NEW_TOKENS
            total = prompt.get(s, -OUTPUT_TOKENS) + OUTPUT_TOKENS + new
            before = prompt.get(s, 0) // 512
            prompt[s] = total
            own = [10_000 * s + 100 * t + b for b in range(-(-total // 512))]
            if with_ids:
                row = {"session_id": f"s{s}", "input_length": total if whole else new,
                       "output_length": OUTPUT_TOKENS}
                row.update({"timestamp": 400 * s} if t == 0 else {"delay": 1000})
                if whole:
                    row["hash_ids"] = [10_000 * s + b for b in range(before)] + own[before:]
            else:
                row = {"timestamp": 400 * s + 1500 * t, "input_length": total,
                       "output_length": OUTPUT_TOKENS, "hash_ids": own}
            out.append(row)
    return out


@pytest.fixture
def trace_run(tmp_path, write_scenario):
    """``trace_run(with_ids, router)`` → (hit tokens ÷ queried tokens, trace, result) on 4
    replicas."""
    def go(with_ids: bool, router: str = "session_affinity", whole: bool = False):
        path = tmp_path / f"t{int(with_ids)}{int(whole)}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in _lines(with_ids, whole)))
        doc = {"name": "c", "seed": 1, "model": "llama-3.1-8b", "hardware": "h100-sxm",
               "engine": {"max_model_len": 4096, "enable_prefix_caching": True},
               "cluster": {"num_replicas": 4, "router": router},
               "workload": {"trace": {"path": path.name, "format": "mooncake"}}}
        run = load(write_scenario(tmp_path, doc, f"s{int(with_ids)}{int(whole)}.yaml")).runs[0]
        trace = build(run.workload, run.seed, tmp_path)
        res = simulate(run, trace)
        hits = sum(r.prefix_hit_tokens for r in res.replicas)
        queried = sum(r.prefix_queried_tokens for r in res.replicas)
        return hits / queried, trace, res
    return go


def test_session_affinity_keeps_each_conversation_on_one_replica(trace_run):
    _, trace, res = trace_run(True)
    assert len(trace) == SESSIONS * TURNS and (res.requests.status == "finished").all()
    replica = res.requests.replica.reshape(SESSIONS, TURNS)   # rows grouped by conversation
    assert (replica == replica[:, :1]).all()
    assert len(set(replica[:, 0].tolist())) == 4               # and spreads the conversations


def test_the_history_hits_the_prefix_cache_only_with_ids(trace_run):
    """Per conversation the turns hold 640, 800, 960 and 1,120 tokens (3,520 queried);
    turn t ≥ 2 starts with the previous turn's prompt + reply (704, 864, 1,024 tokens), whose
    KV is computed but for the reply's last token (never fed back), so all its full
    16-token blocks but the last hit on its replica: 688 + 848 + 1,008 = 2,544 tokens. The
    same requests without ids share nothing, whichever replica they reach."""
    with_ids, trace, _ = trace_run(True)
    without, plain, _ = trace_run(False, "round_robin")
    assert plain.prompt_tokens.sum() == trace.prompt_tokens.sum()   # the same tokens
    assert without == 0.0
    assert with_ids == pytest.approx(2544 / 3520, rel=1e-9)
    again, _, _ = trace_run(True)
    assert again == with_ids                                          # deterministic
    assert np.isnan(trace.arrival_s[1])


def test_session_affinity_over_a_trace_without_ids_is_refused(trace_run):
    with pytest.raises(ScenarioError) as err:
        trace_run(False)
    assert err.value.path == "cluster.router"
    assert "a replayed trace carries no conversation ids" in str(err.value)


def test_turns_that_name_their_whole_context_hit_where_their_ids_agree(trace_run):
    """Dynamo's form: turns of 640, 800, 960 and 1,120 tokens, each naming the previous
    turn's one full 512-token block alike: 3 × 512 of the 3,520 tokens queried per
    conversation hit (the reply is not in the named blocks), all on one replica."""
    hit, trace, res = trace_run(True, whole=True)
    assert trace.prompt_tokens[:TURNS].tolist() == [640, 800, 960, 1120]
    assert hit == pytest.approx(1536 / 3520, rel=1e-9)
    replica = res.requests.replica.reshape(SESSIONS, TURNS)
    assert (replica == replica[:, :1]).all()

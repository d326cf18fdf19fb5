"""Agentic loops (``conversation.kind: agentic``): tool-call turns with short replies, the
tool's result as the next turn's new tokens, a constant tool latency between turns, and the
context growing by every call and result."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from capsim.scenario.workload import WorkloadConfig
from capsim.workload.build import build


def _wl(kind: str) -> WorkloadConfig:
    return WorkloadConfig.model_validate({
        "num_requests": 20, "arrival": {"process": "poisson", "rate_per_s": 1},
        "classes": [{"name": "agent", "weight": 1,
                     "prompt_tokens": {"dist": "fixed", "value": 300},       # a tool's result
                     "output_tokens": {"dist": "fixed", "value": 40},        # a tool call
                     "shared_prefix": {"tokens": 4000},                      # tools + goal
                     "conversation": {"turns": {"dist": "fixed", "value": 8},
                                      "think_time_s": 1.5, "kind": kind}}]})


def test_an_agent_loop_grows_its_context_with_constant_tool_latency():
    """8 turns: turn t's prompt is 4,300 + (t − 1) × 340 tokens (call + result), 167:1 input
    to output by the eighth (Manus's "over 100:1"); every pause is the tool's 1.5 s."""
    trace = build(_wl("agentic"), 0, Path("."))
    assert len(trace) == 160
    later = trace.parent >= 0
    assert (trace.think_s[later] == 1.5).all() and (trace.think_s[~later] == 0).all()
    depth = np.zeros(len(trace), dtype=int)
    for i in np.flatnonzero(later):
        depth[i] = depth[trace.parent[i]] + 1
    assert (trace.prompt_tokens == 4300 + depth * 340).all()
    assert trace.prompt_tokens.max() == 6680            # 167 input tokens per output token


def test_a_chat_keeps_its_exponential_pauses_and_the_same_lengths():
    chat, agent = build(_wl("chat"), 0, Path(".")), build(_wl("agentic"), 0, Path("."))
    assert np.array_equal(chat.prompt_tokens, agent.prompt_tokens)
    pauses = chat.think_s[chat.parent >= 0]
    assert len(np.unique(pauses)) == len(pauses) and pauses.mean() == pytest.approx(1.5, rel=0.3)


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="'chat' or 'agentic'"):
        _wl("tool")

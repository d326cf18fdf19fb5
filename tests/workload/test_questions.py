"""Repeated questions after a shared prompt (``shared_prefix.questions_per_template``,
inference-perf's ``num_prompts_per_group``; shared_prefix_datagen.py at 0ba9ace): whole
prompts repeat, so two requests of one question share every block of their prompts."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from capsim.engine.cache_router import prompt_hashes
from capsim.scenario.workload import WorkloadConfig
from capsim.sim.request_source import RequestSource
from capsim.workload.build import build


def _wl(questions: int | None, fraction: float = 1.0) -> WorkloadConfig:
    prefix = {"tokens": 6000, "num_templates": 150, "fraction": fraction}
    if questions is not None:
        prefix["questions_per_template"] = questions
    return WorkloadConfig.model_validate({
        "num_requests": 3000, "arrival": {"process": "poisson", "rate_per_s": 10},
        "classes": [{"name": "b2b", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 1200},
                     "output_tokens": {"dist": "fixed", "value": 1000},
                     "shared_prefix": prefix}]})


def test_questions_belong_to_their_template_and_leave_the_rest_unchanged():
    """150 templates × 5 questions: 750 prompts, every question id in its template's range;
    the templates, arrivals and lengths are those drawn without questions (the question is
    drawn after them)."""
    trace = build(_wl(5), 0, Path("."))
    plain = build(_wl(None), 0, Path("."))
    template = trace.prefix_id % 1_000_000
    assert np.array_equal(trace.question_id // 5, template)
    # 3,000 uniform draws of 750 cover 750 × (1 − e^−4) ≈ 736 on average; seed 0 covers 735.
    assert len(np.unique(trace.question_id)) == 735
    assert (trace.question_id.min(), trace.question_id.max()) == (0, 749)
    assert np.array_equal(trace.prefix_id, plain.prefix_id)
    assert np.array_equal(trace.arrival_s, plain.arrival_s)
    assert (plain.question_id == -1).all() and (trace.prompt_tokens == 7200).all()


def test_a_request_without_the_shared_prompt_has_no_question():
    trace = build(_wl(5, fraction=0.5), 0, Path("."))
    assert ((trace.prefix_id < 0) == (trace.question_id < 0)).all()
    assert 0.45 < (trace.question_id >= 0).mean() < 0.55


def test_one_question_shares_the_whole_prompt_another_only_the_template():
    """7,200 tokens = 450 blocks of 16: the same question matches all 450; another question
    of the same template the 375 blocks of its 6,000-token prompt (6,000 = 375 × 16)."""
    trace = build(_wl(5), 0, Path("."))
    source = RequestSource(trace)
    q = trace.question_id
    a, b = np.flatnonzero(q == q[0])[:2]
    c = np.flatnonzero((q // 5 == q[0] // 5) & (q != q[0]))[0]
    ha, hb, hc = (prompt_hashes(source.root(int(i)), 16) for i in (a, b, c))
    assert len(ha) == 450 and ha == hb
    assert sum(x == y for x, y in zip(ha, hc)) == 375 and ha[:375] == hc[:375]
    assert source.root(int(a)).shareable

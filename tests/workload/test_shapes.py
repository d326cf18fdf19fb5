"""Named workload shapes: ``workload.classes[i].shape: sharegpt`` resolves to the shipped
table (capsim/profiles/data/workloads/sharegpt.yaml) and draws what it was fitted to."""

from __future__ import annotations

import numpy as np
import pytest

from capsim.profiles.shapes import load_shape, shape_names
from capsim.scenario.load import load
from capsim.workload import build
from capsim.workload.shapes import draw_pairs

SCENARIO = {
    "name": "shapes", "seed": 0, "model": "llama-3.1-8b", "hardware": "a100-80gb",
    "engine": {"preset": "vllm-0.6", "max_model_len": 4096},
    "workload": {"num_requests": 20_000, "arrival": {"process": "poisson", "rate_per_s": 4.0},
                 "classes": [{"name": "chat", "weight": 1, "shape": "sharegpt"}]},
    "variants": [{"name": "a"}],
}


def test_sharegpt_resolves_to_the_shipped_table():
    """The file's figures (benchmarks/fit_sharegpt_shape.py: prompt quantiles of the 320
    requests of LambdaLabsML/vllm-benchmark's Meta-Llama-3-8B-Instruct prompt_320 result,
    a4f9f437; output quantiles drawn to the mean 194.35 and median 117.3 of the fit case
    load_sglang030_a100_llama31_8b_sharegpt_rps4_rps8)."""
    s = load_shape("sharegpt")
    assert "sharegpt" in shape_names()
    assert (s.filter.min_tokens, s.filter.max_prompt_tokens, s.filter.max_total_tokens) == \
        (4, 1024, 2048)                       # vLLM's sample_sharegpt_requests filter
    assert len(s.quantiles) == len(s.prompt_tokens) == len(s.output_tokens) == 25
    assert s.prompt_tokens[s.quantiles.index(0.5)] == 77.0      # the table's median prompt
    assert s.output_tokens[s.quantiles.index(0.5)] == 117.0
    assert s.output_tokens[-1] == 2044.5                        # 2048 - 4, plus half a token
    assert s.rank_correlation == -0.293
    assert s.check_sources() == []


def test_a_scenario_class_draws_from_the_shape(tmp_path, write_scenario):
    """The class's lengths are the shape's draw from the class's prompt stream: the same as
    draw_pairs on that stream, every pair inside vLLM's filter."""
    loaded = load(write_scenario(tmp_path, SCENARIO))
    trace = build(loaded.spec.workload, 0, tmp_path)
    p, o = trace.prompt_tokens, trace.output_tokens
    assert len(p) == 20_000
    assert p.min() >= 4 and o.min() >= 4 and p.max() <= 1024 and (p + o).max() <= 2048
    # the class's prompt stream: SeedSequence(0) -> lengths (2) -> class 0 -> prompts (0)
    _, _, length_ss = np.random.SeedSequence(0).spawn(3)
    prompt_ss = length_ss.spawn(1)[0].spawn(4)[0]
    want_p, want_o = draw_pairs(load_shape("sharegpt"), 20_000, np.random.default_rng(prompt_ss))
    assert np.array_equal(p, want_p) and np.array_equal(o, want_o)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_seeded_means_match_the_fitted_means(seed):
    """A draw of 100,000 pairs has the fit's means within 2 % (the standard error of a mean
    of 100,000 draws is 0.4 % for each): prompt 204.1 and output 194.4 tokens (the file's fit
    block; targets: the table's 204.9 and the fit case's 194.35), the output median 117 within
    3 tokens (target 117.3) and the table's rank correlation -0.293 within 0.02."""
    s = load_shape("sharegpt")
    p, o = draw_pairs(s, 100_000, np.random.default_rng(seed))
    assert p.mean() == pytest.approx(s.fit["mean_prompt_tokens"]["shape"], rel=0.02)
    assert o.mean() == pytest.approx(s.fit["mean_output_tokens"]["shape"], rel=0.02)
    assert abs(np.median(o) - s.fit["median_output_tokens"]["shape"]) <= 3
    ranks = [np.argsort(np.argsort(x)) for x in (p, o)]
    assert np.corrcoef(*ranks)[0, 1] == pytest.approx(s.rank_correlation, abs=0.02)


def test_draws_are_deterministic_for_a_seed():
    s = load_shape("sharegpt")
    a = draw_pairs(s, 1000, np.random.default_rng(7))
    b = draw_pairs(s, 1000, np.random.default_rng(7))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_conversation_turns_draw_new_user_tokens_from_the_shape(tmp_path, write_scenario):
    doc = {**SCENARIO, "workload": {**SCENARIO["workload"], "num_requests": 300, "classes": [
        {"name": "chat", "weight": 1, "shape": "sharegpt",
         "conversation": {"turns": {"dist": "fixed", "value": 2}, "think_time_s": 1.0}}]}}
    trace = build(load(write_scenario(tmp_path, doc)).spec.workload, 0, tmp_path)
    second = trace.parent >= 0
    assert second.sum() == 300
    parent = trace.parent[second]
    new_user = trace.prompt_tokens[second] - trace.prompt_tokens[parent] \
        - trace.output_tokens[parent]
    assert new_user.min() >= 4 and new_user.max() <= 1024


@pytest.mark.parametrize("cls, message", [
    ({"shape": "sharegtp"},
     "workload.classes.0.shape: unknown workload shape 'sharegtp'; valid: sharegpt"),
    ({"shape": "sharegpt", "prompt_tokens": {"dist": "fixed", "value": 5}},
     "workload.classes.0: give either shape (sharegpt) or prompt_tokens and output_tokens, "
     "not both; remove prompt_tokens"),
    ({"prompt_tokens": {"dist": "fixed", "value": 5}},
     "workload.classes.0: missing output_tokens: give prompt_tokens and output_tokens, or a "
     "shape such as shape: sharegpt"),
])
def test_bad_shape_is_one_line_exit_2(tmp_path, write_scenario, run_cli, cls, message):
    doc = {**SCENARIO, "workload": {**SCENARIO["workload"],
                                    "classes": [{"name": "chat", "weight": 1, **cls}]}}
    path = write_scenario(tmp_path, doc)
    code, out, err = run_cli(["validate", str(path)])
    assert code == 2 and out == ""
    assert err.startswith(f"error: {path}: {message}") and err.count("\n") == 1


def test_capsim_shapes_lists_the_shipped_shapes(run_cli, monkeypatch):
    """The listing names each shape, its means and filter, and folds to a narrow terminal
    without cutting a figure (as `capsim models` does)."""
    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = run_cli(["shapes"])
    assert code == 0 and "…" not in out
    assert "│ sharegpt " in out and "workload.classes.N.shape" in out
    assert max(len(line) for line in out.splitlines() if "│" in line) <= 100
    assert "204" in out and "194" in out          # the fit's prompt and output means

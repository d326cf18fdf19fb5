"""The drafting's host launches (``host_overhead.draft_*``): in vLLM 0.8 / 0.9 the drafting
runs in series after the sampled tokens reach the host, so each pass lasts the longer of its
kernels and its launches from Python, and each step adds the set-up's launches."""

from __future__ import annotations

import sys

import pytest

from capsim.cost.speculative import DraftHost, SpecPricer
from capsim.cost.terms import StepInput
from capsim.profiles.engines import load_engine_preset

#: Seconds per launch derived from vllm-project/vllm PR 1440 (benchmarks/calibration/
#: draft_launch_s.py: 11.31 ms over the 322 kernels of an eager Llama-2-7B decode forward).
LAUNCH_S = 3.512e-5


def _pool(preset: str, k: int = 2):
    """The EAGLE-3 variant of the published K 2 measurement (Llama-3.1-8B, one H100,
    benchmarks/spec_speedup) under ``preset``."""
    from capsim.profiles.models import load_model
    from capsim.scenario.load import load
    from conftest import REPO
    loaded = load(REPO / "benchmarks" / "spec_speedup" / "eagle3_llama31_8b_h100_bs1_k2.yaml",
                  [f"engine.preset={preset}",
                   f"variants.1.engine.speculative.num_speculative_tokens={k}"])
    return loaded.runs[1].pool(), load_model("llama-3.1-8b")


def test_the_launch_cost_is_pr_1440s_eager_forward_over_its_kernels():
    """11.31 ms (capsim's A100 80GB graph step + 0.15 s / 99 steps) over 32 x 10 + 2
    kernels of vLLM 0.2.5's eager Llama-2-7B decode: 35.12 us, the presets' figure."""
    from conftest import REPO
    sys.path.insert(0, str(REPO / "benchmarks" / "calibration"))
    from draft_launch_s import draft_launch_s, launches_per_forward
    assert launches_per_forward() == 322
    assert draft_launch_s() == pytest.approx(LAUNCH_S, rel=1e-3)
    for name in ("vllm-0.8", "vllm-0.9"):
        assert load_engine_preset(name).host_overhead.draft_launch_s == pytest.approx(
            draft_launch_s(), rel=1e-3)


def test_presets_say_what_their_version_runs_and_launches():
    """0.8.5: the head eagerly (14 kernels a forward + 5 logits + argmax = 20 a pass, 11
    updates between passes, 41 a step); 0.9.2: piecewise graphs (2 replays + 2 attention
    kernels + 6 = 10 a pass, 15 updates, 42 a step); 0.11 compiled but graph-less, not
    counted; vllm-v1 unchanged. Neither old version schedules asynchronously."""
    h = {n: load_engine_preset(n).host_overhead
         for n in ("vllm-0.8", "vllm-0.9", "vllm-0.11", "vllm-v1")}
    assert [(h[n].draft_cuda_graph, h[n].draft_step_launches, h[n].draft_pass_launches,
             h[n].draft_update_launches) for n in h] == [
        ("none", 41, 20, 11), ("piecewise", 42, 10, 15), ("none", 0, 0, 0), ("full", 0, 0, 0)]
    assert h["vllm-0.11"].draft_launch_s == h["vllm-v1"].draft_launch_s == 0.0
    assert h["vllm-0.8"].overlap == h["vllm-0.9"].overlap == "serial"
    assert not h["vllm-0.8"].async_scheduling_knob and not h["vllm-0.9"].async_scheduling_knob
    assert (load_engine_preset("vllm-0.8").version, load_engine_preset("vllm-0.9").version) \
        == ("0.8.5", "0.9.2")


def test_pool_turns_counts_into_seconds():
    pool, _ = _pool("vllm-0.8")
    assert pool.draft_host() == pytest.approx(
        DraftHost(41 * LAUNCH_S, 20 * LAUNCH_S, 31 * LAUNCH_S), rel=1e-12)
    pool, _ = _pool("vllm-0.9")
    assert pool.draft_host() == pytest.approx(
        DraftHost(42 * LAUNCH_S, 10 * LAUNCH_S, 25 * LAUNCH_S), rel=1e-12)
    pool, _ = _pool("vllm-v1")
    assert pool.draft_host() is None


def test_a_batch_1_step_lasts_its_launches_where_they_outlast_the_kernels():
    """Batch 1 on an H100, k = 2: each pass's kernels take ~0.27 ms; under vllm-0.8 the first
    pass's 20 launches (0.70 ms) and the second's 31 (1.09 ms) outlast them, and the step adds
    41 set-up launches (1.44 ms): verification + 3.23 ms, where the old pricing added the
    kernels + 0.3 ms a pass (1.15 ms)."""
    step = StepInput(0, 0.0, 0, 1, 400, [])
    pool, model = _pool("vllm-0.8")
    target, draft = pool.pricer(model), pool.draft_pricer()
    verify_s = target.price(step, 3, 3).seconds
    passes = [draft.price(step, 1, 3), draft.cost(decode_seqs=1, logits_seqs=1,
                                                  decode_ctx_tokens=401)]
    kernels = [p.seconds - p.overhead_s for p in passes]
    assert 0.26e-3 < min(kernels) and max(kernels) < 0.29e-3
    old, *_ = SpecPricer(target, draft, 2).price(step, 1, 3)
    new, *_ = SpecPricer(target, draft, 2, pool.draft_host()).price(step, 1, 3)
    assert old.seconds - verify_s == pytest.approx(sum(kernels) + 2 * 3e-4, rel=1e-9)
    assert new.seconds - verify_s == pytest.approx((41 + 20 + 31) * LAUNCH_S, rel=1e-9)
    assert new.seconds - verify_s == pytest.approx(3.231e-3, abs=1e-6)
    assert new.flops == old.flops and new.bytes == old.bytes       # the same kernels


def test_kernels_that_outlast_the_launches_set_the_pass():
    """At 256 sequences the passes' kernels outlast their launches: the step is the set-up
    launches + the kernels, with no per-pass step_overhead_s."""
    step = StepInput(0, 0.0, 0, 256, 256 * 2000, [])
    pool, model = _pool("vllm-0.9")
    target, draft = pool.pricer(model), pool.draft_pricer()
    host = pool.draft_host()
    passes = [draft.price(step, 256, 3), draft.cost(decode_seqs=256, logits_seqs=256,
                                                    decode_ctx_tokens=256 * 2000 + 256)]
    kernels = [p.seconds - p.overhead_s for p in passes]
    assert min(kernels) > host.later_pass_s
    cost, *_ = SpecPricer(target, draft, 2, host).price(step, 256, 3)
    assert cost.seconds - target.price(step, 3 * 256, 3).seconds == pytest.approx(
        host.step_s + sum(kernels), rel=1e-9)

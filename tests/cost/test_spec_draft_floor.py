"""Draft passes launched from Python (``host_overhead.draft_cuda_graph`` /
``draft_eager_op_s``): each lasts at least its operators' launches, by vLLM version."""

from __future__ import annotations

import pytest

from capsim.cost.speculative import SpecPricer, draft_eager_operators
from capsim.cost.terms import StepInput
from capsim.profiles.engines import load_engine_preset

#: vllm-0.6.4's eager operator cost (vllm-project/vllm PR 1440: 58.9 us per operator).
OP_S = 5.890e-5


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


def test_operators_a_pass_launches_from_python_by_graph_mode():
    """One EAGLE-3 layer is 4 matmuls + attention + the element-wise group (capsim's 6
    operators): eagerly those and the LM head (7); in vLLM 0.9's piecewise graphs the
    attention, the two graph pieces around it and the LM head (4); a full graph none."""
    pool, _ = _pool("vllm-0.8")
    draft = pool.draft_pricer()
    assert draft.terms.eager_operators == 6
    assert [draft_eager_operators(draft, g) for g in ("none", "piecewise", "full")] == [7, 4, 0]


def test_presets_say_what_their_version_runs_the_drafter_in():
    """0.8.5 eager (no compile, PR 17211 / 17504 came after it), 0.9.2 piecewise graphs,
    0.11.0 compiled but called with cudagraph_runtime_mode NONE; the per-operator cost is
    vllm-0.6.4's eager figure; vllm-v1 unchanged (no floor)."""
    hosts = {n: load_engine_preset(n).host_overhead
             for n in ("vllm-0.8", "vllm-0.9", "vllm-0.11", "vllm-v1")}
    assert {n: h.draft_cuda_graph for n, h in hosts.items()} == {
        "vllm-0.8": "none", "vllm-0.9": "piecewise", "vllm-0.11": "none", "vllm-v1": "full"}
    v0 = load_engine_preset("vllm-0.6.4").host_overhead.eager_prefill_op_s
    assert [hosts[n].draft_eager_op_s for n in ("vllm-0.8", "vllm-0.9", "vllm-0.11")] == [v0] * 3
    assert v0 == OP_S and hosts["vllm-v1"].draft_eager_op_s == 0.0
    assert (load_engine_preset("vllm-0.8").version, load_engine_preset("vllm-0.9").version) \
        == ("0.8.5", "0.9.2")
    assert hosts["vllm-0.8"].overlap == hosts["vllm-0.9"].overlap == "serial"


def test_an_eager_pass_lasts_its_launches_where_they_outlast_its_kernels():
    """Batch 1 on an H100: a pass's kernels take ~0.27 ms, 7 eager operators 0.412 ms, so
    under vllm-0.8 each of the k = 2 passes costs 0.412 ms + the H100's per-forward
    0.3 ms; 4 operators under vllm-0.9 (0.236 ms) stay below the kernels: no change."""
    step = StepInput(0, 0.0, 0, 1, 400, [])
    pool, model = _pool("vllm-0.8")
    target, draft = pool.pricer(model), pool.draft_pricer()
    floor_s = pool.draft_pass_floor_s(draft)
    assert floor_s == pytest.approx(7 * OP_S, rel=1e-12)
    plain, *_ = SpecPricer(target, draft, 2).price(step, 1, 3)
    eager, *_ = SpecPricer(target, draft, 2, floor_s).price(step, 1, 3)
    passes = [draft.price(step, 1, 3), draft.cost(decode_seqs=1, logits_seqs=1,
                                                  decode_ctx_tokens=401)]
    kernels = [p.seconds - p.overhead_s for p in passes]
    assert 0.26e-3 < min(kernels) and max(kernels) < 0.29e-3
    assert eager.seconds - plain.seconds == pytest.approx(
        sum(floor_s - s for s in kernels), rel=1e-9)
    assert eager.seconds - target.price(step, 3, 3).seconds == pytest.approx(
        2 * (floor_s + 3e-4), rel=1e-9)
    pool9, _ = _pool("vllm-0.9")
    draft9 = pool9.draft_pricer()
    floor9 = pool9.draft_pass_floor_s(draft9)
    assert floor9 == pytest.approx(4 * OP_S, rel=1e-12) and floor9 < min(kernels)
    graphed, *_ = SpecPricer(target, draft9, 2, floor9).price(step, 1, 3)
    assert graphed.seconds == plain.seconds


def test_no_drafter_or_no_cost_means_no_floor():
    """ngram has no GPU drafter, and a preset without a per-operator cost sets none."""
    pool, _ = _pool("vllm-v1")
    assert pool.draft_pass_floor_s(pool.draft_pricer()) == 0.0
    assert pool.draft_pass_floor_s(None) == 0.0

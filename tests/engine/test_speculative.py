"""Speculative decoding: the acceptance formula, KV slots, α = 0, determinism, macro-steps.

Sources: E[tokens per step] = (1 − α^(k+1)) / (1 − α) is eq. 1 of Leviathan et al. 2023
("Fast Inference from Transformers via Speculative Decoding"); the scheduler's slot rule
(1 + k scheduled tokens + k lookahead slots) is vllm/v1/core/sched/scheduler.py at
00024d3; the streamed-chunk ITL is vllm/benchmarks/lib/endpoint_request_func.py at 3aee4a4.
"""

from __future__ import annotations

import random
from itertools import product
from math import comb

import pytest

from capsim.cost.speculative import verify_aggregates
from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import Request
from capsim.engine.scheduler.speculative import SpeculativeScheduler
from capsim.kv.allocator import BlockAllocator
from capsim.metrics.summary import summarize
from capsim.profiles.speculative import accepted_drafts, expected_tokens_per_step
from capsim.scenario.load import load
from capsim.scenario.speculative import SpecDecoding
from capsim.sim.simulate import simulate
from capsim.workload import build


# ----------------------------------------------------------------- the formula
@pytest.mark.parametrize("alpha,k,expected", [
    (0.7, 3, 2.533), (0.8, 3, 2.952), (0.0, 3, 1.0), (0.5, 1, 1.5), (0.9, 5, 4.686)])
def test_expected_tokens_per_step_is_leviathan_eq_1(alpha, k, expected):
    assert expected_tokens_per_step(alpha, k) == pytest.approx(expected, abs=5e-4)


@pytest.mark.parametrize("alpha,k", [(0.7, 3), (0.6, 4), (0.9, 2)])
def test_formula_matches_brute_force_over_every_acceptance_pattern(alpha, k):
    """Enumerate the 2^k accept/reject patterns of the k drafts (each accepted with
    probability α): the step emits the accepted prefix + 1 token."""
    mean = 0.0
    for pattern in product((True, False), repeat=k):
        p = 1.0
        for ok in pattern:
            p *= alpha if ok else 1 - alpha
        prefix = next((i for i, ok in enumerate(pattern) if not ok), k)
        mean += p * (prefix + 1)
    assert mean == pytest.approx(expected_tokens_per_step(alpha, k), rel=1e-12)


def test_drawn_acceptances_average_to_the_formula():
    rng = random.Random(1)
    n = 200_000
    drawn = sum(1 + accepted_drafts(rng.random(), 0.7, 3) for _ in range(n)) / n
    assert drawn == pytest.approx(2.533, abs=0.01)
    # the distribution: P(a = i) = α^i (1 − α) for i < k, α^k for i = k
    rng = random.Random(2)
    counts = [0] * 4
    for _ in range(n):
        counts[accepted_drafts(rng.random(), 0.7, 3)] += 1
    for i, p in enumerate([0.3, 0.21, 0.147, 0.343]):
        assert counts[i] / n == pytest.approx(p, abs=0.005)


def test_verification_is_a_k_plus_1_chunk_on_each_context():
    # two sequences with 100 and 200 cached tokens (ctx_tokens counts cached + 1 each)
    tokens, pairs, kv = verify_aggregates(2, 302, 4)
    assert tokens == 8
    assert pairs == 4 * 300 + 2 * (4 * 5 / 2)          # 1,220 query-key pairs
    assert kv == 308


# ----------------------------------------------------------------- KV slots
def _scheduler(k=3, lookahead=3, alpha=0.7, blocks=1000, budget=8192):
    spec = SpecDecoding(method="eagle", k=k, lookahead_tokens=lookahead,
                        alpha_by_class=(alpha,), draft=None, draft_weight_bytes_per_gpu=0,
                        draft_kv_bytes_per_token=0, seed=0)
    alloc = BlockAllocator(blocks, 16, enable_caching=False)
    return SpeculativeScheduler(spec=spec, max_num_seqs=64, max_num_batched_tokens=budget,
                                chunked=True, allocator=alloc, num_classes=1,
                                itl=ItlRecorder(1))


def test_each_decoder_holds_slots_for_1_plus_k_tokens_and_k_lookahead():
    sched = _scheduler()
    req = Request(0, 0, 0.0, 100, 50)
    sched.add(req)
    step = sched.schedule(0.0)
    assert step.prefill_tokens == 100 and len(req.blocks) == 7      # ceil(100 / 16)
    sched.complete(step, 0.01)                                      # first token
    step = sched.schedule(0.01)
    # 100 computed + 4 verified + 3 lookahead = 107 slots -> 7 blocks; budget 4 tokens
    assert step.decode_seqs == 1 and sched.width == 4 and len(req.blocks) == 7
    sched.complete(step, 0.02)
    assert req.num_generated >= 2 and req.num_computed == 99 + req.num_generated
    # after 12 more tokens at most (a <= 3 per step) the slots need an 8th block
    while req.num_computed + 4 + 3 <= 112:
        sched.complete(sched.schedule(1.0), 1.0)
    sched.schedule(2.0)
    assert len(req.blocks) == 8


def test_the_token_budget_counts_k_plus_1_per_decoder_and_caps_the_width():
    sched = _scheduler(budget=64)
    for rid in range(20):
        sched.add(Request(rid, 0, 0.0, 3, 100))
    step = sched.schedule(0.0)                  # 20 prompts of 3 tokens: 60 of the 64
    sched.complete(step, 0.01)
    step = sched.schedule(0.01)
    assert step.decode_seqs == 20 and sched.width == 3      # 64 // 20 = 3 < k + 1
    assert step.prefill_tokens == 0


def test_alpha_zero_emits_one_token_per_step():
    sched = _scheduler(alpha=0.0)
    req = Request(0, 0, 0.0, 40, 30)
    sched.add(req)
    steps = 0
    while sched.has_work():
        step = sched.schedule(float(steps))
        sched.complete(step, float(steps) + 0.5)
        steps += 1
    assert steps == 30 and sched.merged_tokens == 0         # 1 prefill + 29 decode steps


# ----------------------------------------------------------------- whole runs
def _run(loaded, rc, macro_steps=True):
    return simulate(rc, build(rc.workload, rc.seed, loaded.base_dir), macro_steps=macro_steps)


def _all_row(loaded, result):
    return next(r for r in summarize(result, loaded.spec.slo, loaded.class_slos)
                if r.cls == "all")


def test_eagle_halves_tpot_at_4_users_and_gains_less_at_128(scenarios_dir):
    """The shipped scenario's story (scenarios/spec_decode.yaml), on 200 requests."""
    loaded = load(scenarios_dir / "spec_decode.yaml", ["workload.num_requests=200"])
    tpot, tput = {}, {}
    for rc in loaded.runs:
        row = _all_row(loaded, _run(loaded, rc))
        tpot[rc.variant], tput[rc.variant] = row.tpot_p50_ms, row.output_throughput_tok_per_s
    low = tpot["none-4-users"] / tpot["eagle-4-users"]
    high = tpot["none-128-users"] / tpot["eagle-128-users"]
    assert 1.8 < low < 2.6           # E = 2.53 (chat) / 2.95 (code), less the drafts
    assert 1.0 < high < low - 0.4    # compute-bound verification: the gain shrinks
    assert tput["eagle-128-users"] / tput["none-128-users"] < low - 0.4


def test_alpha_zero_costs_the_verification_and_gains_nothing(scenarios_dir):
    loaded = load(scenarios_dir / "spec_decode.yaml",
                  ["workload.num_requests=40", "variants.1.engine.speculative="
                   "{method: eagle, num_speculative_tokens: 3, acceptance_rate: 0.0}"])
    base, spec = (_run(loaded, rc) for rc in loaded.runs[:2])
    assert spec.requests.first_token_s.size == base.requests.first_token_s.size
    tpot_base = _all_row(loaded, base).tpot_p50_ms
    tpot_spec = _all_row(loaded, spec).tpot_p50_ms
    assert tpot_spec > 1.1 * tpot_base           # 4 tokens verified and 3 drafts per token
    # one token per step: every gap streamed, as many steps as without speculation
    assert sum(r.steps for r in spec.replicas) == sum(r.steps for r in base.replicas)


def test_runs_are_deterministic_and_macro_steps_change_nothing(scenarios_dir):
    loaded = load(scenarios_dir / "spec_decode.yaml", ["workload.num_requests=60"])
    rc = next(r for r in loaded.runs if r.variant == "eagle-128-users")
    ref = _run(loaded, rc, macro_steps=False)
    again = _run(loaded, rc, macro_steps=False)
    fast = _run(loaded, rc, macro_steps=True)
    for other in (again, fast):
        assert other.requests == ref.requests
        assert other.replicas == ref.replicas
        assert other.timelines == ref.timelines
        assert other.itl == ref.itl
        assert other.sim_end_s == ref.sim_end_s


def test_the_drafter_takes_weights_and_kv_from_the_cache(scenarios_dir):
    """EAGLE on Llama-3.1-8B: one more decoder layer (218 M params + the 2·4096² fc,
    bf16: 0.47 GiB) and a 33rd layer of KV per token (131,072 → 135,168 bytes)."""
    loaded = load(scenarios_dir / "spec_decode.yaml", ["workload.num_requests=10"])
    none, eagle = (rc.pool() for rc in loaded.runs[:2])
    assert none.kv.kv_bytes_per_token == 131_072
    assert eagle.kv.kv_bytes_per_token == 135_168
    extra = eagle.kv.memory.weight_bytes - none.kv.memory.weight_bytes
    assert extra == eagle.spec.draft_weight_bytes_per_gpu == (218_116_096 + 2 * 4096**2) * 2


# ----------------------------------------------------------------- the drafters
def test_deepseek_v3_mtp_layer_is_its_11_5b_module_with_one_more_latent_per_token():
    """DeepSeek-V3's MTP module: 11.5B unique parameters besides the shared embedding and
    output head (DeepSeek-V3 README_WEIGHTS.md); capsim counts its MoE layer, MLA and
    eh_proj: 11.61B. Its KV is one more layer's 576-element latent (1,152 bytes bf16)."""
    from capsim.profiles.models import load_model
    from capsim.profiles.speculative import draft_shape, draft_weight_params
    m = load_model("deepseek-v3")
    assert draft_weight_params(m, "mtp") == pytest.approx(11.5e9, rel=0.015)
    d = draft_shape(m, "mtp")
    assert (d.num_hidden_layers, d.moe_layers) == (1, 1)
    assert d.paged_kv_bytes_per_token(2) == 1152


@pytest.mark.parametrize("method,extra", [
    ("ngram", {}), ("draft_model", {"model": "llama-3.1-8b"}), ("eagle3", {})])
def test_every_method_runs_and_a_heavier_drafter_costs_more(tmp_path, method, extra):
    """Llama-3.1-70B on 4 × H100 at 2 users: ngram drafts for free, EAGLE-3 with one
    layer, the 8B draft model with 32 layers of its own: the step time follows."""
    import yaml
    doc = {"name": "s", "seed": 3, "model": "llama-3.1-70b", "hardware": "h100-sxm",
           "engine": {"tensor_parallel_size": 4, "max_model_len": 4096},
           "workload": {"num_requests": 12, "arrival": {"process": "concurrency", "users": 2},
                        "classes": [{"name": "chat", "weight": 1,
                                     "prompt_tokens": {"dist": "fixed", "value": 300},
                                     "output_tokens": {"dist": "fixed", "value": 120}}]},
           "variants": [{"name": "none"},
                        {"name": method, "engine": {"speculative": {
                            "method": method, "num_speculative_tokens": 3,
                            "acceptance_rate": 0.0, **extra}}}]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    loaded = load(path)
    base, spec = (_run(loaded, rc) for rc in loaded.runs)
    per_step = [sum(r.busy_s for r in res.replicas) / sum(r.steps for r in res.replicas)
                for res in (base, spec)]
    ratio = per_step[1] / per_step[0]
    # α = 0: the same steps, each verifying 4 tokens (+ drafting), so only dearer
    assert sum(r.steps for r in spec.replicas) == sum(r.steps for r in base.replicas)
    low, high = {"ngram": (1.0, 1.15), "eagle3": (1.03, 1.4), "draft_model": (1.3, 2.2)}[method]
    assert low < ratio < high, ratio

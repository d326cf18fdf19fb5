"""Prefill/decode disaggregation in whole runs (capsim.engine.disagg): the seed experiment,
back-pressure, conservation on both sides, determinism, heterogeneous pools (issue 3).
The KV link itself: test_transfer.py."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from capsim.scenario.load import load
from capsim.metrics.summary import request_frame, summarize
from capsim.cost.pricer import StepPricer
from capsim.sim.simulate import simulate
from capsim.workload import build


# --------------------------------------------------------------------- the seed experiment

ARRIVAL_S = 1.3
SEED_ENGINE = {"max_model_len": 4096, "max_num_seqs": 64, "enable_chunked_prefill": False,
               "max_num_batched_tokens": 16384}


@pytest.fixture
def seed_runs(disagg_scenario, disagg, trace_of):
    """Seed 000 "Prefill and decode are two different jobs": Llama-2-7B on A100s, 32
    sequences decoding (512-token prompts, 60 tokens), one 2,048-token prompt arriving while
    they decode (1.3 s: their prefill ends at ~1.0 s, their replies at ~1.9 s). Co-located on
    one GPU, unchunked, versus 1 prefill + 1 decode GPU over NVLink 3."""
    path = disagg_scenario([{"name": "shared"},
                            {"name": "1P1D", "disaggregation": disagg(link="nvlink-3")}],
                           model="llama-2-7b", hardware="a100-80gb", engine=SEED_ENGINE)
    loaded = load(path)
    rows = [(0.0, 512, 60, 0)] * 32 + [(ARRIVAL_S, 2048, 2, 1)]
    trace = trace_of(rows, ("decoders", "newcomer"))
    return loaded, [simulate(run, trace) for run in loaded.runs]


def class_gaps(result, class_id: int) -> Counter:
    """ITL gaps (s) of one class → how many."""
    out: Counter = Counter()
    for gap, n, cid in zip(result.itl.gap_s, result.itl.count, result.itl.class_id):
        if cid == class_id:
            out[gap] += int(n)
    return out


def test_seed_experiment_disaggregation_removes_the_prefill_stall(seed_runs):
    loaded, (shared, split) = seed_runs
    for result in (shared, split):          # the prompt arrives while all 32 are decoding
        r = result.requests
        assert max(r.first_token_s[:32]) < ARRIVAL_S < min(r.finish_s[:32])
    run = loaded.runs[0]
    pricer = StepPricer(run.model, run.pool().hardware, 1)
    step_32 = pricer.cost(decode_seqs=32, decode_ctx_tokens=32 * 512).seconds
    step_33 = pricer.cost(decode_seqs=33, decode_ctx_tokens=33 * 2048).seconds   # generous bound
    prefill = pricer.cost(prefill_tokens=2048, prefill_attn_pairs=2048 * 2049 / 2,
                          prefill_kv_tokens=2048, logits_seqs=1).seconds

    # Co-located, unchunked: all 32 decoders see one whole prefill plus a decode step.
    worst_shared = max(class_gaps(shared, 0))
    assert worst_shared == pytest.approx(prefill + step_32, rel=0.05)
    assert worst_shared > 5 * step_32

    # Disaggregated: each decoder's token 1→2 gap carries its own KV transfer (once, before
    # the prompt arrives); every other gap, while the prompt is prefilled on the other GPU
    # included, is one decode step.
    t = split.disagg.transfers
    new = t.class_id.index(1)
    first_gaps = Counter(s - h for s, h, c in zip(t.second_token_s, t.handoff_s, t.class_id)
                         if c == 0)
    assert sum(first_gaps.values()) == 32
    assert all(s < ARRIVAL_S for s, c in zip(t.second_token_s, t.class_id) if c == 0)
    rest = class_gaps(split, 0) - first_gaps
    assert sum(rest.values()) == 32 * 58                     # Σ (output − 1) − the first gaps
    assert step_32 * 0.999 < min(rest) and max(rest) < step_33
    assert max(rest) < worst_shared / 5
    # Per request, too: the worst gap of each decoder is its own first (transfer) gap.
    frame = request_frame(split)
    decoders = frame[frame.cls == "decoders"]
    assert np.allclose(sorted(decoders.max_itl_ms), sorted(g * 1e3 for g in first_gaps.elements()))

    # The newcomer: its 1→2 gap is its transfer (latency + bytes / bandwidth) plus waiting for
    # the decode step in flight and its own first decode step.
    wire = t.arrived_s[new] - t.reserved_s[new]
    assert wire == pytest.approx(1e-5 + 2048 * 524288 / 300e9, rel=1e-9)   # Llama-2-7B: 512 KiB/token
    gap_12 = t.second_token_s[new] - t.handoff_s[new]
    assert wire + step_32 < gap_12 < wire + 2 * step_33
    assert class_gaps(split, 1) == Counter({gap_12: 1})
    # requests.csv carries each request's transfer (the newcomer's row here).
    row = frame[frame.request_id == t.request_id[new]].iloc[0]
    assert row.decode_replica == t.decode_replica[new]
    assert row.kv_bytes == 2048 * 524288
    assert row.kv_transfer_ms == pytest.approx(wire * 1e3, rel=1e-12)
    assert row.second_token_ms == pytest.approx(gap_12 * 1e3, rel=1e-12)
    assert row.kv_backpressure_ms == pytest.approx((t.reserved_s[new] - t.handoff_s[new]) * 1e3)


# ------------------------------------------------------------- back-pressure, conservation


@pytest.fixture
def backpressure_run(disagg_scenario, disagg, trace_of):
    """``backpressure_run(decode_kv_gib)``: 60 requests (1,000-token prompts, 400-token
    replies) within 0.12 s into one prefill replica whose KV (1.7 GiB) holds ~13 prompts,
    and one decode replica with ``decode_kv_gib`` of KV (None: what 0.9 of the GPU
    leaves); returns (run, result)."""
    def run_at(decode_kv_gib: float | None):
        decode = {"kv_cache_memory_gib": decode_kv_gib} if decode_kv_gib else {}
        pools = disagg(prefill={"engine": {"kv_cache_memory_gib": 1.7}},
                       decode={"engine": decode})
        path = disagg_scenario([{"name": "bp", "disaggregation": pools}],
                               engine={"max_model_len": 4096, "max_num_batched_tokens": 4096})
        run = load(path).runs[0]
        rows = [(i * 0.002, 1000, 400) for i in range(60)]
        return run, simulate(run, trace_of(rows))
    return run_at


def test_backpressure_throttles_the_prefill_pool_without_losing_or_duplicating(
        backpressure_run, disagg_scenario):
    roomy_run, roomy = backpressure_run(None)
    tight_run, tight = backpressure_run(0.5)
    blocks = tight_run.pool("decode").kv.num_gpu_blocks
    assert blocks * 16 < 3 * 1400                       # room for about two requests at once
    for result in (roomy, tight):
        assert result.requests.status.tolist() == ["finished"] * 60
        t = result.disagg.transfers
        assert sorted(t.request_id) == list(range(60))   # each crossed exactly once
        assert all(a >= r >= h for h, r, a in zip(t.handoff_s, t.reserved_s, t.arrived_s))
        assert result.itl.count.sum() == 60 * 399
    wait = np.subtract(tight.disagg.transfers.reserved_s, tight.disagg.transfers.handoff_s)
    assert (wait > 0).sum() > 40 and not np.any(np.subtract(
        roomy.disagg.transfers.reserved_s, roomy.disagg.transfers.handoff_s))
    # Prefilled requests keep their blocks on the prefill replica while they wait: its KV fills
    # and new prompts queue there, so the prefill pool is throttled, not the requests lost.
    prefill_peak = tight.replicas[0].peak_kv_used_blocks
    assert prefill_peak > 0.9 * tight.replicas[0].num_gpu_blocks
    queue = {name: request_frame(r).queue_ms.mean() for name, r in (("roomy", roomy),
                                                                      ("tight", tight))}
    assert queue["tight"] > 5 * queue["roomy"]
    slo = load(disagg_scenario([{"name": "x"}])).spec.slo
    row = summarize(tight, slo)[0]
    assert row.kv_backpressure_p99_ms > 1000
    assert tight.disagg.decode_saturated_s > 1.0
    assert row.stranded_prefill_frac > 0.3              # prefill GPU idle, blocked by decode


def test_prefill_bound_mix_strands_decode_capacity(disagg_scenario, disagg, trace_of):
    """Long prompts, one-token... two-token replies: the prefill pool saturates while the
    decode GPU has little to do — stranded decode capacity."""
    path = disagg_scenario([{"name": "pb", "disaggregation": disagg()}])
    run = load(path).runs[0]
    result = simulate(run, trace_of([(i * 0.01, 6000, 2) for i in range(100)]))
    row = summarize(result, load(path).spec.slo)[0]
    assert row.prefill_busy_frac > 0.9 and row.decode_busy_frac < 0.2
    assert row.stranded_decode_frac > 0.7 and row.stranded_prefill_frac == 0.0


def test_conservation_on_both_sides_for_every_split(disagg_scenario, disagg):
    """Random mix (some one-token replies that never leave the prefill pool) over 1P3D, 2P2D
    and 3P1D with both decode routers; simulate() checks blocks, tokens, ITL counts and the
    link; here the per-side totals are asserted too."""
    variants = [{"name": f"{p}P{4 - p}D-{router}",
                 "disaggregation": disagg(p, 4 - p, router=router)}
                for p in (1, 2, 3) for router in ("least_kv", "round_robin")]
    loaded = load(disagg_scenario(variants))
    trace = build(loaded.spec.workload, loaded.spec.seed, loaded.base_dir)
    outputs = trace.output_tokens
    for run in loaded.runs:
        result = simulate(run, trace)
        assert result.num_gpus == 4 and len(result.replicas) == 4
        assert all(s == "finished" for s in result.requests.status)
        t = result.disagg.transfers
        assert sorted(t.request_id) == [i for i, o in enumerate(outputs) if o > 1]
        pools = Counter(r.pool for r in result.replicas)
        p = int(run.variant[0])
        assert pools == Counter({"prefill": p, "decode": 4 - p})
        prefill_ids = {r.replica for r in result.replicas if r.pool == "prefill"}
        assert set(t.prefill_replica) <= prefill_ids
        assert set(t.decode_replica).isdisjoint(prefill_ids)
        assert result.itl.count.sum() == int((outputs - 1).sum())
        ports = result.disagg.ports
        moved = sum(t.bytes)
        assert sum(pt.bytes for pt in ports if pt.pool == "prefill") == pytest.approx(moved)
        assert sum(pt.bytes for pt in ports if pt.pool == "decode") == pytest.approx(moved)
        if run.variant.endswith("round_robin"):
            used = Counter(t.decode_replica)
            assert max(used.values()) - min(used.values()) <= 1   # strict alternation


def test_same_seed_same_numbers_and_json_round_trip(disagg_scenario, disagg):
    loaded = load(disagg_scenario([{"name": "2P2D", "disaggregation": disagg(2, 2)}]))
    trace = build(loaded.spec.workload, loaded.spec.seed, loaded.base_dir)
    a, b = (simulate(loaded.runs[0], trace) for _ in range(2))
    assert summarize(a, loaded.spec.slo) == summarize(b, loaded.spec.slo)
    assert a.disagg == b.disagg
    again = type(a).model_validate_json(a.model_dump_json())
    assert again.disagg.transfers == a.disagg.transfers


def test_fleet_price_and_peaks_sum_over_heterogeneous_pools(disagg_scenario, disagg, trace_of):
    """H100 prefill + H200 decode: cost and MFU/MBU denominators add the two pools."""
    pools = disagg(2, 1, decode={"hardware": "h200-sxm"})
    loaded = load(disagg_scenario([{"name": "het", "disaggregation": pools}]))
    run = loaded.runs[0]
    result = simulate(run, trace_of([(0.0, 500, 20), (0.1, 900, 30)]))
    h100, h200 = (run.pool(r).hardware for r in ("prefill", "decode"))
    assert result.num_gpus == 3 and result.hardware == "h100-sxm/h200-sxm"
    assert result.price_per_hour_usd == pytest.approx(
        2 * h100.price_per_gpu_hour_usd + h200.price_per_gpu_hour_usd)
    assert result.hbm_bandwidth_per_gpu_bytes_per_s * 3 == pytest.approx(
        2 * h100.hbm_bandwidth_bytes_per_s + h200.hbm_bandwidth_bytes_per_s)
    assert [r.hardware for r in result.replicas] == ["h100-sxm", "h100-sxm", "h200-sxm"]
    assert any(line.startswith("decode: GPU KV cache size") for line in result.log)


# ------------------------------------------------------------------------------ invariants


def test_a_request_finishing_without_its_kv_transfer_breaks_the_run(disagg_scenario, disagg,
                                                                   trace_of, monkeypatch):
    """Checked as the request finishes: the run keeps no request objects to look at later."""
    from capsim.engine.disagg import DisaggCluster
    from capsim.sim.simulate import InvariantError
    loaded = load(disagg_scenario([{"name": "1P1D", "disaggregation": disagg(1, 1)}]))
    finished = DisaggCluster._finished

    def forget_transfer(self, req):
        if req.rid == 1:
            del self.transfers[1]
        finished(self, req)

    monkeypatch.setattr(DisaggCluster, "_finished", forget_transfer)
    with pytest.raises(InvariantError, match="request 1 finished without a KV transfer"):
        simulate(loaded.runs[0], trace_of([(0.0, 500, 20), (0.1, 900, 30)]))

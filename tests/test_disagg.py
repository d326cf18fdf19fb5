"""Prefill/decode disaggregation: the KV link model, the seed experiment, back-pressure,
conservation on both sides, and bad input (issue 3)."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import simpy
import yaml

from capsim.scenario.load import load
from capsim.engine.transfer import FairShareNetwork, Flow, KVLink
from capsim.profiles.links import load_link, resolve_link, LinkNumbers
from capsim.metrics.summary import request_frame, summarize
from capsim.cost.pricer import StepPricer
from capsim.sim.simulate import simulate
from capsim.workload import RequestTrace, build
from cli_helpers import run_cli

NDR = 50e9            # InfiniBand NDR: 400 Gb/s per port = 50e9 bytes/s per direction


def trace_of(rows: list[tuple], classes: tuple[str, ...] = ("chat",)) -> RequestTrace:
    """rows: (arrival_s, prompt_tokens, output_tokens[, class_id])."""
    rows = [r if len(r) == 4 else (*r, 0) for r in rows]
    a, p, o, c = (np.array(col) for col in zip(*rows))
    n = len(rows)
    return RequestTrace(arrival_s=a.astype(np.float64), prompt_tokens=p.astype(np.int64),
                        output_tokens=o.astype(np.int64), class_id=c.astype(np.int32),
                        prefix_id=np.full(n, -1, np.int32), class_names=classes)


def scenario(tmp_path: Path, variants: list[dict], **top) -> Path:
    doc = {"name": "disagg", "seed": 3, "model": "llama-3.1-8b", "hardware": "h100-sxm",
           "engine": {"max_model_len": 8192},
           "workload": {"num_requests": 120, "arrival": {"process": "poisson", "rate_per_s": 6},
                        "classes": [{"name": "chat", "weight": 1,
                                     "prompt_tokens": {"dist": "uniform", "min": 50, "max": 4000},
                                     "output_tokens": {"dist": "uniform", "min": 1, "max": 300}}]},
           "variants": variants, **top}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def disagg(p: int = 1, d: int = 1, link="infiniband-ndr", **extra) -> dict:
    out = {"prefill": {"num_replicas": p}, "decode": {"num_replicas": d}, "link": link}
    for key, value in extra.items():
        if key in ("prefill", "decode"):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


# ----------------------------------------------------------------------------- the link


def test_link_profiles_are_datasheet_numbers_with_sources():
    ndr = load_link("infiniband-ndr")
    assert ndr.bandwidth_bytes_per_s == NDR and "connectx7" in ndr.sources["bandwidth_bytes_per_s"]
    assert load_link("roce-200g").bandwidth_bytes_per_s == 25e9
    assert load_link("nvlink-4").bandwidth_bytes_per_s == 450e9      # 900 GB/s bidirectional
    assert load_link("pcie-gen5-x16").bandwidth_bytes_per_s == 64e9
    custom = resolve_link(LinkNumbers(bandwidth_gbit_per_s=400, latency_s=1e-4))
    assert custom.bandwidth_bytes_per_s == NDR and custom.latency_s == 1e-4
    tuned = resolve_link(LinkNumbers(name="infiniband-ndr", latency_s=0.0))
    assert tuned.bandwidth_bytes_per_s == NDR and tuned.latency_s == 0.0


def run_link(sends: list[tuple[float, float, tuple[int, ...]]], capacities: list[float],
             latency_s: float) -> list[float]:
    """Start each (start_s, bytes, ports) transfer on one KVLink; return the finish times."""
    env = simpy.Environment()
    link = KVLink(env, capacities, latency_s)
    done = [math.nan] * len(sends)

    def start(i, nbytes, ports):
        link.send(nbytes, ports, lambda t, i=i: done.__setitem__(i, t))

    for i, (t0, nbytes, ports) in enumerate(sends):
        env.timeout(t0).callbacks.append(lambda _e, i=i, b=nbytes, p=ports: start(i, b, p))
    env.run()
    assert link.in_flight == 0 and link.started == link.completed == len(sends)
    return done


def test_a_transfer_takes_latency_plus_bytes_over_bandwidth():
    """2,048 tokens of Llama-3.1-8B KV (128 KiB per token) over one NDR port: 30 µs + 5.37 ms."""
    ndr = load_link("infiniband-ndr")
    nbytes = 2048 * 131072
    (end,) = run_link([(0.0, nbytes, (0, 1))], [NDR, NDR], ndr.latency_s)
    assert end == pytest.approx(ndr.latency_s + nbytes / NDR, rel=1e-12)
    assert end == pytest.approx(ndr.transfer_time_s(nbytes), rel=1e-12)
    assert end == pytest.approx(3.0e-5 + 5.36870912e-3, rel=1e-12)


def test_two_simultaneous_transfers_over_one_link_each_take_twice_as_long():
    nbytes = 1e9
    alone = run_link([(0.0, nbytes, (0, 1))], [NDR, NDR], 3e-5)[0]
    both = run_link([(0.0, nbytes, (0, 1)), (0.0, nbytes, (0, 1))], [NDR, NDR], 3e-5)
    assert both[0] == both[1] == pytest.approx(3e-5 + 2 * nbytes / NDR, rel=1e-12)
    assert (both[0] - 3e-5) / (alone - 3e-5) == pytest.approx(2.0, rel=1e-12)
    assert both[0] / alone == pytest.approx(2.0, rel=1e-2)    # the fixed latency is not shared


def test_a_transfer_starting_halfway_shares_the_rest_fairly():
    """Alone for T/2, then half a link each: the first ends at 1.5 T, the second at 2 T."""
    nbytes, t = 1e9, 1e9 / NDR
    first, second = run_link([(0.0, nbytes, (0, 1)), (t / 2, nbytes, (0, 1))], [NDR, NDR], 0.0)
    assert first == pytest.approx(1.5 * t, rel=1e-12)
    assert second == pytest.approx(2.0 * t, rel=1e-12)


def test_max_min_fairness_incast_and_tensor_parallel_ports():
    """Three prefill ports (TP1) into one decode port (TP1) get a third each; a TP2 pair
    next to them, with its own ports, runs at twice the link rate."""
    net = FairShareNetwork([NDR, NDR, NDR, NDR, 2 * NDR, 2 * NDR])
    flows = [Flow(ports=(i, 3), total_bytes=1e9, on_done=lambda t: None) for i in range(3)]
    flows.append(Flow(ports=(4, 5), total_bytes=1e9, on_done=lambda t: None))
    for f in flows:
        net.add(f, 0.0)
    assert [f.rate_bytes_per_s for f in flows] == pytest.approx([NDR / 3] * 3 + [2 * NDR])
    done = net.advance(net.next_finish_s())
    assert done == [flows[3]] and net.next_finish_s() == pytest.approx(3e9 / NDR)
    # One sender with two receivers: its egress is the bottleneck, shared equally.
    net = FairShareNetwork([NDR, NDR, NDR])
    a, b = (Flow(ports=(0, k), total_bytes=1e9, on_done=lambda t: None) for k in (1, 2))
    net.add(a, 0.0)
    net.add(b, 0.0)
    assert a.rate_bytes_per_s == b.rate_bytes_per_s == pytest.approx(NDR / 2)


def test_a_flow_with_a_sub_ulp_remainder_still_finishes():
    """Regression (found in disagg_ratio at 24 req/s): at t = 266.34 s a float step is
    5.7e-14 s; a 9.4 MB flow left with 0.012 bytes at 450 GB/s needs 2.7e-14 s, so its timer
    fired at the same instant again and again. Such a flow now counts as finished."""
    t0 = 266.3373948493349
    env = simpy.Environment(initial_time=t0)
    link = KVLink(env, [450e9, 450e9], 0.0)
    done = []
    link.send(9437184.0, (0, 1), done.append)
    flow = link.net.flows[0]
    flow.remaining_bytes = 0.012129588052630424      # what float rounding left over
    link._arm()
    for _ in range(100):                             # bounded: a regression cannot hang
        if not done and env.peek() < t0 + 1.0:
            env.step()
    assert done == [t0] and link.in_flight == 0 and not link.net.flows


def one_request_transfer(tmp_path, **pools) -> tuple[float, float]:
    """Simulate one 2,048-token prompt; return (transfer seconds, bytes)."""
    run = load(scenario(tmp_path, [{"name": "d", "disaggregation": disagg(**pools)}])).runs[0]
    result = simulate(run, trace_of([(0.0, 2048, 5)]))
    t = result.disagg.transfers
    return t.arrived_s[0] - t.reserved_s[0], t.bytes[0]


def test_transfer_inside_a_run_honours_tensor_parallel_sharding(tmp_path):
    """Bytes = tokens × KV bytes per token; a TP2 → TP1 transfer is bound by the decode
    GPU's one link, TP2 → TP2 moves two shards in parallel."""
    lat = load_link("infiniband-ndr").latency_s
    secs, nbytes = one_request_transfer(tmp_path, prefill={"tensor_parallel_size": 2})
    assert nbytes == 2048 * 131072
    assert secs == pytest.approx(lat + nbytes / NDR, rel=1e-9)
    secs, _ = one_request_transfer(tmp_path, prefill={"tensor_parallel_size": 2},
                                   decode={"tensor_parallel_size": 2})
    assert secs == pytest.approx(lat + nbytes / (2 * NDR), rel=1e-9)


def test_layerwise_overlap_hides_all_but_the_last_layer(tmp_path):
    """Unchunked, the whole prefill (tens of ms) overlaps the KV stream: only the last of
    32 layers (or what the link could not carry during the prefill) is left."""
    base, nbytes = one_request_transfer(tmp_path)
    over, _ = one_request_transfer(tmp_path, layerwise_overlap=True)
    assert base == pytest.approx(3e-5 + nbytes / NDR, rel=1e-9)
    assert over == pytest.approx(nbytes / 32 / NDR, rel=1e-9)


# ------------------------------------------------------------------- the seed experiment

ARRIVAL_S = 1.3
SEED_ENGINE = {"max_model_len": 4096, "max_num_seqs": 64, "enable_chunked_prefill": False,
               "max_num_batched_tokens": 16384}


def seed_runs(tmp_path):
    """Seed 000 "Prefill and decode are two different jobs": Llama-2-7B on A100s, 32
    sequences decoding (512-token prompts, 60 tokens), one 2,048-token prompt arriving while
    they decode (1.3 s: their prefill ends at ~1.0 s, their replies at ~1.9 s). Co-located on
    one GPU, unchunked, versus 1 prefill + 1 decode GPU over NVLink 3."""
    path = scenario(tmp_path, [{"name": "shared"},
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


def test_seed_experiment_disaggregation_removes_the_prefill_stall(tmp_path):
    loaded, (shared, split) = seed_runs(tmp_path)
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


# ---------------------------------------------------------------- back-pressure, conservation


def backpressure_run(tmp_path, decode_util: float):
    """60 requests (1,000-token prompts, 400-token replies) within 0.12 s into one prefill
    replica whose KV holds ~50 prompts, and one decode replica of ``decode_util``."""
    pools = disagg(prefill={"engine": {"gpu_memory_utilization": 0.215}},
                   decode={"engine": {"gpu_memory_utilization": decode_util}})
    path = scenario(tmp_path, [{"name": "bp", "disaggregation": pools}],
                    engine={"max_model_len": 4096, "max_num_batched_tokens": 4096})
    run = load(path).runs[0]
    rows = [(i * 0.002, 1000, 400) for i in range(60)]
    return run, simulate(run, trace_of(rows))


def test_backpressure_throttles_the_prefill_pool_without_losing_or_duplicating(tmp_path):
    roomy_run, roomy = backpressure_run(tmp_path, 0.9)
    tight_run, tight = backpressure_run(tmp_path, 0.2)
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
    slo = load(scenario(tmp_path, [{"name": "x"}])).spec.slo
    row = summarize(tight, slo)[0]
    assert row.kv_backpressure_p99_ms > 1000
    assert tight.disagg.decode_saturated_s > 1.0
    assert row.stranded_prefill_frac > 0.3              # prefill GPU idle, blocked by decode


def test_prefill_bound_mix_strands_decode_capacity(tmp_path):
    """Long prompts, one-token... two-token replies: the prefill pool saturates while the
    decode GPU has little to do — stranded decode capacity."""
    path = scenario(tmp_path, [{"name": "pb", "disaggregation": disagg()}])
    run = load(path).runs[0]
    result = simulate(run, trace_of([(i * 0.01, 6000, 2) for i in range(100)]))
    row = summarize(result, load(path).spec.slo)[0]
    assert row.prefill_busy_frac > 0.9 and row.decode_busy_frac < 0.2
    assert row.stranded_decode_frac > 0.7 and row.stranded_prefill_frac == 0.0


def test_conservation_on_both_sides_for_every_split(tmp_path):
    """Random mix (some one-token replies that never leave the prefill pool) over 1P3D, 2P2D
    and 3P1D with both decode routers; simulate() checks blocks, tokens, ITL counts and the
    link; here the per-side totals are asserted too."""
    variants = [{"name": f"{p}P{4 - p}D-{router}",
                 "disaggregation": disagg(p, 4 - p, router=router)}
                for p in (1, 2, 3) for router in ("least_kv", "round_robin")]
    loaded = load(scenario(tmp_path, variants))
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


def test_same_seed_same_numbers_and_json_round_trip(tmp_path):
    loaded = load(scenario(tmp_path, [{"name": "2P2D", "disaggregation": disagg(2, 2)}]))
    trace = build(loaded.spec.workload, loaded.spec.seed, loaded.base_dir)
    a, b = (simulate(loaded.runs[0], trace) for _ in range(2))
    assert summarize(a, loaded.spec.slo) == summarize(b, loaded.spec.slo)
    assert a.disagg == b.disagg
    again = type(a).model_validate_json(a.model_dump_json())
    assert again.disagg.transfers == a.disagg.transfers


def test_fleet_price_and_peaks_sum_over_heterogeneous_pools(tmp_path):
    """H100 prefill + H200 decode: cost and MFU/MBU denominators add the two pools."""
    pools = disagg(2, 1, decode={"hardware": "h200-sxm"})
    loaded = load(scenario(tmp_path, [{"name": "het", "disaggregation": pools}]))
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


# ------------------------------------------------------------------------------ bad input

BAD = [
    ({"link": "infiniband-xdr"}, "variants.0.disaggregation.link: unknown link 'infiniband-xdr'"),
    ({"decode": {"num_replicas": 1, "hardware": "h900"}},
     "variants.0.disaggregation.decode.hardware: unknown hardware 'h900'"),
    ({"prefill": {"num_replicas": 0}}, "variants.0.disaggregation.prefill.num_replicas: "),
    ({"decode": {"num_replicas": 0}}, "variants.0.disaggregation.decode.num_replicas: "),
    ({"decode": {"num_replicas": 1, "engine": {"scheduler": "static"}}},
     "variants.0.disaggregation.decode.engine.scheduler: "),
    ({"link": {"bandwidth_gbit_per_s": 0}}, "variants.0.disaggregation.link: "),
]


@pytest.mark.parametrize("change,expected", BAD)
def test_bad_disaggregation_is_one_line_exit_2(tmp_path, capsys, change, expected):
    pools = {**disagg(), **change}
    path = scenario(tmp_path, [{"name": "d", "disaggregation": pools}])
    out_dir = tmp_path / "report"
    code, _, err = run_cli(["run", str(path), "-o", str(out_dir)], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {path}: ")
    assert expected in err and "Traceback" not in err
    assert not out_dir.exists()


def test_model_that_does_not_fit_on_the_decode_gpus(tmp_path, capsys):
    """Llama-3.1-70B (131 GiB of weights) fits a TP2 H100 prefill replica, not one decode H100."""
    pools = disagg(prefill={"tensor_parallel_size": 2}, decode={"tensor_parallel_size": 1})
    path = scenario(tmp_path, [{"name": "d", "disaggregation": pools}], model="llama-3.1-70b")
    code, _, err = run_cli(["validate", str(path)], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "variants.0.disaggregation.decode" in err and "do not fit" in err


def test_cluster_num_replicas_next_to_pools_is_refused(tmp_path, capsys):
    path = scenario(tmp_path, [{"name": "d", "cluster": {"num_replicas": 2},
                                "disaggregation": disagg()}])
    code, _, err = run_cli(["validate", str(path)], capsys)
    assert code == 2 and "variants.0.cluster.num_replicas" in err


def test_timeline_link_panel_counts_intervals_exactly():
    """Mean number of open [start, end) intervals per 1-s bin (waiting / in-flight panel)."""
    from capsim.report.run.disagg import interval_occupancy
    occ = interval_occupancy(np.array([0.5, 1.0, 2.25]), np.array([1.5, 3.0, float("nan")]),
                             1.0, 3)
    assert occ.tolist() == pytest.approx([0.5, 1.5, 1.0])


def test_a_request_finishing_without_its_kv_transfer_breaks_the_run(tmp_path, monkeypatch):
    """Checked as the request finishes: the run keeps no request objects to look at later."""
    from capsim.engine.disagg import DisaggCluster
    from capsim.sim.simulate import InvariantError
    loaded = load(scenario(tmp_path, [{"name": "1P1D", "disaggregation": disagg(1, 1)}]))
    finished = DisaggCluster._finished

    def forget_transfer(self, req):
        if req.rid == 1:
            del self.transfers[1]
        finished(self, req)

    monkeypatch.setattr(DisaggCluster, "_finished", forget_transfer)
    with pytest.raises(InvariantError, match="request 1 finished without a KV transfer"):
        simulate(loaded.runs[0], trace_of([(0.0, 500, 20), (0.1, 900, 30)]))

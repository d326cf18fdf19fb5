"""The KV link between prefill and decode pools (capsim.engine.transfer): latency plus bytes
over bandwidth, max-min fair sharing between ports; and transfers inside a disaggregated run
(tensor-parallel shards, layer-wise overlap)."""

from __future__ import annotations

import math

import pytest
import simpy

from capsim.scenario.load import load
from capsim.engine.transfer import FairShareNetwork, Flow, KVLink
from capsim.profiles.links import load_link
from capsim.sim.simulate import simulate

NDR = 50e9            # InfiniBand NDR: 400 Gb/s per port = 50e9 bytes/s per direction


# ----------------------------------------------------------------------------- the network


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


# ---------------------------------------------------------------------------- inside a run


@pytest.fixture
def one_request_transfer(disagg_scenario, disagg, trace_of):
    """``one_request_transfer(**pools)``: simulate one 2,048-token prompt over a 1P1D split
    (``pools`` as in ``disagg``); return (transfer seconds, bytes)."""
    def transfer(**pools) -> tuple[float, float]:
        run = load(disagg_scenario([{"name": "d", "disaggregation": disagg(**pools)}])).runs[0]
        result = simulate(run, trace_of([(0.0, 2048, 5)]))
        t = result.disagg.transfers
        return t.arrived_s[0] - t.reserved_s[0], t.bytes[0]
    return transfer


def test_transfer_inside_a_run_honours_tensor_parallel_sharding(one_request_transfer):
    """Bytes = tokens × KV bytes per token; a TP2 → TP1 transfer is bound by the decode
    GPU's one link, TP2 → TP2 moves two shards in parallel."""
    lat = load_link("infiniband-ndr").latency_s
    secs, nbytes = one_request_transfer(prefill={"tensor_parallel_size": 2})
    assert nbytes == 2048 * 131072
    assert secs == pytest.approx(lat + nbytes / NDR, rel=1e-9)
    secs, _ = one_request_transfer(prefill={"tensor_parallel_size": 2},
                                   decode={"tensor_parallel_size": 2})
    assert secs == pytest.approx(lat + nbytes / (2 * NDR), rel=1e-9)


def test_layerwise_overlap_hides_all_but_the_last_layer(one_request_transfer):
    """Unchunked, the whole prefill (tens of ms) overlaps the KV stream: only the last of
    32 layers (or what the link could not carry during the prefill) is left."""
    base, nbytes = one_request_transfer()
    over, _ = one_request_transfer(layerwise_overlap=True)
    assert base == pytest.approx(3e-5 + nbytes / NDR, rel=1e-9)
    assert over == pytest.approx(nbytes / 32 / NDR, rel=1e-9)

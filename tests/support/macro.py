"""Macro-steps against the step-by-step reference (the policy tests' shared check)."""

from __future__ import annotations

from capsim.sim.simulate import simulate


def simulate_both_ways(rc, trace):
    """Simulate ``rc`` step by step (the reference; it checks the invariants) and with
    macro-steps; assert both give the same requests, replicas, timelines and end time.
    Returns the reference result."""
    ref = simulate(rc, trace, macro_steps=False)
    fast = simulate(rc, trace, macro_steps=True)
    assert fast.requests == ref.requests, rc.variant
    assert fast.replicas == ref.replicas, rc.variant
    assert fast.timelines == ref.timelines, rc.variant
    assert fast.sim_end_s == ref.sim_end_s, rc.variant
    return ref

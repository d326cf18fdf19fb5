"""Driving a scheduler by hand, one step at a time (the policy tests' shared helpers)."""

from __future__ import annotations


def step(sched, t, dt=1.0):
    """Schedule a step at ``t`` and complete it ``dt`` later; the step (None when idle)."""
    s = sched.schedule(t)
    if s is not None:
        sched.complete(s, t + dt)
    return s


def batch(s):
    """(rid, tokens) of a step's prefills and its decode count."""
    return [(r.rid, n) for r, n in s.prefills], s.decode_seqs

"""The serving engine: request state, schedulers, replicas, router.

Schedulers are pure deterministic Python (no SimPy) so tests can drive them
step by step; :mod:`capsim.engine.replica` wires one into a SimPy process.
"""

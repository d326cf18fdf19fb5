"""Resolving a variant: presets loaded, engine defaults filled, memory sized, pools made.

A variant of a scenario becomes one frozen :class:`~capsim.scenario.run_config.RunConfig`,
everything ``sim.simulate`` needs besides the trace. Resolution loads the model and GPU
profile, fills the engine's model-dependent defaults, checks the rules vLLM enforces
(tensor parallelism, token budget, FP8 support) and sizes the KV cache
(:mod:`capsim.kv.capacity`): :mod:`capsim.scenario.resolve_colocated` and the modules it
composes. A disaggregated variant (DistServe, OSDI'24; Splitwise, ISCA'24) resolves each
pool exactly like a co-located variant whose ``hardware`` and ``engine`` are the
variant's with the pool's overrides on top (:mod:`capsim.scenario.resolve_disagg`), so
every rule, default and memory check applies per pool; a pooled fleet likewise
(:mod:`capsim.scenario.resolve_pools`).

Public API:
    resolve_variant(spec, index, v, path) -> RunConfig
"""

from __future__ import annotations

from pathlib import Path

from capsim.scenario.resolve_colocated import resolve_colocated
from capsim.scenario.resolve_disagg import resolve_disaggregated
from capsim.scenario.run_config import RunConfig
from capsim.scenario.schema import Scenario, VariantSpec


def resolve_variant(spec: Scenario, index: int, v: VariantSpec, path: Path) -> RunConfig:
    """Variant ``index`` of ``spec`` (``v``) as a RunConfig: model and GPU profile loaded
    (with hardware overrides), the engine preset's defaults filled in, vLLM's rules
    checked, the KV cache sized by the preset's memory rule; a disaggregated variant's
    two pools each so.

    Raises:
        ScenarioError: naming the file and the YAML path of the offending field.
    """
    if v.disaggregation is not None:
        return resolve_disaggregated(spec, index, v, path)
    return resolve_colocated(spec, index, v, path)



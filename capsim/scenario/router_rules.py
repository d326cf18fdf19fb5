"""The checks of ``cluster.router`` that need the workload: a router that sticks a
conversation to its replica (``session_affinity``) needs requests that carry a
conversation id, which ``workload.classes.N.conversation`` makes and a Mooncake-format
trace carries as ``session_id`` (other replayed traces have none); llm-d's precise
prefix-cache scorer (``router_options.prefix_match: precise``) reads the replicas' prefix
caches, so it needs an engine that keeps one."""

from __future__ import annotations

import json
from pathlib import Path

from capsim.common.errors import ScenarioError
from capsim.scenario.paths import scenario_relative
from capsim.scenario.routing import CONVERSATION_ROUTERS
from capsim.scenario.schema import ClusterConfig, EngineConfig
from capsim.scenario.workload import WorkloadConfig


def check_router(cluster: ClusterConfig, workload: WorkloadConfig, variant_keys: set[str],
                 path: Path, where: str, engine: EngineConfig | None = None) -> None:
    """Refuse a conversation router over a workload without conversations, and the precise
    prefix scorer over replicas without a paged prefix cache (``engine``: the resolved
    engine knobs).

    Raises:
        ScenarioError: naming ``cluster.router`` (the variant's when it set it) or
            ``cluster.router_options.prefix_match``.
    """
    opts = cluster.router_options
    if (engine is not None and opts is not None and opts.prefix_match == "precise"
            and not (engine.enable_prefix_caching and engine.kv_allocator == "paged")):
        at = "cluster.router_options.prefix_match"
        raise ScenarioError("prefix_match: precise scores replicas by the blocks their prefix "
                            "caches hold, but this engine keeps none; set "
                            "engine.enable_prefix_caching: true (a paged KV cache) or "
                            "prefix_match: approximate",
                            file=str(path), path=f"{where}.{at}" if where and
                            "router_options" in variant_keys else at)
    if cluster.router not in CONVERSATION_ROUTERS:
        return
    at = f"{where}.cluster.router" if where and "router" in variant_keys else "cluster.router"
    if workload.trace is not None:
        if _has_session_ids(workload, path):
            return
        raise ScenarioError(f"router {cluster.router} sticks each conversation to one replica, "
                            "but a replayed trace carries no conversation ids (a Mooncake-"
                            "format trace's session_id); use prefix_aware or kv_scorer (they "
                            "match prompt blocks)", file=str(path), path=at)
    if not any(c.conversation is not None for c in workload.classes or ()):
        raise ScenarioError(f"router {cluster.router} sticks each conversation to one replica, "
                            "but no workload class has conversation turns; give "
                            "workload.classes.N.conversation or another router",
                            file=str(path), path=at)


def _has_session_ids(workload: WorkloadConfig, path: Path) -> bool:
    """Whether the trace's first line has a ``session_id`` (its reader refuses a trace
    where only some lines do); True where it cannot be read, so that the reader reports
    the file itself."""
    trace = workload.trace
    if trace.format != "mooncake":
        return False
    try:
        with scenario_relative(trace.path, path.parent).open() as f:
            first = next((line for line in f if line.strip()), "")
        record = json.loads(first)
    except (OSError, ValueError):
        return True
    return not isinstance(record, dict) or "session_id" in record

"""What a resolved variant says about itself: its engine and scheduler labels and the
start-up lines ``capsim run`` and ``capsim validate`` print (per pool, as its engine logs
them), for a co-located, a disaggregated or a pooled variant.

Public API:
    pool_log_lines(pool), kv_log_lines(run)         start-up lines
    engine_label(run), scheduler_label(pool)        labels in tables and reports
    pool_lines(run), fleet_lines(run)               ``capsim validate``'s lines of a split, a fleet
    replica_shape(engine)                           ``TP8 EP DP-attention``: a replica's GPUs
    limits_text(run, pool)                          the request limits in those lines
"""

from __future__ import annotations

from dataclasses import replace

from capsim.common.labels import parallel_label
from capsim.scenario.preset_rules import applied_rule_lines
from capsim.scenario.routing import CACHE_ROUTERS, KV_ROUTERS, RouterOptions, SaturationConfig
from capsim.scenario.run_config import Pool, RunConfig
from capsim.scenario.schema import EngineConfig


def replica_shape(engine: EngineConfig) -> str:
    """A replica's GPU shape with its MoE parallelism: ``TP8``, ``TP4 × PP2``,
    ``TP8 EP DP-attention``, ``TP32 EP DP8-attention × TP4``."""
    return (parallel_label(engine.tensor_parallel_size, engine.pipeline_parallel_size)
            + (" EP" if engine.enable_expert_parallel else "")
            + (_dp_attention_label(engine) if engine.enable_dp_attention else ""))


def _dp_attention_label(engine: EngineConfig) -> str:
    """`` DP-attention`` (a rank per GPU) or `` DP4-attention × TP8`` (ranks of 8 GPUs)."""
    t = engine.attention_tp_size
    if t == 1:
        return " DP-attention"
    return f" DP{engine.tensor_parallel_size // t}-attention × TP{t}"


def pool_log_lines(pool: Pool) -> list[str]:
    """A pool's start-up lines as its engine logs them (per GPU): the preset, weights,
    the memory profile, the available KV memory, the KV cache size and concurrency; with
    speculative decoding its method, k and expected tokens per step."""
    lines = [f"engine {pool.engine_label}"]
    if pool.spec is not None:
        lines.append(pool.spec.log_line())
    return [*lines, *pool.kv.memory.log_lines(), *pool.kv.log_lines(pool.engine.max_model_len)]


def engine_label(run: RunConfig) -> str:
    """The engine preset(s) of a variant, e.g. ``vllm-v1 (vLLM 0.19.0)``; a split whose
    pools run different presets names both."""
    labels = list(dict.fromkeys(p.engine_label for p in run.pools))
    if len(labels) == 1:
        return labels[0]
    names = run.fleet.names if run.fleet is not None else [p.role for p in run.pools]
    return ", ".join(f"{name} {p.engine_label}" for name, p in zip(names, run.pools))


def scheduler_label(pool: Pool) -> str:
    """``continuous+chunked(2048)``, ``static``, ``trtllm(GUARANTEED_NO_EVICT, 8192)``, …"""
    eng = pool.engine
    if eng.scheduler == "static":
        return "static"
    chunk = f"+chunked({eng.max_num_batched_tokens})" if eng.chunked else ""
    if eng.scheduler == "trtllm":
        return f"trtllm({eng.capacity_scheduler_policy}, {eng.max_num_batched_tokens}){chunk}"
    return f"{eng.scheduler}{chunk}"


def kv_log_lines(run: RunConfig) -> list[str]:
    """A variant's start-up lines (:func:`pool_log_lines`); one set per pool (prefixed)
    when disaggregated."""
    if run.fleet is not None:
        return [f"{fp.name}: {line}" for fp in run.fleet.pools for line in pool_log_lines(fp.pool)]
    if not run.disaggregated:
        return pool_log_lines(run.pool())
    return [f"{p.role}: {line}" for p in run.pools for line in pool_log_lines(p)]


def limits_text(run: RunConfig, pool: Pool | None = None) -> str:
    """``, sheds beyond 16 waiting per replica; 20/s, burst 40 at the router``: the request
    limits of ``pool``'s replicas (None: none) and of ``run``'s router, for ``capsim
    validate``'s lines; "" when there are none."""
    eng = pool.engine if pool is not None else None
    parts = []
    if eng is not None and eng.max_waiting_requests is not None:
        parts.append(f"{eng.max_waiting_requests} waiting per replica")
    if eng is not None and eng.max_inflight_requests is not None:
        parts.append(f"{eng.max_inflight_requests} in flight per replica")
    if run.router_max_queued_requests is not None:
        parts.append(f"{run.router_max_queued_requests} waiting at the router")
    if run.router_rate_limit is not None:
        parts.append(f"{run.router_rate_limit.rate_per_s:g}/s, burst "
                     f"{run.router_rate_limit.burst} at the router")
    shed = [c.name for c in run.workload.classes or () if c.criticality == "sheddable"]
    out = f", sheds beyond {'; '.join(parts)}" if parts else ""
    if shed:
        sat = run.saturation or SaturationConfig()
        out += (f", drops {', '.join(shed)} while saturated (mean of max(waiting / "
                f"{sat.queue_depth_threshold}, KV use / {sat.kv_cache_util_threshold:g}) >= 1)")
    return out


def engine_extras_text(pool: Pool) -> str:
    """``, priority scheduling, KV offload 16 GiB (native)``: the engine's priority
    scheduling and host-memory KV tier, for ``capsim validate``'s line; "" without."""
    eng, parts = pool.engine, []
    if eng.scheduling_policy == "priority":
        parts.append("priority scheduling")
    if eng.kv_offloading_size is not None:
        parts.append(f"KV offload {eng.kv_offloading_size:g} GiB ({eng.kv_offloading_backend})")
    return "".join(f", {p}" for p in parts)


def router_text(run: RunConfig) -> str:
    """``, router prefix_aware (cache_threshold 0.5, ...)``: a cache-aware router and its
    knobs (scenario/routing.py), for ``capsim validate``'s line; "" for a load-only one."""
    if run.router not in KV_ROUTERS:
        return ""
    if run.router not in CACHE_ROUTERS:
        return f", router {run.router}"
    o = run.router_options if run.router_options is not None else RouterOptions()
    if run.router == "kv_scorer":
        w = o.scorer_weights
        rule = (f"weights queue {w.queue:g}, kv_cache_utilization {w.kv_cache_utilization:g}, "
                f"prefix_cache {w.prefix_cache:g}")
    else:
        rule = (f"cache_threshold {o.cache_threshold:g}, by load past "
                f"{o.balance_abs_threshold} and {o.balance_rel_threshold:g}×")
    if o.prefix_match == "precise":
        return f", router {run.router} ({rule}; precise: the replicas' cached blocks)"
    return f", router {run.router} ({rule}; {o.max_tree_size_blocks} blocks per replica)"


def pool_lines(run: RunConfig) -> list[str]:
    """What ``capsim validate`` prints for a disaggregated variant: split, link, each pool."""
    d = run.transfer
    out = [f"{run.variant}: {run.label} on {run.num_gpus} GPUs, KV over {d.link.name} "
           f"({d.link.bandwidth_bytes_per_s / 1e9:,.0f} GB/s per GPU and direction, "
           f"{d.link.latency_s * 1e6:,.0f} µs per transfer), decode router "
           f"{d.router}" + (", layer-wise overlap" if d.layerwise_overlap else "")
           + limits_text(run)]
    for pool in run.pools:
        eng = pool.engine
        out.append(f"  {pool.role}: {pool.num_replicas} × {pool.hardware.name} "
                   f"{replica_shape(eng)}, {'chunked' if eng.chunked else 'unchunked'}, "
                   f"max_num_seqs {eng.max_num_seqs}, max_num_batched_tokens "
                   f"{eng.max_num_batched_tokens}")
        out += [f"    {line}" for line in [*_rules(pool, run.model),
                                              *pool_log_lines(pool)]]
    return out


def fleet_lines(run: RunConfig) -> list[str]:
    """What ``capsim validate`` prints for a pooled variant: the router and its rules, then
    per pool its replicas, GPU, TP, engine, model and start-up lines."""
    f = run.fleet
    rules = [" and ".join(([f"class {r.class_name}"] if r.class_name else [])
                          + ([f"prompt >= {r.min_prompt_tokens}"] if r.min_prompt_tokens else []))
             + f" → {f.pools[r.pool].name}" for r in f.routes]
    out = [f"{run.variant}: {len(f.pools)} pools on {run.num_gpus} GPUs, router {f.policy}"
           + (f", route: {'; '.join(rules)}" if rules else "") + limits_text(run)]
    for fp in f.pools:
        eng = fp.pool.engine
        scaling = ", autoscaled" if fp.autoscaling is not None else ""
        out.append(f"  {fp.name}: {fp.pool.num_replicas} × {fp.pool.hardware.name} "
                   f"{replica_shape(eng)}, model {fp.model.name}, engine "
                   f"{fp.pool.engine_label}, max_num_seqs {eng.max_num_seqs}, "
                   f"max_num_batched_tokens {eng.max_num_batched_tokens}, "
                   f"${fp.price_per_replica_hour_usd:,.2f}/h per replica{scaling}"
                   + limits_text(replace(run, router_max_queued_requests=None,
                                         router_rate_limit=None), fp.pool))
        out += [f"    {line}" for line in [*_rules(fp.pool, fp.model),
                                              *pool_log_lines(fp.pool)]]
    return out


def _rules(pool: Pool, model) -> list[str]:
    """``preset rule: …``: the preset's rules that apply to ``pool`` running ``model``
    (:func:`~capsim.scenario.preset_rules.applied_rule_lines`), for ``capsim validate``."""
    return [f"preset rule: {line}" for line in applied_rule_lines(pool, model)]

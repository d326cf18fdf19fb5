"""The engine preset's own rules, said where a user looks: one short line per rule that
applies to a resolved pool (``capsim validate``, ``capsim run``), and each rule of a preset
with its source (``capsim engines PRESET``).

The rules are those that change a run's numbers without a knob of the scenario's saying so:
TensorRT-LLM's batch waiting, SGLang's fused all-reduce + RMSNorm (``all_reduce_fusion``),
its untuned block-fp8 GEMM on gfx942 (``untuned_fp8_gemm``) and its eager decode above the
captured CUDA graphs (``host_overhead.eager_decode_above_graph_bs``). A line is printed only
where the rule applies as the pricer and the scheduler apply it.

Public API:
    applied_rule_lines(pool, model) -> list[str]     a pool's lines
    run_rule_lines(run) -> list[str]                 a variant's (per pool when split / pooled)
    engine_rule_lines(runs, names) -> list[str]      those of some variants, each line once
    preset_rules(preset) -> list[PresetRule]         every rule a preset carries, with sources
    fusion_applies(engine, preset, model, hw) -> bool
"""

from __future__ import annotations

from dataclasses import dataclass

from capsim.profiles.engines import EnginePreset
from capsim.profiles.hardware import HardwareProfile
from capsim.profiles.models import ModelShape
from capsim.scenario.run_config import Pool, RunConfig
from capsim.scenario.schema import EngineConfig

#: The source keys of the batch-waiting knobs in a TensorRT-LLM preset's ``sources:``.
_WAIT_KEYS = ("scheduler.knobs.batch_wait_timeout_iters",
              "scheduler.knobs.batch_wait_max_tokens_ratio")


@dataclass(frozen=True)
class PresetRule:
    """One rule of an engine preset: its YAML key, what it does, its ``sources:`` entry
    ("" where the preset file gives none: a user's own file may leave sources out)."""

    key: str
    text: str
    source: str


def fusion_applies(engine: EngineConfig, preset: EnginePreset, model: ModelShape,
                   hw: HardwareProfile) -> bool:
    """Whether the preset's ``all_reduce_fusion`` applies to this pool as the pricer applies
    it (:meth:`capsim.cost.pricer.StepPricer._communication`): TP >= 2, the model type and
    GPU named, no DP attention, the TP group on one node."""
    fusion = preset.all_reduce_fusion
    return fusion is not None and fusion.applies_to(model, hw, engine.tensor_parallel_size,
                                                    engine.enable_dp_attention)


def _graph_limit(preset: EnginePreset) -> tuple[str, str]:
    """(name, where capsim reads it) of the largest decode batch a preset replays a CUDA
    graph for: SGLang's ``cuda_graph_max_bs`` (its memory rule's table), else vLLM V1's
    largest capture size (:attr:`capsim.scenario.run_config.Pool.decode_graph_max_seqs`)."""
    if preset.memory.static_fraction is not None:
        return "cuda_graph_max_bs", "memory.static_fraction's table, per DP rank"
    return "the largest CUDA-graph capture size", "memory.cudagraph_capture"


def batch_waiting(engine: EngineConfig) -> bool:
    """Whether a TensorRT-LLM scheduler holds new contexts back
    (:class:`capsim.engine.scheduler.trtllm.InflightBatching`): both knobs above 0 (with
    ``batch_wait_timeout_iters`` 0 or the ratio 0 the contexts never wait), no attention DP."""
    return (engine.scheduler == "trtllm" and not engine.enable_dp_attention
            and bool(engine.batch_wait_timeout_iters)
            and bool(engine.batch_wait_max_tokens_ratio))


def applied_rule_lines(pool: Pool, model: ModelShape) -> list[str]:
    """One short line per preset rule that applies to ``pool`` running ``model``, e.g.
    ``all-reduce + RMSNorm fused up to 2,048 tokens (FlashInfer; sglang-0.5 on b200)``;
    empty where none does."""
    eng, preset, hw = pool.engine, pool.preset, pool.hardware
    on = f"{preset.name} on {hw.name}"
    out = []
    if batch_waiting(eng):
        tokens = eng.batch_wait_max_tokens_ratio * eng.max_num_batched_tokens
        out.append(f"batch waiting: new prompts wait up to {eng.batch_wait_timeout_iters} "
                   f"iterations or {tokens:,.0f} tokens ({eng.batch_wait_max_tokens_ratio:g} × "
                   f"max_num_tokens) while decoding ({preset.name})")
    fusion = preset.all_reduce_fusion
    if fusion is not None and fusion_applies(eng, preset, model, hw) \
            and eng.tensor_parallel_size in getattr(hw.all_reduce_tables.get(fusion.table),
                                                    "latency_us", {}):
        out.append(f"all-reduce + RMSNorm fused up to {fusion.max_tokens:,} tokens "
                   f"(FlashInfer, table {fusion.table}; {on})")
    untuned = pool.pricer(model).untuned_fp8_gemm
    if untuned is not None:
        out.append(f"untuned block-fp8 GEMM (aiter's Triton): >= {untuned.k_step_s * 1e6:g} µs "
                   f"per {untuned.block_k}-wide K step in {', '.join(untuned.matmuls)} ({on})")
    graph_seqs = pool.decode_graph_max_seqs
    if graph_seqs is not None and eng.max_num_seqs > graph_seqs:
        limit = _graph_limit(preset)[0]
        out.append(f"decode batches above {graph_seqs:,} sequences run eagerly ({limit}; {on})")
    return out


def run_rule_lines(run: RunConfig) -> list[str]:
    """:func:`applied_rule_lines` of a variant: its pool's, or each pool's prefixed with its
    name (a pooled fleet) or role (a split)."""
    if run.fleet is not None:
        return [f"{fp.name}: {line}" for fp in run.fleet.pools
                for line in applied_rule_lines(fp.pool, fp.model)]
    if not run.disaggregated:
        return applied_rule_lines(run.pool(), run.model)
    return [f"{p.role}: {line}" for p in run.pools for line in applied_rule_lines(p, run.model)]


def preset_rules(preset: EnginePreset) -> list[PresetRule]:
    """The rules ``preset`` carries beyond its table row in ``capsim engines`` (its
    all-reduce, fusions, kernel rules, graphs, batch waiting), each with its source."""
    src = preset.sources
    out = []

    def add(key: str, text: str, *source_keys: str) -> None:
        found = [src[k] for k in (key, *source_keys) if k in src]
        out.append(PresetRule(key, text, found[0] if found else ""))

    _all_reduce_rules(preset, add)
    _kernel_rules(preset, add)
    h = preset.host_overhead
    if h.eager_decode_above_graph_bs:
        limit = "{} ({})".format(*_graph_limit(preset))
        add("host_overhead.eager_decode_above_graph_bs",
            f"decode batches above {limit} run eagerly, at the eager-launch floor "
            f"({(h.eager_decode_op_s or h.eager_prefill_op_s) * 1e6:g} µs per operator)",
            "host_overhead.eager_decode_op_s")
    if "batch_wait_timeout_iters" in preset.scheduler.knobs or preset.scheduler.policy == "trtllm":
        iters = preset.scheduler.knobs.get("batch_wait_timeout_iters", 0)
        ratio = preset.scheduler.knobs.get("batch_wait_max_tokens_ratio", 0)
        state = (f"on: up to {iters} iterations or {ratio:g} × max_num_tokens" if iters and ratio
                 else "off (both 0); on with both above 0 in engine:")
        add(_WAIT_KEYS[0], f"batch waiting (batch_wait_timeout_iters / "
                           f"batch_wait_max_tokens_ratio): {state}", *_WAIT_KEYS[1:])
    return out


def _all_reduce_rules(preset: EnginePreset, add) -> None:
    """The preset's TP all-reduce and its fused all-reduce + RMSNorm, for :func:`preset_rules`."""
    ar = preset.tp_all_reduce
    what = {"nccl_ring": "NCCL's ring",
            "custom": f"the engine's custom one-shot / two-shot kernel at TP "
                      f"{'/'.join(map(str, ar.world_sizes))} below "
                      f"{(ar.max_bytes or 0) / 2**20:g} MiB, NCCL above",
            "table": f"the GPU profile's measured table {ar.table}"}[ar.algorithm]
    add("tp_all_reduce", f"TP all-reduces run {what}")
    f = preset.all_reduce_fusion
    if f is not None:
        add("all_reduce_fusion",
            f"all-reduce + RMSNorm fused (FlashInfer) up to {f.max_tokens:,} tokens for "
            f"{'/'.join(f.model_types)} on {'/'.join(f.hardware)} (TP >= 2, no DP attention, "
            f"one node), priced at the GPU profile's table {f.table}")
    s = preset.shared_experts_fusion
    if s is not None:
        add("shared_experts_fusion",
            f"shared expert fused into the routed experts for {'/'.join(s.model_types)} "
            f"({s.num_experts} routed, {s.num_shared_experts} shared) on "
            f"{'/'.join(s.platforms)}, not under expert parallelism")


def _kernel_rules(preset: EnginePreset, add) -> None:
    """The preset's per-GPU kernel rules and prefill graph, for :func:`preset_rules`."""
    u = preset.untuned_fp8_gemm
    if u is not None:
        add("untuned_fp8_gemm",
            f"block-fp8 linears ({', '.join(u.matmuls)}) on aiter's untuned Triton GEMM on "
            f"{'/'.join(u.hardware)}: at least {u.k_step_s * 1e6:g} µs per {u.block_k}-wide "
            f"K step, {u.block_m} × {u.block_n} tiles")
    d = preset.absorbed_bmm_dequant
    if d is not None:
        add("absorbed_bmm_dequant",
            f"MLA decode rewrites its fp8 w_kc / w_vc to bf16 ({d.passes} passes a step) on "
            f"{'/'.join(d.hardware)}")
    g = preset.piecewise_cuda_graph
    if g is not None:
        add("piecewise_cuda_graph",
            f"prefill in piecewise CUDA graphs on {'/'.join(g.platforms)} (MLA models up to "
            f"{g.mla_max_tokens:,} tokens), the eager floor above")


def engine_rule_lines(runs: list[RunConfig], names: list[str]) -> list[str]:
    """The rule lines of the variants ``names`` (one engine's, under ``capsim run``'s
    ``engine …:`` line), each once, ending ``: v1, v2`` where it applies to some of them
    only."""
    by_line: dict[str, list[str]] = {}
    for run in runs:
        if run.variant in names:
            for line in run_rule_lines(run):
                by_line.setdefault(line, []).append(run.variant)
    return [line if len(who) == len(names) else f"{line}: {', '.join(who)}"
            for line, who in by_line.items()]

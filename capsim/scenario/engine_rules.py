"""The engine a variant runs: its preset loaded, the knobs merged and defaulted, the
engine's own rules checked.

The variant's ``engine:`` knobs go over the scenario's, over the preset's defaults on
the GPU (:meth:`~capsim.profiles.engines.EnginePreset.defaults_for`) and, for a preset that
picks its batch limits from the dataset, over those (:mod:`capsim.scenario.bench_settings`),
then :meth:`EngineConfig.resolved` fills the model-dependent ones. A knob of another engine,
or a combination the engine refuses at start-up, is one error naming where the knob
was given (the variant's field, else the scenario's).

Public API:
    resolve_engine(base, override, model, hw, path, where, workload) -> (EngineConfig, EnginePreset)
    check_engine_knobs(engine, preset, user, path, where, variant_keys)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from capsim.common.errors import ScenarioError
from capsim.profiles.engines import EnginePreset, engine_preset_names, load_engine_preset
from capsim.profiles.hardware import HardwareProfile
from capsim.profiles.models import ModelShape
from capsim.profiles.moe_runners import ARCH_FAMILY, CUDA_ONLY, MOE_RUNNERS, moe_runner_error
from capsim.profiles.policies import RECV_SKIPPER_KNOBS, knob_policies, policy_capabilities
from capsim.profiles.weight_layout import weight_layout
from capsim.scenario.bench_settings import tuned_knobs
from capsim.scenario.preset_names import check_user_preset_names
from capsim.scenario.preset_rules import fusion_applies
from capsim.scenario.profile_loading import check_preset_knobs, load_engine_preset_at, named
from capsim.scenario.schema import EngineConfig
from capsim.scenario.speculative import SERIAL_DRAFTERS
from capsim.scenario.validation import merged
from capsim.scenario.workload import WorkloadConfig

log = logging.getLogger(__name__)

GIB = 2**30


def resolve_engine(base: EngineConfig, override: dict[str, Any], model: ModelShape,
                   hw: HardwareProfile, path: Path, where: str,
                   workload: WorkloadConfig) -> tuple[EngineConfig, EnginePreset]:
    """The variant's engine knobs over the scenario's over the preset's defaults on ``hw``
    (and the batch limits a ``dataset_tuning`` preset picks for ``workload``), resolved
    (:meth:`EngineConfig.resolved`), and the preset.

    Raises:
        ScenarioError: an unknown preset, a knob of another engine or a combination the
            engine refuses (:func:`check_engine_knobs`), naming where it was given.
    """
    user = {**base.model_dump(exclude_unset=True), **override}
    name = user.get("preset", "vllm-v1")
    at = f"{where}.engine" if where and "preset" in override else "engine"
    preset = named(lambda n: load_engine_preset_at(n, path), name, path, f"{at}.preset")
    check_preset_knobs(preset, name, path, f"{at}.preset")
    check_user_preset_names(name, preset, path, hw)
    if hw.platform not in preset.platforms:
        raise ScenarioError(f"engine preset '{preset.name}' ({preset.display_name}) runs on "
                            f"{' / '.join(preset.platforms)} GPUs only; hardware '{hw.name}' "
                            f"is a {hw.platform} GPU (valid: a {' / '.join(preset.platforms)} "
                            f"GPU, or another engine preset)", file=str(path),
                            path=f"{at}.preset")
    knobs = {k: v for k, v in user.items() if k != "preset"}
    defaults = preset.defaults_for(hw.name, hw.memory_total_bytes / GIB, knobs)
    scheduler_knobs = {k: v for k, v in preset.scheduler.knobs.items()
                       if k in EngineConfig.model_fields}
    engine = merged(EngineConfig, EngineConfig(), {**scheduler_knobs, **defaults, **user}, path,
                    where, "engine", user_keys=set(override))
    if preset.dataset_tuning is not None:
        tuned = tuned_knobs(preset, engine, model, hw, workload, set(knobs), path,
                            f"{at}.preset")
        engine = merged(EngineConfig, EngineConfig(),
                        {**scheduler_knobs, **defaults, **tuned, **user}, path, where,
                        "engine", user_keys=set(override))
    engine = _default_static_fraction(engine, preset, hw, model, set(user))
    check_engine_knobs(engine, preset, set(user), path, where, set(override))
    _warn_batch_waiting_idle(engine, set(user), path, where, set(override))
    check_class_priorities(engine, workload, path, preset)
    _check_marlin_platform(engine, model, hw, path, where, override)
    _check_runner_format(engine, preset, model, hw, path, where, override)
    _check_fusion_model(engine, preset, model, path, where, override)
    _warn_fusion_off_anyway(engine, preset, model, hw, path, where, override)
    _warn_tables(engine, preset, model, hw, path)
    if engine.enable_prefix_caching and _no_prefix_cache(engine):
        # a default the scenario did not give (vLLM V1's, the schema's) does not apply
        engine = engine.model_copy(update={"enable_prefix_caching": False})
    engine = _resolved(engine, model, set(knobs), user, override, path, where)
    _check_tgi_prefill_budget(engine, user, override, path, where)
    return engine, preset


def _expert_format(model: ModelShape, engine: EngineConfig) -> str:
    """The routed experts' weight format (``""`` for a format the later checks refuse at its
    field, so that this look-up does not refuse it first without one)."""
    try:
        return weight_layout(model, engine.weight_format).experts.name
    except ScenarioError:
        return ""


def _default_static_fraction(engine: EngineConfig, preset: EnginePreset, hw: HardwareProfile,
                             model: ModelShape, user: set[str]) -> EngineConfig:
    """SGLang's default ``mem_fraction_static`` (the preset's ``memory.static_fraction`` or
    ``static_fraction_tiers``) where the scenario leaves it unset: from the GPU's memory, the
    prefill chunk (``max_num_batched_tokens``), TP, PP, the DP attention ranks, the drafter
    and, from SGLang 0.5.10, the piecewise prefill graph's reserve where the graph is on."""
    rule = preset.memory.fraction_rule
    if rule is None or "mem_fraction_static" in user:
        return engine
    tp = engine.tensor_parallel_size
    ranks = (engine.data_parallel_size or tp) if engine.enable_dp_attention else 0
    drafter = engine.speculative.method if engine.speculative is not None else None
    graph, graph_mib = preset.piecewise_cuda_graph, 0.0
    if graph is not None and engine.pipeline_parallel_size == 1:   # PP turns it off
        graph_mib = graph.reserve_mib(model, hw.name, hw.platform, _expert_format(model, engine),
                                      engine.enable_dp_attention, engine.max_num_batched_tokens)
    fraction = rule.fraction(hw.memory_total_bytes / 2**20, engine.max_num_batched_tokens, tp,
                             engine.pipeline_parallel_size, ranks, drafter, graph_mib)
    return engine.model_copy(update={"mem_fraction_static": fraction})


def _check_fusion_model(engine: EngineConfig, preset: EnginePreset, model: ModelShape,
                        path: Path, where: str, override: dict[str, Any]) -> None:
    """``disable_shared_experts_fusion`` on a model whose shared expert SGLang never fuses
    (another architecture, or no shared expert): the knob would change nothing."""
    rule = preset.shared_experts_fusion
    if not engine.disable_shared_experts_fusion or rule is None or rule.fits(model):
        return
    at = f"{where}.engine.disable_shared_experts_fusion" \
        if where and "disable_shared_experts_fusion" in override \
        else "engine.disable_shared_experts_fusion"
    raise ScenarioError(
        f"SGLang fuses the shared expert of {', '.join(rule.model_types)} models with "
        f"{rule.num_experts} routed experts and {rule.num_shared_experts} shared only; model "
        f"'{model.name}' has none it would fuse, so the knob changes nothing (valid: false)",
        file=str(path), path=at)


def _table_gap(hw: HardwareProfile, name: str, tp: int) -> str | None:
    """Why ``hw`` cannot price TP ``tp`` from its all-reduce table ``name``, as the end of a
    warning sentence (None: the table has that row)."""
    table = hw.all_reduce_tables.get(name)
    if table is not None and tp in table.latency_us:
        return None
    if table is not None:
        return f"has no row for TP {tp} (rows: {', '.join(map(str, table.latency_us))})"
    has = ", ".join(hw.all_reduce_tables) or "none"
    return f"is not in {hw.name}'s all_reduce_tables (it has: {has})"


def _warn_tables(engine: EngineConfig, preset: EnginePreset, model: ModelShape,
                 hw: HardwareProfile, path: Path) -> None:
    """The measured all-reduce tables the preset names that the GPU profile lacks
    (:func:`_warn_all_reduce_table`, :func:`_warn_fusion_table`)."""
    _warn_all_reduce_table(engine, preset, hw, path)
    _warn_fusion_table(engine, preset, model, hw, path)


def _warn_all_reduce_table(engine: EngineConfig, preset: EnginePreset, hw: HardwareProfile,
                           path: Path) -> None:
    """A preset that runs a measured all-reduce table (``tp_all_reduce: {algorithm: table}``)
    at TP >= 2 on a GPU profile without that table, or without its TP row: NCCL's ring is
    priced instead (a slower collective than the engine runs), which a shipped GPU's trust
    line says; a GPU or preset file of the user's own, or a misspelt table name, is said
    here."""
    ar, tp = preset.tp_all_reduce, engine.tensor_parallel_size
    if ar.algorithm != "table" or tp < 2:
        return
    what = _table_gap(hw, ar.table, tp)
    if what is None:
        return
    log.warning("%s: engine.preset: engine preset '%s' runs the all-reduce table '%s', which %s; "
                "NCCL's ring is priced instead", path, preset.name, ar.table, what)


def _warn_fusion_table(engine: EngineConfig, preset: EnginePreset, model: ModelShape,
                       hw: HardwareProfile, path: Path) -> None:
    """A preset whose ``all_reduce_fusion`` applies here (its model type and GPU, TP >= 2, no
    DP attention, one node) naming a table the GPU profile lacks, or lacks the TP row of:
    the engine's own all-reduce is priced instead (:meth:`Communication.fused_pieces`), so a
    misspelt ``table`` would otherwise change the numbers without a word, as
    ``tp_all_reduce.table`` would (:func:`_warn_all_reduce_table`)."""
    fusion = preset.all_reduce_fusion
    if fusion is None or not fusion_applies(engine, preset, model, hw):
        return
    what = _table_gap(hw, fusion.table, engine.tensor_parallel_size)
    if what is None:
        return
    log.warning("%s: engine.preset: engine preset '%s' fuses the all-reduce at the table '%s' "
                "(all_reduce_fusion.table), which %s; the unfused all-reduce is priced instead",
                path, preset.name, fusion.table, what)


def _warn_fusion_off_anyway(engine: EngineConfig, preset: EnginePreset, model: ModelShape,
                            hw: HardwareProfile, path: Path, where: str,
                            override: dict[str, Any]) -> None:
    """``disable_shared_experts_fusion: true`` where SGLang does not fuse anyway (expert
    parallelism, another platform, a MoE runner that cannot fuse): SGLang accepts the flag
    and logs why fusion is off (determine_num_fused_shared_experts, the preset's sources),
    so capsim warns that the knob changes nothing."""
    rule = preset.shared_experts_fusion
    if not engine.disable_shared_experts_fusion or rule is None or not rule.fits(model):
        return
    ep = engine.enable_expert_parallel
    experts = weight_layout(model, engine.quantization).experts.name
    if rule.applies(model, hw.name, hw.platform, experts, ep):
        return
    at = f"{where}.engine.disable_shared_experts_fusion" \
        if where and "disable_shared_experts_fusion" in override \
        else "engine.disable_shared_experts_fusion"
    who = f"engine preset '{preset.name}'"
    why = (f"SGLang ({who}) does not fuse the shared expert under expert parallelism on "
           f"CUDA" if ep and hw.platform == "cuda"
           else f"capsim does not model SGLang's fusion under expert parallelism on ROCm "
                f"({who})" if ep
           else f"SGLang ({who}) does not fuse the shared expert on {hw.platform}"
           if hw.platform not in rule.platforms
           else f"SGLang ({who}) picks a MoE runner that cannot fuse on {hw.name} with "
                f"{experts} experts")
    log.warning("%s: %s: %s, so disable_shared_experts_fusion: true changes nothing here",
                path, at, why)


_WAIT_KNOBS = ("batch_wait_timeout_iters", "batch_wait_max_tokens_ratio")


def _warn_batch_waiting_idle(engine: EngineConfig, user: set[str], path: Path, where: str,
                             variant_keys: set[str]) -> None:
    """TensorRT-LLM batch waiting the scenario asked for that never holds a prompt back:
    one knob above 0 with the other 0 (the executor stops waiting once either limit is
    reached, and a 0 limit is reached at once), or either under attention DP, which skips
    the waiting (``_schedule`` / ``_waiting_requests`` in
    tensorrt_llm/_torch/pyexecutor/py_executor.py at
    0004396720054fd8e205cbf616f21f0b57c6b412). TensorRT-LLM starts either way; capsim warns
    so that the knob is not taken to have changed the numbers."""
    given = [k for k in _WAIT_KNOBS if k in user and getattr(engine, k)]
    if engine.scheduler != "trtllm" or not given:
        return
    key = given[0]
    at = f"{where}.engine.{key}" if where and key in variant_keys else f"engine.{key}"
    iters, ratio = engine.batch_wait_timeout_iters or 0, engine.batch_wait_max_tokens_ratio or 0
    if engine.enable_dp_attention:
        why = ("TensorRT-LLM skips batch waiting under attention DP (enable_dp_attention: "
               "true), so it changes nothing here")
    elif not (iters and ratio):
        why = (f"batch_wait_timeout_iters {iters} with batch_wait_max_tokens_ratio {ratio:g} "
               f"never holds a prompt back: TensorRT-LLM stops waiting once either limit is "
               f"reached, and a 0 limit is reached at once (valid: both above 0, e.g. 40 and "
               f"0.8, or both 0)")
    else:
        return
    log.warning("%s: %s: %s", path, at, why)


def _check_marlin_platform(engine: EngineConfig, model: ModelShape, hw: HardwareProfile,
                           path: Path, where: str, override: dict[str, Any]) -> None:
    """``moe_backend: marlin`` needs a CUDA GPU for a MoE model."""
    if engine.moe_backend == "marlin" and hw.platform != "cuda" and model.is_moe:
        # vLLM's Marlin MoE kernels are CUDA-only: MarlinExpertsBase._supports_current_device
        # is is_cuda() and capability >= 8.0 (vllm/model_executor/layers/fused_moe/
        # fused_marlin_moe.py at 00a130a0), so the MoE layer of --moe-backend marlin fails
        # to build on ROCm (oracle/mxfp4.py select_mxfp4_moe_backend raises).
        at = f"{where}.engine.moe_backend" if where and "moe_backend" in override \
            else "engine.moe_backend"
        raise ScenarioError(
            f"vLLM's Marlin MoE kernels run on NVIDIA GPUs only (CUDA, compute capability "
            f">= 8.0); hardware '{hw.name}' runs {hw.platform} (valid: auto)",
            file=str(path), path=at)


def _check_runner_format(engine: EngineConfig, preset: EnginePreset, model: ModelShape,
                         hw: HardwareProfile, path: Path, where: str,
                         override: dict[str, Any]) -> None:
    """A named MoE runner must run the model's expert format, and a CUDA-only one an NVIDIA
    GPU (:data:`~capsim.profiles.moe_runners.CUDA_ONLY`); one the GPU profile has not
    measured for that format is priced with the generic fused-MoE entries (warned)."""
    if engine.moe_backend in ("auto", "marlin") or not model.is_moe:
        return
    experts = weight_layout(model, engine.quantization).experts.name
    why = moe_runner_error(preset.engine, engine.moe_backend, experts)
    at = f"{where}.engine.moe_backend" if where and "moe_backend" in override \
        else "engine.moe_backend"
    if why:
        raise ScenarioError(why, file=str(path), path=at)
    if engine.moe_backend in CUDA_ONLY and hw.platform != "cuda":
        valid = [r for r in MOE_RUNNERS[preset.engine] if r not in CUDA_ONLY and r != "marlin"]
        raise ScenarioError(
            f"moe_backend {engine.moe_backend} runs {CUDA_ONLY[engine.moe_backend]}, built for "
            f"NVIDIA GPUs (CUDA) only; hardware '{hw.name}' runs {hw.platform} "
            f"(valid: {', '.join(valid)})",
            file=str(path), path=at)
    _check_runner_arch(engine.moe_backend, preset, hw, path, at)
    if hw.efficiency.runner_curve(engine.moe_backend, experts) is None:
        log.warning("%s: %s: hardware '%s' has no measured %s curve for %s experts "
                    "(efficiency.fused_moe_runners); they are priced as under auto",
                    path, at, hw.name, engine.moe_backend, experts)


def _check_runner_arch(runner: str, preset: EnginePreset, hw: HardwareProfile, path: Path,
                       at: str) -> None:
    """A runner the engine builds for one GPU architecture family only
    (:data:`~capsim.profiles.moe_runners.ARCH_FAMILY`) on a GPU whose profile names another
    compute capability; a profile that names none is not checked (the curve warning says
    the rest)."""
    family = ARCH_FAMILY.get((preset.engine, runner))
    cc = hw.compute_capability
    if family is None or cc is None or int(cc.split(".")[0]) == family[0]:
        return
    valid = [r for r in MOE_RUNNERS[preset.engine] if (preset.engine, r) not in ARCH_FAMILY]
    raise ScenarioError(
        f"moe_backend {runner} runs {CUDA_ONLY.get(runner, runner)}, which {preset.display_name} "
        f"runs on {family[1]} GPUs only (it refuses them at start-up elsewhere); hardware "
        f"'{hw.name}' has compute capability {cc} (valid: {', '.join(valid)}, or a "
        f"compute capability {family[0]}.x GPU)", file=str(path), path=at)


def _resolved(engine: EngineConfig, model: ModelShape, knobs: set[str], user: dict[str, Any],
              override: dict[str, Any], path: Path, where: str) -> EngineConfig:
    """:meth:`EngineConfig.resolved`; its error names where the knob it is about was given."""
    try:
        return engine.resolved(model, knobs)
    except ValueError as exc:
        # The message starts with the knob it is about; name where that knob was given.
        key = str(exc).split(" ", 1)[0]
        if where and key in override:
            at = f"{where}.engine.{key}"
        elif key in user:
            at = f"engine.{key}"
        else:
            at = f"{where}.engine" if override else "engine"
        raise ScenarioError(str(exc), file=str(path), path=at) from None


def _check_tgi_prefill_budget(engine: EngineConfig, user: dict[str, Any],
                              override: dict[str, Any], path: Path, where: str) -> None:
    """TGI's prefill budget must hold one whole prompt of ``max_model_len - 1`` tokens."""
    if engine.scheduler == "tgi" and engine.max_num_batched_tokens < engine.max_model_len - 1:
        # TGI's launcher (launcher/src/main.rs at v2.1.0): max_batch_prefill_tokens must be
        # >= max_input_tokens, which defaults to max_total_tokens - 1.
        key = "max_num_batched_tokens" if "max_num_batched_tokens" in user else "max_model_len"
        at = f"{where}.engine.{key}" if where and key in override else f"engine.{key}"
        raise ScenarioError(
            f"TGI refuses to start with max_num_batched_tokens (its max_batch_prefill_tokens) "
            f"{engine.max_num_batched_tokens:,} below max_input_tokens = max_model_len - 1 = "
            f"{engine.max_model_len - 1:,}: raise max_num_batched_tokens or lower max_model_len",
            file=str(path), path=at)


@dataclass(frozen=True)
class _Given:
    """Where a variant's engine knobs were given, to name it in an error.

    Attributes:
        path: the scenario file.
        where: ``variants.<i>`` ("" when the file has no variants).
        user: the knobs the scenario's or the variant's ``engine:`` gave.
        variant_keys: the knobs the variant's ``engine:`` gave.
    """

    path: Path
    where: str
    user: set[str]
    variant_keys: set[str]

    def fail(self, key: str, message: str) -> NoReturn:
        """Raise ``message`` at the variant's field when the variant set ``key``; when the
        scenario's ``engine:`` set it and the variant chose the preset, at the variant's
        preset, saying which scenario-wide knob conflicts; else at the scenario's field.

        Raises:
            ScenarioError: always.
        """
        where, variant_keys = self.where, self.variant_keys
        if where and key in variant_keys:
            at = f"{where}.engine.{key}"
        elif where and "preset" in variant_keys:
            at = f"{where}.engine.preset"
            message += f" (engine.{key} is set for the whole scenario: move it into the " \
                       "variants that need it)"
        else:
            at = f"engine.{key}"
        raise ScenarioError(message, file=str(self.path), path=at)


def check_engine_knobs(engine: EngineConfig, preset: EnginePreset, user: set[str], path: Path,
                       where: str, variant_keys: set[str]) -> None:
    """Engine-specific knobs only with their engine; contradictory combinations refused.

    ``user``: the knobs the scenario or the variant gave; ``variant_keys``: those the
    variant gave. The error names the variant's field when the variant set it; when the
    scenario's ``engine:`` set it and the variant chose the preset, it names the variant's
    preset and says which scenario-wide knob conflicts (:meth:`_Given.fail`).

    Raises:
        ScenarioError: the first rule broken, in :data:`_KNOB_CHECKS` order.
    """
    given = _Given(path, where, user, variant_keys)
    for check in _KNOB_CHECKS:
        check(engine, preset, given)


def _check_scheduler(engine: EngineConfig, preset: EnginePreset, given: _Given) -> None:
    policies = _preset_policies(preset)
    if engine.scheduler not in policies:
        given.fail("scheduler", f"engine preset '{preset.name}' runs scheduler "
                                f"{preset.scheduler.policy}, not {engine.scheduler} "
                                f"(valid: {', '.join(policies)})")


def _check_memory_fraction(engine: EngineConfig, preset: EnginePreset, given: _Given) -> None:
    """Each engine names its memory fraction its own way; only the preset's applies."""
    fraction = preset.memory.fraction_knob
    for knob in ("gpu_memory_utilization", "mem_fraction_static", "free_gpu_memory_fraction",
                 "cuda_memory_fraction"):
        if knob in given.user and knob != fraction:
            given.fail(knob, f"{knob} is not a knob of engine preset '{preset.name}', which "
                             f"sizes its KV cache with {fraction}")


#: Engine knobs that belong to one scheduling policy (the policy table's ``knobs``).
_POLICY_KNOBS = knob_policies()


def _check_policy_knobs(engine: EngineConfig, preset: EnginePreset, given: _Given) -> None:
    for knob, policy in _POLICY_KNOBS.items():
        if knob in given.user and engine.scheduler != policy:
            given.fail(knob, f"{knob} belongs to the {policy} scheduler; this engine runs "
                             f"scheduler: {engine.scheduler}")


def _check_recv_interval(engine: EngineConfig, preset: EnginePreset, given: _Given) -> None:
    """``scheduler_recv_interval`` above 1 only where the preset carries SGLang's recv
    skipper (its ``scheduler.knobs`` weights) and without DP attention, which SGLang's
    ``SchedulerRecvSkipper`` refuses (it asserts ``not enable_dp_attention``)."""
    interval = engine.scheduler_recv_interval
    if interval is None or interval <= 1 or engine.scheduler != "sglang":
        return
    if RECV_SKIPPER_KNOBS[0] not in preset.scheduler.knobs:
        valid = [n for n in engine_preset_names()
                 if RECV_SKIPPER_KNOBS[0] in load_engine_preset(n).scheduler.knobs]
        given.fail("scheduler_recv_interval",
                   f"engine preset '{preset.name}' has no --scheduler-recv-interval (SGLang's "
                   f"recv skipper); valid: 1, or a preset that has it: {', '.join(valid)}")
    if engine.enable_dp_attention:
        given.fail("scheduler_recv_interval",
                   "SGLang's recv skipper does not run with DP attention "
                   "(enable_dp_attention: true); valid: 1")


def _check_async_scheduling(engine: EngineConfig, preset: EnginePreset, given: _Given) -> None:
    """``async_scheduling`` only where the preset has the knob, and not with a drafter
    vLLM runs serially."""
    if engine.async_scheduling is not None and not preset.host_overhead.async_scheduling_knob:
        valid = [n for n in engine_preset_names()
                 if load_engine_preset(n).host_overhead.async_scheduling_knob]
        given.fail("async_scheduling", f"engine preset '{preset.name}' has no async_scheduling "
                                       f"knob (its host work is {preset.host_overhead.overlap} "
                                       f"with the GPU step; valid with: {', '.join(valid)})")
    if engine.async_scheduling and engine.speculative is not None \
            and engine.speculative.method in SERIAL_DRAFTERS:
        given.fail("async_scheduling", f"vLLM schedules asynchronously with EAGLE / MTP "
                                       f"drafters only, not {engine.speculative.method} "
                                       "(vllm/config/vllm.py); valid: false, or leave it unset")


def _check_moe_backend(engine: EngineConfig, preset: EnginePreset, given: _Given) -> None:
    why = moe_runner_error(preset.engine, engine.moe_backend, None)
    if why:
        given.fail("moe_backend", f"engine preset '{preset.name}' runs {preset.engine}: {why}")


def _check_shared_fusion(engine: EngineConfig, preset: EnginePreset, given: _Given) -> None:
    if engine.disable_shared_experts_fusion and preset.shared_experts_fusion is None:
        given.fail("disable_shared_experts_fusion",
                   f"disable_shared_experts_fusion is SGLang's --disable-shared-experts-fusion; "
                   f"engine preset '{preset.name}' does not fuse shared experts (valid: false, "
                   f"or a preset with shared_experts_fusion such as sglang-0.5)")


def _check_spec_method(engine: EngineConfig, preset: EnginePreset, given: _Given) -> None:
    """A speculative method the engine version has and capsim models as it runs it (the
    preset's ``speculative_methods``)."""
    rule, spec = preset.speculative_methods, engine.speculative
    if rule is None or spec is None:
        return
    why = rule.refusal(spec.method)
    if why is not None:
        given.fail("speculative", f"method {spec.method} under engine preset "
                                  f"'{preset.name}' ({preset.display_name} "
                                  f"{preset.version}): {why}")


def _check_multi_step(engine: EngineConfig, preset: EnginePreset, given: _Given) -> None:
    """``num_scheduler_steps`` > 1: vLLM 0.6's multi-step scheduling, without chunking."""
    if engine.num_scheduler_steps <= 1:
        return
    if not preset.scheduler.knobs.get("multi_step_scheduling"):
        given.fail("num_scheduler_steps", f"engine preset '{preset.name}' has no multi-step "
                                          "scheduling (valid with: "
                                          f"{_presets_with_knob('multi_step_scheduling')})")
    if engine.chunked:
        given.fail("num_scheduler_steps", "multi-step scheduling runs without chunked prefill "
                                          "(vLLM 0.6 refuses both); set "
                                          "enable_chunked_prefill: false")


def _check_long_prefill(engine: EngineConfig, preset: EnginePreset, given: _Given) -> None:
    """``long_prefill_token_threshold``: vLLM V1's, with chunked prefill."""
    key = "long_prefill_token_threshold"
    if key not in given.user or engine.scheduler != "continuous":
        return
    if key not in preset.scheduler.knobs:
        given.fail(key, f"engine preset '{preset.name}' has no long_prefill_token_threshold "
                        f"(vLLM V1's; valid with: {_presets_with_knob(key)})")
    if not engine.chunked:
        given.fail(key, "it caps the prompt chunk a request gets per step: set "
                        "enable_chunked_prefill: true")


def _check_offload(engine: EngineConfig, preset: EnginePreset, given: _Given) -> None:
    """``kv_offloading_size``: vLLM V1's KV offloading, behind its paged prefix cache."""
    key = "kv_offloading_size"
    if engine.kv_offloading_size is None:
        return
    if not preset.scheduler.knobs.get("kv_offloading") or engine.scheduler != "continuous":
        given.fail(key, f"engine preset '{preset.name}' (scheduler {engine.scheduler}) has no "
                        f"KV offloading (vLLM V1's; valid with: "
                        f"{_presets_with_knob('kv_offloading')})")
    if engine.kv_allocator != "paged" or not engine.enable_prefix_caching:
        given.fail(key, "KV offloading keeps the prefix cache's evicted blocks: set "
                        "enable_prefix_caching: true and kv_allocator: paged")


def _check_priority(engine: EngineConfig, preset: EnginePreset, given: _Given) -> None:
    """``scheduling_policy: priority``: vLLM V1's, over its continuous batching."""
    if engine.scheduling_policy == "fcfs":
        return
    if not preset.scheduler.knobs.get("priority_scheduling") or engine.scheduler != "continuous" \
            or engine.kv_allocator != "paged":
        given.fail("scheduling_policy", f"engine preset '{preset.name}' (scheduler "
                                        f"{engine.scheduler}) has no priority scheduling "
                                        f"(vLLM V1's; valid with: "
                                        f"{_presets_with_knob('priority_scheduling')}; "
                                        "else fcfs)")


def check_class_priorities(engine: EngineConfig, workload: WorkloadConfig, path: Path,
                           preset: EnginePreset | None = None) -> None:
    """A class with a request priority other than 0 needs ``scheduling_policy: priority``
    (vLLM refuses such a request under fcfs: "Got priority ... but Priority scheduling is
    not enabled"); on a ``preset`` without priority scheduling the message does not offer it.

    Raises:
        ScenarioError: naming ``workload.classes.N.priority``.
    """
    if engine.scheduling_policy == "priority":
        return
    for i, c in enumerate(workload.classes or ()):
        if not c.priority:
            continue
        fix = "set engine.scheduling_policy: priority (or priority 0)"
        if preset is not None and not preset.scheduler.knobs.get("priority_scheduling"):
            fix = (f"engine preset '{preset.name}' has no priority scheduling (valid with: "
                   f"{_presets_with_knob('priority_scheduling')}); give priority 0")
        raise ScenarioError(f"class {c.name} has priority {c.priority}, but the engine "
                            f"schedules fcfs, which refuses a request priority; {fix}",
                            file=str(path), path=f"workload.classes.{i}.priority")


def _check_preemption(engine: EngineConfig, preset: EnginePreset, given: _Given) -> None:
    """Swap preemption: a policy that preempts, on a preset that swaps (vLLM V0)."""
    no_swap = policy_capabilities(engine.scheduler).no_swap
    if no_swap and engine.preemption_mode == "swap":
        given.fail("preemption_mode", f"scheduler {engine.scheduler} {no_swap}")
    if engine.preemption_mode == "swap" and not preset.scheduler.knobs.get("swap_preemption"):
        given.fail("preemption_mode", f"engine preset '{preset.name}' preempts by recompute "
                                      "only (swap to host memory: vLLM V0, presets "
                                      f"{_presets_with_knob('swap_preemption')})")


def _presets_with_knob(knob: str) -> str:
    """The shipped engine presets whose scheduler has ``knob`` (not set false), comma-separated."""
    return ", ".join(n for n in engine_preset_names()
                     if load_engine_preset(n).scheduler.knobs.get(knob, False) is not False)


def _check_chunking(engine: EngineConfig, preset: EnginePreset, given: _Given) -> None:
    reason = policy_capabilities(engine.scheduler).no_chunked_prefill
    if reason and engine.enable_chunked_prefill:
        given.fail("enable_chunked_prefill", reason)


def _check_kv_allocator(engine: EngineConfig, preset: EnginePreset, given: _Given) -> None:
    if engine.kv_allocator != "paged" and not policy_capabilities(engine.scheduler).contiguous_kv:
        given.fail("kv_allocator", f"scheduler {engine.scheduler} runs on its engine's paged "
                                   "KV cache; the contiguous layouts are vLLM-style baselines "
                                   "(valid: paged)")


def _check_prefix_cache(engine: EngineConfig, preset: EnginePreset, given: _Given) -> None:
    """``enable_prefix_caching: true`` given where the engine has no prefix cache; when
    the variant chose the cause and the scenario set the knob, the variant's cause."""
    reason = _no_prefix_cache(engine)
    if reason and engine.enable_prefix_caching and "enable_prefix_caching" in given.user:
        cause = "kv_allocator" if engine.kv_allocator != "paged" else "scheduler"
        keys = given.variant_keys
        if given.where and cause in keys and "enable_prefix_caching" not in keys:
            given.fail(cause, f"{reason}, and engine.enable_prefix_caching: true is set for "
                              "the whole scenario (move it into the variants that need it)")
        given.fail("enable_prefix_caching", f"{reason}; valid: false")


#: The rules of :func:`check_engine_knobs`, in the order an error is looked for.
_KNOB_CHECKS = (_check_scheduler, _check_memory_fraction, _check_policy_knobs,
                _check_recv_interval,
                _check_async_scheduling, _check_moe_backend, _check_shared_fusion,
                _check_spec_method,
                _check_multi_step,
                _check_long_prefill, _check_offload, _check_priority, _check_preemption,
                _check_chunking,
                _check_kv_allocator, _check_prefix_cache)


def _no_prefix_cache(engine: EngineConfig) -> str:
    """Why ``engine`` runs without a prefix cache whatever ``enable_prefix_caching`` says
    ('' when it can have one): TGI 2.1 had none (the v3 router's radix allocator and
    USE_PREFIX_CACHING came with TGI 2.3, huggingface/text-generation-inference 8deeaca and
    b70ae09); static batching and the contiguous layouts are baselines without one (the
    policy's reason: its row in :data:`capsim.profiles.policies.POLICY_TABLE`)."""
    reason = policy_capabilities(engine.scheduler).no_prefix_cache
    if reason:
        return reason
    if engine.kv_allocator != "paged":
        return (f"kv_allocator {engine.kv_allocator} has no prefix cache (it reuses paged "
                "blocks)")
    return ""


def _preset_policies(preset: EnginePreset) -> tuple[str, ...]:
    """The ``engine.scheduler`` values a preset can run: its own policy; a vLLM preset also
    static batching (the baseline it is compared with)."""
    own = preset.scheduler.policy
    return (own, "static") if own == "continuous" else (own,)

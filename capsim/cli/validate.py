"""``capsim validate``: check a scenario (schema, names, memory fit, trace, sweep
and sizing) without running it, and print what each variant resolved to."""

from __future__ import annotations

from pathlib import Path

import click

from capsim.common.errors import ScenarioError
from capsim.cli.common import build_traces, checkpoint_text, scenario_arg, set_option


@click.command(help="Check SCENARIO (schema, names, memory fit, trace file) without running it.")
@scenario_arg
@set_option
def validate(scenario: Path, overrides: tuple[str, ...]) -> None:
    from capsim.scenario.load import load, warnings_held
    from capsim.sim.simulate import rejections

    with warnings_held():             # a refusal below is one line, without the warnings
        loaded = load(scenario, list(overrides))
        traces = build_traces(loaded)
        # What capsim sweep and capsim size would refuse is refused here too.
        points = _check_sweep_and_sizing(loaded, list(overrides))
        rejected = [rejections(rc, traces.get(rc.workload, rc.seed)) for rc in loaded.runs]
        _refuse_all_rejected(loaded, traces, rejected)
    sizes = "/".join(f"{len(t):,}" for t in traces.traces.values())
    click.echo(f"{scenario}: ok — {sizes} requests, {len(loaded.runs)} variant(s)"
               + (f", {points} sweep point(s)" if points else ""))
    for rc, reasons in zip(loaded.runs, rejected):
        for line in _variant_lines(rc):
            click.echo(line)
        trace = traces.get(rc.workload, rc.seed)
        for count, example in reasons:
            click.echo(f"    warning: {count:,} of {len(trace):,} requests will be rejected, "
                       f"e.g. {example}")


def _variant_lines(rc) -> list[str]:
    """What a variant resolved to, indented: a pooled fleet's router and pools, a split's
    link and pools, or a co-located variant's GPUs, parallelism, weights and scheduler;
    each pool's start-up lines."""
    from capsim.scenario.describe import (engine_extras_text, fleet_lines, limits_text,
                                          pool_lines, pool_log_lines, replica_shape,
                                          router_text)
    from capsim.scenario.preset_rules import applied_rule_lines

    if rc.fleet is not None:      # pooled fleet: one line per pool
        return [f"  {line}" for line in fleet_lines(rc)]
    if rc.disaggregated:          # prefill and decode pools
        return [f"  {line}" for line in pool_lines(rc)]
    pool = rc.pool()
    eng = pool.engine
    weights = (f", {eng.weight_format} weights ({pool.matmul_dtype} matmuls)"
               if eng.weight_format and not rc.model.weight_formats else "")
    if rc.model.weight_formats:      # the checkpoint's formats by tensor group
        weights = f", checkpoint weights: {checkpoint_text(rc.model)}, the rest 16-bit"
    head = (f"  {rc.variant}: {pool.num_replicas} × {pool.hardware.name} "
            f"{replica_shape(eng)}{weights}, {eng.scheduler}"
            f"{' chunked' if eng.chunked else ''}, max_num_seqs {eng.max_num_seqs}, "
            f"max_num_batched_tokens {eng.max_num_batched_tokens}{engine_extras_text(pool)}"
            f"{limits_text(rc, pool)}{router_text(rc)}")
    rules = [f"preset rule: {line}" for line in applied_rule_lines(pool, rc.model)]
    logs = pool_log_lines(pool)     # the engine line first, its rules under it (as run)
    return [head, *(f"    {line}" for line in [*logs[:1], *rules, *logs[1:]])]


def _refuse_all_rejected(loaded, traces, rejected: list[list[tuple[int, str]]]) -> None:
    """A variant whose engine would reject every request of its trace is refused here, as
    ``capsim run`` refuses it after the run (:func:`capsim.cli.run._refuse_empty_variants`):
    the engine starts (vLLM takes any ``max_model_len`` up to the model's and checks each
    request's prompt + ``max_tokens`` against it, answering HTTP 400 — ``_validate_input``
    of ``vllm/entrypoints/openai/serving_engine.py``), but the variant would serve nothing.
    Some requests rejected stays a warning.

    Raises:
        ScenarioError: naming the first such variant (``variants.N`` where the file has
            variants), how many requests and one example reason.
    """
    for i, (rc, reasons) in enumerate(zip(loaded.runs, rejected)):
        total = len(traces.get(rc.workload, rc.seed))
        if total and sum(count for count, _ in reasons) == total:
            path = f"variants.{i}" if loaded.spec.variants else None
            raise ScenarioError(
                f"variant {rc.variant} would reject every request ({total:,} of {total:,}), "
                f"e.g. {reasons[0][1]}; it would complete none (capsim run exits 2)",
                file=str(loaded.path), path=path)


def _check_sweep_and_sizing(loaded, overrides: list[str]) -> int:
    """Every point of the ``sweep:`` grid loads (:func:`capsim.studies.sweep.plan`) and
    its fleets' work is within a run's (on the scenario's seed), every
    ``sizing.hardware`` names a GPU profile and ``sizing.disaggregation`` can be searched
    (:func:`~capsim.studies.split_options.check_disagg_sizing`); the number of sweep points
    (0: none).

    Raises:
        ScenarioError: as ``capsim sweep`` / ``capsim size`` would, naming the field.
    """
    from capsim.studies.fleet import check_hardware_names
    from capsim.studies.split_options import check_disagg_sizing
    from capsim.studies.sweep import check_work, plan
    from capsim.workload import TraceCache

    if loaded.spec.sizing is not None:
        check_hardware_names(loaded, loaded.spec.sizing.hardware)
        if loaded.spec.sizing.disaggregation is not None:
            check_disagg_sizing(loaded, loaded.spec.sizing.disaggregation)
    if not loaded.spec.sweep:
        return 0
    sweep = plan(loaded.path, overrides)
    check_work(sweep, [loaded.spec.seed], TraceCache(loaded.base_dir, str(loaded.path)))
    return len(sweep.points)

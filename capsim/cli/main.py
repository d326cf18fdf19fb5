"""The ``capsim`` command line: run | validate | hardware | roofline | compare | calibrate | ….

User mistakes (:class:`~capsim.common.errors.ScenarioError`) print one line on
stderr and exit with code 2, without a traceback. Warnings the layers below log on the
``capsim`` logger (a profile without sources, trace rows adjusted) print as
``warning: …`` on stderr, each once per command.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from capsim import __version__
from capsim.common.errors import ScenarioError
from capsim.common.labels import parallel_label
from capsim.profiles.trust import EDGES

if TYPE_CHECKING:                  # rich is imported by the commands that print with it
    from rich.console import Console


@contextmanager
def _as_option(option: str, field: str | None = None):
    """A ScenarioError raised inside names the CLI option the user typed, not the scenario
    field it stands for: ``field`` (``pipeline_parallel_size``) in the message becomes
    ``option`` (``--pp``); a message without it is prefixed ``--option: ``. An error inside
    a file the option names (a profile's field) keeps its file and path; one about the
    file itself (missing, not YAML) names the option before it."""
    try:
        yield
    except ScenarioError as exc:
        raise _option_error(exc, option, field) from None


def _option_error(exc: ScenarioError, option: str, field: str | None = None) -> ScenarioError:
    """``exc`` naming ``option`` (see :func:`_as_option`)."""
    if exc.file is not None:
        return ScenarioError(exc.message, file=f"{option} {exc.file}") if exc.path is None \
            else exc
    msg = exc.message
    if field and field in msg:
        return ScenarioError(msg.replace(field, option))
    return ScenarioError(msg if msg.startswith(option) else f"{option}: {msg}")


#: What a roofline error speaks of → the option that set it (the pricer's messages use the
#: scenario's names, shared with ``capsim run``).
_ROOFLINE_OPTIONS = (("pipeline_parallel_size", "--pp"), ("tensor_parallel_size", "--tp"),
                     ("expert parallel", "--ep"), ("data-parallel attention", "--dp-attention"),
                     ("quantization", "--quantization"), ("moe_routing_skew", "--routing-skew"))


def _console() -> Console:
    """A console as wide as the terminal, or as ``COLUMNS`` says; when output is piped
    without ``COLUMNS``, 200 columns (rich would assume 80 and fold every table)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal or "COLUMNS" in os.environ else Console(width=200)


class _WarningLines(logging.Handler):
    """``warning: MESSAGE`` on stderr for each distinct warning of the ``capsim`` logger (a
    profile loaded once per variant warns once)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text not in self.seen:
            self.seen.add(text)
            click.echo(f"warning: {text}", err=True)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``capsim`` console script and ``python -m capsim``."""
    logger, handler = logging.getLogger("capsim"), _WarningLines()
    logger.addHandler(handler)
    try:
        _main(argv)
    finally:
        logger.removeHandler(handler)


def _main(argv: list[str] | None) -> None:
    try:
        cli.main(args=argv, prog_name="capsim", standalone_mode=False)
    except ScenarioError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)   # one line, no usage block
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


@click.group(help="Capacity-planning simulator for LLM serving.")
@click.version_option(__version__, prog_name="capsim")
def cli() -> None:
    pass


def _scenario_arg(f):
    return click.argument("scenario", type=click.Path(dir_okay=False, path_type=Path))(f)


def _set_option(f):
    """``--set KEY=VALUE`` (repeatable); a mistake in a value names the option and its key
    (:func:`_set_error`)."""
    @functools.wraps(f)
    def command(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except ScenarioError as exc:
            raise _set_error(exc, kwargs.get("scenario"), kwargs.get("overrides", ())) from None
    return click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                        help="Override a scenario field, e.g. engine.max_num_seqs=64 "
                             "(repeatable).")(command)


def _set_error(exc: ScenarioError, scenario: Path | None, overrides: tuple[str, ...]
               ) -> ScenarioError:
    """An error about a value a ``--set`` gave names the option and its key, not the
    scenario file (the value is not in it): ``--set engine.max_num_seqs: expected an
    integer (got 'lots')``; a field inside the value keeps its path after the key. Another
    error of a scenario field keeps its file and path and says which ``--set`` keys were
    applied (a rule across fields may be broken by one: ``(with --set
    engine.max_num_seqs)``; those of the error's own section when there are any)."""
    if scenario is None or exc.file != str(scenario) or not overrides:
        return exc
    if exc.message.startswith("--set"):         # the option's own syntax
        return ScenarioError(exc.message)
    at = exc.path or ""
    keys = [item.partition("=")[0].strip() for item in overrides]
    for key in reversed(keys):                  # the last --set of a key wins
        if at == key:
            return ScenarioError(f"--set {key}: {exc.message}")
        if at.startswith(f"{key}."):
            return ScenarioError(f"--set {key}: {at}: {exc.message}")
    if not at:                                  # the file itself (unreadable, not YAML)
        return exc
    # The keys of the error's own section, when some are (a workload rule is not broken
    # by engine.max_num_seqs); else every key, a rule across sections may be.
    section = at.split(".")[0]
    named = [k for k in keys if k.split(".")[0] == section] or keys
    return ScenarioError(f"{exc.message} (with --set {', '.join(dict.fromkeys(named))})",
                         file=exc.file, path=exc.path)


@cli.command(help="Simulate every variant of SCENARIO and write the HTML report.")
@_scenario_arg
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Report directory [default: reports/<scenario name>].")
@click.option("--seed", type=click.IntRange(min=0), help="Override the scenario's seed.")
@click.option("--workers", type=click.IntRange(min=1), metavar="N",
              help="Variants simulated at once, one worker process each [default: one per "
                   "CPU, at most one per variant]; 1 runs them one after the other in this "
                   "process. The report is the same either way.")
@_set_option
def run(scenario: Path, out_dir: Path | None, seed: int | None, workers: int | None,
        overrides: tuple[str, ...]) -> None:
    from capsim import report
    from capsim.scenario.load import dump_resolved, load
    from capsim.scenario.resolve import kv_log_lines
    from capsim.metrics.summary import summarize
    from capsim.profiles import trust
    from capsim.report.run import day
    from capsim.report.run.console import (day_table, day_verdict_lines, disagg_table,
                                           pools_table, summary_table)
    from capsim.report.run.html import skipped_failure_notes
    from capsim.report.run.pools import trust_pairs
    from capsim.sim.simulate import group_reasons, simulate
    from capsim.studies.task import RunTask
    from capsim.studies.variants import simulate_variants
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    loaded = load(scenario, list(overrides), seed)
    spec = loaded.spec
    traces = _traces(loaded)
    out = out_dir or Path("reports") / spec.name
    report.check_out_dir(out)
    console = _console()
    sizes = sorted({len(t) for t in traces.traces.values()})
    console.print(f"[bold]{spec.name}[/]: {'/'.join(f'{n:,}' for n in sizes)} requests, "
                  f"{len(loaded.runs)} variant(s), seed {spec.seed}")
    results, rows = [], []
    workers = min(workers or os.cpu_count() or 1, len(loaded.runs))
    with Progress(TextColumn("{task.description:<28}"), BarColumn(), TextColumn("{task.percentage:>5.1f}%"),
                  TimeElapsedColumn(), console=console, transient=False) as bar:
        for rc in loaded.runs:
            for line in kv_log_lines(rc):
                bar.console.print(f"  [dim]{rc.variant}: {line}[/]")
        if workers > 1:                 # one pulsing bar (no total until every variant is done)
            label = f"{len(loaded.runs)} variants, {workers} processes"
            task = bar.add_task(f"{label}: 0 done", total=None)
            tasks = [RunTask({"variant": rc.variant}, rc, traces.get(rc.workload, rc.seed),
                             spec.slo, loaded.class_slos) for rc in loaded.runs]
            for outcome in simulate_variants(tasks, workers, lambda d, t: bar.update(
                    task, description=f"{label}: {d} done", total=t if d == t else None,
                    completed=d)):
                results.append(outcome.result)
                rows.extend(outcome.rows)
        else:                           # one bar per variant: requests done
            for rc in loaded.runs:
                trace = traces.get(rc.workload, rc.seed)
                task = bar.add_task(rc.variant, total=len(trace))
                result = simulate(rc, trace, progress=lambda d, t, task=task:
                                  bar.update(task, completed=d))
                results.append(result)
                rows.extend(summarize(result, spec.slo, loaded.class_slos))
    frames = day.windows(results, spec.slo) if day.has_day(results) else None
    index = report.write(out, scenario_name=spec.name, description=spec.description,
                         resolved_yaml=dump_resolved(loaded, __version__, spec.seed),
                         results=results, rows=rows, slo=spec.slo, class_slos=loaded.class_slos,
                         day_frames=frames)
    console.print(summary_table(rows, spec.slo))
    if frames:
        console.print(day_table(results, frames))
        for line in day_verdict_lines(rows, frames, spec.slo):
            console.print(f"[yellow]warning[/]: {line}")
    for label, names in _by_engine(results).items():
        console.print(f"engine {label}: {', '.join(names)}")
    for line in trust.lines(trust_pairs(results)):
        console.print(f"how far to trust it: {line}")
    for r in results:
        for count, example in group_reasons(r.requests.reject_reason.tolist())[:1]:
            total = len(r.requests.reject_reason)
            what = (f"every request rejected ({count:,} of {total:,})" if count == total
                    else f"{count:,} of {total:,} requests rejected")
            console.print(f"[yellow]warning[/]: {r.variant}: {what}, e.g. {example}")
    for line in skipped_failure_notes(results):
        console.print(f"[yellow]warning[/]: {line}")
    split = disagg_table(rows)
    if split is not None:
        console.print(split)
    by_pool = pools_table(results, spec.slo, loaded.class_slos)
    if by_pool is not None:
        console.print(by_pool)
    console.print(f"report: {index}")
    _refuse_empty_variants(loaded, rows, index)


def _refuse_empty_variants(loaded, rows, index: Path) -> None:
    """A variant that completed no request has no figure to compare: after the report is
    written (it shows why), end with one error line naming each such variant and exit 2,
    as for bad input — its configuration cannot serve this workload.

    Raises:
        ScenarioError: naming the variants (and their YAML paths) that finished nothing.
    """
    empty = [(i, r) for i, rc in enumerate(loaded.runs) for r in rows
             if r.cls == "all" and r.variant == rc.variant and r.num_finished == 0]
    if not empty:
        return
    what = "; ".join(f"{r.variant}: " + (f"all {r.num_requests:,} requests rejected"
                                         if r.num_requests else "no measured request")
                     for _, r in empty)
    path = (f"variants.{empty[0][0]}" if loaded.spec.variants and len(empty) == 1 else None)
    raise ScenarioError(f"{len(empty)} of {len(loaded.runs)} variant(s) completed no request "
                        f"({what}); the report says why: {index}", file=str(loaded.path),
                        path=path)


def _by_engine(results) -> dict[str, list[str]]:
    """Variant names by the engine preset they ran."""
    out: dict[str, list[str]] = {}
    for r in results:
        out.setdefault(r.engine, []).append(r.variant)
    return out


def _traces(loaded):
    """Every variant's trace (a :class:`~capsim.workload.TraceCache`), built before
    anything runs: one per distinct workload."""
    from capsim.workload import TraceCache

    traces = TraceCache(loaded.base_dir, str(loaded.path))
    for rc in loaded.runs:
        traces.get(rc.workload, rc.seed)
    return traces


@cli.command(help="Check SCENARIO (schema, names, memory fit, trace file) without running it.")
@_scenario_arg
@_set_option
def validate(scenario: Path, overrides: tuple[str, ...]) -> None:
    from capsim.scenario.load import load
    from capsim.scenario.resolve import pool_lines, pool_log_lines
    from capsim.scenario.resolve_pools import fleet_lines
    from capsim.sim.simulate import rejections

    loaded = load(scenario, list(overrides))
    traces = _traces(loaded)
    # What capsim sweep and capsim size would refuse is refused here too.
    points = _check_sweep_and_sizing(loaded, list(overrides))
    sizes = "/".join(f"{len(t):,}" for t in traces.traces.values())
    rejected = [rejections(rc, traces.get(rc.workload, rc.seed)) for rc in loaded.runs]
    _refuse_all_rejected(loaded, traces, rejected)
    click.echo(f"{scenario}: ok — {sizes} requests, {len(loaded.runs)} variant(s)"
               + (f", {points} sweep point(s)" if points else ""))
    for rc, reasons in zip(loaded.runs, rejected):
        if rc.fleet is not None:      # pooled fleet: one line per pool
            for line in fleet_lines(rc):
                click.echo(f"  {line}")
            max_len = max(p.engine.max_model_len for p in rc.pools)
        elif rc.disaggregated:        # prefill and decode pools
            for line in pool_lines(rc):
                click.echo(f"  {line}")
            max_len = min(p.engine.max_model_len for p in rc.pools)
        else:
            pool = rc.pool()
            eng = pool.engine
            weights = (f", {eng.weight_format} weights ({pool.matmul_dtype} matmuls)"
                       if eng.weight_format and not rc.model.weight_formats else "")
            if rc.model.weight_formats:      # the checkpoint's formats by tensor group
                weights = f", checkpoint weights: {_checkpoint_text(rc.model)}, the rest 16-bit"
            click.echo(f"  {rc.variant}: {pool.num_replicas} × {pool.hardware.name} "
                       f"{parallel_label(eng.tensor_parallel_size, eng.pipeline_parallel_size)}"
                       f"{' EP' if eng.enable_expert_parallel else ''}"
                       f"{' DP-attention' if eng.enable_dp_attention else ''}{weights}, {eng.scheduler}"
                       f"{' chunked' if eng.chunked else ''}, max_num_seqs {eng.max_num_seqs}, "
                       f"max_num_batched_tokens {eng.max_num_batched_tokens}")
            for line in pool_log_lines(pool):
                click.echo(f"    {line}")
            max_len = eng.max_model_len
        trace = traces.get(rc.workload, rc.seed)
        for count, example in reasons:
            click.echo(f"    warning: {count:,} of {len(trace):,} requests will be rejected, "
                       f"e.g. {example}")


def _refuse_all_rejected(loaded, traces, rejected: list[list[tuple[int, str]]]) -> None:
    """A variant whose engine would reject every request of its trace is refused here, as
    ``capsim run`` refuses it after the run (:func:`_refuse_empty_variants`): the engine
    starts (vLLM takes any ``max_model_len`` up to the model's and checks each request's
    prompt + ``max_tokens`` against it, answering HTTP 400 — ``_validate_input`` of
    ``vllm/entrypoints/openai/serving_engine.py``), but the variant would serve nothing.
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
    every ``sizing.hardware`` names a GPU profile; the number of sweep points (0: none).

    Raises:
        ScenarioError: as ``capsim sweep`` / ``capsim size`` would, naming the field.
    """
    from capsim.studies.fleet import check_hardware_names
    from capsim.studies.sweep import plan

    if loaded.spec.sizing is not None:
        check_hardware_names(loaded, loaded.spec.sizing.hardware)
    if not loaded.spec.sweep:
        return 0
    return len(plan(loaded.path, overrides).points)


def _template_options(kind: str, default_base: str):
    """``--template NAME [--from BASE] [-o FILE]`` of ``capsim hardware`` / ``capsim models``."""
    def wrap(f):
        f = click.option("-o", "--out", "out_file", type=click.Path(dir_okay=False,
                                                                    path_type=Path),
                         help="With --template: write the template to this new file "
                              "[default: print it].")(f)
        f = click.option("--from", "base", metavar="NAME|PATH",
                         help=f"With --template: the {kind} whose numbers the template starts "
                              f"from [default: {default_base}].")(f)
        return click.option("--template", "template", metavar="NAME",
                             help=f"Print (or write with -o) a commented {kind} named NAME "
                                  "to fill in, instead of the list.")(f)
    return wrap


def _emit_template(text: str, template: str | None, base: str | None, out_file: Path | None,
                   what: str) -> bool:
    """Print or write a template; False when there is none to emit (show the list)."""
    if template is None:
        if base is not None or out_file is not None:
            raise ScenarioError("--from and -o go with --template NAME")
        return False
    if out_file is None:
        click.echo(text, nl=False)
        return True
    try:
        with open(out_file, "x", encoding="utf-8") as f:      # never overwrite
            f.write(text)
    except FileExistsError:
        raise ScenarioError(f"-o {out_file}: the file exists; name a new file") from None
    except OSError as exc:
        raise ScenarioError(f"-o {out_file}: cannot write: {exc.strerror or exc}") from None
    click.echo(f"wrote {out_file}: replace its numbers by your {what}'s, then name it in a "
               f"scenario by its path relative to the scenario file; capsim validate checks it")
    return True


def _from(loader, base: str):
    try:
        return loader(base)
    except ScenarioError as exc:
        raise exc.with_context(path="--from") from None


@cli.command(help="List the GPU profiles and their key datasheet numbers, or write a "
                  "template for your own (--template NAME).")
@_template_options("GPU profile", "h100-sxm")
def hardware(template: str | None, base: str | None, out_file: Path | None) -> None:
    from capsim.profiles.hardware import hardware_names, list_hardware, load_hardware
    from capsim.profiles.template import check_template_name, hardware_template

    if template is not None:
        check_template_name(template, hardware_names(), "GPU profile")
        text = hardware_template(template, _from(load_hardware, base or "h100-sxm"))
    if _emit_template(text if template is not None else "", template, base, out_file, "GPU"):
        return
    table = _listing("GPU profiles (dense peak; per-direction link bandwidth)", [
        "BF16\nTFLOP/s", "FP8\nTFLOP/s", "FP4\nTFLOP/s", "HBM\nGiB", "seen\nGiB", "HBM\nTB/s",
        ("scale-up link", True), "GB/s", "PCIe\nGB/s", ("curves", True), "$/GPU-h"])
    for hw in list_hardware():
        peaks = hw.peak_flops_per_s
        fp8, fp4 = peaks.get("fp8"), peaks.get("fp4")
        curves = "calibrated" if hw.calibration else ("derived" if hw.derivation else "scalars")
        table.add_row(hw.name, f"{peaks['bf16'] / 1e12:,.0f}",
                      f"{fp8 / 1e12:,.0f}" if fp8 else "—", f"{fp4 / 1e12:,.0f}" if fp4 else "—",
                      f"{hw.hbm_bytes / 2**30:,.0f}", f"{hw.memory_total_bytes / 2**30:,.2f}",
                      f"{hw.hbm_bandwidth_bytes_per_s / 1e12:.2f}",
                      hw.scale_up_link.split(" (")[0] or "—",
                      f"{hw.tp_link_bandwidth_bytes_per_s / 1e9:,.0f}",
                      f"{hw.pcie_bandwidth_bytes_per_s / 1e9:,.0f}", curves,
                      f"{hw.price_per_gpu_hour_usd:.2f}")
    _console().print(table)


@cli.command(help="List the engine presets: version, memory rule, scheduler and defaults.")
def engines() -> None:
    from capsim.profiles.engines import engine_preset_names, load_engine_preset

    table = _listing("Engine presets (engine: {preset: NAME}; vllm-v1 when none is named)", [
        ("engine", True), ("version", True), ("memory rule", True), ("scheduler", True),
        ("host overhead", True), ("defaults", True)])
    for name in engine_preset_names():
        p = load_engine_preset(name)
        defaults = ", ".join(f"{k} {v}" for k, v in p.defaults.items() if k != "scheduler")
        for c in p.conditional_defaults:
            when = ", ".join(f"{k} {v}" for k, v in c.when.model_dump(exclude_none=True).items())
            defaults += f"; if {when}: " + ", ".join(f"{k} {v}" for k, v in c.set.items())
        table.add_row(p.name, p.display_name, p.version,
                      f"{p.memory.rule} ({p.memory.fraction_knob})", p.scheduler.policy,
                      _host_text(p.host_overhead), defaults)
    _console().print(table)


def _listing(title: str, columns: list) -> "FoldedTable":
    """A listing keyed by ``name`` that folds to the terminal's width, as the summary does:
    a narrow terminal wraps text cells and moves columns to a second table repeating the
    name, never cuts a name or a figure to ``a100-4…``. ``columns``: a header (a figure,
    right-aligned), or (header, text[, justify]) for a column that may wrap."""
    from capsim.report.terminal import FoldColumn, FoldedTable

    cols = [FoldColumn(c) if isinstance(c, str) else
            FoldColumn(c[0], text=c[1], justify=c[2] if len(c) > 2 else "left")
            for c in columns]
    return FoldedTable(title, [FoldColumn("name", text=True, justify="left")],
                       [[c] for c in cols])


def _host_text(h) -> str:
    """``1.05 ms/step, serial; 8.3 ms before scheduling``: the non-zero host terms."""
    terms = [f"{v * 1e3:g} ms/{unit}" for v, unit in ((h.per_step_s, "step"),
                                                       (h.per_seq_s, "sequence"),
                                                       (h.per_prefill_token_s, "prompt token"),
                                                       (h.per_extra_tp_worker_s,
                                                        "step per TP worker beyond the first"))
             if v]
    overlap = h.overlap + (f" (+{h.residual_s * 1e3:g} ms)" if h.residual_s else "") \
        + (" (engine.async_scheduling)" if h.async_scheduling_knob else "")
    text = ", ".join([*terms, overlap])
    if h.request_before_s:
        text += f"; {h.request_before_s * 1e3:g} ms before scheduling"
    return text


@cli.command(help="List the model presets: total and active parameters, experts, attention, "
                  "KV bytes per token; or write a template for your own (--template NAME; a "
                  "scenario may also name a Hugging Face config.json).")
@_template_options("model", "llama-3.1-8b")
def models(template: str | None, base: str | None, out_file: Path | None) -> None:
    from capsim.profiles.models import list_models, load_model, model_names
    from capsim.profiles.template import check_template_name, model_template

    if template is not None:
        check_template_name(template, model_names(), "model")
        text = model_template(template, _from(load_model, base or "llama-3.1-8b"))
    if _emit_template(text if template is not None else "", template, base, out_file, "model"):
        return
    table = _listing("Model presets (bf16 weights and KV; a checkpoint's own formats where it "
                     "records them)", [
        "params\nB", "active\nB", ("weights GiB", True, "right"), "layers", "hidden",
        "heads\n/ kv", ("experts", True, "right"), ("attention", True), "KV\nKiB/token",
        "max\ncontext"])
    for m in list_models():
        table.add_row(m.name, f"{m.params_total / 1e9:.2f}", f"{m.params_active / 1e9:.2f}",
                      _weights_text(m), str(m.num_hidden_layers),
                      str(m.hidden_size), f"{m.num_attention_heads} / {m.num_key_value_heads}",
                      _experts_text(m), _attention_text(m), _kv_text(m),
                      f"{m.max_position_embeddings:,}")
    _console().print(table)
    click.echo("active: parameters one token uses, embedding table excluded. KV: all layers "
               "per token; 'paged' where vLLM frees sliding-window blocks.")


def _weights_text(m) -> str:
    """GiB of the weights: bf16, or the checkpoint's formats by tensor group (gpt-oss-120b:
    ``60.8 (mxfp4 experts)``, its published checkpoint size)."""
    if not m.weight_formats:
        return f"{m.weight_bytes(2) / 2**30:.1f}"
    from capsim.kv.memory import weight_bytes_per_gpu

    return f"{weight_bytes_per_gpu(m, 1, 2) / 2**30:.1f} ({_checkpoint_text(m)})"


def _checkpoint_text(m) -> str:
    """``mxfp4 experts``: the checkpoint's quantized tensor groups ("" for none)."""
    by: dict[str, list[str]] = {}
    for group, fmt in m.weight_formats.items():
        if fmt != "bf16":
            by.setdefault(fmt, []).append(group)
    return "; ".join(f"{fmt} {', '.join(groups)}" for fmt, groups in by.items())


def _experts_text(m) -> str:
    """``8 of 256 +1 shared, 58/61 layers``; ``-`` for a dense model."""
    if not m.is_moe:
        return "-"
    text = f"{m.num_experts_per_tok} of {m.num_experts}"
    if m.shared_expert_intermediate_size:
        text += " +shared"
    if m.moe_layers != m.num_hidden_layers:
        text += f", {m.moe_layers}/{m.num_hidden_layers} layers"
    return text


def _attention_text(m) -> str:
    """``MLA``, ``GQA``, with the windowed layers: ``GQA, 18 sliding 128``."""
    text = "MLA" if m.is_mla else ("MHA" if m.num_key_value_heads == m.num_attention_heads
                                   else "GQA")
    if m.sliding_window_layers:
        text += f", {m.sliding_window_layers} sliding {m.sliding_window}"
    if m.chunked_attention_layers:
        text += f", {m.chunked_attention_layers} chunked {m.attention_chunk_size}"
    if m.attention_sinks:
        text += ", sinks"
    return text


def _kv_text(m) -> str:
    """KiB per token, and the paged figure where it differs."""
    full, paged = m.kv_bytes_per_token(2) / 1024, m.paged_kv_bytes_per_token(2) / 1024
    return f"{full:.0f}" if full == paged else f"{full:.0f} ({paged:.0f} paged)"


@cli.command(help="Price one engine step with the roofline: FLOPs, bytes, intensity, time, bound.")
@click.option("--model", "model_name", required=True, help="Preset name or path to config.json.")
@click.option("--hardware", "hw_name", required=True, help="Profile name or path to a YAML.")
@click.option("--prefill-tokens", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--decode-batch", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--context", type=click.IntRange(min=0), default=0, show_default=True,
              help="Context length of each decoding sequence (tokens).")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Pipeline stages of TP GPUs each: operators summed over the stages, each "
                   "stage's and handoff's time (engine.pipeline_parallel_size).")
@click.option("--ep", "expert_parallel", is_flag=True,
              help="Expert parallelism over the TP GPUs (MoE; engine.enable_expert_parallel).")
@click.option("--dp-attention", "dp_attention", is_flag=True,
              help="Data-parallel attention (MoE; engine.enable_dp_attention).")
@click.option("--ideal", is_flag=True, help="Efficiencies 1.0 and no step overhead (textbook).")
@click.option("--routing-skew", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="MoE routing skew: Zipf exponent of expert popularity (0: uniform).")
@click.option("--quantization", default=None,
              help="Weight format (fp8, fp8_channel, fp8_block, int8, awq, gptq, nvfp4, mxfp4).")
@click.option("--preset", "preset_name", default="vllm-v1", show_default=True,
              help="Engine preset (or a path to one) whose TP all-reduce is priced (vLLM's "
                   "custom kernels; NCCL's ring for the others) and whose own kernels the GPU "
                   "profile has (vLLM's MXFP4 MoE path).")
def roofline(model_name: str, hw_name: str, prefill_tokens: int, decode_batch: int, context: int,
             tp: int, pp: int, expert_parallel: bool, dp_attention: bool, ideal: bool,
             routing_skew: float, quantization: str | None, preset_name: str) -> None:
    from capsim.profiles.hardware import load_hardware
    from capsim.profiles.models import load_model
    from capsim.cost.describe import describe_step
    from capsim.profiles.engines import load_engine_preset
    from capsim.cost.operators import check_tensor_parallel, pp_layer_partition

    # The names first: an unknown model or GPU is the error to see, whatever else is wrong.
    with _as_option("--model"):
        model = load_model(model_name)
    with _as_option("--hardware"):
        hw = load_hardware(hw_name)
    if prefill_tokens == 0 and decode_batch == 0:
        raise ScenarioError("nothing to price: --prefill-tokens and --decode-batch are both 0; "
                            "give --prefill-tokens N and/or --decode-batch B --context C")
    if decode_batch and not context:
        raise ScenarioError(f"--decode-batch {decode_batch} needs --context C: the tokens each "
                            "decoding sequence attends over (>= 1)")
    if not math.isfinite(routing_skew):          # click's FloatRange lets nan and inf by
        raise ScenarioError(f"--routing-skew must be a finite number >= 0 (the Zipf exponent "
                            f"of expert popularity; 0: uniform), got {routing_skew}")
    with _as_option("--tp", "tensor_parallel_size"):
        check_tensor_parallel(model, tp)
    if not (expert_parallel and dp_attention):   # DP attention + EP: all-to-all beyond a node
        try:
            hw.check_tp_in_node(tp)      # TP all-reduces are priced within one node only
        except ScenarioError as exc:     # in roofline's words: its options, no scenario
            raise _option_error(_reworded(exc, _ROOFLINE_NODE_WORDS), "--tp",
                                "tensor_parallel_size") from None
    with _as_option("--pp", "pipeline_parallel_size"):
        pp_layer_partition(model.num_hidden_layers, pp)
    with _as_option("--preset"):
        preset = load_engine_preset(preset_name)
    all_reduce = preset.tp_all_reduce
    try:
        d = describe_step(model, hw, tp, prefill_tokens=prefill_tokens,
                          decode_batch=decode_batch, context=context, ideal=ideal,
                          routing_skew=routing_skew, quantization=quantization, pp=pp,
                          expert_parallel=expert_parallel, dp_attention=dp_attention,
                          all_reduce=all_reduce, engine=preset.engine)
    except ScenarioError as exc:
        option, field = next(((o, f) for f, o in _ROOFLINE_OPTIONS if f in exc.message),
                             (None, None))
        if option is None:
            raise
        raise _option_error(exc, option, field if " " not in field else None) from None
    _print_step(d, model.name, hw.name, tp, ideal, preset.name, _keeps_batches_in_flight(preset))
    # A price is not a fit: say so when the weights and this step's KV exceed one GPU.
    from capsim.kv.memory import weight_bytes_per_gpu
    from capsim.profiles.quantization import load_quant_format

    kv_tokens = decode_batch * context + prefill_tokens
    weights = model.weight_bytes() / tp if quantization is None and not model.weight_formats \
        else weight_bytes_per_gpu(model, tp, 2, quant=load_quant_format(quantization)
                                  if quantization else None)
    need = (weights + kv_tokens * model.kv_bytes_per_token() / tp) / pp   # ≈ one stage's
    if need > hw.hbm_bytes:
        click.echo(f"warning: does not fit: {need / 2**30:,.1f} GiB per GPU of "
                   f"{quantization or _checkpoint_text(model) or 'bf16'} weights and "
                   f"KV for {kv_tokens:,} tokens > {hw.hbm_bytes / 2**30:,.1f} GiB on {hw.name}",
                   err=True)


def _keeps_batches_in_flight(preset) -> bool:
    """Whether the preset's scheduling policy keeps up to PP batches in flight under
    pipeline parallelism (vLLM's continuous batching; SGLang's, TensorRT-LLM's, TGI's and
    static batching run one at a time: :mod:`capsim.engine.pipeline`)."""
    from capsim.profiles.policies import policy_capabilities

    return policy_capabilities(preset.scheduler.policy).pipelining


def _reworded(exc: ScenarioError, words: tuple[tuple[str, str], ...]) -> ScenarioError:
    msg = exc.message
    for old, new in words:
        msg = msg.replace(old, new)
    return ScenarioError(msg, file=exc.file, path=exc.path)


#: A TP group beyond one node, in roofline's terms: its --pp option, and a profile YAML
#: for --hardware where a scenario would set hardware_overrides.
_ROOFLINE_NODE_WORDS = (
    ("pipeline_parallel_size", "--pp"),
    ("set hardware_overrides.gpus_per_node if your node is larger",
     "give --hardware a profile YAML with a larger gpus_per_node"))


def _print_step(d: dict, model: str, hw: str, tp: int, ideal: bool, preset: str = "vllm-v1",
                in_flight: bool = True) -> None:
    from rich.table import Table

    console = _console()
    pp = d["pipeline_parallel_size"]
    shape = f"TP{tp}" + (f" × PP{pp}" if pp > 1 else "") + (" EP" if d["expert_parallel"]
                                                            else "") \
        + (" DP-attention" if d["dp_attention"] else "")
    console.print(f"[bold]{model}[/] on [bold]{hw}[/] {shape}"
                  f"{' (ideal: efficiency 1.0, no overhead)' if ideal else ''}"
                  f"{'; operators summed over the stages (one GPU of each)' if pp > 1 else ''}")
    table = Table(show_header=True)
    for col in ("operator", "GFLOP", "MB", "FLOP/byte", "compute ms", "memory ms", "bound"):
        table.add_column(col, justify="left" if col in ("operator", "bound") else "right")
    for op in d["operators"]:
        table.add_row(op["name"], f"{op['flops'] / 1e9:,.2f}", f"{op['bytes'] / 1e6:,.1f}",
                      f"{op['arithmetic_intensity_flops_per_byte']:,.1f}",
                      f"{op['compute_s'] * 1e3:.3f}",
                      f"{op['memory_s'] * 1e3:.3f}", op["bound"])
    console.print(table)
    console.print(
        f"step: {d['flops'] / 1e9:,.1f} GFLOP, {d['bytes'] / 1e9:,.3f} GB per GPU"
        f"{' column' if pp > 1 else ''}, "
        f"intensity {d['arithmetic_intensity_flops_per_byte']:,.1f} FLOP/byte (ridge "
        f"{d['ridge_flops_per_byte']:,.0f}) → [bold]{d['seconds'] * 1e3:.3f} ms[/] "
        f"({d['bound']}-bound; compute {d['compute_s'] * 1e3:.3f} ms, memory "
        f"{d['memory_s'] * 1e3:.3f} ms, comm {d['comm_s'] * 1e3:.3f} ms, overhead "
        f"{d['overhead_s'] * 1e3:.3f} ms)")
    p = d.get("pipeline")
    if p:
        stages = ", ".join(f"{n} layers {s * 1e3:.3f} ms"
                           for n, s in zip(p["partition"], p["stage_s"]))
        hand = ", ".join(f"{h * 1e3:.3f}" for h in p["handoff_s"])
        if in_flight:
            after = (f"with {pp} batches in flight a step leaves every "
                     f"≥ {p['bottleneck_s'] * 1e3:.3f} ms (the slowest stage)")
        else:
            after = (f"{preset}'s scheduler runs one batch at a time under PP, so every step "
                     "takes the sum (only vLLM's continuous batching keeps batches in flight)")
        console.print(f"stages: {stages}; handoffs {hand} ms. One batch alone takes the sum; "
                      + after)
    e = d.get("experts")
    if e:
        console.print(f"experts: {e['hit']:,.1f} of {e['num_experts']} read per MoE layer "
                      f"({e['tokens']:,} tokens × top-{e['top_k']}; "
                      f"{e['hit'] / e['num_experts']:.0%} of the expert weights)")


def _executor_options(f):
    """--seeds, --workers, --executor, --scheduler: replications and where runs execute."""
    f = click.option("--scheduler", metavar="ADDRESS",
                     help="Address of a running Dask scheduler (tcp://host:8786); "
                          "implies --executor dask.")(f)
    f = click.option("--executor", type=click.Choice(["process", "serial", "dask"]),
                     default="process", show_default=True,
                     help="process: local process pool; dask: Dask distributed (a LocalCluster "
                          "unless --scheduler is given); serial: in this process.")(f)
    f = click.option("--workers", type=int, metavar="N",
                     help="Worker processes [default: one per CPU]; 1 runs serially.")(f)
    return click.option("--seeds", "num_seeds", type=int, metavar="K",
                        help="Independent traces per configuration: mean and 95 % CI of every "
                             "metric; a configuration passes only in all K.")(f)


def _executor(executor: str, workers: int | None, scheduler: str | None):
    from capsim.studies.parallel import ExecutorSpec

    return ExecutorSpec(backend=executor, workers=workers, scheduler=scheduler)


@cli.command(help="Run SCENARIO's sweep: grid × variants (× seeds) in parallel; write the "
                  "sweep report (latency–load curves, cost vs tail latency, every run).")
@_scenario_arg
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Report directory [default: reports/<scenario name>-sweep].")
@click.option("--seed", type=click.IntRange(min=0), help="Override the scenario's seed (replication 0).")
@_executor_options
@_set_option
def sweep(scenario: Path, out_dir: Path | None, seed: int | None, num_seeds: int | None,
          workers: int | None, executor: str, scheduler: str | None,
          overrides: tuple[str, ...]) -> None:
    from capsim.cli.sweep import run_sweep

    spec = _executor(executor, workers, scheduler)
    run_sweep(_console(), scenario, out_dir, seed, 1 if num_seeds is None else num_seeds, spec,
              list(overrides))


@cli.command(help="Fewest GPUs per variant / hardware / TP meeting every SLO target at --rate "
                  "(or the sizing: section); with --gpus N, the highest rate N GPUs sustain.")
@_scenario_arg
@click.option("--rate", "rate_per_s", type=float, metavar="R",
              help="Requests/s to size for [default: sizing.rate_per_s, else the workload's].")
@click.option("--gpus", type=int, metavar="N",
              help="Answer the inverse: the highest request rate N GPUs sustain.")
@click.option("--max-gpus", type=int, metavar="M", help="Search bound [default: sizing.max_gpus "
                                                        "or 64].")
@click.option("--headroom", type=int, default=0, metavar="K",
              help="N+K: the SLOs must hold with K replicas down at the rate sized for.")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Report directory [default: reports/<scenario name>-size].")
@click.option("--seed", type=click.IntRange(min=0), help="Override the scenario's seed (replication 0).")
@click.option("--trust-edge", type=click.Choice(EDGES), default="none", show_default=True,
              help="Size against the pessimistic edge of capsim's measured error for each "
                   "option's engine preset and GPU: SLO bounds tightened by the median or max "
                   "|error| of the fidelity benchmark (README, 'How far to trust it').")
@_executor_options
@_set_option
def size(scenario: Path, rate_per_s: float | None, gpus: int | None, max_gpus: int | None,
         headroom: int, out_dir: Path | None, seed: int | None, trust_edge: str,
         num_seeds: int | None,
         workers: int | None, executor: str, scheduler: str | None,
         overrides: tuple[str, ...]) -> None:
    from capsim.cli.sweep import run_size

    for name, value in (("--gpus", gpus), ("--max-gpus", max_gpus), ("--seeds", num_seeds)):
        if value is not None and value < 1:
            raise ScenarioError(f"{name} must be >= 1, got {value}")
    if rate_per_s is not None and not (rate_per_s > 0 and math.isfinite(rate_per_s)):
        raise ScenarioError(f"--rate must be a finite number > 0 requests/s, got "
                            f"{rate_per_s:g}")
    if rate_per_s is not None and gpus is not None:
        raise ScenarioError("give --rate (fewest GPUs for a rate) or --gpus (highest rate for "
                            "N GPUs), not both")
    if gpus is not None and max_gpus is not None:
        raise ScenarioError("--max-gpus bounds the search for the fewest GPUs; with --gpus N "
                            "the GPU count is fixed, so drop one of them")
    run_size(_console(), scenario, out_dir, seed, rate_per_s=rate_per_s, gpus=gpus,
             num_seeds=num_seeds, max_gpus=max_gpus, headroom=headroom,
             executor=_executor(executor, workers, scheduler), overrides=list(overrides),
             trust_edge=trust_edge)


def _variant_option(f):
    return click.option("--variant", help="Scenario variant to simulate [default: the first].")(f)


def _run_option(f):
    return click.option("--run", "run_index", type=click.IntRange(min=0), metavar="N",
                        help="Which run of a result file holding several (appended JSON lines, "
                             "GuideLLM benchmarks, genai-perf experiments), from 0.")(f)


def _check_calibration_variant(run, base, scenario: Path, chosen: bool) -> None:
    """``calibrate --from`` fits ``base`` (the ``--hardware`` profile) by replaying the
    result through ``run`` with every pool's GPU replaced by it, KV sizes kept: the variant
    must run on that GPU (by name, or the same memory, bandwidth and peak: a calibrated copy
    of it; on another, its KV sizes and the fit are another GPU's), and it
    must stream its replies (static batching returns each whole: TPOT is 0 by
    construction, nothing to fit).

    Raises:
        ScenarioError: naming --variant and the variant's GPUs or scheduler.
    """
    which = f"--variant {run.variant!r}" if chosen else \
        f"variant {run.variant!r} (the first; choose with --variant)"
    gpus = sorted({p.hardware.name.partition("[")[0] for p in run.pools})
    if len(gpus) > 1:
        raise ScenarioError(
            f"{which} runs on several GPUs ({', '.join(gpus)}); a calibration fits one GPU's "
            f"profile: choose a variant on {base.name} alone", file=str(scenario))
    def datasheet(hw):             # a calibrated copy keeps these, whatever its name
        return (hw.memory_total_bytes, hw.hbm_bandwidth_bytes_per_s,
                hw.peak_flops_per_s.get("bf16"))
    if gpus != [base.name] and datasheet(run.pools[0].hardware) != datasheet(base):
        raise ScenarioError(
            f"{which} runs on {gpus[0]}, not {base.name}: calibrate the profile of the GPU "
            f"the server ran on (--hardware {gpus[0]}) or choose a variant on {base.name}",
            file=str(scenario))
    if run.static_batching:
        raise ScenarioError(
            f"{which} runs static batching, which returns each reply whole (TPOT 0 by "
            "construction): nothing to fit; choose a streaming variant", file=str(scenario))


def _pick_variant(loaded, name: str | None):
    """The RunConfig of variant ``name`` (the first when None)."""
    if name is None:
        return loaded.runs[0]
    for rc in loaded.runs:
        if rc.variant == name:
            return rc
    raise ScenarioError(f"--variant {name!r}: no such variant; valid: "
                        f"{', '.join(rc.variant for rc in loaded.runs)}", file=str(loaded.path))


@cli.command(help="Replay a benchmark client's measured requests through a scenario variant; "
                  "print and write measured vs simulated TTFT / TPOT / ITL / E2E (CDFs and an "
                  "error table). RESULT: vllm bench serve, sglang.bench_serving, GuideLLM, "
                  "AIPerf or genai-perf output (format detected).")
@click.argument("result", type=click.Path(dir_okay=False, path_type=Path))
@_scenario_arg
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Report directory [default: reports/compare-<result file name>].")
@_variant_option
@_run_option
@click.option("--seed", type=click.IntRange(min=0),
              help="Seed of re-drawn arrivals (finite-rate runs without send times) "
                   "[default: the scenario's].")
@_set_option
def compare(result: Path, scenario: Path, out_dir: Path | None, variant: str | None,
            run_index: int | None, seed: int | None, overrides: tuple[str, ...]) -> None:
    from capsim import report
    from capsim.calibrate.compare import compare as run_compare
    from capsim.calibrate.readers import read_result
    from capsim.report.compare import error_table, write
    from capsim.report.style import slug
    from capsim.scenario.load import dump_resolved, load
    from capsim.sim.simulate import group_reasons

    loaded = load(scenario, list(overrides), seed)
    rc = _pick_variant(loaded, variant)
    measured = read_result(result, run_index)
    out = out_dir or Path("reports") / f"compare-{slug(result.stem)}"
    report.check_out_dir(out)
    console = _console()
    console.print(f"[bold]{measured.label}[/] {result}"
                  f"{f' ({measured.run_label})' if measured.run_label else ''}: "
                  f"{len(measured):,} requests, {int(measured.success.sum()):,} successful; "
                  f"simulating variant [bold]{rc.variant}[/] of {loaded.spec.name}")
    c = run_compare(rc, measured, seed=loaded.spec.seed)
    if c.rejected and not any(r.n_simulated for r in c.rows if r.metric == "ttft"):
        # Nothing left to compare: an empty table and page would say nothing (as capsim run
        # refuses a variant that completed no request), so say why and write nothing.
        reasons = group_reasons(c.result.requests.reject_reason.tolist())
        example = f", e.g. {reasons[0][1]}" if reasons else ""
        raise ScenarioError(f"variant {rc.variant!r} of {loaded.spec.name} rejects every one of "
                            f"the {c.rejected:,} successful requests{example}: nothing to "
                            "compare; choose another --variant or raise its limits",
                            file=str(result))
    notes = list(measured.notes)
    if variant is None and len(loaded.runs) > 1:
        notes.append(f"The scenario has {len(loaded.runs)} variants; simulated the first, "
                     f"{rc.variant!r} (choose with --variant).")
    if rc.static_batching:
        notes.append(f"Variant {rc.variant!r} runs static batching, which returns each reply "
                     "whole: its TPOT and ITL are 0 by construction (-100 %); its TTFT and E2E "
                     "compare, or choose a streaming --variant.")
    if c.replay.dropped:
        notes.append(f"{c.replay.dropped:,} request(s) not replayed: no prompt length, no "
                     "output token or no send time (failed before the server answered).")
    if c.rejected:
        notes.append(f"{c.rejected:,} successful request(s) rejected by the simulated engine "
                     "(e.g. longer than max_model_len): left out of both distributions.")
    index = write(out, c, scenario_name=loaded.spec.name,
                  resolved_yaml=dump_resolved(loaded, __version__, loaded.spec.seed), notes=notes)
    console.print(c.replay.note)
    for line in notes:
        console.print(f"note: {line}")
    console.print(error_table(c))
    console.print(f"report: {index}")


@cli.command(help="Fit the hardware profile's efficiencies and step overhead to measured timings; "
                  "write the calibrated profile YAML and a fidelity report.")
@click.option("--hardware", "hw_name", required=True,
              help="Profile to start from (name or YAML path); also names the output.")
@click.option("--vidur", type=click.Path(file_okay=False, path_type=Path),
              help="Vidur profiling folder (e.g. ../shared/reference/vidur_profiling).")
@click.option("--vidur-device", help="Vidur compute folder (a100, h100) [default: from --hardware].")
@click.option("--vidur-network", help="Vidur network folder (a100_dgx, ...) [default: from --hardware].")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Plain CSV of measured operators (see README: Calibration).")
@click.option("--model", "model_name", help="Model the --csv operators were measured on.")
@click.option("--from", "--vllm-bench", "result", type=click.Path(dir_okay=False, path_type=Path),
              help="A benchmark result: vllm bench serve --save-result --save-detailed JSON, "
                   "sglang.bench_serving --output-details JSONL, GuideLLM report JSON, AIPerf "
                   "profile_export.jsonl or genai-perf profile_export.json (format detected; "
                   "--vllm-bench is the old name).")
@click.option("--scenario", type=click.Path(dir_okay=False, path_type=Path),
              help="Scenario whose variant's engine the --from server ran.")
@_variant_option
@_run_option
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Output folder for the profile and the report [default: reports/calibration-<hw>].")
@click.option("--name", help="Name of the calibrated profile [default: the input's].")
@click.option("--note", "notes", multiple=True, help="Provenance line added to calibration.data.")
def calibrate(hw_name: str, vidur: Path | None, vidur_device: str | None,
              vidur_network: str | None, csv_path: Path | None, model_name: str | None,
              result: Path | None, scenario: Path | None, variant: str | None,
              run_index: int | None, out_dir: Path | None, name: str | None,
              notes: tuple[str, ...]) -> None:
    from capsim.calibrate import Inputs, calibrate as run_calibration, write_profile
    from capsim.scenario.load import load
    from capsim.profiles.hardware import load_hardware
    from capsim.profiles.models import load_model
    from capsim.report.calibration import write_calibration_page

    from capsim.report.outdir import check_writable_dir

    with _as_option("--hardware"):
        base = load_hardware(hw_name)
    check_writable_dir(out_dir or Path("reports") / f"calibration-{name or base.name}")
    run = _pick_variant(load(scenario), variant) if scenario is not None else None
    if run is not None and result is not None:
        _check_calibration_variant(run, base, scenario, chosen=variant is not None)
    inputs = Inputs(vidur=vidur, vidur_device=vidur_device, vidur_network=vidur_network,
                    csv=csv_path, model=_load_model_option(model_name),
                    result=result, result_run=run_index, run=run, notes=notes)
    try:
        outcome = run_calibration(base, inputs, name=name)
    except ScenarioError as exc:     # about the --vidur folder itself: name the option
        if vidur is None or exc.file != str(vidur) or exc.path is not None:
            raise
        raise _option_error(exc, "--vidur") from None
    profile = outcome.profile
    out = out_dir or Path("reports") / f"calibration-{name or base.name}"
    path = write_profile(profile, out / f"{profile.name}.yaml",
                         header=f"{profile.display_name}: calibrated by capsim calibrate on "
                                f"{profile.calibration.date}; see calibration: below.")
    try:
        index = write_calibration_page(out, title=f"Fidelity of {profile.name}",
                                       profile_name=profile.name, date=profile.calibration.date,
                                       data=outcome.data, errors=outcome.errors,
                                       table=outcome.table)
    except OSError as exc:
        raise ScenarioError(f"cannot write the report: {exc.strerror or exc}",
                            file=str(out)) from None
    _print_calibration(outcome.errors, profile.name)
    click.echo(f"profile: {path}\nreport: {index}")


def _load_model_option(name: str | None):
    """``--model NAME`` of ``capsim calibrate`` (None when not given)."""
    from capsim.profiles.models import load_model

    if name is None:
        return None
    with _as_option("--model"):
        return load_model(name)


def _print_calibration(errors: dict, name: str) -> None:
    from rich.table import Table

    table = Table(title=f"{name}: absolute % error of predicted vs measured time")
    for col in ("class", "rows", "before median", "before p90", "after median", "after p90"):
        table.add_column(col, justify="left" if col == "class" else "right")
    for op_class, err in errors.items():
        table.add_row(op_class, f"{err.after.n:,}", f"{err.before.median_pct:.1f} %",
                      f"{err.before.p90_pct:.1f} %", f"{err.after.median_pct:.1f} %",
                      f"{err.after.p90_pct:.1f} %")
    _console().print(table)

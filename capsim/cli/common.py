"""What the ``capsim`` commands share: the options several take (``SCENARIO``, ``--set``,
``--variant``, ``--run``, the executor options, ``--template``), errors re-pointed at
the option the user typed, the console, listings that fold to the terminal's width.

Heavy modules (rich, the simulator) are imported inside the functions that need them, so
a command loads only what it runs.
"""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from capsim.common.errors import ScenarioError

if TYPE_CHECKING:                  # rich is imported by the commands that print with it
    from rich.console import Console

    from capsim.report.terminal import FoldedTable


@contextmanager
def as_option(option: str, field: str | None = None):
    """A ScenarioError raised inside names the CLI option the user typed, not the scenario
    field it stands for: ``field`` (``pipeline_parallel_size``) in the message becomes
    ``option`` (``--pp``); a message without it is prefixed ``--option: ``. An error inside
    a file the option names reads ``--option FILE: YAML.PATH: message`` in one form, whether
    it is about a field (its path kept) or the file itself (missing, not YAML: no path)."""
    try:
        yield
    except ScenarioError as exc:
        raise option_error(exc, option, field) from None


def option_error(exc: ScenarioError, option: str, field: str | None = None) -> ScenarioError:
    """``exc`` naming ``option`` (see :func:`as_option`)."""
    if exc.file is not None:
        named = exc.file if exc.file.startswith(f"{option} ") else f"{option} {exc.file}"
        return ScenarioError(exc.message, file=named, path=exc.path)
    msg = exc.message
    if field and field in msg:
        return ScenarioError(msg.replace(field, option))
    return ScenarioError(msg if msg.startswith(option) else f"{option}: {msg}")


def make_console() -> Console:
    """A console as wide as the terminal, or as ``COLUMNS`` says; when output is piped
    without ``COLUMNS``, 200 columns (rich would assume 80 and fold every table)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal or "COLUMNS" in os.environ else Console(width=200)


def scenario_arg(f):
    """The ``SCENARIO`` argument: a scenario YAML's path."""
    return click.argument("scenario", type=click.Path(dir_okay=False, path_type=Path))(f)


def set_option(f):
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


def build_traces(loaded):
    """Every variant's trace (a :class:`~capsim.workload.TraceCache`), built before
    anything runs: one per distinct workload; then the work each variant's fleet would
    take is checked on it (:func:`capsim.sim.budget.check_work`), so ``capsim run`` and
    ``capsim validate`` refuse the same runs."""
    from capsim.sim.budget import check_work
    from capsim.workload import TraceCache

    traces = TraceCache(loaded.base_dir, str(loaded.path))
    for rc in loaded.runs:
        traces.get(rc.workload, rc.seed)
    check_work(loaded, traces)
    return traces


def variant_option(f):
    """``--variant NAME`` of ``capsim compare`` / ``capsim calibrate`` (:func:`pick_variant`)."""
    return click.option("--variant", help="Scenario variant to simulate [default: the first].")(f)


def run_option(f):
    """``--run N``: which run of a benchmark result file holding several."""
    return click.option("--run", "run_index", type=click.IntRange(min=0), metavar="N",
                        help="Which run of a result file holding several (appended JSON lines, "
                             "GuideLLM benchmarks, genai-perf experiments), from 0.")(f)


def pick_variant(loaded, name: str | None):
    """The RunConfig of variant ``name`` (the first when None)."""
    if name is None:
        return loaded.runs[0]
    for rc in loaded.runs:
        if rc.variant == name:
            return rc
    raise ScenarioError(f"--variant {name!r}: no such variant; valid: "
                        f"{', '.join(rc.variant for rc in loaded.runs)}", file=str(loaded.path))


def executor_options(f):
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


def executor_spec(executor: str, workers: int | None, scheduler: str | None):
    """The :class:`~capsim.studies.parallel.ExecutorSpec` the executor options give."""
    from capsim.studies.parallel import ExecutorSpec

    return ExecutorSpec(backend=executor, workers=workers, scheduler=scheduler)


@contextmanager
def progress_bar(console: Console, label: str):
    """Yields ``progress(done, total)`` drawing one bar over runs (``capsim sweep`` and
    ``capsim size``)."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)

    with Progress(TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("runs"), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def template_options(kind: str, default_base: str):
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


def emit_template(text: str, template: str | None, base: str | None, out_file: Path | None,
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


def load_from_option(loader, base: str):
    """``loader(base)`` for ``--template``'s ``--from BASE``; an error names ``--from``."""
    try:
        return loader(base)
    except ScenarioError as exc:
        raise exc.with_context(path="--from") from None


def listing(title: str, columns: list) -> "FoldedTable":
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


def checkpoint_text(m) -> str:
    """``mxfp4 experts``: the checkpoint's quantized tensor groups ("" for none)."""
    by: dict[str, list[str]] = {}
    for group, fmt in m.weight_formats.items():
        if fmt != "bf16":
            by.setdefault(fmt, []).append(group)
    return "; ".join(f"{fmt} {', '.join(groups)}" for fmt, groups in by.items())


class PercentileList(click.ParamType):
    """``--percentiles 50,90,99,99.9``: comma-separated percentiles, each 0..100, none
    repeated (vLLM's ``--metric-percentiles``); a tuple of floats in the order given."""

    name = "P,P,..."

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        text = str(value).strip()
        example = "give numbers from 0 to 100 separated by commas, e.g. 50,90,99,99.9"
        if not text:
            self.fail(f"empty; {example}", param, ctx)
        out: list[float] = []
        for part in text.split(","):
            try:
                q = float(part.strip())
            except ValueError:
                self.fail(f"{part.strip()!r} is not a number; {example}", param, ctx)
            if not 0 <= q <= 100:             # NaN fails too
                self.fail(f"{part.strip()} is not a percentile; {example}", param, ctx)
            if q in out:
                self.fail(f"{part.strip()} is given twice; {example}", param, ctx)
            out.append(q)
        if len(out) > MAX_PERCENTILES:
            self.fail(f"{len(out)} percentiles; at most {MAX_PERCENTILES} (each adds a column "
                      "per metric to summary.csv and to every latency table: 999 took a 5-s "
                      f"run past 50 s); {example}", param, ctx)
        return tuple(out)


#: Most ``--percentiles`` values: each is a column per metric (TTFT, TPOT, ITL, E2EL) in
#: summary.csv and in the terminal and HTML tables; a table of more is not read.
MAX_PERCENTILES = 20


def percentiles_option(f):
    """``--percentiles P,P,...`` of ``capsim run``, ``sweep`` and ``size``."""
    return click.option(
        "--percentiles", type=PercentileList(), default=None,
        help="Latency percentiles to report, vLLM's --metric-percentiles, e.g. 50,90,99,99.9: "
             "summary.csv gains p50_ttft_ms … p99.9_e2el_ms (vLLM's names; TTFT, TPOT, ITL, "
             "E2EL) and the tables show them [default: the usual columns; results.json: "
             "50,90,99,99.9].")(f)

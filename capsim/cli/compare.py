"""``capsim compare``: replay a benchmark client's measured requests through a
scenario variant; measured vs simulated TTFT / TPOT / ITL / E2E."""

from __future__ import annotations

from pathlib import Path

import click

from capsim import __version__
from capsim.common.errors import ScenarioError
from capsim.cli.common import (make_console, pick_variant, run_option, scenario_arg,
                               set_option)


def choose_variant(loaded, name: str | None):
    """The variant to replay: ``--variant NAME``, or the scenario's only one.

    A result file does not say how its server was configured (``vllm bench serve``,
    SGLang, GuideLLM, AIPerf and genai-perf save the client's settings: rate,
    concurrency, model name; not ``max_num_seqs`` or chunked prefill), so with several
    variants none is guessed: the first was rag_mix's ``static``, whose TPOT read -100 %
    against any streaming server.

    Raises:
        ScenarioError: several variants and no ``--variant`` (naming them), or an unknown
            name.
    """
    if name is None and len(loaded.runs) > 1:
        names = ", ".join(rc.variant for rc in loaded.runs)
        raise ScenarioError(f"the scenario has {len(loaded.runs)} variants and a result file "
                            f"does not say which the server ran: choose one with --variant "
                            f"(valid: {names})", file=str(loaded.path))
    return pick_variant(loaded, name)


@click.command(help="Replay a benchmark client's measured requests through a scenario variant; "
                    "print and write measured vs simulated TTFT / TPOT / ITL / E2E (CDFs and an "
                    "error table). RESULT: vllm bench serve, sglang.bench_serving, GuideLLM, "
                    "AIPerf or genai-perf output (format detected).")
@click.argument("result", type=click.Path(dir_okay=False, path_type=Path))
@scenario_arg
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Report directory [default: reports/compare-<result file name>].")
@click.option("--variant", help="Scenario variant to simulate; required when the scenario "
                                 "has several (a result file does not say which the server "
                                 "ran).")
@run_option
@click.option("--seed", type=click.IntRange(min=0),
              help="Seed of re-drawn arrivals (finite-rate runs without send times) "
                   "[default: the scenario's].")
@set_option
def compare(result: Path, scenario: Path, out_dir: Path | None, variant: str | None,
            run_index: int | None, seed: int | None, overrides: tuple[str, ...]) -> None:
    from capsim import report
    from capsim.calibrate.compare import compare as run_compare
    from capsim.calibrate.readers import read_result
    from capsim.report.compare import error_table, write
    from capsim.report.style import slug
    from capsim.scenario.load import dump_resolved, load

    loaded = load(scenario, list(overrides), seed)
    named = pick_variant(loaded, variant) if variant is not None else None
    measured = read_result(result, run_index)      # a bad file is said before a missing choice
    rc = named or choose_variant(loaded, None)
    out = out_dir or Path("reports") / f"compare-{slug(result.stem)}"
    report.check_out_dir(out)
    console = make_console()
    console.print(f"[bold]{measured.label}[/] {result}"
                  f"{f' ({measured.run_label})' if measured.run_label else ''}: "
                  f"{len(measured):,} requests, {int(measured.success.sum()):,} successful; "
                  f"simulating variant [bold]{rc.variant}[/] of {loaded.spec.name}")
    c = run_compare(rc, measured, seed=loaded.spec.seed)
    _refuse_nothing_to_compare(c, rc, loaded, result)
    notes = _notes(c, measured, rc)
    index = write(out, c, scenario_name=loaded.spec.name,
                  resolved_yaml=dump_resolved(loaded, __version__, loaded.spec.seed), notes=notes)
    console.print(c.replay.note)
    for line in notes:
        console.print(f"note: {line}")
    console.print(error_table(c))
    console.print(f"report: {index}")


def _refuse_nothing_to_compare(c, rc, loaded, result: Path) -> None:
    """Nothing left to compare when the variant rejected every successful request: an
    empty table and page would say nothing (as ``capsim run`` refuses a variant that
    completed no request), so say why and write nothing.

    Raises:
        ScenarioError: naming the result file, the variant and one reason.
    """
    from capsim.sim.simulate import group_reasons

    if c.rejected and not any(r.n_simulated for r in c.rows if r.metric == "ttft"):
        reasons = group_reasons(c.result.requests.reject_reason.tolist())
        example = f", e.g. {reasons[0][1]}" if reasons else ""
        raise ScenarioError(f"variant {rc.variant!r} of {loaded.spec.name} rejects every one of "
                            f"the {c.rejected:,} successful requests{example}: nothing to "
                            "compare; choose another --variant or raise its limits",
                            file=str(result))


def _notes(c, measured, rc) -> list[str]:
    """The reader's notes: the result reader's, then static batching, requests not
    replayed and requests the simulated engine rejected."""
    notes = list(measured.notes)
    if rc.static_batching:
        notes.append(f"Variant {rc.variant!r} runs static batching, which returns each reply "
                     "whole: its TPOT is 0 by construction (-100 %) and its ITL n/a (held "
                     "replies: no gap reaches the client); its TTFT and E2E compare, or choose "
                     "a streaming --variant.")
    if c.replay.dropped:
        notes.append(f"{c.replay.dropped:,} request(s) not replayed: no prompt length, no "
                     "output token or no send time (failed before the server answered).")
    if c.rejected:
        notes.append(f"{c.rejected:,} successful request(s) rejected by the simulated engine "
                     "(e.g. longer than max_model_len): left out of both distributions.")
    return notes

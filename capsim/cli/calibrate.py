"""``capsim calibrate``: fit a GPU profile's efficiencies and step overhead to
measured timings; write the calibrated profile and its fidelity page."""

from __future__ import annotations

from pathlib import Path

import click

from capsim.common.errors import ScenarioError
from capsim.cli.common import (as_option, make_console, option_error, pick_variant, run_option,
                               variant_option)


@click.command(help="Fit the hardware profile's efficiencies and step overhead to measured "
                    "timings; write the calibrated profile YAML and a fidelity report.")
@click.option("--hardware", "hw_name", required=True,
              help="Profile to start from (name or YAML path); also names the output.")
@click.option("--vidur", type=click.Path(file_okay=False, path_type=Path),
              help="Vidur profiling folder (e.g. ../shared/reference/vidur_profiling).")
@click.option("--vidur-device", help="Vidur compute folder (a100, h100) [default: from --hardware].")
@click.option("--vidur-network", help="Vidur network folder (a100_dgx, ...) [default: from --hardware].")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Plain CSV of measured operators (see docs/calibration.md).")
@click.option("--model", "model_name", help="Model the --csv operators were measured on.")
@click.option("--from", "--vllm-bench", "result", type=click.Path(dir_okay=False, path_type=Path),
              help="A benchmark result: vllm bench serve --save-result --save-detailed JSON, "
                   "sglang.bench_serving --output-details JSONL, GuideLLM report JSON or YAML, "
                   "AIPerf profile_export.jsonl or genai-perf profile_export.json (format "
                   "detected; --vllm-bench is the old name).")
@click.option("--scenario", type=click.Path(dir_okay=False, path_type=Path),
              help="Scenario whose variant's engine the --from server ran.")
@variant_option
@run_option
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
    from capsim.report.calibration import write_calibration_page

    from capsim.report.outdir import check_writable_dir

    with as_option("--hardware"):
        base = load_hardware(hw_name)
    check_writable_dir(out_dir or Path("reports") / f"calibration-{name or base.name}")
    run = pick_variant(load(scenario), variant) if scenario is not None else None
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
        raise option_error(exc, "--vidur") from None
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


def _load_model_option(name: str | None):
    """``--model NAME`` of ``capsim calibrate`` (None when not given)."""
    from capsim.profiles.models import load_model

    if name is None:
        return None
    with as_option("--model"):
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
    make_console().print(table)

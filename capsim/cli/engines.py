"""``capsim engines``: the engine presets, their memory rule, scheduler, host
overhead and defaults."""

from __future__ import annotations


import click

from capsim.cli.common import listing, make_console
from capsim.common.errors import ScenarioError


@click.command(help="List the engine presets: version, memory rule, scheduler and defaults. "
                    "With PRESET (a preset name or your own preset YAML): that preset's row "
                    "and each of its rules (all-reduce, fusions, kernel rules, CUDA graphs, "
                    "batch waiting) with its source.")
@click.argument("preset", required=False, metavar="[PRESET]")
def engines(preset: str | None) -> None:
    from capsim.profiles.engines import engine_preset_names, load_engine_preset

    if preset is not None:
        _one_preset(preset)
        return
    table = listing("Engine presets (engine: {preset: NAME}; vllm-v1 when none is named)",
                    _COLUMNS)
    for name in engine_preset_names():
        _add_row(table, name, load_engine_preset(name))
    make_console().print(table)


def _one_preset(preset: str) -> None:
    """``capsim engines PRESET``: the preset's row, then one line per rule
    (:func:`~capsim.scenario.preset_rules.preset_rules`) and its source, folded to the
    terminal; a preset file's own rules read as they would in a scenario."""
    from pathlib import Path

    from capsim.profiles.engines import engine_preset_names, load_engine_preset
    from capsim.scenario.paths import locate
    from capsim.scenario.preset_names import warn_shipped_name, warn_unknown_rule_names
    from capsim.scenario.profile_loading import preset_knob_error
    from capsim.scenario.preset_rules import preset_rules

    # a shipped name, or a file relative to here: the scenario's rule, with its messages
    # (a folder, a missing file, an unknown name with the valid ones)
    try:
        found = locate(preset, Path.cwd(), kind="engine preset", shipped=engine_preset_names(),
                       what="an engine preset YAML")
    except ScenarioError as exc:        # here a relative path is the working directory's
        raise ScenarioError(exc.message.replace("paths in a scenario are relative to the "
                                                "scenario's directory", "the working "
                                                "directory").replace(
            "relative to the scenario's directory", "relative to the working directory"),
            file=exc.file, path=exc.path) from None
    p = load_engine_preset(found)
    if preset not in engine_preset_names():   # a file of the user's: checked as run checks it
        err = preset_knob_error(p, Path(found))
        if err is not None:
            raise err
        warn_shipped_name(p, Path(found))
        warn_unknown_rule_names(p, Path(found), Path.cwd() / "capsim-engines", None)
    table = listing(f"Engine preset {p.name}", _COLUMNS)
    _add_row(table, preset, p)
    console = make_console()
    console.print(table)
    console.print(f"rules of {p.name} (each applies where it says; capsim run and capsim "
                  "validate name those that apply to a variant):", highlight=False)
    for rule in preset_rules(p):
        _indented(console, f"{rule.key}: {rule.text}", 2)
        source = rule.source or "none given (a preset file of your own may leave it out)"
        _indented(console, f"source: {source}", 4, style="dim")


def _indented(console, text: str, indent: int, style: str = "") -> None:
    """``text`` folded at spaces to the console, every line ``indent`` columns in and the
    lines after the first 2 more (:func:`~capsim.report.terminal.wrap_prose`)."""
    from capsim.report.terminal import wrap_prose

    for line in wrap_prose(text, max(console.width - indent, 20), 2):
        console.print(" " * indent + line, style=style, highlight=False, markup=False,
                      soft_wrap=True)


#: ``capsim engines``' columns (name first, added by :func:`listing`).
_COLUMNS = [("engine", True), ("version", True), ("memory rule", True), ("scheduler", True),
            ("host overhead", True), ("defaults", True)]


def _add_row(table, name: str, p) -> None:
    """One preset's row: ``name`` as given (an alias shows the preset it names)."""
    defaults = ", ".join(f"{k} {v}" for k, v in p.defaults.items() if k != "scheduler")
    for c in p.conditional_defaults:
        when = ", ".join(f"{k} {v}" for k, v in c.when.model_dump(exclude_none=True).items())
        defaults += f"; if {when}: " + ", ".join(f"{k} {v}" for k, v in c.set.items())
    if p.dataset_tuning is not None:
        defaults += ("; max_num_seqs, max_num_batched_tokens, max_model_len from the "
                     "workload's lengths and the GPUs (trtllm-bench's estimate)")
    # an alias file loads the preset it names: show both names
    shown = name if p.name == name else f"{name} (= {p.name})"
    table.add_row(shown, p.display_name, p.version,
                  f"{p.memory.rule} ({p.memory.fraction_knob})", p.scheduler.policy,
                  _host_text(p.host_overhead) + _graph_text(p.piecewise_cuda_graph),
                  defaults)


def _host_text(h) -> str:
    """``1.05 ms/step, serial; 8.3 ms before scheduling``: the non-zero host terms (and
    ``; tokens streamed after the next step's host work`` with asynchronous output
    processing)."""
    terms = [f"{v * 1e3:g} ms/{unit}" for v, unit in ((h.per_step_s, "step"),
                                                       (h.per_seq_s, "sequence"),
                                                       (h.per_prefill_token_s, "prompt token"),
                                                       (h.per_extra_tp_worker_s,
                                                        "step per TP worker beyond the first"),
                                                       (h.eager_prefill_op_s,
                                                        "operator of an eager prefill (floor)"))
             if v]
    overlap = h.overlap + (f" (+{h.residual_s * 1e3:g} ms)" if h.residual_s else "") \
        + (" (engine.async_scheduling)" if h.async_scheduling_knob else "")
    text = ", ".join([*terms, overlap])
    if h.draft_launch_s:
        runs = {"none": "eager", "piecewise": "in piecewise CUDA graphs",
                "full": "in CUDA graphs"}[h.draft_cuda_graph]
        text += (f"; drafter {runs}, {h.draft_launch_s * 1e6:g} us/kernel launched from "
                 f"Python ({h.draft_step_launches} a step, {h.draft_pass_launches} a pass "
                 f"+ {h.draft_update_launches} between passes)")
    if h.request_before_s:
        text += f"; {h.request_before_s * 1e3:g} ms before scheduling"
    if h.eager_decode_above_graph_bs:
        text += (f"; decode batches above the largest capture size eager "
                 f"({h.eager_decode_op_s * 1e6:g} us/operator floor)" if h.eager_decode_op_s
                 else "; decode batches above cuda_graph_max_bs eager (the same floor)")
    if h.async_output_proc:
        text += "; tokens streamed after the next step's host work"
    if h.outputs_wait_step_return:
        text += ("; a reply ending inside a multi-step window streams at its end or the next "
                 "arrival")
    return text


def _graph_text(g) -> str:
    """``; piecewise CUDA graph on cuda: the floor only above 2048 tokens for MLA models, never
    for others (off: deepseek_v3 on b200, DP attention, PP)``; empty without such a graph."""
    if g is None:
        return ""
    off = [f"{'/'.join(o.model_types)} on {'/'.join(o.hardware)}" for o in g.off_on]
    return (f"; piecewise CUDA graph on {', '.join(g.platforms)}: the floor only above "
            f"{g.mla_max_tokens} tokens for MLA models, never for others (off: "
            f"{', '.join([*off, 'DP attention', 'PP'])})")

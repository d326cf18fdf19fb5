"""``capsim engines``: the engine presets, their memory rule, scheduler, host
overhead and defaults."""

from __future__ import annotations


import click

from capsim.cli.common import listing, make_console


@click.command(help="List the engine presets: version, memory rule, scheduler and defaults.")
def engines() -> None:
    from capsim.profiles.engines import engine_preset_names, load_engine_preset

    table = listing("Engine presets (engine: {preset: NAME}; vllm-v1 when none is named)", [
        ("engine", True), ("version", True), ("memory rule", True), ("scheduler", True),
        ("host overhead", True), ("defaults", True)])
    for name in engine_preset_names():
        p = load_engine_preset(name)
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
    make_console().print(table)


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

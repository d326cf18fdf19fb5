"""``capsim shapes``: the shipped workload shapes (a public dataset's request lengths) a
scenario names as ``workload.classes[i].shape``."""

from __future__ import annotations

import click

from capsim.cli.common import listing, make_console


@click.command(help="List the workload shapes a request class may name (workload.classes[i]."
                    "shape: NAME): a public dataset's prompt and output lengths, drawn "
                    "jointly, with the dataset's filter.")
def shapes() -> None:
    from capsim.profiles.shapes import load_shape, shape_names

    table = listing("Workload shapes (workload.classes.N.shape: NAME, instead of "
                    "prompt_tokens and output_tokens)", [
                        "prompt\nmedian", "prompt\nmean", "output\nmedian", "output\nmean",
                        "rank\ncorr", ("filter", True), ("tokenizer", True), ("what", True)])
    for name in shape_names():
        s = load_shape(name)
        f = s.filter
        mid = s.quantiles.index(0.5) if 0.5 in s.quantiles else None
        table.add_row(name, _at(s.prompt_tokens, mid), _mean(s.fit, "prompt"),
                      _at(s.output_tokens, mid), _mean(s.fit, "output"),
                      f"{s.rank_correlation:+.2f}",
                      f"{f.min_tokens} <= prompt <= {f.max_prompt_tokens}, output >= "
                      f"{f.min_tokens}, prompt + output <= {f.max_total_tokens}",
                      s.tokenizer, s.description)
    make_console().print(table)
    click.echo("tokens per request; lengths beyond the engine's max_model_len are rejected as "
               "the engine rejects them. Sources: capsim/profiles/data/workloads/NAME.yaml.")


def _at(values: list[float], i: int | None) -> str:
    return "-" if i is None else f"{values[i]:.0f}"


def _mean(fit: dict, which: str) -> str:
    """The shape's mean from its fit block (``mean_prompt_tokens: {shape: 204.2}``)."""
    value = (fit.get(f"mean_{which}_tokens") or {}).get("shape")
    return "-" if value is None else f"{value:.0f}"

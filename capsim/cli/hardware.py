"""``capsim hardware``: the GPU profiles and their datasheet numbers, or a template
for your own (``--template NAME``)."""

from __future__ import annotations

from pathlib import Path

import click

from capsim.cli.common import (emit_template, listing, load_from_option, make_console,
                               template_options)


@click.command(help="List the GPU profiles and their key datasheet numbers, or write a "
                    "template for your own (--template NAME).")
@template_options("GPU profile", "h100-sxm")
def hardware(template: str | None, base: str | None, out_file: Path | None) -> None:
    from capsim.profiles.hardware import hardware_names, list_hardware, load_hardware
    from capsim.profiles.template import check_template_name, hardware_template

    if template is not None:
        check_template_name(template, hardware_names(), "GPU profile")
        text = hardware_template(template, load_from_option(load_hardware, base or "h100-sxm"))
    if emit_template(text if template is not None else "", template, base, out_file, "GPU"):
        return
    table = listing("GPU profiles (dense peak; per-direction link bandwidth)", [
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
    console = make_console()
    console.print(table)
    tables: dict[str, list[str]] = {}
    for hw in list_hardware():
        for kernel in hw.all_reduce_tables:
            tables.setdefault(kernel, []).append(hw.name)
    if tables:
        console.print("measured all-reduce tables (a preset naming one prices NCCL's ring on "
                      "the other GPUs; nccl: messages above an engine's custom all-reduce "
                      "limit, the ring where a GPU has none):\n"
                      + "\n".join(f"  {k}: {', '.join(v)}" for k, v in sorted(tables.items())),
                      highlight=False)
    derived = [_derived_line(hw) for hw in list_hardware() if hw.derivation is not None]
    if derived:
        console.print("derived curves (efficiencies carried over, not measured on the GPU):\n"
                      + "\n".join(derived), highlight=False)


def _derived_line(hw) -> str:
    """``"  mi325x: attention_prefill, ... from h100-sxm; gemm, ... mi300x's (the same die)"``."""
    d = hw.derivation
    line = f"  {hw.name}: {', '.join(d.classes)} from {d.from_profile}"
    if d.same_die is not None:
        line += f"; {', '.join(d.same_die.classes)} {d.same_die.from_profile}'s (the same die)"
    return line

"""``capsim models``: the model presets and their shapes, or a template for your own
(``--template NAME``)."""

from __future__ import annotations

from pathlib import Path

import click

from capsim.cli.common import (checkpoint_text, emit_template, listing, load_from_option,
                               make_console, template_options)


@click.command(help="List the model presets: total and active parameters, experts, attention, "
                    "KV bytes per token; or write a template for your own (--template NAME; a "
                    "scenario may also name a Hugging Face config.json).")
@template_options("model", "llama-3.1-8b")
def models(template: str | None, base: str | None, out_file: Path | None) -> None:
    from capsim.profiles.models import list_models, load_model, model_names
    from capsim.profiles.template import check_template_name, model_template

    if template is not None:
        check_template_name(template, model_names(), "model")
        text = model_template(template, load_from_option(load_model, base or "llama-3.1-8b"))
    if emit_template(text if template is not None else "", template, base, out_file, "model"):
        return
    table = listing("Model presets (bf16 weights and KV; a checkpoint's own formats where it "
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
    make_console().print(table)
    click.echo("active: parameters one token uses, embedding table excluded. KV: all layers "
               "per token; 'paged' where vLLM frees sliding-window blocks.")


def _weights_text(m) -> str:
    """GiB of the weights: bf16, or the checkpoint's formats by tensor group (gpt-oss-120b:
    ``60.8 (mxfp4 experts)``, its published checkpoint size)."""
    if not m.weight_formats:
        return f"{m.weight_bytes(2) / 2**30:.1f}"
    from capsim.kv.memory import weight_bytes_per_gpu

    return f"{weight_bytes_per_gpu(m, 1, 2) / 2**30:.1f} ({checkpoint_text(m)})"


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

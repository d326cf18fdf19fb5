"""``capsim roofline``: price one engine step with the roofline, operator by
operator (TP, PP, EP, DP attention, a weight format, an engine preset's all-reduce)."""

from __future__ import annotations

import click

from capsim.common.errors import ScenarioError
from capsim.cli.common import as_option, checkpoint_text, make_console, option_error


#: What a roofline error speaks of → the option that set it (the pricer's messages use the
#: scenario's names, shared with ``capsim run``).
_ROOFLINE_OPTIONS = (("pipeline_parallel_size", "--pp"), ("tensor_parallel_size", "--tp"),
                     ("expert parallel", "--ep"), ("data-parallel attention", "--dp-attention"),
                     ("quantization", "--quantization"), ("moe_routing_skew", "--routing-skew"))


@click.command(help="Price one engine step with the roofline: FLOPs, bytes, intensity, time, "
                    "bound.")
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
    from capsim.cost.describe import describe_step
    from capsim.profiles.engines import load_engine_preset
    from capsim.profiles.hardware import load_hardware
    from capsim.profiles.models import load_model

    # The names first: an unknown model or GPU is the error to see, whatever else is wrong.
    with as_option("--model"):
        model = load_model(model_name)
    with as_option("--hardware"):
        hw = load_hardware(hw_name)
    _check_step_options(prefill_tokens, decode_batch, context, routing_skew)
    _check_step_size(model, prefill_tokens, decode_batch, context)
    _check_parallelism(model, hw, tp, pp, expert_parallel, dp_attention)
    with as_option("--preset"):
        preset = load_engine_preset(preset_name)
    all_reduce = preset.tp_all_reduce
    try:
        d = describe_step(model, hw, tp, prefill_tokens=prefill_tokens,
                          decode_batch=decode_batch, context=context, ideal=ideal,
                          routing_skew=routing_skew, quantization=quantization, pp=pp,
                          expert_parallel=expert_parallel, dp_attention=dp_attention,
                          all_reduce=all_reduce, engine=preset.engine,
                          shared_experts_fusion=preset.shared_experts_fusion,
                          absorbed_bmm_dequant=preset.absorbed_bmm_dequant,
                          untuned_fp8_gemm=preset.untuned_fp8_gemm,
                          all_reduce_fusion=preset.all_reduce_fusion,
                          moe_build=preset.grouped_gemm_fp8_engine)
    except ScenarioError as exc:
        option, field = next(((o, f) for f, o in _ROOFLINE_OPTIONS if f in exc.message),
                             (None, None))
        if option is None:
            raise
        raise option_error(exc, option, field if " " not in field else None) from None
    _print_step(d, model.name, hw.name, tp, ideal, preset.name, _keeps_batches_in_flight(preset))
    _warn_if_it_does_not_fit(model, hw, tp, pp, decode_batch * context + prefill_tokens,
                             quantization)


def _check_step_options(prefill_tokens: int, decode_batch: int, context: int,
                        routing_skew: float) -> None:
    """A step to price: some tokens, a context for the decoders, a finite routing skew.

    Raises:
        ScenarioError: naming the option.
    """
    if prefill_tokens == 0 and decode_batch == 0:
        raise ScenarioError("nothing to price: --prefill-tokens and --decode-batch are both 0; "
                            "give --prefill-tokens N and/or --decode-batch B --context C")
    if decode_batch and not context:
        raise ScenarioError(f"--decode-batch {decode_batch} needs --context C: the tokens each "
                            "decoding sequence attends over (>= 1)")
    from capsim.cost.experts import check_routing_skew

    check_routing_skew(routing_skew, "--routing-skew")


def _check_step_size(model, prefill_tokens: int, decode_batch: int, context: int) -> None:
    """A step a server could run: each decoding sequence's context within the model's
    positions (vLLM refuses a max_model_len beyond them), token counts within
    ``MAX_TOKENS`` (a step of 1e11 tokens printed a table and a "does not fit" warning).

    Raises:
        ScenarioError: naming the option and its valid range.
    """
    from capsim.common.schema import MAX_TOKENS

    if context > model.max_position_embeddings:
        raise ScenarioError(f"--context {context:,} exceeds {model.name}'s "
                            f"max_position_embeddings {model.max_position_embeddings:,}; valid: "
                            f"1 to {model.max_position_embeddings:,}")
    for option, value in (("--prefill-tokens", prefill_tokens), ("--decode-batch", decode_batch),
                          ("--decode-batch × --context", decode_batch * context)):
        if value > MAX_TOKENS:
            raise ScenarioError(f"{option} {value:,} is more tokens than one step can hold; "
                                f"valid: at most {MAX_TOKENS:,}")


def _check_parallelism(model, hw, tp: int, pp: int, expert_parallel: bool,
                       dp_attention: bool) -> None:
    """``--tp`` divides the model's heads and fits one node or whole nodes,
    ``--pp`` leaves each stage a layer: the rules ``capsim run`` applies, in option words.

    Raises:
        ScenarioError: naming ``--tp`` or ``--pp``.
    """
    from capsim.cost.operators import check_tensor_parallel, pp_layer_partition

    with as_option("--tp", "tensor_parallel_size"):
        check_tensor_parallel(model, tp)
    try:
        hw.check_tp_nodes(tp)            # within one node, or whole nodes
    except ScenarioError as exc:         # in roofline's words: its options, no scenario
        raise option_error(exc, "--tp", "tensor_parallel_size") from None
    with as_option("--pp", "pipeline_parallel_size"):
        pp_layer_partition(model.num_hidden_layers, pp)


def _warn_if_it_does_not_fit(model, hw, tp: int, pp: int, kv_tokens: int,
                             quantization: str | None) -> None:
    """A price is not a fit: say so (on stderr) when the weights and this step's KV
    exceed one GPU's memory."""
    from capsim.kv.memory import weight_bytes_per_gpu
    from capsim.profiles.quantization import load_quant_format

    weights = model.weight_bytes() / tp if quantization is None and not model.weight_formats \
        else weight_bytes_per_gpu(model, tp, 2, quant=load_quant_format(quantization)
                                  if quantization else None)
    need = (weights + kv_tokens * model.kv_bytes_per_token() / tp) / pp   # ≈ one stage's
    if need > hw.hbm_bytes:
        click.echo(f"warning: does not fit: {need / 2**30:,.1f} GiB per GPU of "
                   f"{quantization or checkpoint_text(model) or 'bf16'} weights and "
                   f"KV for {kv_tokens:,} tokens > {hw.hbm_bytes / 2**30:,.1f} GiB on {hw.name}",
                   err=True)


def _keeps_batches_in_flight(preset) -> bool:
    """Whether the preset's scheduling policy keeps up to PP batches in flight under
    pipeline parallelism (vLLM's continuous batching; SGLang's, TensorRT-LLM's, TGI's and
    static batching run one at a time: :mod:`capsim.engine.pipeline`)."""
    from capsim.profiles.policies import policy_capabilities

    return policy_capabilities(preset.scheduler.policy).pipelining


def _print_step(d: dict, model: str, hw: str, tp: int, ideal: bool, preset: str = "vllm-v1",
                in_flight: bool = True) -> None:
    from rich.table import Table

    console = make_console()
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
    _print_notes(console, d, preset)


def _print_notes(console, d: dict, preset: str) -> None:
    """The lines under the table: the matmuls the preset's untuned block-fp8 GEMM floors, the
    experts a MoE step reads."""
    f = d.get("k_loop_floor")
    if f:
        rows = {op["name"] for op in d["operators"]}
        names = ", ".join(n for n in f["matmuls"] if n in rows)
        console.print(f"{names}: at least {preset}'s untuned block-fp8 GEMM floor "
                      f"(untuned_fp8_gemm: ceil(K / {f['block_k']}) steps × "
                      f"{f['k_step_s'] * 1e6:.3f} µs a layer): where longer, it is both their "
                      "compute and memory ms")
    e = d.get("experts")
    if e:
        console.print(f"experts: {e['hit']:,.1f} of {e['num_experts']} read per MoE layer "
                      f"({e['tokens']:,} tokens × top-{e['top_k']}; "
                      f"{e['hit'] / e['num_experts']:.0%} of the expert weights)"
                      + ("; the shared expert runs among them (SGLang's shared-experts fusion)"
                         if e["shared_fused"] else ""))

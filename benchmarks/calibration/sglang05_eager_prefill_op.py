"""SGLang 0.5's eager-prefill floor (``host_overhead.eager_prefill_op_s`` of the sglang-0.5
preset): the shipped derivation, and every published eager DeepSeek-V3 / R1 / Kimi-K2 figure
found to check it against.

SGLang 0.5 runs prefill (extend) forwards outside CUDA graphs unless
``--enable-piecewise-cuda-graph`` (off by default in the 0.5.7 wheel's server_args.py), so a
short prefill lasts its operators' launches. The shipped figure is one forward log:
sgl-project/sglang PR 12160 (2025-10-26), DeepSeek-V3 with TP prefilling 1 new token in
82.64 ms eagerly (23.10 ms replayed from a piecewise graph; GPU not stated), over capsim's
operators of one DeepSeek-V3 forward (:attr:`capsim.cost.operator_terms.OperatorTerms.
eager_operators`, 546; 488 had SGLang fused the shared expert into the routed experts' kernel,
which the log does not say).

The rule a replacement figure had to meet, fixed before any figure was run against a test row:
SGLang 0.5.x without the piecewise graph; DeepSeek-V3 / R1 or Kimi-K2 (the same layers);
one node (TP <= 8: a TP 16 forward adds two inter-node all-reduces per layer); its GPU and
prompt length stated; a forward time, or a concurrency-1 client TTFT from which the parts that
are not the forward can be taken off; not a row of a capsim measured case
(benchmarks/fidelity/fit_test_split.yaml, ../shared/reference/measured/cases.yaml). Where
sources met it and disagreed, a forward log would be preferred to a client TTFT (fewer parts
to take off) and a stated GPU to an unstated one.

:data:`EXTERNAL` lists what was found. The rows that would settle it, the same server with and
without the piecewise graph at concurrency 1 (PRs 12996 and 13466), could not be read in full.
One row meets the rule: the SGLang cookbook's Kimi-K2-Instruct on 8 x B200 under 0.5.6.post1
(mean c1 TTFT 141.22 ms at ~195-token ShareGPT prompts), with DP attention 4 and as a client
TTFT. Charging all of it but ``request_before_s`` to launches gives 242.55 us per operator
(:func:`implied_op_s`; 1.60 x PR 12160) — an upper bound, because a client TTFT holds more than
the forward: PR 13466's graphed c1 TTFT (92.94 ms at 1,024 tokens, so not launch-bound) less
capsim's graph-run 1,024-token forward leaves 28-49 ms (H200 / B200) that is neither launches
nor compute; taking that off instead gives 168.94-204.84 us (:func:`graphed_bracket_op_s`;
1.12-1.37 x). The choice: PR 13466 names no GPU, so the cookbook row's non-forward part can be
bracketed but not taken off, and the row fails the rule's last clause; it stays a cross-check,
and the shipped value stays PR 12160's forward log, 10-27 % below the bracket (38 % below the
upper bound). The bracket's own gap (tens of ms a c1 TTFT holds beyond the forward, above the
preset's 8.3 ms ``request_before_s``) is a per-request term, not a per-operator one, and is
left open.

Where the floor stops applying: from the 0.5.10 wheel on, server_args.py has
``disable_piecewise_cuda_graph: bool = False`` (0.5.9: ``enable_piecewise_cuda_graph: bool =
False``; sgl-project/sglang PR 16331, merged 2026-03-02), and ``_handle_piecewise_cuda_graph``
keeps it on for DeepseekV3ForCausalLM on CUDA unless DP attention, an A2A MoE backend, PP,
EPLB, disaggregation or the other listed cases turn it off (configs/model_config.py
``piecewise_cuda_graph_disabled_model_archs`` names DeepSeek-V3.2, not V3), capturing prefills
of up to 2,048 tokens for MLA models (``piecewise_cuda_graph_max_tokens``; the same in the
0.5.12 wheel). SGLang 0.5.10 and later prefill such DeepSeek-V3 / R1 batches from graphs, not
eagerly: the sglang-0.5.10 preset keeps this floor only above the graph's limit and where SGLang
turns the graph off (its ``piecewise_cuda_graph``).

Usage: python benchmarks/calibration/sglang05_eager_prefill_op.py   (prints op_s and the table)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

PR12160_EAGER_S = 82.64e-3     # 1 new token, eager forward cost logged by the scheduler
PR12160_GRAPH_S = 23.10e-3     # the same from a piecewise CUDA graph
PRESET = "sglang-0.5"
DSV3_OPERATORS = 3 * 8 + 58 * 9    # capsim's count: 3 dense layers x 8, 58 MoE layers x 9
# Kimi-K2 (config.json: 61 layers, first_k_dense_replace 1, 384 routed experts + 1 shared):
# DeepSeek-V3's layers with 1 dense and 60 MoE; no shared-expert fusion (SGLang fuses only
# at 256 routed experts, models/deepseek_v2.py determine_num_fused_shared_experts)
KIMI_K2_OPERATORS = 1 * 8 + 60 * 9
PR13466_GRAPH_TTFT_S = 92.937e-3   # Kimi-K2 TP 8, 1,024 tokens, piecewise graph, median
PR13466_PROMPT = 1024


@dataclass(frozen=True)
class Figure:
    """One published figure: ``seconds`` is None where the table could not be read in full
    from the stored copy of the page; ``kind`` is "forward" (a logged forward) or "ttft_c1"
    (a client's median / mean TTFT at concurrency 1); ``operators`` capsim's count of the
    model's forward."""

    source: str
    model: str
    gpu: str | None
    tp: int
    sglang: str
    prompt_tokens: int
    graph: bool
    kind: str
    seconds: float | None
    operators: int
    verdict: str


EXTERNAL: tuple[Figure, ...] = (
    Figure("sgl-project/sglang PR 12160 (2025-10-26), scheduler log", "DeepSeek-V3", None,
           8, "main, 2025-10-26", 1, False, "forward", PR12160_EAGER_S, DSV3_OPERATORS,
           "shipped: a forward log of 0.5-era SGLang; GPU and shared-expert fusion unstated"),
    Figure("sgl-project/sgl-cookbook docs/autoregressive/Moonshotai/Kimi-K2.md at 0abf8552, "
           "5.1.1 (bench_serving ShareGPT, 10 prompts, 1,951 input tokens)",
           "Kimi-K2-Instruct", "b200", 8, "0.5.6.post1", 195, False, "ttft_c1", 141.22e-3,
           KIMI_K2_OPERATORS,
           "cross-check: meets the rule but runs DP attention 4 and is a client TTFT "
           "(median 158.28 ms); its non-forward part is not known (see graphed_bracket_op_s)"),
    Figure("tenstorrent/tt-inference-server issue 356, comment of 2025-07-09 (SGLANG + "
           "INFINIBAND)", "DeepSeek-R1-0528", "h100-sxm", 16, "2025-07 release (0.4.x)", 128,
           False, "ttft_c1", 179.7e-3, DSV3_OPERATORS,
           "rejected: SGLang 0.4.x, TP 16 over two nodes (inter-node all-reduces in the "
           "forward); 184.1 / 190.5 / 200.4 / 199.7 ms at 128 / 2,048 / 3,072 / 4,096 tokens"),
    Figure("sgl-project/sglang PR 12996 (2025-11-10), 'w/o piecewise cuda graph' table",
           "DeepSeek-R1-0528", None, 8, "main, 2025-11-10", 1024, False, "ttft_c1",
           None, DSV3_OPERATORS, "not read: the stored copies end before the c1 row; GPU "
           "unstated"),
    Figure("sgl-project/sglang PR 13466 (2025-11-18), 'Before' table", "Kimi-K2-Instruct-0905",
           None, 8, "main, 2025-11", 1024, False, "ttft_c1", None, KIMI_K2_OPERATORS,
           "not read: the stored copies end before the c1 row; GPU unstated"),
    Figure("sgl-project/sglang PR 13466 (2025-11-18), 'After' table", "Kimi-K2-Instruct-0905",
           None, 8, "main, 2025-11", PR13466_PROMPT, True, "ttft_c1", PR13466_GRAPH_TTFT_S,
           KIMI_K2_OPERATORS,
           "context only: WITH the piecewise graph (mean 95.154 ms); bounds what the client "
           "TTFT holds beyond a graphed forward, GPU unstated"),
    Figure("sgl-project/sglang PR 13287 (2025-11), main branch row", "Kimi-K2-Thinking", None,
           8, "main, 2025-11", 1200, False, "ttft_c1", None, KIMI_K2_OPERATORS,
           "not read: the stored copy ends before the table's rows; GPU unstated"),
)


def deepseek_pricer(gpu: str = "h200-sxm", tp: int = 8) -> StepPricer:
    """capsim's DeepSeek-V3 FP8 (block scales) pricer without host terms."""
    return StepPricer(load_model("deepseek-v3"), load_hardware(gpu), tp,
                      quantization="fp8_block")


def eager_op_s() -> float:
    """Seconds per operator of an eager DeepSeek-V3 forward: PR 12160's 1-token prefill over
    capsim's operator count (the count does not depend on the GPU or TP)."""
    return PR12160_EAGER_S / deepseek_pricer().terms.eager_operators


def implied_op_s(figure: Figure, other_s: float | None = None) -> float | None:
    """The per-operator floor ``figure`` would give if all of it but ``other_s`` (default:
    the preset's ``request_before_s`` for a client TTFT, nothing for a forward) were
    launches; None without a number or for a figure run with the piecewise graph (its
    forward is not launch-bound)."""
    if figure.seconds is None or figure.graph:
        return None
    if other_s is None:
        other_s = load_engine_preset(PRESET).host_overhead.request_before_s \
            if figure.kind == "ttft_c1" else 0.0
    return (figure.seconds - other_s) / figure.operators


def graphed_bracket_op_s(gpus: tuple[str, ...] = ("h200-sxm", "b200")) -> dict[str, float]:
    """The Kimi-K2 B200 cookbook row's per-operator floor with the non-forward part of a
    client TTFT taken from PR 13466's graphed row instead: PR 13466's c1 TTFT less capsim's
    graph-run 1,024-token prefill (DeepSeek-V3 standing in for Kimi-K2, which capsim has no
    profile of) on each GPU PR 13466 may have run on (it names none)."""
    kimi = next(f for f in EXTERNAL if f.model == "Kimi-K2-Instruct")
    out = {}
    for gpu in gpus:
        n = PR13466_PROMPT
        forward_s = deepseek_pricer(gpu).cost(prefill_tokens=n, prefill_attn_pairs=n * n / 2,
                                              prefill_kv_tokens=n).seconds
        out[gpu] = implied_op_s(kimi, PR13466_GRAPH_TTFT_S - forward_s)
    return out


def main() -> int:
    op_s = eager_op_s()
    shipped = load_engine_preset(PRESET).host_overhead.eager_prefill_op_s
    print(f"eager_prefill_op_s = {op_s * 1e6:.2f} us (PR 12160, "
          f"{deepseek_pricer().terms.eager_operators} operators); shipped {shipped * 1e6:.2f} us")
    for f in EXTERNAL:
        implied = implied_op_s(f)
        shown = "-" if implied is None else f"{implied * 1e6:7.2f} us ({implied / op_s:.2f}x)"
        ms = "-" if f.seconds is None else f"{f.seconds * 1e3:.1f} ms"
        print(f"{f.model:22s} {f.gpu or '?':9s} TP {f.tp:2d} {f.prompt_tokens:5d} tok "
              f"{'graph' if f.graph else 'eager'} {f.kind:8s} {ms:>9s} -> {shown}\n"
              f"    {f.source}: {f.verdict}")
    for gpu, bracket in graphed_bracket_op_s().items():
        print(f"Kimi-K2 B200 row, non-forward part from PR 13466 on {gpu}: "
              f"{bracket * 1e6:.2f} us ({bracket / op_s:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

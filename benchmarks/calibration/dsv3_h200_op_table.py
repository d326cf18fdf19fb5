"""DeepSeek-V3 / R1 FP8 at TP 8 on 8 x H200, one engine step priced per operator group: capsim's
pricer against aiconfigurator's measured per-op tables for the same op and shape.

aiconfigurator (ai-dynamo/aiconfigurator, Apache-2.0) times each operator of a serving engine on
the GPU (collector/<backend>/collect_*.py) and stores the times as parquet tables under
``aic-core/src/aiconfigurator_core/systems/data/h200_sxm/<op>/<backend>/<version>/``; its
DeepSeek model (``aic-core/src/aiconfigurator_core/sdk/models/deepseek.py``) sums them per step:
for a context (prefill) step ``add_norm_1``, the fused ``q_a + kv_a`` GEMM (2,112 x 7,168), the
``q_b`` (3,072 / TP x 1,536) and ``kv_b`` (4,096 / TP x 512) GEMMs, the context MLA attention
(128 / TP heads), ``o_proj`` (7,168 x 2,048 / TP), ``add_norm_2``, the shared expert (gate-up
4,096 / TP x 7,168, SiLU, down 7,168 x 256), the bf16 router GEMM (256 x 7,168), the fused MoE
(top-8 of 256, ``moe_tp_size`` TP) between two all-reduces of the hidden states
(``MoEDispatch``: SGLang's custom all-reduce, ``aic-core/rust/aiconfigurator-core/src/operators/
moe_dispatch.rs``) and the LM head; a decode step the same with the absorbed MLA (``mla_bmm``
pre / post and the generation MLA table) in place of ``kv_b`` and context attention. aiconfigurator
charges all 61 layers as MoE layers; this table charges the 3 dense layers their own MLP GEMMs
(18,432 / TP wide) and the 58 MoE layers the experts, as capsim does.

Groups (both sides; milliseconds per step, summed over the layers):

- ``mla_attention``: capsim ``attention_prefill`` / ``attention_decode`` vs the context /
  generation MLA table (bf16 KV; decode at ``DECODE_CONTEXT`` keys);
- ``qkvo_proj``: q_a_kv_a, q_b, kv_b, o_proj vs the GEMM table at those shapes (decode: the
  absorbed ``mla_bmm`` pre and post in kv_b's place, capsim's ``kv_b_proj`` row being the same
  weights);
- ``dense_mlp``: the 3 dense layers' gate-up and down vs the GEMM table;
- ``router``: the bf16 router GEMM;
- ``routed_moe + shared``: capsim ``experts`` and ``shared_expert`` (SGLang fuses the shared
  expert into the routed experts' kernel as a 257th expert: one row) vs the fused-MoE table
  (balanced routing where the version has it, else power_law_1.01) plus the shared expert's
  GEMMs (also printed alone as ``shared_expert``);
- ``all_reduce``: capsim's TP communication vs 2 per layer of the backend's own all-reduce
  table (NCCL's table, comm/nccl/2.26.2, where the backend's does not reach);
- ``elementwise``: capsim ``elementwise`` (+ embedding) vs aiconfigurator's analytic memory op
  (it has no table: bytes / (HBM x scaling) + a constant; printed, not measured);
- ``host / launch``: capsim's step overhead and eager-prefill floor; aiconfigurator has none.

Tables are read straight from the mirror's git objects (``git show COMMIT:path``), never copied
into capsim; pandas reads parquet through pyarrow (install it in your own venv for this script;
it is not a capsim dependency).

Usage:
    python benchmarks/calibration/dsv3_h200_op_table.py MIRROR_GIT_DIR [--commit 095f58a51]
        [--backend sglang|vllm|trtllm] [--version V] [--prompt-tokens P]
        [--decode-batches 64,256,512,1024] [--decode-context C] [--decode-only]

``MIRROR_GIT_DIR`` is a git directory of ai-dynamo/aiconfigurator (e.g. the ``fetch`` mirror's
``repo``); ``--backend`` the engine whose tables and capsim preset are compared (sglang:
sglang-0.5, TP 8; vllm: vllm-0.11, TP 8; trtllm: trtllm, TP 8 EP 8, as the measured
deployments ran); ``--version`` its table set (BACKENDS; default the oldest, the nearest to
the measured engines; a table missing there is taken from the nearest version that has it,
named in the output); ``--prompt-tokens`` splits each prefill step into prompts of P tokens
(default: one prompt); ``--decode-batches`` the decode steps' sequence counts (default 64, 256,
512) and ``--decode-context`` the keys each decoding sequence reads (default 2,048);
``--decode-only`` prints the decode columns alone (the wide-batch study of issue 30: 1,000
ShareGPT prompts decode at ~300-500 keys).
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd

from capsim.common.yamlio import load_yaml
from capsim.cost.operators import attn_pairs
from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

DATA = "aic-core/src/aiconfigurator_core/systems/data/h200_sxm"
#: Each backend's table versions (aiconfigurator's directories), its capsim preset, whether
#: the experts run expert-parallel (the measured TensorRT-LLM deployment: --ep_size 8) and
#: the kernel_source of its tables where they hold several.
#: ``bmm``: the absorbed MLA batched GEMMs' dtype the engine runs. SGLang on CUDA dequantises
#: DeepSeek's 128 x 128 block-fp8 kv_b_proj to bf16 once (post_load_weights,
#: block_quant_dequant) and runs torch.bmm in bf16 (the sglang-0.5 preset's
#: absorbed_bmm_dequant source, the 0.5.7 wheel), not the fp8 rows aiconfigurator's DeepSeek
#: model takes for an fp8 checkpoint (sdk/models/deepseek.py mla_bmm_quant_mode), which time
#: per_tensor_quant_mla_fp8 + bmm_fp8 at 2.7-4.0x the bf16 time at 256-1,024 tokens (H200).
#: vLLM / TensorRT-LLM keep aiconfigurator's fp8 (not checked).
BACKENDS = {
    "sglang": dict(versions=("0.5.6.post2", "0.5.9", "0.5.10", "0.5.14"), preset="sglang-0.5",
                   ep=False, ctx_mla=None, gen_mla=None, moe=None, gemm=None, bmm="bfloat16"),
    "vllm": dict(versions=("0.14.0", "0.18.0", "0.19.0", "0.24.0"), preset="vllm-0.11", ep=False,
                 ctx_mla="vllm_flash_attn_mla", gen_mla="vllm_flash_attn_mla", moe="vllm_fused_moe",
                 gemm=None, bmm="fp8"),
    "trtllm": dict(versions=("1.2.0rc5", "1.3.0rc10", "1.3.0rc20"), preset="trtllm", ep=True,
                   ctx_mla=None, gen_mla=None, moe=None, gemm="torch_flow", bmm="fp8"),
}
TP = 8
PREFILL_TOKENS = (1024, 4096, 8192, 16384)
DECODE_BATCHES = (64, 256, 512)
DECODE_CONTEXT = 2048          # keys per decoding sequence (a 1k/1k run's middle)

# DeepSeek-V3 shapes (capsim/profiles/data/models/deepseek-v3.yaml), per GPU at TP 8.
HIDDEN, HEADS, Q_LORA, KV_LORA = 7168, 128, 1536, 512
NOPE, ROPE, V_DIM = 128, 64, 128
LAYERS, MOE_LAYERS, DENSE_LAYERS = 61, 58, 3
DENSE_INTER, MOE_INTER, EXPERTS, TOP_K, VOCAB = 18432, 2048, 256, 8, 129280
# aiconfigurator's analytic memory op for the H200 (systems/h200_sxm.yaml: mem_bw,
# mem_bw_empirical_scaling_factor, mem_empirical_constant_latency), read at run time.


@dataclass(frozen=True)
class Aic:
    """aiconfigurator's tables of one backend version, read from the mirror (mla_bmm: None
    where the backend has no such table)."""

    gemm: pd.DataFrame
    moe: pd.DataFrame
    ctx_mla: pd.DataFrame
    gen_mla: pd.DataFrame
    mla_bmm: pd.DataFrame | None
    allreduce: pd.DataFrame
    nccl: pd.DataFrame
    mem_bw: float
    mem_scaling: float
    mem_const_s: float
    used: dict
    backend: str


def _git_show(repo: str, commit: str, path: str) -> bytes | None:
    out = subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], capture_output=True)
    return out.stdout if out.returncode == 0 else None


def _table(repo: str, commit: str, backend: str, op: str, name: str, version: str,
           used: dict) -> pd.DataFrame | None:
    """The parquet table of ``op`` for ``version``, else the nearest version with it (None:
    no version has it)."""
    versions = BACKENDS[backend]["versions"]
    order = sorted(versions, key=lambda v: abs(versions.index(v) - versions.index(version)))
    for v in order:
        raw = _git_show(repo, commit, f"{DATA}/{op}/{backend}/{v}/{name}.parquet")
        if raw is not None:
            used[name] = v
            return pd.read_parquet(io.BytesIO(raw))
    used[name] = None
    return None


def load_aic(repo: str, commit: str, backend: str, version: str) -> Aic:
    used: dict = {}
    t = {n: _table(repo, commit, backend, op, n, version, used) for op, n in (
        ("gemm", "gemm_perf"), ("moe", "moe_perf"), ("mla", "context_mla_perf"),
        ("mla", "generation_mla_perf"), ("mla_bmm", "mla_bmm_perf"),
        ("comm", "custom_allreduce_perf"))}
    raw = _git_show(repo, commit, f"{DATA}/comm/nccl/2.26.2/nccl_perf.parquet")
    nccl = pd.read_parquet(io.BytesIO(raw))
    used["nccl_perf"] = "nccl 2.26.2"
    spec = _git_show(repo, commit, "aic-core/src/aiconfigurator_core/systems/h200_sxm.yaml")
    gpu = load_yaml(spec.decode())["gpu"]
    return Aic(t["gemm_perf"], t["moe_perf"], t["context_mla_perf"], t["generation_mla_perf"],
               t["mla_bmm_perf"], t["custom_allreduce_perf"], nccl, float(gpu["mem_bw"]),
               float(gpu.get("mem_bw_empirical_scaling_factor", 1.0)),
               float(gpu.get("mem_empirical_constant_latency", 0.0)), used, backend)


def _source(a: Aic, df: pd.DataFrame, key: str) -> pd.DataFrame:
    """The rows of the backend's kernel for this table (where it holds several)."""
    ks = BACKENDS[a.backend][key]
    return df[df.kernel_source == ks] if ks else df


def _interp(x: float, xs: np.ndarray, ys: np.ndarray) -> float:
    """Linear between the table's points (log-log beyond the last two)."""
    order = np.argsort(xs)
    xs, ys = np.asarray(xs, float)[order], np.asarray(ys, float)[order]
    if x > xs[-1]:
        slope = np.log(ys[-1] / ys[-2]) / np.log(xs[-1] / xs[-2])
        return float(ys[-1] * (x / xs[-1]) ** slope)
    return float(np.interp(x, xs, ys))


def gemm_ms(a: Aic, m: int, n: int, k: int, dtype: str = "fp8_block") -> float:
    """One GEMM of m rows, n x k weights: the table at k, linear in n and m between its grid."""
    g = _source(a, a.gemm, "gemm")
    g = g[g.gemm_dtype == dtype]
    ks = np.sort(g.k.unique())
    if k not in ks:
        lo, hi = ks[ks < k].max(), ks[ks > k].min()
        w = (k - lo) / (hi - lo)
        return (1 - w) * gemm_ms(a, m, n, int(lo), dtype) + w * gemm_ms(a, m, n, int(hi), dtype)
    g = g[g.k == k]
    ns = np.sort(g.n.unique())
    def at_n(nn: int) -> float:
        r = g[g.n == nn]
        return _interp(m, r.m.values, r.latency.values)
    if n in ns:
        return at_n(n)
    lo, hi = ns[ns < n].max(), ns[ns > n].min()
    w = (n - lo) / (hi - lo)
    return (1 - w) * at_n(int(lo)) + w * at_n(int(hi))


def moe_ms(a: Aic, tokens: int) -> float:
    """The fused MoE of ``tokens`` tokens: TP-sharded experts (moe_tp_size 8), or whole
    experts over 8 ranks (moe_ep_size 8) for an expert-parallel backend."""
    tp, ep = (1, TP) if BACKENDS[a.backend]["ep"] else (TP, 1)
    m = _source(a, a.moe, "moe")
    m = m[(m.moe_dtype == "fp8_block") & (m.hidden_size == HIDDEN)
          & (m.inter_size == MOE_INTER) & (m.num_experts == EXPERTS)
          & (m.topk == TOP_K) & (m.moe_tp_size == tp) & (m.moe_ep_size == ep)]
    dist = "balanced" if (m.distribution == "balanced").any() else "power_law_1.01"
    a.used["moe distribution"] = dist
    m = m[m.distribution == dist]
    return _interp(tokens, m.num_tokens.values, m.latency.values)


def ctx_mla_ms(a: Aic, prompts: int, isl: int) -> float:
    """Context MLA of ``prompts`` prompts of ``isl`` tokens (16 heads, bf16 KV): the table at
    batch 1 scaled by the prompts (rows are linear in batch beyond a few sequences)."""
    c = _source(a, a.ctx_mla, "ctx_mla")
    c = c[(c.num_heads == HEADS // TP) & (c.tp_size == TP) & (c.kv_cache_dtype == "bfloat16")]
    batches = np.sort(c.batch_size.unique())
    b = int(batches[batches <= prompts].max())
    r = c[c.batch_size == b]
    if isl > r.isl.max():              # the largest batch that reaches this prompt length
        b = int(c[c.isl >= isl].batch_size.max())
        r = c[c.batch_size == b]
    return _interp(isl, r.isl.values, r.latency.values) * prompts / b


def gen_mla_ms(a: Aic, batch: int, context: int) -> float:
    """One layer's decode attention of ``batch`` sequences of ``context`` keys (``step`` + 1):
    linear in the batch at each of the two table steps around the context, then linear in
    the context between them (the table's time grows about linearly in the keys; the
    nearest step alone priced 400 keys as 512, ~20 % dearer at 1,024 sequences)."""
    g = _source(a, a.gen_mla, "gen_mla")
    g = g[(g.num_heads == HEADS // TP) & (g.tp_size == TP) & (g.kv_cache_dtype == "bfloat16")]
    keys = np.sort(g.step.unique()) + 1
    at = [_interp(batch, g[g.step == k - 1].batch_size.values, g[g.step == k - 1].latency.values)
          for k in keys]
    return _interp(context, keys, np.array(at))


def mla_bmm_ms(a: Aic, tokens: int) -> float:
    """The absorbed MLA's two batched GEMMs (q_nope x W_UK, attention output x W_UV) of a
    decode step; 0 where the backend has no table (vLLM 0.14: priced as kv_b instead)."""
    if a.mla_bmm is None:
        return 0.0
    b = a.mla_bmm[(a.mla_bmm.num_heads == HEADS // TP)
                  & (a.mla_bmm.bmm_dtype == BACKENDS[a.backend]["bmm"])]
    if b.empty:
        return 0.0
    return sum(_interp(tokens, b[b.op_name == op].num_tokens.values,
                       b[b.op_name == op].latency.values) for op in ("mla_gen_pre", "mla_gen_post"))


def allreduce_ms(a: Aic, tokens: int) -> float:
    """One all-reduce of ``tokens`` x hidden bf16 over 8 GPUs: the backend's own table (its
    faster implementation at each size), NCCL's beyond it."""
    elements = tokens * HIDDEN
    c = a.allreduce[a.allreduce.num_gpus == TP].groupby("message_size").latency.min()
    if elements <= c.index.max():
        return _interp(elements, c.index.values, c.values)
    n = a.nccl[(a.nccl.op_name == "all_reduce") & (a.nccl.num_gpus == TP)
               & (a.nccl.nccl_dtype == "half")]
    return _interp(elements, n.message_size.values, n.latency.values)


def mem_op_ms(a: Aic, nbytes: float) -> float:
    return (nbytes / (a.mem_bw * a.mem_scaling) + a.mem_const_s) * 1e3


def aic_groups(a: Aic, tokens: int, prompts: int, decode_batch: int,
               context: int = DECODE_CONTEXT) -> dict[str, float]:
    """aiconfigurator's ms per step by group, for a prefill of ``tokens`` in ``prompts`` equal
    prompts (decode_batch 0) or a decode step of ``decode_batch`` sequences (tokens 0)."""
    n = tokens or decode_batch
    g = {}
    proj = (gemm_ms(a, n, Q_LORA + KV_LORA + ROPE, HIDDEN)
            + gemm_ms(a, n, HEADS * (NOPE + ROPE) // TP, Q_LORA)
            + gemm_ms(a, n, HIDDEN, HEADS * V_DIM // TP))
    kv_b = gemm_ms(a, n, HEADS * (NOPE + V_DIM) // TP, KV_LORA)
    if tokens:
        g["mla_attention"] = LAYERS * ctx_mla_ms(a, prompts, tokens // prompts)
    else:                               # absorbed: kv_b's weights as two batched GEMMs
        kv_b = mla_bmm_ms(a, decode_batch) or kv_b
        g["mla_attention"] = LAYERS * gen_mla_ms(a, decode_batch, context)
    proj += kv_b
    g["qkvo_proj"] = LAYERS * proj
    g["dense_mlp"] = DENSE_LAYERS * (gemm_ms(a, n, 2 * DENSE_INTER // TP, HIDDEN)
                                     + gemm_ms(a, n, HIDDEN, DENSE_INTER // TP))
    g["router"] = MOE_LAYERS * gemm_ms(a, n, EXPERTS, HIDDEN, "bfloat16")
    g["routed_moe"] = MOE_LAYERS * moe_ms(a, n)
    g["shared_expert"] = MOE_LAYERS * (gemm_ms(a, n, 2 * MOE_INTER // TP, HIDDEN)
                                       + gemm_ms(a, n, HIDDEN, MOE_INTER // TP))
    g["all_reduce"] = 2 * LAYERS * allreduce_ms(a, n)
    # add_norm_1 / add_norm_2 (2 x hidden in and out) and the shared expert's SiLU-and-mul
    # (2 x, 1 x its width), 16-bit: aiconfigurator's ElementWise ops of deepseek.py.
    ew_bytes = 2 * n * (2 * (2 * HIDDEN + 2 * HIDDEN) + (3 * MOE_INTER // TP))
    g["elementwise"] = LAYERS * mem_op_ms(a, ew_bytes)
    return g


CAPSIM_GROUPS = {
    "attention_prefill": "mla_attention", "attention_decode": "mla_attention",
    "q_a_kv_a_proj": "qkvo_proj", "q_b_proj": "qkvo_proj", "kv_b_proj": "qkvo_proj",
    "o_proj": "qkvo_proj", "gate_up_proj": "dense_mlp", "down_proj": "dense_mlp",
    "router": "router", "experts": "routed_moe", "shared_expert": "routed_moe",
    "elementwise": "elementwise",
    "embedding": "elementwise", "lm_head": "lm_head",
}


def capsim_groups(pricer: StepPricer, tokens: int, prompts: int, decode_batch: int,
                  context: int = DECODE_CONTEXT) -> dict[str, float]:
    """capsim's ms per step by group (its own pricer under the backend's preset)."""
    if tokens:
        inputs = dict(prefill_tokens=tokens, prefill_kv_tokens=tokens,
                      prefill_attn_pairs=prompts * attn_pairs(tokens // prompts, 0),
                      logits_seqs=prompts)
    else:
        inputs = dict(decode_seqs=decode_batch, decode_ctx_tokens=decode_batch * context)
    g: dict[str, float] = {}
    for op in pricer.breakdown(**inputs):
        key = CAPSIM_GROUPS[op.name]
        g[key] = g.get(key, 0.0) + op.seconds * 1e3
    cost = pricer.cost(**inputs)
    g["all_reduce"] = cost.comm_s * 1e3
    g["host / launch"] = cost.overhead_s * 1e3
    g["total"] = cost.seconds * 1e3
    return g


def build_pricer(backend: str) -> StepPricer:
    """capsim's pricer of DeepSeek-V3 fp8 at TP 8 on h200-sxm under the backend's preset (the
    preset's host terms, all-reduce and shared-experts rule; EP 8 for TensorRT-LLM)."""
    preset = load_engine_preset(BACKENDS[backend]["preset"])
    return StepPricer(load_model("deepseek-v3"), load_hardware("h200-sxm"), TP,
                      quantization="fp8_block", host=preset.host_overhead,
                      all_reduce=preset.tp_all_reduce, engine=preset.engine,
                      expert_parallel=BACKENDS[backend]["ep"],
                      shared_experts_fusion=preset.shared_experts_fusion)


ROWS = ("mla_attention", "qkvo_proj", "dense_mlp", "router", "routed_moe", "shared_expert",
        "all_reduce", "elementwise", "lm_head", "host / launch", "total")


def table(a: Aic, pricer: StepPricer, prompt_tokens: int | None,
          decode_batches: tuple[int, ...] = DECODE_BATCHES, context: int = DECODE_CONTEXT,
          decode_only: bool = False) -> str:
    steps = [] if decode_only else [
        (f"prefill {n}", n, max(1, n // prompt_tokens) if prompt_tokens else 1, 0)
        for n in PREFILL_TOKENS]
    steps += [(f"decode {b}", 0, 0, b) for b in decode_batches]
    lines = []
    head = f"{'group (ms per step)':22s}" + "".join(f"{s[0]:>26s}" for s in steps)
    lines += [head, f"{'':22s}" + "".join(f"{'capsim   aic   c/a':>26s}" for _ in steps)]
    cols = []
    for _, tokens, prompts, batch in steps:
        c = capsim_groups(pricer, tokens, prompts, batch, context)
        x = aic_groups(a, tokens, prompts, batch, context)
        x["total"] = sum(x.values())
        cols.append((c, x))
    for row in ROWS:
        cells = []
        for c, x in cols:
            cv, xv = c.get(row), x.get(row)
            if row == "routed_moe":            # capsim's row holds the fused shared expert
                xv = x["routed_moe"] + x["shared_expert"]
            if row == "shared_expert":
                cv = None
            ratio = f"{cv / xv:6.2f}" if cv and xv else "     -"
            cells.append(f"{_fmt(cv)} {_fmt(xv)} {ratio}")
        label = "routed_moe + shared" if row == "routed_moe" else row
        lines.append(f"{label:22s}" + "".join(f"{s:>26s}" for s in cells))
    return "\n".join(lines)


def _fmt(v: float | None) -> str:
    return f"{v:8.2f}" if v is not None else "       -"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mirror", help="git directory of ai-dynamo/aiconfigurator")
    p.add_argument("--commit", default="095f58a51")
    p.add_argument("--backend", default="sglang", choices=sorted(BACKENDS))
    p.add_argument("--version", default=None,
                   help="the backend's table version (default: its oldest)")
    p.add_argument("--prompt-tokens", type=int, default=None,
                   help="split each prefill step into prompts of this many tokens")
    p.add_argument("--decode-batches", default=",".join(map(str, DECODE_BATCHES)),
                   help="comma-separated decode batch sizes (sequences per step)")
    p.add_argument("--decode-context", type=int, default=DECODE_CONTEXT,
                   help="keys each decoding sequence reads")
    p.add_argument("--decode-only", action="store_true", help="print the decode steps alone")
    args = p.parse_args(argv)
    versions = BACKENDS[args.backend]["versions"]
    version = args.version or versions[0]
    if version not in versions:
        p.error(f"--version {version}: {args.backend} tables are {', '.join(versions)}")
    a = load_aic(args.mirror, args.commit, args.backend, version)
    print(f"DeepSeek-V3 fp8_block, TP {TP}{' EP 8' if BACKENDS[args.backend]['ep'] else ''}, "
          f"h200-sxm, capsim preset {BACKENDS[args.backend]['preset']} vs aiconfigurator "
          f"{args.commit} {args.backend} {version} tables ({a.used}); decode context "
          f"{args.decode_context}; prompts of "
          f"{args.prompt_tokens or 'the whole step'} tokens")
    batches = tuple(int(b) for b in args.decode_batches.split(","))
    print(table(a, build_pricer(args.backend), args.prompt_tokens, batches,
                args.decode_context, args.decode_only))
    print("shared expert (aic, in the routed_moe + shared row): "
          + ", ".join(f"{n}: {aic_groups(a, n, 1, 0)['shared_expert']:.2f}"
                      for n in PREFILL_TOKENS))
    return 0


if __name__ == "__main__":
    sys.exit(main())

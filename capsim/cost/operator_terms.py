"""The per-operator terms of one pricer's steps, built once from the model shape and the
profile's rates: the layer matmuls, the routed experts, prefill attention, the elementwise
kernels and the embedding gather, the LM head (decode attention's coefficients too; the
pricer adds that part, as it depends on the step's decodes).

Per operator class (see :class:`capsim.profiles.hardware.Efficiency`):

- weight matmuls (layers and LM head): ``launch_s + max(flops / peak, bytes / bw) / e(n)``
  with the profile's ``gemm`` curve (``gemm_fp8`` for fp8 weights, when the profile has
  one), or ``max(flops / (peak × compute), bytes / (bw × memory))`` without one;
- attention, split into the prefill part (chunks over their cached prefix) and the
  decode part (one token over its context), each with its own factors and per-layer
  launch time, summed (as Vidur predicts them); decode's memory side also carries the
  kernel's time per sequence where the profile measured one (``seq_s``);
- elementwise kernels and the embedding gather: memory only, plus a per-layer launch time.

One reference, one fast path, side by side: :meth:`OperatorTerms.operator_rows` prices
each operator on its own (the reference formula, for reports); :meth:`OperatorTerms.base`
prices the same terms from batch aggregates in O(1), memoised per token count
(tests/cost/test_roofline.py holds the pricer's ``cost`` to the reference).

Public API:
    OperatorTerms
"""

from __future__ import annotations

import numpy as np

from capsim.cost.experts import ExpertPricer
from capsim.cost.gemm_floor import k_loop_floor_s, k_loop_floors
from capsim.cost.operators import (ACTIVATION_BYTES, Matmul, attention_work, dp_attention_work,
                                   elementwise_bytes_per_token, expert_work, keys_per_query,
                                   layer_matmuls, lm_head, windowed)
from capsim.cost.terms import GEMM_TABLE_TOKENS, WorkTally, inverse_at, inverse_table
from capsim.profiles.engines import UntunedFp8Gemm
from capsim.profiles.hardware import KernelEfficiency, OperatorRates
from capsim.profiles.models import ModelShape
from capsim.profiles.quantization import QuantFormat
from capsim.profiles.weight_layout import WeightLayout

#: (flops, bytes, compute_s, memory_s) of one operator.
Row = tuple[float, float, float, float]


class OperatorTerms:
    """Every per-model constant of a step's operators on one GPU, and their prices.

    Args:
        model, tp: the shape and the tensor-parallel group.
        layout: each tensor group's weight format (:func:`~capsim.profiles.quantization.
            weight_layout`); the layer matmuls take ``layout.attention``'s bytes.
        dp_attention: data-parallel attention (:func:`~capsim.cost.operators.dp_attention_work`).
        attention_tp: GPUs per data-parallel attention rank (1: one GPU each).
        kv_cache_dtype_bytes: bytes per KV-cache element.
        embedding, lm_head: whether this GPU group runs the embedding gather and the LM head.
        rates: the profile's rates for the pricer's dtypes (:class:`OperatorRates`).
        experts: (routing skew, busiest-rank q or None, its imbalance, whether the experts
            compute at their own dtype) for :class:`~capsim.cost.experts.ExpertPricer`.
        fuse_shared_expert: price the shared expert inside the routed experts' grouped
            GEMM (SGLang's shared-experts fusion), not as its own matmuls.
        absorbed_dequant_s: seconds per layer every decode step adds to decode attention's
            fixed time (SGLang rewriting the absorbed MLA weights on ROCm,
            :meth:`~capsim.cost.pricer.StepPricer.absorbed_dequant_s`).
        untuned_fp8_gemm, compute_units: the engine's untuned block-fp8 GEMM where it
            applies (None: nowhere) and the GPU's compute units: each matmul it names
            takes at least its K-loop floor (:mod:`capsim.cost.gemm_floor`).
    """

    __slots__ = ("matmuls", "lm", "attn", "experts", "window", "win_frac", "win_tokens",
                 "elementwise", "embedding", "mem_only_bytes_per_token", "lm_on", "rates",
                 "mm_peak", "mm_bw", "lm_peak", "lm_bw", "attn_peak", "lin", "lm_t", "ginv",
                 "lm_ginv", "ainv", "attn_p", "attn_d", "mem_only_t", "gemm_launch_one",
                 "gemm_launch_s", "lm_launch_s", "ew_launch_s", "expert_launch_s",
                 "flops_per_token", "bytes_fixed", "bytes_per_token", "layers",
                 "eager_operators", "eager_all_reduces", "floors", "floor_block_m",
                 "compute_units", "seq_share", "_memo")

    def __init__(self, model: ModelShape, tp: int, layout: WeightLayout, dp_attention: bool,
                 kv_cache_dtype_bytes: int, embedding: bool, lm_head: bool,
                 rates: OperatorRates, experts: tuple[float, np.ndarray | None, float, bool],
                 attention_tp: int = 1, fuse_shared_expert: bool = False,
                 absorbed_dequant_s: float = 0.0,
                 untuned_fp8_gemm: UntunedFp8Gemm | None = None,
                 compute_units: int = 0) -> None:
        self.lm_on, self.rates, self.layers = lm_head, rates, model.num_hidden_layers
        weight_bytes = self._init_work(model, tp, layout, layout.attention, dp_attention,
                                       kv_cache_dtype_bytes, embedding, attention_tp,
                                       fuse_shared_expert)
        self._init_rates(rates)
        self.floors = k_loop_floors(self.matmuls, untuned_fp8_gemm)
        self.floor_block_m = untuned_fp8_gemm.block_m if untuned_fp8_gemm else 1
        self.compute_units = max(compute_units, 1)
        if absorbed_dequant_s:          # once per layer of every step that decodes
            c_pair, m_kv, m_new, launch = self.attn_d
            self.attn_d = (c_pair, m_kv, m_new, launch + self.attn.layers * absorbed_dequant_s)
        expert_bytes = layout.experts.bytes_per_weight(model.hidden_size, ACTIVATION_BYTES) \
            if layout.grouped else weight_bytes
        work = expert_work(model, tp, expert_bytes, fuse_shared_expert)
        self.experts = None if work is None else ExpertPricer(
            work, tp, *experts[:3], rates,
            (self.mm_peak, self.mm_bw, self.ginv, self.gemm_launch_one), experts[3])
        self.expert_launch_s = self.experts.launch_s if self.experts else 0.0
        # Operators one forward runs (a host launch each when run eagerly): every layer
        # matmul on each layer it runs on, attention and the elementwise kernels on every
        # layer, the routed experts on each MoE layer. DeepSeek-V3: 546.
        self.eager_operators = (sum(op.count for op in self.matmuls) + 2 * self.layers
                                + (work.layers if work is not None else 0))
        # The tensor-parallel collectives such a forward also launches one by one (counted
        # where the preset says so: HostOverhead.eager_all_reduce_ops): each layer's two
        # all-reduces (attention output, MLP / MoE output), the embedding's all-reduce and
        # the logits' gather.
        self.eager_all_reduces = (2 * self.layers + int(embedding) + int(lm_head)) \
            if tp > 1 else 0
        self.flops_per_token = sum(op.flops_per_row for op in self.matmuls)
        self.bytes_fixed = sum(op.weight_bytes for op in self.matmuls)
        self.bytes_per_token = (sum(op.act_bytes_per_row for op in self.matmuls)
                                + self.mem_only_bytes_per_token)
        self._memo: dict[int, tuple[float, ...]] = {}            # see base

    def _init_work(self, m: ModelShape, tp: int, lay: WeightLayout, quant: QuantFormat,
                   dp_attention: bool, kv_bytes: int, embedding: bool,
                   attention_tp: int = 1, fuse_shared_expert: bool = False) -> float:
        """The operators' work per GPU; returns the layer matmuls' bytes per weight."""
        # Dense layers: each weight's exact bytes; MoE / MLA shapes: the format's mean
        # bytes per weight (scales spread over the elements).
        weight_bytes = quant.bytes_per_weight(m.hidden_size, ACTIVATION_BYTES)
        groups = None
        if lay.grouped:                  # the checkpoint's groups apart; the router 16-bit
            groups = {"attention": weight_bytes, "router": float(ACTIVATION_BYTES),
                      "mlp": lay.mlp.bytes_per_weight(m.hidden_size, ACTIVATION_BYTES)}
        self.matmuls = layer_matmuls(m, tp, weight_bytes, dp_attention, quant, lay.mlp, groups,
                                     attention_tp, fuse_shared_expert)
        self.lm = lm_head(m, tp, ACTIVATION_BYTES)            # 16-bit in every format
        self.attn = a = dp_attention_work(m, tp, kv_bytes, attention_tp) if dp_attention \
            else attention_work(m, tp, kv_bytes)
        # Each GPU attends for its rank's share of the decoding sequences (balanced ranks).
        self.seq_share = attention_tp / tp if dp_attention else 1.0
        self.window = a.window_fraction > 0
        self.win_frac, self.win_tokens = a.window_fraction, a.window_tokens
        self.elementwise = m.num_hidden_layers * elementwise_bytes_per_token(m, tp)
        self.embedding = m.hidden_size * (ACTIVATION_BYTES + ACTIVATION_BYTES) \
            if embedding else 0.0
        self.mem_only_bytes_per_token = self.elementwise + self.embedding
        return weight_bytes

    def _init_rates(self, r: OperatorRates) -> None:
        """Seconds per unit of work of each operator (the roofline's two sides)."""
        peak, bw = r.matmul_peak_flops_per_s, r.hbm_bandwidth_bytes_per_s
        curve = r.matmul_curve
        # With a curve the matmul roofs are ideal and 1 / e(n) scales their max.
        self.mm_peak = peak if curve is not None else peak * r.compute
        self.mm_bw = bw if curve is not None else bw * r.memory
        self.lin = tuple(self._time_coeffs(op) for op in self.matmuls)
        self.gemm_launch_one = launch = curve.launch_s if curve is not None else 0.0
        self.gemm_launch_s = sum(op.count for op in self.matmuls) * launch
        self.ginv = inverse_table(curve)
        # The LM head: 16-bit weights at the 16-bit peak and the gemm curve.
        lm, lm_curve, lm_peak = self.lm, r.lm_head_curve, r.lm_head_peak_flops_per_s
        self.lm_peak = lm_peak if lm_curve is not None else lm_peak * r.compute
        self.lm_bw = bw if lm_curve is not None else bw * r.memory
        self.lm_t = (lm.flops_per_row / self.lm_peak, lm.weight_bytes / self.lm_bw,
                     lm.act_bytes_per_row / self.lm_bw)
        self.lm_launch_s = lm_curve.launch_s if lm_curve is not None else 0.0
        self.lm_ginv = self.ginv if lm_curve is curve else inverse_table(lm_curve)
        self.attn_peak = r.attention_peak_flops_per_s
        self.ainv = inverse_table(r.attention_prefill.compute_curve)
        self.attn_p = self._attn_coeffs(r.attention_prefill, self.attn.flops_per_pair)
        # An fp8 KV cache: the engine's own fp8 decode kernel where the profile measured
        # one (vLLM's FA3 reads fp8 KV at a lower fraction of bandwidth than bf16 KV).
        self.attn_d = self._attn_coeffs(r.attention_decode, self.attn.decode_flops_per_pair,
                                        self.seq_share)
        ew = r.elementwise
        self.mem_only_t = self.mem_only_bytes_per_token / (bw * ew.memory)
        self.ew_launch_s = self.layers * ew.launch_s

    def _time_coeffs(self, op: Matmul) -> tuple[float, float, float]:
        """(compute s per row, weight-read s, activation s per row) of a matmul."""
        return (op.flops_per_row / self.mm_peak, op.weight_bytes / self.mm_bw,
                op.act_bytes_per_row / self.mm_bw)

    def _attn_coeffs(self, k: KernelEfficiency, flops_per_pair: float,
                     seq_share: float = 0.0) -> tuple[float, float, float, float]:
        """(compute s per pair, s per KV token read, s per new token, launch s per step).

        ``seq_share``: the share of a step's decoding sequences this GPU attends for (1, or
        attention TP / TP under data-parallel attention; 0: prefill). The kernel's time per
        sequence (``k.seq_s``, per layer) is then part of the memory side's s per new token:
        exact for decode (one new token a sequence); a verify step of w tokens a sequence
        pays it w times (the kernel tables time one query a sequence)."""
        a, bw = self.attn, self.rates.hbm_bandwidth_bytes_per_s * k.memory
        compute = 1.0 if k.compute_curve is not None else k.compute   # the curve scales it
        return (flops_per_pair / (self.attn_peak * compute), a.kv_bytes_per_token / bw,
                a.new_bytes_per_token / bw + a.layers * k.seq_s * seq_share,
                a.layers * k.launch_s)

    # -- the fast path: aggregates, O(1) ------------------------------------------------

    def base(self, n: int, logits_seqs: int, prefill_tokens: int, prefill_attn_pairs: float,
             prefill_kv_tokens: int) -> tuple[float, float, float, float, float]:
        """(compute_s, memory_s, roof_s, flops, bytes) of everything but decode attention
        in a step of ``n`` tokens (``roof_s``: Σ over operators of max(compute, memory))."""
        terms = self._memo.get(n)
        if terms is None:
            terms = self.gemm_terms(n)
            if n < GEMM_TABLE_TOKENS:        # bounded: one entry per token count seen
                self._memo[n] = terms
        compute_s, memory_s, roof_s, flops, nbytes = terms
        if logits_seqs > 0:
            lm, (c_row, m_fixed, m_row) = self.lm, self.lm_t
            g = self.lm_ginv[logits_seqs] if logits_seqs < GEMM_TABLE_TOKENS \
                else self.lm_inv(logits_seqs)
            launch = self.lm_launch_s
            c = launch + c_row * logits_seqs * g
            m = launch + (m_fixed + m_row * logits_seqs) * g
            compute_s, memory_s = compute_s + c, memory_s + m
            roof_s += c if c > m else m
            flops += lm.flops_per_row * logits_seqs
            nbytes += lm.weight_bytes + lm.act_bytes_per_row * logits_seqs
        a = self.attn
        if prefill_tokens > 0:
            if self.window:
                prefill_attn_pairs, prefill_kv_tokens = self.windowed_prefill(
                    prefill_tokens, prefill_attn_pairs, prefill_kv_tokens)
            c_pair, m_kv, m_new, launch = self.attn_p
            keys = int(prefill_attn_pairs / prefill_tokens)
            c = launch + c_pair * prefill_attn_pairs * (
                self.ainv[keys] if keys < GEMM_TABLE_TOKENS else self.attn_inv(keys))
            m = launch + m_kv * prefill_kv_tokens + m_new * prefill_tokens
            compute_s, memory_s = compute_s + c, memory_s + m
            roof_s += c if c > m else m
            flops += a.flops_per_pair * prefill_attn_pairs
            nbytes += a.kv_bytes_per_token * prefill_kv_tokens + a.new_bytes_per_token * prefill_tokens
        return compute_s, memory_s, roof_s, flops, nbytes

    def gemm_terms(self, n: int) -> tuple[float, float, float, float, float]:
        """(compute_s, memory_s, roof_s, flops, bytes) of a step's layer matmuls, element-wise
        work and routed experts: everything that depends on its ``n`` tokens only
        (memoised per n by :meth:`base`)."""
        g = self.ginv[n] if n < GEMM_TABLE_TOKENS else self.gemm_inv(n)
        fixed = self.gemm_launch_s + self.ew_launch_s
        mem_only = self.mem_only_t * n
        compute_s, memory_s, roof_s = fixed, fixed + mem_only, fixed + mem_only
        for (c_row, m_fixed, m_row), op, floor in zip(self.lin, self.matmuls, self.floors):
            c, m = c_row * n * g, (m_fixed + m_row * n) * g
            if floor is not None:     # the K-loop floor, launches included (see __init__)
                f = self.floor_s(floor, n) - op.count * self.gemm_launch_one
                c, m = max(c, f), max(m, f)
            compute_s, memory_s = compute_s + c, memory_s + m
            roof_s += c if c > m else m
        flops, nbytes = self.flops_per_token * n, self.bytes_fixed + self.bytes_per_token * n
        if self.experts is not None:
            f, b, c, m = self.experts.terms(n)
            c, m = c + self.expert_launch_s, m + self.expert_launch_s
            compute_s, memory_s = compute_s + c, memory_s + m
            roof_s += c if c > m else m
            flops, nbytes = flops + f, nbytes + b
        return compute_s, memory_s, roof_s, flops, nbytes

    def floor_s(self, floor: tuple[float, float], n: int) -> float:
        """A matmul's K-loop floor at ``n`` rows (:func:`~capsim.cost.gemm_floor.k_loop_floor_s`)."""
        return k_loop_floor_s(floor, n, self.floor_block_m, self.compute_units)

    def windowed_prefill(self, tokens: int, pairs: float, kv_tokens: float
                         ) -> tuple[float, float]:
        """Prefill (pairs, KV tokens read) with the windowed layers capped: at most W keys
        per query, and at most the chunk + W cached keys read (one sequence; more
        prefilling sequences in one step make it an upper bound)."""
        w, frac = self.win_tokens, self.win_frac
        return windowed(pairs, tokens * w, frac), windowed(kv_tokens, tokens + w, frac)

    def gemm_inv(self, n: int) -> float:
        """1 / e(n) of the GEMM curve (table lookup below 16,384 tokens)."""
        return inverse_at(self.ginv, self.rates.matmul_curve, n)

    def lm_inv(self, n: int) -> float:
        """1 / e(n) of the LM head's (16-bit) GEMM curve."""
        return inverse_at(self.lm_ginv, self.rates.lm_head_curve, n)

    def attn_inv(self, keys: int) -> float:
        """1 / e(keys per query) of the prefill-attention compute curve."""
        return inverse_at(self.ainv, self.rates.attention_prefill.compute_curve, keys)

    # -- totals over many steps ---------------------------------------------------------

    def work(self, tally: WorkTally) -> tuple[float, float]:
        """(FLOPs, HBM bytes) per GPU of all the steps in ``tally``: equal to Σ of their
        ``cost().flops`` / ``cost().bytes`` up to float rounding (the same linear terms).

        The routed experts' terms come from the tally's steps per token count (a tally
        from the pricer's ``new_tally``). Not exact for MLA (prefill and decode pairs are summed
        together and priced at the prefill rate) nor for windowed layers (the pairs are
        uncapped): an upper bound there; nor with expert parallelism under a routing
        skew, whose expert terms are the busiest rank's (× EP): an upper bound."""
        a, lm = self.attn, self.lm
        logits, logit_steps = (tally.logits, tally.logit_steps) if self.lm_on else (0, 0)
        flops = (self.flops_per_token * tally.tokens + lm.flops_per_row * logits
                 + a.flops_per_pair * tally.attn_pairs)
        nbytes = (self.bytes_fixed * tally.steps + self.bytes_per_token * tally.tokens
                  + lm.weight_bytes * logit_steps + lm.act_bytes_per_row * logits
                  + a.kv_bytes_per_token * tally.kv_read_tokens
                  + a.new_bytes_per_token * tally.tokens)
        if self.experts is not None and tally.steps_by_tokens:
            for n, steps in tally.steps_by_tokens.items():
                f, b, _, _ = self.experts.terms(n)
                flops, nbytes = flops + f * steps, nbytes + b * steps
        return flops, nbytes

    @property
    def weight_bytes_per_gpu(self) -> float:
        """Matmul weight bytes one GPU reads per step (layers + LM head; no embedding table)."""
        experts = self.experts.weight_bytes if self.experts is not None else 0.0
        lm = self.lm.weight_bytes if self.lm_on else 0.0
        return sum(op.weight_bytes for op in self.matmuls) + lm + experts

    # -- the reference: each operator on its own ----------------------------------------

    def names(self) -> list[tuple[str, int]]:
        """(name, count) of every operator, in :meth:`operator_rows` order."""
        layers = self.layers
        return [(op.name, op.count) for op in self.matmuls] + (
            [("experts", self.experts.work.layers)] if self.experts is not None else []) + [
            ("attention_prefill", layers), ("attention_decode", layers), ("elementwise", layers),
            ("embedding", 1), ("lm_head", 1)]

    def operator_rows(self, n: int, logits_seqs: int, prefill_tokens: int, pairs: float,
                      prefill_kv_tokens: float, decode_seqs: int,
                      decode_ctx_tokens: float) -> list[Row]:
        """(flops, bytes, compute_s, memory_s) of every operator, in :meth:`names` order.

        Each side's seconds include the operator's fixed launch time, so
        ``max(compute_s, memory_s)`` is the operator's time.
        """
        g = self.gemm_inv(n) if n > 0 else 1.0
        rows = [self._matmul_row(op, n, g, op.count * self.gemm_launch_one, self.mm_peak,
                                 self.mm_bw, self.floor_s(fl, n) if fl is not None else 0.0)
                for op, fl in zip(self.matmuls, self.floors)]
        if self.experts is not None:
            if n > 0:
                f, b, c, m = self.experts.terms(n)
                rows.append((f, b, c + self.expert_launch_s, m + self.expert_launch_s))
            else:
                rows.append((0.0, 0.0, 0.0, 0.0))
        if self.window and prefill_tokens > 0:
            pairs, prefill_kv_tokens = self.windowed_prefill(prefill_tokens, pairs,
                                                             prefill_kv_tokens)
        if self.window and decode_seqs > 0:
            decode_ctx_tokens = windowed(decode_ctx_tokens, decode_seqs * self.win_tokens,
                                         self.win_frac)
        g_attn = self.attn_inv(keys_per_query(pairs, prefill_tokens)) if prefill_tokens > 0 \
            else 1.0
        rows.append(self._attn_row(self.attn_p, prefill_tokens, pairs, prefill_kv_tokens,
                                   g_attn, self.attn.flops_per_pair))
        rows.append(self._attn_row(self.attn_d, decode_seqs, decode_ctx_tokens,
                                   decode_ctx_tokens, 1.0, self.attn.decode_flops_per_pair))
        bw_ew = self.mem_only_bytes_per_token / self.mem_only_t
        ew_bytes, emb_bytes = self.elementwise * n, self.embedding * n
        ew_launch = self.ew_launch_s if n > 0 else 0.0
        rows.append((0.0, ew_bytes, ew_launch, ew_launch + ew_bytes / bw_ew))
        rows.append((0.0, emb_bytes, 0.0, emb_bytes / bw_ew))
        lm_rows = max(logits_seqs, 0) if n > 0 else 0
        g_lm = self.lm_inv(lm_rows) if lm_rows > 0 else 1.0
        rows.append(self._matmul_row(self.lm, lm_rows, g_lm, self.lm_launch_s,
                                     self.lm_peak, self.lm_bw))
        return rows

    @staticmethod
    def _matmul_row(op: Matmul, rows: int, g: float, launch_s: float, peak: float,
                    bw: float, floor_s: float = 0.0) -> Row:
        if rows <= 0:
            return (0.0, 0.0, 0.0, 0.0)
        f, b = op.flops_per_row * rows, op.weight_bytes + op.act_bytes_per_row * rows
        return (f, b, max(launch_s + f / peak * g, floor_s), max(launch_s + b / bw * g, floor_s))

    def _attn_row(self, coeffs: tuple[float, float, float, float], new_tokens: int,
                  pairs: float, kv_tokens: float, g: float, flops_per_pair: float) -> Row:
        if new_tokens <= 0:
            return (0.0, 0.0, 0.0, 0.0)
        a = self.attn
        c_pair, m_kv, m_new, launch = coeffs
        f = flops_per_pair * pairs
        b = a.kv_bytes_per_token * kv_tokens + a.new_bytes_per_token * new_tokens
        return (f, b, launch + c_pair * pairs * g, launch + m_kv * kv_tokens + m_new * new_tokens)

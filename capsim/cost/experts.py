"""The routed experts of a mixture-of-experts step: which experts a step's tokens hit and
what their grouped GEMMs cost on one GPU.

A step of n tokens routes n·k (token, expert) pairs over the experts it hits
(:func:`~capsim.cost.operators.expected_experts_hit`, with the routing skew); each expert
hit reads its weights once and runs its GEMM at the efficiency of its ``n·k / hit`` rows
(fp8 experts: the profile's ``grouped_gemm_fp8`` curve, measured on the fused-MoE kernel
over rows per expert, where it has one; else the GEMM curve, capped at the profile's
``fused_moe.memory`` where it has one). With
expert parallelism under a routing skew the busiest rank sets the time
(:func:`~capsim.cost.operators.expert_rank_loads`).

Public API:
    check_moe_options(model, tp, routing_skew, dp_attention, expert_parallel)
    busiest_rank_load(model, ep, routing_skew, expert_parallel) -> (q | None, imbalance)
    ExpertPricer
"""

from __future__ import annotations

from array import array

import numpy as np

from capsim.common.errors import ScenarioError
from capsim.cost.operators import (ExpertWork, eplb_rank_loads, expected_experts_hit,
                                   expert_rank_loads)
from capsim.cost.terms import GEMM_TABLE_TOKENS, inverse_at, inverse_table
from capsim.profiles.hardware import OperatorRates
from capsim.profiles.models import ModelShape


MAX_ROUTING_SKEW = 100.0
"""The largest ``moe_routing_skew`` (Zipf exponent of expert popularity): at 100 every
packaged MoE model (top_k 1 to 8 of 8 to 256 experts) sends all but 1e-6 of its (token,
expert) picks to its ``top_k`` most popular experts (``tests/cost/test_moe_cost.py``
checks each): a larger skew prices the same deterministic routing (``1e9`` ended in a
NaN traceback)."""


#: What a valid skew is, after the field's or option's name.
ROUTING_SKEW_RANGE = (f"must be in [0, {MAX_ROUTING_SKEW:g}] (the Zipf exponent of expert "
                      f"popularity: 0 routes uniformly, {MAX_ROUTING_SKEW:g} sends every token "
                      "to the same top_k experts)")


def check_routing_skew(routing_skew: float, name: str = "moe_routing_skew") -> None:
    """A finite skew in ``[0, MAX_ROUTING_SKEW]``.

    Raises:
        ScenarioError: naming ``name`` (the field or option) and the valid range.
    """
    if not 0.0 <= routing_skew <= MAX_ROUTING_SKEW:       # NaN fails both
        raise ScenarioError(f"{name} {ROUTING_SKEW_RANGE}, got {routing_skew:g}")


def check_moe_options(model: ModelShape, tp: int, routing_skew: float, dp_attention: bool,
                      expert_parallel: bool, attention_tp: int = 1,
                      redundant_experts: int = 0) -> None:
    """Refuse MoE options the model cannot take.

    Raises:
        ScenarioError: a routing skew outside [0, MAX_ROUTING_SKEW]; a skew, DP attention
            or expert parallelism on a dense model; EP (= TP) not dividing the experts;
            DP attention ranks of ``attention_tp`` GPUs not dividing TP; redundant experts
            without EP, or EP not dividing the experts and their redundant copies.
    """
    check_routing_skew(routing_skew)
    dense = (f"a mixture-of-experts model; {model.name} is dense")
    if routing_skew and not model.is_moe:
        raise ScenarioError(f"moe_routing_skew needs {dense}")
    if dp_attention and not model.is_moe:
        raise ScenarioError(f"data-parallel attention needs {dense}")
    if expert_parallel and not model.is_moe:
        raise ScenarioError(f"expert parallelism needs {dense}")
    if dp_attention and (attention_tp < 1 or tp % attention_tp):
        raise ScenarioError(f"data-parallel attention ranks of {attention_tp} GPUs must divide "
                            f"tensor_parallel_size {tp}")
    if redundant_experts and not expert_parallel:
        raise ScenarioError("num_redundant_experts (EPLB) needs expert parallelism")
    if expert_parallel and (model.num_experts + redundant_experts) % tp:
        extra = f" + {redundant_experts} redundant" if redundant_experts else ""
        raise ScenarioError(f"expert parallel size {tp} must divide num_experts "
                            f"{model.num_experts}{extra} of {model.name}")


def busiest_rank_load(model: ModelShape, ep: int, routing_skew: float,
                      expert_parallel: bool, redundant_experts: int = 0
                      ) -> tuple[np.ndarray | None, float]:
    """(q_i of the busiest EP rank's experts, its load over the mean): (None, 1.0) under
    uniform routing or without EP, where every rank is the mean (no change to TP's terms);
    with ``redundant_experts`` (EPLB) the busiest rank of its placement
    (:func:`~capsim.cost.operators.eplb_rank_loads`)."""
    if expert_parallel and ep > 1 and routing_skew > 0 and redundant_experts:
        q = eplb_rank_loads(model.num_experts, model.num_experts_per_tok, ep, routing_skew,
                            redundant_experts)
        return q, float(q.sum()) * ep / model.num_experts_per_tok
    if expert_parallel and ep > 1 and routing_skew > 0:
        q = expert_rank_loads(model.num_experts, model.num_experts_per_tok, ep, routing_skew)
        return q, float(q.sum()) * ep / model.num_experts_per_tok
    return None, 1.0


class ExpertPricer:
    """The routed experts' share of a step on one GPU.

    Args:
        work: the experts per GPU (:func:`~capsim.cost.operators.expert_work`).
        tp: the TP (= EP) group size.
        routing_skew: Zipf exponent of expert popularity (0: uniform).
        ep_q, ep_imbalance: :func:`busiest_rank_load`.
        rates: the profile's rates (experts' peak and curve, ``fused_moe``).
        matmul: (peak FLOP/s, bytes/s, 1 / e table, GEMM launch s) of the layer matmuls,
            which the experts share unless their format computes at another dtype
            (``own_dtype``).
    """

    __slots__ = ("work", "tp", "routing_skew", "ep_q", "ep_imbalance", "hits", "launch_s",
                 "peak", "bw", "ginv", "cap_inv", "curve")

    def __init__(self, work: ExpertWork, tp: int, routing_skew: float,
                 ep_q: np.ndarray | None, ep_imbalance: float, rates: OperatorRates,
                 matmul: tuple[float, float, array, float], own_dtype: bool) -> None:
        self.work, self.tp, self.routing_skew = work, tp, routing_skew
        self.ep_q, self.ep_imbalance = ep_q, ep_imbalance
        self.hits: dict[int, float] = {}             # expected experts hit, per step tokens
        peak, bw, ginv, gemm_launch_s = matmul
        # vLLM's fused MoE per MoE layer: the profile's measured fixed time of the whole
        # call (top-k, align, two grouped GEMMs, activation, sum) where it has one, else
        # the launches of its two grouped GEMMs (gate/up and down); MXFP4 experts run the
        # engine's own MXFP4 path where the profile measured it.
        moe = rates.fused_moe
        per_layer = moe.launch_s if moe is not None else 2 * gemm_launch_s
        grouped = rates.expert_grouped_curve
        if grouped is not None and grouped.launch_s > 0.0:
            # The fixed time measured with the fp8 curve's own kernel table.
            per_layer = grouped.launch_s
        self.launch_s = work.layers * per_layer
        self.cap_inv = 1.0
        if grouped is not None:
            # fp8 experts with a curve measured on the fused-MoE kernel over rows per
            # expert: the ideal roofs at the experts' peak, no cap (the curve is the kernel's).
            self.curve = grouped
            self.peak, self.bw = rates.expert_peak_flops_per_s, rates.hbm_bandwidth_bytes_per_s
            self.ginv = inverse_table(grouped)
            return
        self.curve = curve = rates.expert_curve
        # The routed experts: the layer matmuls' rates, or their own format's.
        if own_dtype:
            hbm = rates.hbm_bandwidth_bytes_per_s
            peak = rates.expert_peak_flops_per_s
            peak = peak if curve is not None else peak * rates.compute
            bw = hbm if curve is not None else hbm * rates.memory
            ginv = inverse_table(curve)
        # The fused-MoE grouped GEMMs reach at most ``fused_moe.memory`` (fitted with the
        # fixed time); a new table, the dense matmuls' may be the same object.
        if moe is not None and moe.memory < 1.0 and curve is not None:
            self.cap_inv = 1.0 / moe.memory
            ginv = array("d", np.maximum(np.frombuffer(ginv, dtype=float),
                                         self.cap_inv).tobytes())
        self.peak, self.bw, self.ginv = peak, bw, ginv

    def hit(self, tokens: int) -> float:
        """Expected distinct experts per MoE layer a step of ``tokens`` tokens reads;
        memoised per token count. Expert parallel with a routing skew: the busiest rank's
        distinct experts × EP (its weight reads in the per-GPU units of a TP slice of
        every expert)."""
        if tokens <= 0:
            return 0.0
        hit = self.hits.get(tokens)
        if hit is None:
            e = self.work
            if self.ep_q is not None:    # the busiest EP rank's experts, × EP per-GPU units
                hit = self.tp * float(np.sum(1.0 - (1.0 - self.ep_q) ** tokens))
            else:
                hit = expected_experts_hit(tokens, e.num_experts, e.top_k, self.routing_skew)
            self.hits[tokens] = hit
        return hit

    def terms(self, n: int) -> tuple[float, float, float, float]:
        """(flops, bytes, compute_s, memory_s) of the routed experts in a step of ``n``
        tokens (launch excluded): n·k (token, expert) rows over the experts hit, each
        expert's GEMM at the efficiency of its ``n·k / hit`` rows; fused shared experts
        (``work.fused_shared`` = s) add n·s rows and s experts hit."""
        e = self.work
        hit, pairs = self.hit(n), n * e.top_k
        if self.ep_q is not None:        # the busiest rank's pairs, in per-GPU units (× EP)
            pairs *= self.ep_imbalance
        if e.fused_shared:               # fused shared experts: every token picks them
            hit, pairs = hit + e.fused_shared, pairs + n * e.fused_shared
        rows = int(pairs / hit) if hit > 0 else 0
        g = self.inv(rows) if rows > 0 else 1.0
        f = e.flops_per_pair * pairs
        b = e.weight_bytes_per_expert * hit + e.act_bytes_per_pair * pairs
        return f, b, f / self.peak * g, b / self.bw * g

    def inv(self, n: int) -> float:
        """1 / e(n) of the routed experts' GEMM curve at ``n`` rows per expert: the
        profile's ``grouped_gemm_fp8`` for fp8 experts where it has one, else the layer
        matmuls' curve (or their own format's), e(n) capped at ``fused_moe.memory``."""
        if n < GEMM_TABLE_TOKENS:
            return self.ginv[n]
        return max(inverse_at(self.ginv, self.curve, n), self.cap_inv)

    @property
    def weight_bytes(self) -> float:
        """Every routed (and fused shared) expert's weight bytes on one GPU (all MoE
        layers)."""
        return self.work.weight_bytes_per_expert * (self.work.num_experts
                                                    + self.work.fused_shared)

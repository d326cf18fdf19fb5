"""A step's collective communication on one GPU: the tensor-parallel all-reduces, the
logits gather and, with DP attention + expert parallelism, the MoE all-to-alls.

Tensor-parallel all-reduces run the engine preset's algorithm
(:class:`~capsim.profiles.engines.TpAllReduce`): NCCL's ring, the α-β model
``2(TP−1)/TP × bytes / (link_bw × interconnect_eff) + 2(TP−1) × link_latency``
(Patarasuk & Yuan, JPDC 2009; NCCL's "bus bandwidth" definition), or the engine's own
one-shot / two-shot kernels below its size limits
(:func:`~capsim.cost.operators.one_shot_all_reduce_s`, ``two_shot_all_reduce_s``; costs
from the GPU profile's ``custom_all_reduce``) and NCCL above them, or the engine's own
dispatch as measured on the GPU (the profile's ``all_reduce_tables``, linear between
measured sizes: :func:`table_pieces`). NCCL above the custom kernels' size limit is the
profile's measured NCCL table where it has one (``all_reduce_tables[NCCL_TABLE]``, a row for
the TP size; on 8 NVSwitch-connected H200s NCCL's NVLink-SHARP all-reduce outruns the ring
bound by ~5 %), else the ring. A message is the step's tokens × hidden ×
2 bytes, so the algorithm changes at fixed token counts: the step's communication is
piecewise linear in its tokens. Where the preset fuses the all-reduce with the RMSNorm after it
(:class:`~capsim.profiles.engines.AllReduceFusion`: SGLang's FlashInfer
``trtllm_allreduce_fusion`` on B200), a step below the fusion's token limit prices those
all-reduces at the GPU's measured table of that kernel family instead. Communication is not overlapped with compute (vLLM does
not overlap TP collectives by default).

A tensor-parallel group over several nodes of ``hw.gpus_per_node`` GPUs (SGLang's
``--tp 16 --nnodes 2``, vLLM's TP across a Ray cluster) runs NCCL over the scale-out link,
priced hierarchically (:func:`hierarchical_all_reduce_s`); the engines' own one-shot /
two-shot kernels are intra-node only (vLLM's ``CustomAllreduce.__init__`` disables them when
the group is not ``in_the_same_node_as`` rank 0, vllm/distributed/device_communicators/
custom_all_reduce.py at 00d618aa).

Fast path and reference side by side: :class:`Communication` keeps the pieces as
``(below_tokens, fixed_s, per_token_s)``, the first inlined by the pricer;
:meth:`Communication.seconds` is the sum they stand for.

Public API:
    Communication, NCCL_TABLE, NO_LIMIT_TOKENS, hierarchical_all_reduce_s, table_pieces
"""

from __future__ import annotations

from bisect import bisect_right

from capsim.common.errors import ScenarioError
from capsim.cost.operators import (ACTIVATION_BYTES, all_to_all_s, moe_all_to_all_bytes_per_token,
                                   one_shot_all_reduce_s, ring_all_reduce_s, two_shot_all_reduce_s)
from capsim.profiles.engines import AllReduceFusion, TpAllReduce
from capsim.profiles.hardware import HardwareProfile
from capsim.profiles.links import LinkProfile
from capsim.profiles.models import ModelShape

#: "No token limit" for the all-reduce pieces.
NO_LIMIT_TOKENS = 1 << 62

#: The ``all_reduce_tables`` key of NCCL's own all-reduce as measured on the GPU: priced for
#: the messages above an engine's custom kernels (``TpAllReduce.max_bytes``), where the
#: engines hand the all-reduce to NCCL (vLLM / SGLang ``should_custom_ar``).
NCCL_TABLE = "nccl"


def hierarchical_all_reduce_s(message_bytes: float, gpus_per_node: int, nodes: int,
                              intra_bandwidth_bytes_per_s: float, intra_latency_s: float,
                              inter_bandwidth_bytes_per_s: float,
                              inter_latency_s: float) -> float:
    """An all-reduce of ``message_bytes`` over ``nodes`` × ``gpus_per_node`` GPUs, seconds:
    a ring reduce-scatter inside each node, a ring all-reduce of each GPU's 1/g share
    among its peers on the other nodes over the scale-out link (one port per GPU, all g
    ports at once), a ring all-gather inside each node::

        2 [(g−1)/g × S / B_in + (g−1) α_in] + 2(N−1)/N × (S/g) / B_out + 2(N−1) α_out

    The two-level algorithm of NCCL's multi-node rings and trees (each of the g channels
    crosses nodes on its own NIC, so the scale-out part moves S/g per GPU), in the α-β
    terms of :func:`~capsim.cost.operators.ring_all_reduce_s`. One node: the ring.
    """
    g, n = gpus_per_node, nodes
    intra = 2 * ((g - 1) / g * message_bytes / intra_bandwidth_bytes_per_s
                 + (g - 1) * intra_latency_s)
    inter = 2 * (n - 1) / n * message_bytes / g / inter_bandwidth_bytes_per_s \
        + 2 * (n - 1) * inter_latency_s
    return intra + inter


def table_pieces(knots: list[tuple[int, float]], row_bytes: int
                 ) -> list[tuple[int, float, float]]:
    """A measured all-reduce table (``knots``: (message bytes, seconds) in size order) as
    ``(below_tokens, fixed_s, per_token_s)`` pieces of a message of ``row_bytes`` a token:
    each segment between two measured sizes is linear in the bytes, so in the tokens; below
    the smallest size the smallest size's time, beyond the largest the last segment's slope
    (:meth:`~capsim.profiles.all_reduce_table.AllReduceTable.seconds`, which these pieces
    equal at every whole token count). Segments no whole token count reaches are left out."""
    pieces: list[tuple[int, float, float]] = []
    below = -(-knots[0][0] // row_bytes)         # fewest tokens of >= the smallest size
    if below > 0:
        pieces.append((below, knots[0][1], 0.0))
    for i, ((b0, t0), (b1, t1)) in enumerate(zip(knots, knots[1:])):
        slope_s = (t1 - t0) / (b1 - b0)
        limit = NO_LIMIT_TOKENS if i == len(knots) - 2 else b1 // row_bytes + 1
        if limit > below:                       # n * row <= b1: this segment's tokens
            pieces.append((limit, t0 - slope_s * b0, slope_s * row_bytes))
            below = limit
    return pieces


class Communication:
    """The collectives of one pricer's steps as piecewise-linear terms in the step's tokens.

    ``fixed_s + per_token_s × n + per_logit_s × logits`` for ``n < split_tokens`` (the
    first piece), then ``tail``'s ``(below_tokens, fixed_s, per_token_s)`` pieces; all
    zero at TP 1.

    Args:
        model, hw, tensor_parallel_size: the shape, the GPU profile (its TP link and
            ``custom_all_reduce``), the TP (= EP) group.
        all_reduce: the preset's algorithm; None: NCCL's ring.
        embedding, lm_head: whether the group runs the embedding's all-reduce and the
            logits gather.
        all_to_all: the MoE layers dispatch and combine by all-to-all (DP attention + EP)
            instead of their two all-reduces each.
        scale_out: the link between nodes (a TP or EP group across nodes needs it).
        ep_imbalance: the busiest EP rank's routing load over the mean (1.0: balanced).
        attention_tp: with ``all_to_all``, the GPUs of each data-parallel attention rank:
            above 1, each MoE layer's attention output is all-reduced inside the rank
            (NCCL's ring over the TP link, for the rank's attention_tp / TP of the step's
            tokens) before the dispatch.
        fusion: the preset's fused all-reduce + RMSNorm where it applies (the caller checks
            :meth:`~capsim.profiles.engines.AllReduceFusion.applies`; None: none): below its
            ``max_tokens``, 2 × layers − 1 of the all-reduces are the profile's
            ``all_reduce_tables[fusion.table]`` (:meth:`fused_pieces`); a profile without
            that table or its TP row keeps the engine's all-reduce throughout.

    Raises:
        ScenarioError: a group across nodes without ``scale_out``, or over part of a node.
    """

    __slots__ = ("model", "hw", "tp", "all_reduce", "scale_out", "ep_imbalance", "attention_tp",
                 "split_tokens", "fixed_s", "per_token_s", "per_logit_s", "tail", "_limits")

    def __init__(self, model: ModelShape, hw: HardwareProfile, tensor_parallel_size: int,
                 all_reduce: TpAllReduce | None = None, *, embedding: bool = True,
                 lm_head: bool = True, all_to_all: bool = False,
                 scale_out: LinkProfile | None = None, ep_imbalance: float = 1.0,
                 attention_tp: int = 1, fusion: AllReduceFusion | None = None) -> None:
        self.model, self.hw, self.tp = model, hw, tensor_parallel_size
        self.attention_tp = attention_tp
        self.all_reduce, self.scale_out, self.ep_imbalance = all_reduce, scale_out, ep_imbalance
        self.split_tokens, self.tail, self._limits = NO_LIMIT_TOKENS, (), ()
        tp, m = tensor_parallel_size, model
        if tp == 1:
            self.fixed_s = self.per_token_s = self.per_logit_s = 0.0
            return
        bw = hw.tp_link_bandwidth_bytes_per_s * hw.efficiency.interconnect
        latency = hw.tp_link_latency_s
        n_all_reduce = 2 * m.num_hidden_layers + (1 if embedding else 0)
        if all_to_all:                   # the MoE layers dispatch and combine instead
            n_all_reduce -= 2 * m.moe_layers
        # + latency: the logits gather's; the all-to-alls added last (the float order
        # of the ring-only sum before the presets had algorithms)
        per_ar = self.all_reduce_pieces(bw, latency)
        fused = self.fused_pieces(fusion) if fusion is not None and not all_to_all else None
        if fused is None:
            pieces = [(limit, n_all_reduce * fixed + latency, n_all_reduce * per_token)
                      for limit, fixed, per_token in per_ar]
        else:
            n_fused = 2 * m.num_hidden_layers - 1
            pieces = [(limit, fixed + latency, per_token) for limit, fixed, per_token in
                      _weighted_sum(((n_all_reduce - n_fused, per_ar), (n_fused, fused)),
                                    fusion.max_tokens)
                      + [(limit, n_all_reduce * fixed, n_all_reduce * per_token)
                         for limit, fixed, per_token in per_ar if limit > fusion.max_tokens]]
        if all_to_all:
            a2a_fixed, a2a_per_token = self.all_to_all_terms()
            pieces = [(limit, fixed + a2a_fixed, per_token + a2a_per_token)
                      for limit, fixed, per_token in pieces]
        (self.split_tokens, self.fixed_s, self.per_token_s), *tail = pieces
        self.tail = tuple(tail)
        self._limits = tuple(limit for limit, _, _ in tail)   # bisected: a table has ~20
        self.per_logit_s = self._logit_gather_s(bw) if lm_head else 0.0

    def _nodes(self) -> int:
        """Nodes the TP group spans (1 within one node).

        Raises:
            ScenarioError: it spans nodes without a scale-out link, or not whole nodes.
        """
        g, tp = self.hw.gpus_per_node, self.tp
        if g is None or tp <= g:
            return 1
        if self.scale_out is None:
            raise ScenarioError(f"tensor_parallel_size {tp} spans nodes of {g} GPUs: the "
                                "pricer needs the scale-out link (hardware scale_out_link)")
        if tp % g:
            raise ScenarioError(f"tensor_parallel_size {tp} spans nodes of {g} GPUs "
                                f"unevenly; valid across nodes: a multiple of {g}")
        return tp // g

    def _logit_gather_s(self, bw: float) -> float:
        """Seconds per LM-head row of the logits gather (vocab × 2 bytes a row): over the
        TP link, or across nodes first among node peers over the scale-out link, then
        inside each node."""
        row, tp, nodes = self.model.vocab_size * ACTIVATION_BYTES, self.tp, self._nodes()
        if nodes == 1:
            return (tp - 1) / tp * row / bw
        g = tp // nodes
        return ((nodes - 1) * row / tp / self.scale_out.bandwidth_bytes_per_s
                + (g - 1) / g * row / bw)

    def all_reduce_pieces(self, ring_bw: float, ring_latency: float
                          ) -> list[tuple[int, float, float]]:
        """One all-reduce of a step's activations as ``(below_tokens, fixed_s,
        per_token_s)`` pieces in token order, the last unlimited: the engine's one-shot
        kernel, then its two-shot kernel, below their byte limits (``TpAllReduce``; a
        message of n tokens is n × hidden × 2 bytes), then NCCL (:meth:`nccl_tail`). Only the ring
        without a ``custom`` preset, a TP size its kernels lack, a group of more than 2
        GPUs without NVLink, or a profile without ``custom_all_reduce`` costs; a group
        across nodes costs :func:`hierarchical_all_reduce_s`."""
        tp, hw = self.tp, self.hw
        row = self.model.hidden_size * ACTIVATION_BYTES
        nodes = self._nodes()
        if nodes > 1:                    # NCCL across nodes; no custom kernel
            out = self.scale_out
            args = (tp // nodes, nodes, ring_bw, ring_latency, out.bandwidth_bytes_per_s,
                    out.latency_s)
            fixed = hierarchical_all_reduce_s(0.0, *args)
            return [(NO_LIMIT_TOKENS, fixed, hierarchical_all_reduce_s(row, *args) - fixed)]
        ring = (NO_LIMIT_TOKENS, ring_all_reduce_s(0.0, tp, ring_bw, ring_latency),
                ring_all_reduce_s(row, tp, ring_bw, 0.0))
        ar, kernel = self.all_reduce, hw.custom_all_reduce
        if ar is not None and ar.algorithm == "table":
            table = hw.all_reduce_tables.get(ar.table)
            if table is None or tp not in table.latency_us:
                return [ring]
            return table_pieces(table.knots_s(tp), row)
        if (ar is None or ar.algorithm != "custom" or kernel is None
                or tp not in ar.world_sizes or (tp > 2 and not hw.has_nvlink)):
            return [ring]
        link = hw.tp_link_bandwidth_bytes_per_s
        max_tokens = -(-ar.max_bytes // row)            # fewest tokens of >= max_bytes
        one_max = ar.one_shot_max_bytes[tp]
        one_tokens = max_tokens if one_max is None else min(-(-one_max // row), max_tokens)
        bw1 = link * kernel.one_shot_link_efficiency
        bw2 = link * kernel.two_shot_link_efficiency
        pieces = []
        if one_tokens > 0:
            pieces.append((one_tokens,
                           one_shot_all_reduce_s(0.0, tp, bw1, kernel.one_shot_latency_s),
                           one_shot_all_reduce_s(row, tp, bw1, 0.0)))
        if max_tokens > one_tokens:
            pieces.append((max_tokens,
                           two_shot_all_reduce_s(0.0, tp, bw2, kernel.two_shot_latency_s),
                           two_shot_all_reduce_s(row, tp, bw2, 0.0)))
        return pieces + self.nccl_tail(max_tokens, row, ring)

    def fused_pieces(self, fusion: AllReduceFusion) -> list[tuple[int, float, float]] | None:
        """One fused all-reduce + RMSNorm of a step's activations as ``(below_tokens,
        fixed_s, per_token_s)`` pieces: the GPU profile's measured table ``fusion.table``
        (:func:`table_pieces`; a message of n tokens is n × hidden × 2 bytes); None where the
        profile has no such table or no row for this TP size, or the group spans nodes."""
        table = self.hw.all_reduce_tables.get(fusion.table)
        if table is None or self.tp not in table.latency_us or self._nodes() > 1:
            return None
        return table_pieces(table.knots_s(self.tp),
                            self.model.hidden_size * ACTIVATION_BYTES)

    def nccl_tail(self, from_tokens: int, row: int, ring: tuple[int, float, float]
                  ) -> list[tuple[int, float, float]]:
        """NCCL's all-reduce for messages of ``from_tokens`` tokens and more (``row`` bytes a
        token) as pieces: the profile's measured NCCL table (:data:`NCCL_TABLE`) where it has
        a row for the TP size, else ``ring`` (one unlimited piece)."""
        table = self.hw.all_reduce_tables.get(NCCL_TABLE)
        if table is None or self.tp not in table.latency_us:
            return [ring]
        return [p for p in table_pieces(table.knots_s(self.tp), row) if p[0] > from_tokens]

    def terms(self, n: int) -> tuple[float, float]:
        """(fixed s, s per token) of a step's communication at ``n`` tokens."""
        if n < self.split_tokens:
            return self.fixed_s, self.per_token_s
        _, fixed, per_token = self.tail[bisect_right(self._limits, n)]
        return fixed, per_token

    def seconds(self, n: int, logits_seqs: int) -> float:
        """A step's communication seconds at ``n`` tokens and ``logits_seqs`` LM-head rows
        (the sum the pricer inlines)."""
        fixed, per_token = self.terms(n)
        return fixed + per_token * n + self.per_logit_s * logits_seqs

    def all_to_all_terms(self) -> tuple[float, float]:
        """(fixed s, s per token of the step) of the expert-parallel dispatch and combine
        of every MoE layer (2 all-to-alls each): the latency, and the busiest rank's
        bytes per token (:func:`~capsim.cost.operators.moe_all_to_all_bytes_per_token` ×
        the routing imbalance) over NVLink within a node and the scale-out link beyond;
        with DP attention ranks of several GPUs, each MoE layer's attention all-reduce
        inside the rank.

        Raises:
            ScenarioError: the EP group spans nodes and no scale-out link was given.
        """
        m, hw, ep = self.model, self.hw, self.tp
        g = hw.gpus_per_node
        if g is not None and ep > g and self.scale_out is None:
            raise ScenarioError(f"expert parallel size {ep} spans nodes of {g} GPUs: the "
                                "pricer needs the scale-out link (hardware scale_out_link)")
        out_bw, out_lat = (self.scale_out.bandwidth_bytes_per_s, self.scale_out.latency_s) \
            if self.scale_out is not None else (0.0, 0.0)
        bw = hw.tp_link_bandwidth_bytes_per_s * hw.efficiency.interconnect
        args = (ep, g, bw, hw.tp_link_latency_s, out_bw, out_lat)
        per_token = moe_all_to_all_bytes_per_token(m, ep) * self.ep_imbalance
        fixed = all_to_all_s(0.0, *args)
        per_token_s = all_to_all_s(per_token, *args) - fixed
        n = 2 * m.moe_layers
        fixed, per_token_s = n * fixed, n * per_token_s
        t = self.attention_tp
        if t > 1:                        # each rank's attention output, inside the rank
            row = m.hidden_size * ACTIVATION_BYTES * t / ep
            fixed += m.moe_layers * ring_all_reduce_s(0.0, t, bw, hw.tp_link_latency_s)
            per_token_s += m.moe_layers * ring_all_reduce_s(row, t, bw, 0.0)
        return fixed, per_token_s


def _weighted_sum(terms: tuple[tuple[int, list[tuple[int, float, float]]], ...], below: int
                  ) -> list[tuple[int, float, float]]:
    """Σ weight × pieces over token counts under ``below``, as pieces: each
    ``(below_tokens, fixed_s, per_token_s)`` list covers [previous limit, its limit) and
    ends unlimited; the sum breaks wherever any of them does, its last piece at ``below``."""
    limits = sorted({limit for _, pieces in terms for limit, _, _ in pieces
                     if limit < below} | {below})
    out, start = [], 0
    for limit in limits:
        fixed = per_token = 0.0
        for weight, pieces in terms:
            _, f, t = next(p for p in pieces if p[0] > start)
            fixed += weight * f
            per_token += weight * t
        out.append((limit, fixed, per_token))
        start = limit
    return out

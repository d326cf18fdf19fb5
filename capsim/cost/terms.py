"""What every part of the step pricer shares: the result types (:class:`StepCost` per step,
:class:`OperatorCost` per operator, the :class:`WorkTally` of a run), the step a pricer
reads (:class:`PricedStep`) and the GEMM-curve tables (``1 / e(n)`` looked up by count).

Public API:
    StepCost, OperatorCost, WorkTally, PricedStep, StepInput, step_input(...) -> (step, logits),
    GEMM_TABLE_TOKENS, inverse_table(curve), inverse_at(table, curve, n), ZERO_COST
"""

from __future__ import annotations

from array import array
from collections.abc import Sized
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from capsim.cost.operators import curve_efficiency
from capsim.profiles.hardware import Curve


class StepCost(NamedTuple):
    """Cost of one engine step on one GPU of the tensor-parallel group.

    ``seconds = Σ_op max(compute, memory) + comm_s + overhead_s``, so
    ``seconds >= max(compute_s, memory_s)`` when one side dominates every op.
    ``flops`` and ``bytes`` are per GPU (for MFU / MBU); ``bytes`` is HBM traffic.
    ``compute_bound`` is ``compute_s > memory_s`` summed over the operators.
    (A named tuple: one is built per engine step, and a frozen dataclass costs
    several times more to construct.)
    """

    seconds: float
    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float
    compute_bound: bool


#: The cost of an empty step.
ZERO_COST = StepCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, False)


class PricedStep(Protocol):
    """The aggregates of one engine step a pricer reads (``capsim.engine.step.Step``
    has them): O(1) in the batch size.

    ``prefill_attn_pairs``: Σ over prompt chunks of ``c·p + c(c+1)/2`` (chunk c on p
    cached tokens, :func:`~capsim.cost.operators.attn_pairs`); ``prefill_kv_tokens``: Σ
    ``p + c``; ``decode_ctx_tokens``: Σ keys the decode tokens attend over;
    ``prefills``: one entry per sequence with a prompt chunk (only its length is read).
    """

    prefill_tokens: int
    prefill_attn_pairs: float
    prefill_kv_tokens: int
    decode_seqs: int
    decode_ctx_tokens: int
    prefills: Sized


class StepInput(NamedTuple):
    """A :class:`PricedStep` given by its aggregates (no scheduler behind it)."""

    prefill_tokens: int = 0
    prefill_attn_pairs: float = 0.0
    prefill_kv_tokens: int = 0
    decode_seqs: int = 0
    decode_ctx_tokens: int = 0
    prefills: Sized = ()


def step_input(prefill_tokens: int = 0, prefill_attn_pairs: float = 0.0,
               prefill_kv_tokens: int = 0, decode_seqs: int = 0, decode_ctx_tokens: int = 0,
               logits_seqs: int | None = None, prefill_seqs: int | None = None
               ) -> tuple[StepInput, int]:
    """A step from its aggregates, and its LM-head rows, for a pricer's ``price``.

    Args:
        prefill_tokens: Σ new prompt tokens (chunks) computed this step.
        prefill_attn_pairs: Σ over prefill chunks of ``c·p + c(c+1)/2``
            (see :func:`attn_pairs`; chunk c on top of p cached tokens).
        prefill_kv_tokens: Σ over prefill chunks of ``p + c`` (KV tokens
            the prefill attention reads).
        decode_seqs: sequences decoding one token each.
        decode_ctx_tokens: Σ context length those decodes attend over.
        logits_seqs: sequences whose LM head runs this step. Default
            ``decode_seqs + (1 if prefill_tokens else 0)``: the pricer
            cannot know how many prefill sequences finish their prompt
            this step, so pass the exact count when you have it (vLLM
            computes logits only for a prompt's last chunk). 0 skips the
            LM head and its weight read entirely.
        prefill_seqs: sequences with a prompt chunk this step (the host's
            per-sequence work); default 1 if ``prefill_tokens`` else 0.
    """
    if logits_seqs is None:
        logits_seqs = decode_seqs + 1 if prefill_tokens else decode_seqs
    if prefill_seqs is None:
        prefill_seqs = 1 if prefill_tokens else 0
    return StepInput(prefill_tokens, prefill_attn_pairs, prefill_kv_tokens, decode_seqs,
                     decode_ctx_tokens, range(prefill_seqs)), logits_seqs


class WorkTally:
    """Exact running sums of the step aggregates that FLOPs and HBM bytes are linear in.

    A step's ``cost().flops`` and ``cost().bytes`` are linear functions of its token
    count, LM-head rows, attention pairs and KV tokens read (plus fixed weight bytes
    per step), so a run's totals follow from these integer sums
    (:meth:`StepPricer.work`) whatever order the steps are added in: step by step and
    in decode runs alike. All fields are ``int``.
    """

    __slots__ = ("steps", "logit_steps", "tokens", "logits", "attn_pairs", "kv_read_tokens",
                 "steps_by_tokens")

    def __init__(self, by_tokens: bool = False) -> None:
        self.steps = self.logit_steps = self.tokens = self.logits = 0
        self.attn_pairs = self.kv_read_tokens = 0
        # Steps per tokens-per-step, kept for MoE models, whose expert weight reads are
        # not linear in the tokens (StepPricer.new_tally); None otherwise.
        self.steps_by_tokens: dict[int, int] | None = {} if by_tokens else None

    def add(self, steps: int, tokens: int, logits: int, attn_pairs: int, kv_read_tokens: int,
            logit_steps: int) -> None:
        """``steps`` steps computing Σ ``tokens`` tokens (prefill + decode) and Σ ``logits``
        LM-head rows (in ``logit_steps`` of them), attending over Σ ``attn_pairs``
        query-key pairs and reading Σ ``kv_read_tokens`` cached KV tokens."""
        self.steps += steps
        self.logit_steps += logit_steps
        self.tokens += tokens
        self.logits += logits
        self.attn_pairs += attn_pairs
        self.kv_read_tokens += kv_read_tokens
        if self.steps_by_tokens is not None and steps:
            n = tokens // steps          # every step of a call has the same token count
            self.steps_by_tokens[n] = self.steps_by_tokens.get(n, 0) + steps


@dataclass(frozen=True, slots=True)
class OperatorCost:
    """One operator's share of a step, summed over its ``count`` executions (layers)."""

    name: str
    count: int
    flops: float
    bytes: float
    compute_s: float
    memory_s: float

    @property
    def seconds(self) -> float:
        """Roofline time: the slower of compute and memory."""
        return max(self.compute_s, self.memory_s)

    @property
    def compute_bound(self) -> bool:
        """True if the arithmetic takes longer than the memory traffic."""
        return self.compute_s > self.memory_s


#: Counts below this use a precomputed table of 1 / e(n) (see StepPricer).
GEMM_TABLE_TOKENS = 16_384

#: The table of a profile without a curve: 1 / e = 1 everywhere (shared, read-only use).
_NO_CURVE = array("d", [1.0]) * GEMM_TABLE_TOKENS


def inverse_table(curve: Curve | None) -> array:
    """``1 / e(n)`` for n in [0, 16,384) as a flat array of doubles."""
    if curve is None:
        return _NO_CURVE
    return array("d", (1.0 / curve_efficiency(curve, np.arange(GEMM_TABLE_TOKENS))).tobytes())


def inverse_at(table: array, curve: Curve | None, n: int) -> float:
    """``1 / e(n)``: the table's entry below 16,384, else the curve evaluated."""
    if n < GEMM_TABLE_TOKENS:
        return table[n]
    return float(1.0 / curve_efficiency(curve, n))

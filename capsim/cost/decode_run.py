"""The price of a run of decode-only steps, vectorised: one numpy pass where the engine's
macro-steps (:mod:`capsim.engine.macro`) would otherwise price each step.

A run is segments of steps with the same sequences n, the context growing by n per
step. Every term of such a step but its decode attention depends on n alone (memoised
per n by :meth:`DecodeRuns.terms`); attention is linear in the context. Two paths, both
bit-for-bit :meth:`~capsim.cost.pricer.StepPricer.cost` of each step (same float
operations in the same order; numpy does not fuse them, and the additions commute
exactly): :meth:`DecodeRuns.general` prices both roofline sides of every step, the
reference; the fast path of :meth:`DecodeRuns.costs` adds only the memory side once a
margin check proves no step is compute-bound (tests/cost/test_decode_run.py holds both
to ``cost``).

Public API:
    DecodeRuns
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from capsim.cost.communication import Communication
from capsim.cost.host import HostTime

#: (compute_s, memory_s, roof_s, flops, bytes) of a step of n tokens and ``logits`` LM-head
#: rows without decode attention (:meth:`~capsim.cost.operator_terms.OperatorTerms.base`).
BaseTerms = Callable[[int, int, int, float, int], tuple[float, float, float, float, float]]


class DecodeRuns:
    """Prices decode runs for one :class:`~capsim.cost.pricer.StepPricer`.

    Args:
        base: the pricer's terms of everything but decode attention (:data:`BaseTerms`).
        comm: its communication; ``lm_head``: whether it runs the LM head.
        attn_d: decode attention's (compute s per pair, s per KV token read, s per new
            token, launch s per step).
        window: (fraction of layers windowed, window tokens); fraction 0: none.
        overhead_s: the hardware's step overhead; ``host``: the engine's host terms.
        eager: (launch floor s, sequences): a step of more sequences than that runs
            eagerly, its GPU part at least the floor (the pricer's decode launch floor and
            decode graph limit); (0.0, inf): every decode step replays a graph.
    """

    __slots__ = ("_base", "_comm", "_lm_on", "_attn_d", "_window", "_win_frac",
                 "_win_tokens", "_overhead_s", "_host", "_memo", "_eager_s", "_graph_seqs",
                 "_eager_decode", "_fast", "_fast_memo", "_consts")

    def __init__(self, base: BaseTerms, comm: Communication, lm_head: bool,
                 attn_d: tuple[float, float, float, float], window: tuple[float, int],
                 overhead_s: float, host: HostTime,
                 eager: tuple[float, float] = (0.0, float("inf"))) -> None:
        self._base, self._comm, self._lm_on, self._attn_d = base, comm, lm_head, attn_d
        self._win_frac, self._win_tokens = window
        self._window = self._win_frac > 0
        self._overhead_s, self._host = overhead_s, host
        self._eager_s, self._graph_seqs = eager
        # Only a finite graph limit with a launch floor ever raises a decode step.
        self._eager_decode = self._eager_s > 0 and self._graph_seqs != float("inf")
        self._memo: dict[int, tuple[float, ...]] = {}
        # The memory-bound fast path needs unwindowed layers and memory growing faster per
        # context token than compute (then a segment's first step decides: _fast_row).
        c_pair, m_kv, _, _ = attn_d
        self._fast = not self._window and not c_pair * (1 + 1e-6) > m_kv
        # n → what _fast_row returns: (compute_s, memory_s, row, row as 0-d arrays)
        self._fast_memo: dict[int, tuple] = {}
        # The fast path's constants as 0-d float64 arrays (see _fast_row)
        self._consts = tuple(np.array(x) for x in (m_kv, attn_d[3], overhead_s, host.residual_s))

    def costs(self, seqs: list[int], ctx0: list[int], lengths: list[int]
              ) -> tuple[np.ndarray, np.ndarray | None]:
        """Vectorised :meth:`~capsim.cost.pricer.StepPricer.cost` of a run of decode-only
        steps, in segments.

        Args:
            seqs: sequences decoding in each segment's steps (> 0).
            ctx0: Σ context of each segment's first step; it grows by ``seqs[i]``
                per step (every sequence appends one token).
            lengths: steps in each segment (> 0); k = Σ lengths.

        Returns:
            (seconds, compute_bound): (k,) float64, bit-for-bit ``cost(decode_seqs=n,
            decode_ctx_tokens=ctx, logits_seqs=n).seconds`` of each step; (k,) bool
            ``cost().compute_bound``, or None when no step is compute-bound.
        """
        if not self._fast or (self._eager_decode and max(seqs) > self._graph_seqs):
            return self.general(seqs, ctx0, lengths)
        # Every segment memory-bound (_fast_row): its terms added in cost()'s order
        m_kv, launch, overhead_s, residual_s = self._consts
        if len(seqs) == 1:
            n, c = seqs[0], ctx0[0]
            f = self._fast_row(n, c)
            if f is None:
                return self.general(seqs, ctx0, lengths)
            new_s, roof_s, comm_s, host_s = f[3]
            m = np.arange(c, c + n * lengths[0], n, dtype=np.float64)
        else:
            rows = self._segment_rows(seqs, ctx0, lengths)
            if rows is None:
                return self.general(seqs, ctx0, lengths)
            # (the method: no dispatch wrapper; the integers are exact in float64)
            new_s, roof_s, comm_s, host_s, base, n = np.array(rows).repeat(lengths, axis=1)
            m = np.arange(sum(lengths), dtype=np.float64)
            m *= n
            m += base                    # the context of each step, exactly
        m *= m_kv
        m += launch
        m += new_s
        m += roof_s
        m += comm_s
        m += overhead_s
        h = self._host
        if h.active:
            if not h.overlapped:
                m += host_s
            else:
                np.maximum(m, host_s, out=m)
                m += residual_s
        return m, None

    def _fast_row(self, n: int, c: int) -> tuple | None:
        """(compute s, memory s, row, row as 0-d float64 arrays) of a segment of ``n``
        sequences whose first step attends over ``c`` tokens, where row is (new-token s,
        roof s, comm s, host s); None when a step of it may be compute-bound.
        The margin check, with a margin far above rounding: the memory side of its first
        step exceeds the compute side by more than 1e-9 of itself, and it grows faster per
        context token (``_fast``: ``m_kv ≥ c_pair · (1 + 1e-6)``), so every later step is
        memory-bound too. The rest depends on n alone (memoised per n)."""
        f = self._fast_memo.get(n)
        if f is None:
            compute_s, memory_s, roof_s, comm_s, _ = self.terms(n)
            h = self._host
            host_s = h.step_s + h.seq_s * n + h.token_s * 0 if h.active else 0.0
            row = (self._attn_d[2] * n, roof_s, comm_s, host_s)
            # also as 0-d arrays: numpy adds those to a run's steps without converting a
            # Python float per operation (the same float64 sums)
            f = self._fast_memo[n] = (compute_s, memory_s, row,
                                      tuple(np.array(x) for x in row))
        c_pair, m_kv, m_new, launch = self._attn_d
        compute_s, memory_s, _, _ = f
        mem = memory_s + launch + m_kv * c + m_new * n
        if not mem - (compute_s + launch + c_pair * c) > 1e-9 * mem:
            return None
        return f

    def _segment_rows(self, seqs: list[int], ctx0: list[int], lengths: list[int]
                      ) -> list[list[float]] | None:
        """Per segment: (new-token s, roof s, comm s, host s, context base, n), where step
        j of the run has context base + n·j (exact integers); None when a step of some
        segment may be compute-bound (:meth:`_fast_row`)."""
        rows: list[list[float]] = [[], [], [], [], [], []]
        a_new, a_roof, a_comm, a_host, a_base, a_seqs = rows
        lo, fast_row = 0, self._fast_row
        for n, c, length in zip(seqs, ctx0, lengths):
            f = fast_row(n, c)
            if f is None:
                return None
            new_s, roof_s, comm_s, host_s = f[2]
            a_new.append(new_s)
            a_roof.append(roof_s)
            a_comm.append(comm_s)
            a_host.append(host_s)
            a_base.append(c - n * lo)
            a_seqs.append(n)
            lo += length
        return rows

    def general(self, seqs: list[int], ctx0: list[int], lengths: list[int]
                ) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`costs` where a step may be compute-bound (or layers are windowed):
        both sides of every step, as ``cost()`` takes them."""
        c_pair, m_kv, m_new, launch = self._attn_d
        terms = [self.terms(n) for n in seqs]
        ctx = np.concatenate([np.arange(c, c + n * m, n, dtype=np.float64)
                              for n, c, m in zip(seqs, ctx0, lengths)])
        compute_s, memory_s, roof_s, comm_s, n = np.array(
            terms, dtype=np.float64).T.repeat(lengths, axis=1)
        if self._window:         # the windowed layers' keys capped, as cost() caps them
            ctx = ctx - self._win_frac * (ctx - np.minimum(ctx, n * self._win_tokens))
        m = ctx * m_kv
        m += launch
        c = launch + c_pair * ctx
        m += m_new * n
        bound = (compute_s + c) > (memory_s + m)
        roof_s += np.maximum(c, m)
        gpu = roof_s + comm_s + self._overhead_s
        if self._eager_decode:       # eager steps: at least their launches (as cost())
            low = (n > self._graph_seqs) & (roof_s + comm_s < self._eager_s)
            if low.any():
                r, k = roof_s[low], comm_s[low]
                gpu[low] = r + k + (self._overhead_s + (self._eager_s - r - k))
        if self._host.active:
            gpu = self._host.apply_array(gpu, n)
        return gpu, bound if bound.any() else None

    def terms(self, n: int) -> tuple[float, ...]:
        """(compute_s, memory_s, roof_s, comm_s, n) of a decode-only step of ``n``
        sequences, all but its attention; memoised (they depend on n only)."""
        terms = self._memo.get(n)
        if terms is None:
            fixed, per_token = self._comm.terms(n)
            comm_s = fixed + per_token * n + self._comm.per_logit_s * n
            compute_s, memory_s, roof_s, _, _ = self._base(n, n if self._lm_on else 0, 0, 0.0, 0)
            terms = self._memo[n] = (compute_s, memory_s, roof_s, comm_s, n)
        return terms

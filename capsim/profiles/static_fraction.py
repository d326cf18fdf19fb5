"""SGLang 0.5's default ``mem_fraction_static``: a memory reserve for activations and CUDA
graphs, chosen from the GPU's memory, the prefill chunk and the parallelism, taken off the
GPU (``ServerArgs._handle_gpu_memory_settings``, python/sglang/srt/server_args.py of the
sglang 0.5.3 and 0.5.7 wheels; SGLang PR 10975)::

    reserve_MiB = base + per_prefill_token × max(chunked_prefill_size, min_prefill_tokens)
                  + per_graph_bs × cuda_graph_max_bs + per_tp_pp_over_8 × TP × PP / 8
                  [+ DP attention: dp_per_graph_bs × bs × dp (+ dp_large_per_graph_bs × bs
                     × dp when bs > dp_large_bs)]
                  [+ graph_mib: 0.5.10 and later, the piecewise prefill graph's own reserve
                     (:meth:`capsim.profiles.engines.PiecewiseCudaGraph.reserve_mib`)]
    reserve_MiB = max(reserve_MiB, floor_mib) on a GPU of more than floor_above_mib
    reserve_MiB += speculative_mib (EAGLE / EAGLE-3 / MTP drafters and their graphs), or
                   standalone_mib (a separate draft model: SGLang's STANDALONE; n-gram: 0)
    mem_fraction_static = round((gpu_MiB − reserve_MiB) / gpu_MiB, 3)

``gpu_MiB`` is ``nvidia-smi``'s memory.total (``get_nvgpu_memory_capacity``); capsim takes the
GPU profile's total memory. ``cuda_graph_max_bs`` comes from the table of GPU memory and TP in
the same function (:class:`GraphBatchRow`).

Public API:
    StaticFraction, GraphBatchRow
"""

from __future__ import annotations

from pydantic import Field

from capsim.common.schema import Int, StrictModel


class ReserveRule(StrictModel):
    """What SGLang's reserve rules share: ``mem_fraction_static = round((GPU memory −
    reserve) / GPU memory, 3)``, the reserve from the subclass's ``reserve_mib``."""

    def reserve_mib(self, gpu_mib: float, chunked_prefill_tokens: int, tp: int, pp: int = 1,
                    dp_attention_ranks: int = 0, drafter: str | None = None,
                    graph_mib: float = 0.0) -> float:
        raise NotImplementedError

    def fraction(self, gpu_mib: float, chunked_prefill_tokens: int, tp: int, pp: int = 1,
                 dp_attention_ranks: int = 0, drafter: str | None = None,
                 graph_mib: float = 0.0) -> float:
        """SGLang's default ``mem_fraction_static`` (rounded to 3 places, as SGLang does)."""
        reserve = self.reserve_mib(gpu_mib, chunked_prefill_tokens, tp, pp,
                                   dp_attention_ranks, drafter, graph_mib)
        return round((gpu_mib - reserve) / gpu_mib, 3)


class GraphBatchRow(StrictModel):
    """One row of SGLang's GPU-memory table: below ``below_mib`` MiB (None: any larger GPU),
    ``cuda_graph_max_bs`` is ``small_tp`` at TP < ``tp_split`` and ``large_tp`` above."""

    below_mib: float | None = None
    small_tp: Int = Field(gt=0)
    large_tp: Int = Field(gt=0)
    tp_split: Int = Field(default=4, gt=0)

    def max_bs(self, tp: int) -> int:
        """``cuda_graph_max_bs`` at tensor-parallel degree ``tp``."""
        return self.small_tp if tp < self.tp_split else self.large_tp


class StaticFraction(ReserveRule):
    """The constants of SGLang 0.5's memory-fraction heuristic (module docstring), MiB."""

    base_mib: float = Field(ge=0)
    mib_per_prefill_token: float = Field(ge=0)
    min_prefill_tokens: Int = Field(ge=0)
    mib_per_graph_bs: float = Field(ge=0)
    mib_per_tp_pp_over_8: float = Field(ge=0)
    dp_mib_per_graph_bs: float = Field(ge=0)
    dp_large_bs: Int = Field(ge=0)
    dp_large_mib_per_graph_bs: float = Field(ge=0)
    floor_above_mib: float = Field(ge=0)
    floor_mib: float = Field(ge=0)
    speculative_mib: float = Field(ge=0)
    standalone_mib: float = Field(ge=0)
    graph_bs: list[GraphBatchRow] = Field(min_length=1)

    def cuda_graph_max_bs(self, gpu_mib: float, tp: int) -> int:
        """SGLang's ``cuda_graph_max_bs`` default on a GPU of ``gpu_mib`` MiB at TP ``tp``."""
        for row in self.graph_bs:
            if row.below_mib is None or gpu_mib < row.below_mib:
                return row.max_bs(tp)
        return self.graph_bs[-1].max_bs(tp)

    def reserve_mib(self, gpu_mib: float, chunked_prefill_tokens: int, tp: int, pp: int = 1,
                    dp_attention_ranks: int = 0, drafter: str | None = None,
                    graph_mib: float = 0.0) -> float:
        """The memory SGLang leaves outside ``mem_fraction_static``, MiB.

        Args:
            gpu_mib: the GPU's total memory, MiB.
            chunked_prefill_tokens: ``chunked_prefill_size`` (capsim's
                ``max_num_batched_tokens``).
            tp, pp: tensor- and pipeline-parallel degrees.
            dp_attention_ranks: SGLang's ``dp_size`` with ``--enable-dp-attention`` (0: off).
            drafter: capsim's speculative ``method`` (None: no speculation).
            graph_mib: the piecewise prefill graph's reserve, added before the floor (0:
                none; SGLang 0.5.10 and later).
        """
        bs = self.cuda_graph_max_bs(gpu_mib, tp)
        reserve = (self.base_mib
                   + self.mib_per_prefill_token * max(chunked_prefill_tokens,
                                                      self.min_prefill_tokens)
                   + self.mib_per_graph_bs * bs + self.mib_per_tp_pp_over_8 * tp * pp / 8)
        if dp_attention_ranks:
            reserve += self.dp_mib_per_graph_bs * bs * dp_attention_ranks
            if bs > self.dp_large_bs:
                reserve += self.dp_large_mib_per_graph_bs * bs * dp_attention_ranks
        reserve += graph_mib
        if gpu_mib > self.floor_above_mib:
            reserve = max(reserve, self.floor_mib)
        if drafter == "draft_model":
            reserve += self.standalone_mib
        elif drafter is not None and drafter != "ngram":
            reserve += self.speculative_mib
        return reserve


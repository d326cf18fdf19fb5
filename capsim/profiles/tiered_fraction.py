"""SGLang 0.4.7-0.4.9's default ``mem_fraction_static``: a fixed reserve for activations and
CUDA graphs per GPU-memory tier, growing with the parallel size, taken off the GPU
(``ServerArgs.__post_init__``, python/sglang/srt/server_args.py of the sglang 0.4.7.post1,
0.4.8.post1, 0.4.9.post2, 0.4.9.post3 and 0.4.9.post6 wheels, the same in all)::

    reserve_MiB = (base_gib + per_parallel_gib × TP × PP) × 1024   (the GPU's tier)
    reserve_MiB += speculative_mib (any drafter) + dp_attention_mib (--enable-dp-attention)
    mem_fraction_static = round((gpu_MiB − reserve_MiB) / gpu_MiB, 3)

Unlike SGLang 0.5's rule (:mod:`capsim.profiles.static_fraction`) the reserve does not follow
the prefill chunk or ``cuda_graph_max_bs``: each tier's constants were sized by SGLang for the
chunk and graph batch of that tier's GPUs. ``gpu_MiB`` is ``nvidia-smi``'s memory.total
(``get_device_memory_capacity``); capsim takes the GPU profile's total memory.

Public API:
    TieredFraction, FractionTier
"""

from __future__ import annotations

from pydantic import Field

from capsim.common.schema import StrictModel
from capsim.profiles.static_fraction import ReserveRule


class FractionTier(StrictModel):
    """One GPU-memory tier: below ``below_mib`` MiB (None: any larger GPU) the reserve is
    ``base_gib + per_parallel_gib × TP × PP`` GiB."""

    below_mib: float | None = Field(default=None, gt=0)
    base_gib: float = Field(ge=0)
    per_parallel_gib: float = Field(ge=0)


class TieredFraction(ReserveRule):
    """The constants of SGLang 0.4.7-0.4.9's memory-fraction rule (module docstring)."""

    tiers: list[FractionTier] = Field(min_length=1)
    speculative_mib: float = Field(ge=0)
    dp_attention_mib: float = Field(ge=0)

    def reserve_mib(self, gpu_mib: float, chunked_prefill_tokens: int, tp: int, pp: int = 1,
                    dp_attention_ranks: int = 0, drafter: str | None = None,
                    graph_mib: float = 0.0) -> float:
        """The memory SGLang 0.4 leaves outside ``mem_fraction_static``, MiB.

        Args:
            gpu_mib: the GPU's total memory, MiB.
            chunked_prefill_tokens: not used (0.4's reserve does not follow the chunk); kept
                so both SGLang rules take the same arguments.
            tp, pp: tensor- and pipeline-parallel degrees.
            dp_attention_ranks: SGLang's ``dp_size`` with ``--enable-dp-attention`` (0: off).
            drafter: capsim's speculative ``method`` (None: no speculation).
            graph_mib: not used (0.4 has no piecewise prefill graph by default).
        """
        del chunked_prefill_tokens, graph_mib
        tier = next((t for t in self.tiers if t.below_mib is None or gpu_mib < t.below_mib),
                    self.tiers[-1])
        reserve = (tier.base_gib + tier.per_parallel_gib * tp * pp) * 1024
        if drafter is not None:
            reserve += self.speculative_mib
        if dp_attention_ranks:
            reserve += self.dp_attention_mib
        return reserve

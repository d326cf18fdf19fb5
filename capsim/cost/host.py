"""The engine's host time around a GPU step (:class:`~capsim.profiles.engines.HostOverhead`):
``per_step_s + per_seq_s × sequences + per_prefill_token_s × prompt tokens`` (+
``per_prefill_step_s + per_prefill_seq_s × sequences`` on a step with prompt tokens), in series
with the GPU or overlapped with it (``overlap: async``: the longer of the two, then
``residual_s``).

Public API:
    HostTime
"""

from __future__ import annotations

import numpy as np

from capsim.profiles.engines import HostOverhead


class HostTime:
    """One engine preset's host terms, applied to a step's GPU seconds.

    Args:
        host: the preset's terms; None (or all zero): ``active`` is False and a step
            costs its GPU seconds alone (callers skip :meth:`apply` then).
    """

    __slots__ = ("active", "step_s", "seq_s", "token_s", "prefill_step_s", "prefill_seq_s",
                 "overlapped", "residual_s")

    def __init__(self, host: HostOverhead | None) -> None:
        self.active = host is not None and (host.per_step_s or host.per_seq_s
                                            or host.per_prefill_token_s
                                            or host.per_prefill_step_s
                                            or host.per_prefill_seq_s) > 0
        h = host or HostOverhead()
        self.step_s, self.seq_s = h.per_step_s, h.per_seq_s
        self.token_s, self.residual_s = h.per_prefill_token_s, h.residual_s
        self.prefill_step_s, self.prefill_seq_s = h.per_prefill_step_s, h.per_prefill_seq_s
        self.overlapped = h.overlap == "async"

    def seconds(self, seqs: int, prefill_tokens: int) -> float:
        """The host's seconds for a step of ``seqs`` sequences and ``prefill_tokens``
        prompt tokens."""
        host_s = self.step_s + self.seq_s * seqs + self.token_s * prefill_tokens
        if prefill_tokens:
            return host_s + self.prefill_step_s + self.prefill_seq_s * seqs
        return host_s

    def apply(self, gpu_s: float, seqs: int, prefill_tokens: int) -> float:
        """A step's seconds: the GPU's and the host's, in series or overlapped."""
        host_s = self.step_s + self.seq_s * seqs + self.token_s * prefill_tokens
        if prefill_tokens and (self.prefill_step_s or self.prefill_seq_s):
            host_s += self.prefill_step_s + self.prefill_seq_s * seqs
        if self.overlapped:
            return (gpu_s if gpu_s > host_s else host_s) + self.residual_s
        return gpu_s + host_s

    def apply_array(self, gpu_s: np.ndarray, seqs: np.ndarray) -> np.ndarray:
        """:meth:`apply` over a decode run (no prompt tokens), elementwise, the same
        float operations in the same order. Shapes: (k,) in, (k,) out."""
        host_s = self.step_s + self.seq_s * seqs + self.token_s * 0
        if self.overlapped:
            return np.maximum(gpu_s, host_s) + self.residual_s
        return gpu_s + host_s

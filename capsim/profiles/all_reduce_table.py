"""An engine's own tensor-parallel all-reduce as measured on one GPU: a table of latency per
message size and group size, held by the GPU profile under the engine's kernel name
(``HardwareProfile.all_reduce_tables``) and named by an engine preset
(``tp_all_reduce: {algorithm: table, table: NAME}``).

A table is the engine's whole dispatch as it ran: TensorRT-LLM's ``AllReduceStrategy.AUTO``
picks one-shot, two-shot or NCCL per message, and a table timed through that entry point
holds each size's choice already, so capsim needs none of the engine's thresholds. Between
two measured sizes the latency is linear in the bytes; below the smallest it is the smallest
size's (a launch and a barrier, whatever the bytes); above the largest it follows the last
two sizes' slope (bandwidth-bound).

Public API:
    AllReduceTable
"""

from __future__ import annotations

from pydantic import Field, model_validator

from capsim.common.schema import Int, StrictModel

#: Microseconds in a second (the tables are kept in µs, as the sources print them).
_US_PER_S = 1e6


class AllReduceTable(StrictModel):
    """Measured all-reduce latency (µs) of one engine's kernels on one GPU.

    ``message_bytes``: the message sizes timed (bytes of the tensor all-reduced, strictly
    increasing, at least two); ``latency_us``: for each group size (GPUs in the TP group),
    one latency per size, in the same order. A TP size without a row is not covered: the
    engine's all-reduce there is priced as NCCL's ring (:mod:`capsim.cost.communication`).
    """

    message_bytes: list[Int] = Field(min_length=2)
    # Lax int keys: a profile written back as JSON-mode YAML (``capsim calibrate``) keys them
    # as strings ('2'), as the engines' by-TP maps already accept.
    latency_us: dict[int, list[float]] = Field(min_length=1)

    @model_validator(mode="after")
    def _check_rows(self) -> "AllReduceTable":
        sizes = self.message_bytes
        if sizes[0] <= 0 or any(b <= a for a, b in zip(sizes, sizes[1:])):
            raise ValueError("message_bytes must be positive and strictly increasing")
        for tp, row in self.latency_us.items():
            if tp < 2:
                raise ValueError(f"latency_us has a row for {tp} GPU(s); valid: group sizes >= 2")
            if len(row) != len(sizes):
                raise ValueError(f"latency_us.{tp} has {len(row)} values for "
                                 f"{len(sizes)} message_bytes; valid: one per size")
            if any(t <= 0 for t in row):
                raise ValueError(f"latency_us.{tp} has a value <= 0; valid: > 0")
        return self

    def knots_s(self, tp: int) -> list[tuple[int, float]]:
        """(message bytes, seconds) of the ``tp``-GPU row, in size order.

        Raises:
            KeyError: the table has no row for ``tp``.
        """
        return [(b, t / _US_PER_S) for b, t in zip(self.message_bytes, self.latency_us[tp])]

    def seconds(self, tp: int, message_bytes: float) -> float:
        """Seconds of one all-reduce of ``message_bytes`` over ``tp`` GPUs: the measured value
        at a measured size, linear between sizes, the smallest size's below them, the last
        slope beyond them (the reference the pricer's pieces stand for).

        Raises:
            KeyError: the table has no row for ``tp``.
        """
        knots = self.knots_s(tp)
        if message_bytes <= knots[0][0]:
            return knots[0][1]
        for (b0, t0), (b1, t1) in zip(knots, knots[1:]):
            if message_bytes <= b1:
                return t0 + (t1 - t0) * (message_bytes - b0) / (b1 - b0)
        (b0, t0), (b1, t1) = knots[-2], knots[-1]
        return t1 + (t1 - t0) * (message_bytes - b1) / (b1 - b0)

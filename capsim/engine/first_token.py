"""When a first token reaches its client under vLLM V0's asynchronous output processing: during
the step after the one that computed it, once that next step has got as far as the callback.

vLLM 0.6 (``use_async_output_proc``) processes and streams step k's outputs from the callback
``LLMEngine.step`` hands step k + 1's ``execute_model``; the model runner calls it after step
k + 1 is scheduled, its input prepared and broadcast to the TP workers and its forward and
logits launched, before the sampler (vllm/worker/model_runner.py ``execute_model``, lines
1489-1495 of the 0.6.0 sdist; ``ModelInputForGPUBuilder.add_seq_group`` walks every sequence of
that step first). So the first token waits for step k + 1's host work, which grows with the
sequences it carries (``per_seq_s``), and, when step k + 1 computes prompt tokens (a prefill
arriving while the first one ran: V0 runs prefills alone, and under ``--num-scheduler-steps``
a prefill is a window of its own, vllm/core/scheduler.py ``_schedule_prefills``), for the
launches of its forward, which V0 runs eagerly (``_use_captured_graph`` needs a decode-only
batch): ``eager_prefill_op_s`` per operator, the TP collectives included
(:attr:`capsim.cost.pricer.StepPricer.eager_floor_s`).

:class:`~capsim.scenario.run_config.Pool.output_delay_s` (the next step's ``per_step_s`` with
the TP term) stays what every other chunk, the last included, waits; a first token waits
:meth:`FirstTokenDelay.seconds` instead, settled when the replica starts the step after it.
A request whose only token is its first is reported before that step and keeps
``output_delay_s``. Its first gap starts when the client got the first token (see
:meth:`FirstTokenDelay.settle`), so each request's gaps add up to E2EL − TTFT.
"""

from __future__ import annotations

from capsim.cost.host import HostTime
from capsim.engine.request import Request
from capsim.scenario.run_config import Pool


class FirstTokenDelay:
    """The first tokens a replica emitted in its last step, and the delay their client sees.

    Args:
        pool: the replica's pool (host terms of its preset with the TP term, unspread over
            multi-step windows: a window's first step schedules and prepares the whole window).
        eager_floor_s: seconds of the launches of one eager prefill forward (0: none).
    """

    __slots__ = ("host", "eager_s", "base_s", "fresh")

    def __init__(self, pool: Pool, eager_floor_s: float) -> None:
        self.host = HostTime(pool.host_overhead.for_tensor_parallel(
            pool.engine.tensor_parallel_size))
        self.eager_s = eager_floor_s
        self.base_s = pool.output_delay_s          # already added when the request finishes
        self.fresh: list[Request] = []

    @classmethod
    def of(cls, pool: Pool, pricer) -> FirstTokenDelay | None:
        """One for a replica of ``pool`` priced by ``pricer``; None where tokens leave with
        their step or after a constant (no asynchronous output processing)."""
        if not pool.output_delay_s:
            return None
        return cls(pool, getattr(pricer, "eager_floor_s", 0.0))

    def seconds(self, seqs: int, prefill_tokens: int) -> float:
        """Seconds after its step that a first token reaches its client when the next step
        carries ``seqs`` sequences and ``prefill_tokens`` prompt tokens: that step's host
        work (:meth:`capsim.cost.host.HostTime.seconds`, its prompt terms included) and, for
        a prefill, its eager launches."""
        delay_s = self.host.seconds(seqs, prefill_tokens)
        return delay_s + self.eager_s if prefill_tokens else delay_s

    def note(self, prefills: list, now: float) -> None:
        """Keep the requests of a step's ``prefills`` ((request, tokens) pairs) that emitted
        their first token at ``now`` and will emit more."""
        for req, _ in prefills:
            if req.first_token_s == now and req.num_generated < req.output_tokens:
                self.fresh.append(req)

    def settle(self, seqs: int, prefill_tokens: int, decoders) -> None:
        """The next step has started: move the kept first tokens to when their client gets
        them (less ``output_delay_s``, which their finish adds), and the start of each one's
        first gap with it (``decoders``: the replica's
        :class:`~capsim.engine.decode_set.DecodeSet`, None: none).

        ``vllm bench serve`` times ITL between chunk arrivals at the client, so the first gap
        is shorter by the wait beyond ``output_delay_s`` and a request's gaps add up to its
        E2EL − TTFT. A request handed to another replica (or preempted) before this step
        moves only its ``last_token_s``, from which its next gap runs when it joins one."""
        extra_s = self.seconds(seqs, prefill_tokens) - self.base_s
        for req in self.fresh:
            token_s = req.first_token_s
            req.first_token_s = later_s = token_s + extra_s
            if req.last_token_s != token_s or decoders is None:
                continue                         # emitted since, or gaps kept elsewhere
            if req.dec_epoch0 < 0:
                req.last_token_s = later_s
            else:
                decoders.delay_last_token(req, later_s)
        self.fresh.clear()

"""The batch a scheduler picks for one engine step, with the roofline's inputs."""

from __future__ import annotations

from dataclasses import dataclass, field

from capsim.engine.request import Request


@dataclass(slots=True)
class Step:
    """One engine step: prefill chunks plus one decode token per decoding sequence.

    ``prefills`` holds (request, tokens computed this step); a request's earlier chunks
    may still be in the pipeline (``Request.num_inflight``, pipeline parallelism). The aggregate
    fields are exactly what :meth:`capsim.cost.pricer.StepPricer.price` reads (a
    :class:`~capsim.cost.terms.PricedStep`), so pricing a step is O(1) in the batch size.
    """

    prefills: list[tuple[Request, int]] = field(default_factory=list)
    decode_seqs: int = 0            # sequences computing one token each
    decode_ctx_tokens: int = 0      # Σ keys those decode tokens attend over
    emitting_decodes: int = 0       # decode sequences that emit a token (static batching pads)
    prefill_tokens: int = 0
    prefill_attn_pairs: float = 0.0
    prefill_kv_tokens: int = 0
    swap_bytes: int = 0             # KV bytes copied host↔GPU for swap preemption in this step
    lane: object = None             # PP > 1: the DecodeSet whose decoders the batch carries

    def add_prefill(self, req: Request, num_tokens: int) -> None:
        """Add a chunk of ``num_tokens`` on top of ``req.num_computed`` cached tokens."""
        cached = req.num_computed + req.num_inflight     # earlier chunks still in the pipeline
        self.prefills.append((req, num_tokens))
        self.prefill_tokens += num_tokens
        self.prefill_attn_pairs += num_tokens * cached + num_tokens * (num_tokens + 1) / 2
        self.prefill_kv_tokens += cached + num_tokens

    @property
    def batch_tokens(self) -> int:
        return self.prefill_tokens + self.decode_seqs

    @property
    def logits_seqs(self) -> int:
        """Sequences whose LM head runs: decodes plus prefills that complete this step."""
        done = sum(1 for req, n in self.prefills
                   if req.num_computed + req.num_inflight + n >= req.num_tokens)
        return self.decode_seqs + done

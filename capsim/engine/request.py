"""A request's progress, tracked the way vLLM v1 tracks it.

A request has ``num_computed_tokens`` against ``prompt_tokens + num_generated``
known tokens (vllm/v1/request.py). A step that brings ``num_computed`` up to
the known length emits one output token. A "prefill" is any step in which a
request still has more than one token to compute; recompute preemption resets
``num_computed`` to 0, so the re-prefill covers prompt + generated tokens.

While a request is decoding, its counters are kept implicitly by the
scheduler (``dec_*`` fields + the replica's decode epoch) so a decode step does
not touch every sequence; :meth:`ContinuousScheduler.sync` materialises them.
"""

from __future__ import annotations

import math

from capsim.kv.prefix import OUTPUT, USER, Segments

WAITING, RUNNING, SWAPPED, FINISHED, REJECTED = (
    "waiting", "running", "swapped", "finished", "rejected")


class Request:
    """One request inside a replica. Times are absolute simulated seconds."""

    __slots__ = (
        "rid", "class_id", "arrival_s", "prompt_tokens", "output_tokens",
        "num_computed", "num_generated", "blocks", "handoff_blocks", "state", "replica", "reject_reason",
        "first_scheduled_s", "first_token_s", "last_token_s", "finish_s",
        "num_preemptions", "max_itl_s", "admit_order",
        "segments", "hashes", "num_registered", "shareable", "n", "group", "samples_left",
        "dec_epoch0", "dec_computed0", "dec_generated0", "dec_bucket", "dec_version",
        "num_inflight", "conversation", "priority", "ignore_eos",
    )

    def __init__(self, rid: int, class_id: int, arrival_s: float, prompt_tokens: int,
                 output_tokens: int, prompt_segments: Segments | None = None, n: int = 1):
        self.rid = rid
        self.class_id = class_id
        self.arrival_s = arrival_s
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.num_computed = 0
        self.num_generated = 0
        self.num_inflight = 0         # prompt tokens in batches still in the pipeline (PP > 1)
        self.conversation = rid       # its conversation's first turn (session_affinity routing)
        self.priority = 0             # vLLM request priority, lower first (its class's)
        self.ignore_eos = False       # the client sent ignore_eos (its class's)
        self.blocks: list[int] = []
        self.handoff_blocks: list[int] = []     # prefill-side blocks held while KV transfers
        self.state = WAITING
        self.replica = -1
        self.reject_reason = ""
        self.first_scheduled_s = math.nan
        self.first_token_s = math.nan
        self.last_token_s = math.nan
        self.finish_s = math.nan
        self.num_preemptions = 0
        self.max_itl_s = math.nan
        self.admit_order = -1
        self.dec_epoch0 = -1          # decode epoch at which it joined the decode set (-1: not decoding)
        self.dec_computed0 = 0
        self.dec_generated0 = 0
        self.dec_bucket = -1
        self.dec_version = 0          # bumps when it leaves the decode set (lazy heap deletion)
        # Token identity for prefix caching (capsim.kv.prefix): prompt segments + own reply.
        prompt_segments = prompt_segments or ((USER, rid, prompt_tokens),)
        self.segments: Segments = prompt_segments + ((OUTPUT, rid, output_tokens),)
        self.shareable = any(kind != USER or sid != rid for kind, sid, _ in prompt_segments)
        self.hashes: list[int] = []   # content hashes of its full blocks, computed lazily
        self.num_registered = 0       # leading blocks registered in the prefix cache
        # Parallel sampling (vLLM SamplingParams.n): this request is sample 0; the
        # scheduler forks n − 1 sibling sequences (group = this request) after prefill.
        self.n = n
        self.group: Request | None = None
        self.samples_left = n
        self.shareable = self.shareable or n > 1

    def restart(self) -> None:
        """Start over after its replica failed: nothing computed or generated, no KV, not
        placed; ``arrival_s`` and the preemption count are kept (a client retrying a
        stream sees its first token after the retry's prefill)."""
        self.num_computed = self.num_generated = self.num_inflight = 0
        self.blocks, self.handoff_blocks, self.hashes = [], [], []
        self.num_registered = 0
        self.state, self.replica = WAITING, -1
        self.first_scheduled_s = self.first_token_s = self.last_token_s = math.nan
        self.finish_s = self.max_itl_s = math.nan
        self.admit_order = -1
        self.dec_epoch0, self.dec_computed0, self.dec_generated0, self.dec_bucket = -1, 0, 0, -1
        self.dec_version += 1
        self.samples_left = self.n

    @property
    def num_tokens(self) -> int:
        """Known tokens: prompt + generated output (vLLM ``num_tokens``)."""
        return self.prompt_tokens + self.num_generated

    @property
    def remaining_to_compute(self) -> int:
        return self.num_tokens - self.num_computed

    @property
    def total_tokens(self) -> int:
        """KV slots it will hold at its last step: prompt + output − 1 (the last token is never fed back)."""
        return self.prompt_tokens + self.output_tokens - 1

    def note_gap(self, gap_s: float) -> None:
        if not gap_s <= self.max_itl_s:      # also true when max_itl_s is NaN
            self.max_itl_s = gap_s

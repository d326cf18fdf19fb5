"""SGLang's scheduler: prefill first, in steps of their own, behind an admission budget
that guesses how much of the running requests' outputs is still to come.

Sources (read, paraphrased; no code copied): the ``sglang==0.5.23`` wheel (whose admission
logic matches commit 00550cd11b35def9d584bf761a1e32729c20a21d), ``python/sglang/srt/``:

- ``managers/scheduler.py``: ``get_next_batch_to_run`` (a prefill batch, if one can be
  formed, runs instead of the decode step), ``_get_new_batch_prefill_raw`` (no try while
  ``batch_is_full`` and no chunked request; the chunked request's next chunk first, then
  the queue in order, stopping at the first request that does not fit; ``batch_is_full``
  set when the slots run out or on NO_TOKEN), ``update_running_batch`` (retract when the
  decode step's KV is short, else decay ``new_token_ratio``), ``on_idle`` (ratio reset);
- ``managers/schedule_policy.py`` ``PrefillAdder``: running requests charge
  new_token_ratio × min(max_new_tokens − generated, 4096) (``_get_running_request_total_token_offset``);
  a request is admitted only if extend + min(max_new_tokens − generated, 4096) + page <
  free − that charge − what this pass admitted (``add_one_req``, ``_select_prefill_admission``);
  one chunked request at a time (``add_chunked_req``); ``mem_cache/prefill_budget.py``
  ``PrefillBudget.reserve`` (an admission charges ceil_page(extend) + page + its clipped
  max_new_tokens, 0 for a chunk that does not end the prompt);
- ``managers/schedule_batch.py`` ``retract_decode`` / ``_get_decode_retraction_order``
  (fewest output tokens first, then longest prompt; at least one retracted, at least one
  kept; the ratio re-estimated over the rest), ``managers/scheduler.py``
  ``_add_request_to_queue`` (retracted requests go to the back of the queue);
- ``managers/scheduler_components/new_token_ratio_tracker.py`` (init = min(0.7 ×
  schedule_conservativeness, 1), min = init × 0.14, decay (init − min) / 600 per decode
  step; after a retraction (Σ generated + 20 × n) / (Σ max_new_tokens + 1), capped at 1).

capsim's mapping: ``max_num_batched_tokens`` = ``chunked_prefill_size`` (with chunked
prefill) or ``max_prefill_tokens`` (without), ``max_num_seqs`` = ``max_running_requests``,
the page = capsim's KV block (SGLang pages by 1 token; its one-page allowances become one
block), free tokens = free blocks × block size, ``output_tokens`` = ``max_new_tokens`` (the
client's max_tokens, not ``ignore_eos``).

The radix cache (``enable_prefix_caching`` = not ``--disable-radix-cache``, on by default),
read at these commits:

- ``mem_cache/radix_cache.py`` at 006b0e3d317f1cd4a7300e919a4eaa878b1947e7: ``match_prefix``
  (the longest cached prefix, token by token with page_size 1), ``cache_unfinished_req``
  (a prompt, or each chunk of it, is inserted after its prefill forward, so later requests
  match it), ``cache_finished_req`` (prompt and output tokens inserted when the request
  ends), ``evict`` (unreferenced leaves, least recently used first, only when memory is
  needed), ``inc_lock_ref`` / ``dec_lock_ref`` (a matched prefix held by a request is not
  evictable);
- ``managers/schedule_policy.py`` at 00550cd (above): ``add_one_req`` pins the matched prefix
  while it checks the budget (``_lock_node``: a prefix nobody held leaves the evictable
  tokens, so it counts once against free memory); only the extend (input − prefix) is
  charged to the token budgets and to memory; ``match_prefix_for_req`` /
  ``_compute_max_prefix_len`` in ``schedule_batch.py`` (at most input − 1 tokens match);
  ``calc_priority`` reorders the queue by longest prefix only under ``lpm`` (and
  ``schedule_policy`` defaults to ``fcfs`` in ``arg_groups/fields/schedule.py`` at
  001b88623b1def14a6970a26626d17c7ee874e91), so capsim keeps the queue order;
- ``managers/schedule_batch.py`` ``release_req`` (a retracted request's KV is released
  without inserting its output: ``cache_finished_req(req, is_insert=False)``).

capsim approximates the token-granular tree with its block-granular prefix cache: a hit is
rounded down to whole blocks (16 tokens in the preset), so capsim recomputes up to
block_size − 1 tokens per request that SGLang reuses (where a shared system prompt ends
inside a block, and the tail of a previous turn); eviction is least recently freed block
first (SGLang: least recently matched leaf first); ``available_size + evictable_size`` is
capsim's free blocks, cached ones included.
"""

from __future__ import annotations

from capsim.engine.macro.plan import RunBlocks
from capsim.engine.request import RUNNING
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.engine.step import Step
from capsim.kv.blocks import blocks_needed


class SglangScheduler(ContinuousScheduler):
    """SGLang's policy for one replica.

    Args:
        schedule_conservativeness: SGLang's knob (scales the initial ratio).
        init_new_token_ratio, min_new_token_ratio_factor, new_token_ratio_decay_steps,
            retract_decode_steps, clip_max_new_tokens: SGLang's constants (the preset's
            ``scheduler.knobs``).
        **kwargs: as :class:`ContinuousScheduler`.

    A step either prefills (the chunked request's next chunk, then new requests from the
    head of the queue, within ``max_num_batched_tokens``) or decodes every running
    request; never both. KV blocks are taken as tokens arrive. When a decode step's blocks
    are short, running requests are retracted, fewest generated tokens first (ties: the
    longest prompt), until the rest fit; a retracted request frees its KV and goes to the
    back of the queue to recompute prompt + generated tokens.

    With the radix cache (a caching allocator), a request admitted from the queue takes
    its longest cached prefix and extends only the rest: the budget charges the extend,
    and the prefix's blocks nobody else holds count against free memory once. Computed
    prompt blocks are cached after their prefill step, the whole sequence when it ends; a
    retracted request keeps only what its prefill had cached.

    Attributes: ``new_token_ratio`` (the current estimate), ``batch_full`` (SGLang's
    ``batch_is_full``: no admission is tried until a running request leaves).
    """

    pipelines = False     # one batch in flight under pipeline parallelism (not modelled)

    registers_when_scheduled = False

    def __init__(self, *, schedule_conservativeness: float, init_new_token_ratio: float,
                 min_new_token_ratio_factor: float, new_token_ratio_decay_steps: int,
                 retract_decode_steps: int, clip_max_new_tokens: int, **kwargs):
        super().__init__(**kwargs)
        init = min(init_new_token_ratio * schedule_conservativeness, 1.0)
        self.ratio_init = init
        self.ratio_min = min(init * min_new_token_ratio_factor, 1.0)
        self.ratio_decay = (init - self.ratio_min) / new_token_ratio_decay_steps
        self.retract_decode_steps = retract_decode_steps
        self.clip = clip_max_new_tokens
        # ratio = max(ratio0 − decays × decay, min): the same float after one step or a run.
        self._ratio0 = init
        self._decays = 0
        self.batch_full = False
        self._chunked = None            # the request whose prompt is being chunked

    @property
    def new_token_ratio(self) -> float:
        return max(self._ratio0 - self._decays * self.ratio_decay, self.ratio_min)

    # -------------------------------------------------------------- schedule
    def schedule(self, now: float = 0.0) -> Step | None:
        self._preempted_now = False
        self._now = now
        if self._chunked is not None and self._chunked.state != RUNNING:
            self._chunked = None
        if self._chunked is not None or not self.decoders.size:
            self.batch_full = False        # the last prefill batch shrank, or nothing runs
        step = Step()
        if self._chunked is not None or (self.waiting and not self.batch_full):
            self._prefill_batch(step)
            if step.prefills:
                return step                 # prefill first: no decode in this step
        if self.decoders.size:
            self._grow_decoders()
            self._add_decodes(step)
            return step
        if not self.running and not self.waiting:
            self._ratio0, self._decays = self.ratio_init, 0     # on_idle
        return None

    def _running_charge(self) -> float:
        """new_token_ratio × Σ over decoding requests of min(output still to come, clip)."""
        epoch, clip, left_sum = self.decoders.epoch, self.clip, 0
        for bucket in self.decoders.buckets:
            for r in bucket.values():
                left = r.output_tokens - r.dec_generated0 - (epoch - r.dec_epoch0)
                left_sum += left if left < clip else clip
        return left_sum * self.new_token_ratio

    def _prefill_batch(self, step: Step) -> None:
        """``PrefillAdder``: the chunked request's next chunk, then queue heads that fit."""
        bs = page = self.bs
        free = self.alloc.num_free_blocks * bs
        total = self._running_charge() if self.decoders.size else 0.0
        current = 0                             # PrefillBudget offsets of this pass
        rem_input = self.budget
        rem_chunk = self.budget if self.chunked else None
        admitted = 0

        def charge(n: int, max_new: int) -> None:
            nonlocal total, current, rem_input, rem_chunk
            ext = -(-n // page) * page
            total += ext + page + max_new
            current += ext + page
            rem_input -= ext
            if rem_chunk is not None:
                rem_chunk -= ext

        req = self._chunked
        if req is not None:                     # add_chunked_req
            avail = min(rem_chunk, int(free - total))
            if avail <= 0:
                avail = rem_chunk
            n = min(req.remaining_to_compute, avail)
            last = n == req.remaining_to_compute
            if self._reserve_prefill(req, n):
                step.add_prefill(req, n)
                charge(n, min(req.output_tokens, self.clip) * req.n if last else 0)
                admitted += 1
                if last:
                    self._chunked = None
        waiting = self.waiting
        while waiting:
            if rem_input <= 0 or (rem_chunk is not None and rem_chunk <= 0):
                break                           # OTHER: this pass's token budget is spent
            req = waiting[0]
            if self.num_running + req.n > self.max_num_seqs:
                self.batch_full = True          # no free request slot
                break
            hit = self._cached_prefix(req) if self.caching else ()
            cached = len(hit) * bs
            locked = self.alloc.num_free_among(hit) * bs if hit else 0     # _lock_node
            todo = req.remaining_to_compute - cached
            want = todo + min(max(req.output_tokens - req.num_generated, 0), self.clip) * req.n
            fits = want + page < free - locked - total
            idle = not self.running             # capsim: an idle engine takes the head anyway
            if not fits and not idle:
                self.batch_full = admitted > 0 or self.decoders.size > 0     # NO_TOKEN
                break
            ext = -(-todo // page) * page
            if rem_chunk is None and admitted and ext >= rem_input:
                break                           # OTHER: the first request may exceed the cap
            max_new = min(req.output_tokens, self.clip) * req.n
            n = todo
            if rem_chunk is not None and ext > rem_chunk:
                n = rem_chunk // page * page    # a new chunked request (one at a time)
                max_new = 0
                if n <= 0:
                    break
            need = blocks_needed(cached + n, bs) - len(hit)
            if not self.alloc.can_allocate(need + locked // bs):
                self.batch_full = admitted > 0 or self.decoders.size > 0
                break
            if self.caching:
                self._take_prefix(req, hit)
                free -= locked                  # the prefix stays pinned by the request
            req.blocks += self.alloc.allocate(need)
            self._start(req, step, n)
            if n < todo:
                self._chunked = req
            charge(n, max_new)
            admitted += 1
            if free - total <= 0 or free - current <= 0:
                self.batch_full = True          # NO_TOKEN for whoever is next
                break

    # ------------------------------------------------------------------ decode
    def _grow_decoders(self) -> None:
        """``update_running_batch``: blocks for the decode step's new tokens; retract if
        they are short, else decay the ratio by one step."""
        cow = self._cow_pending
        if self.alloc.can_allocate(len(self.decoders.crossing()) + len(cow)):
            self._decays += 1
        else:
            self._retract()
        if cow:
            self._copy_on_write(cow)
        bucket = self.decoders.crossing()
        if bucket:
            self._give_blocks(list(bucket.values()))

    def _retract(self) -> None:
        """``retract_decode``: retract in SGLang's order (at least one, keeping at least one)
        until the step's blocks fit. The ratio is then re-estimated over the requests left."""
        keep = self._retraction_order()
        first = True
        while first or not self.alloc.can_allocate(len(self.decoders.crossing())
                                                    + len(self._cow_pending)):
            if len(keep) == 1:
                break
            first = False
            self._retract_one(keep.pop())
        generated = sum(r.num_generated for r in keep)
        max_new = sum(r.output_tokens for r in keep)
        self._ratio0 = min(1.0, (generated + self.retract_decode_steps * len(keep))
                           / (max_new + 1))
        self._decays = 0
        self.batch_full = False

    def _retraction_order(self) -> list:
        """Decoding requests, the one to keep most first (``_get_decode_retraction_order``:
        most generated tokens, then shortest prompt; ties in batch order)."""
        self.decoders.sync()
        keep = [r for r in self.running.values() if r.dec_epoch0 >= 0]
        keep.sort(key=lambda r: (r.num_generated, -r.prompt_tokens), reverse=True)
        return keep

    def _retract_one(self, victim) -> None:
        """Free ``victim``'s KV; it recomputes prompt + generated tokens from the back of
        the queue (``_add_request_to_queue``)."""
        self._preempt(victim)                   # queues it at the front …
        self.waiting.popleft()
        self.waiting.append(victim)             # … SGLang's queue has it at the back

    def _reserve_prefill(self, req, n: int) -> bool:
        """Blocks for the chunked request's next chunk. The admission budget kept them free
        (no decode step runs between chunks); should they not be, decoders are retracted
        in SGLang's order."""
        need = blocks_needed(req.num_computed + n, self.bs) - len(req.blocks)
        if not self.alloc.can_allocate(need):
            keep = self._retraction_order()
            while keep and not self.alloc.can_allocate(need):
                self._retract_one(keep.pop())
        return super()._reserve_prefill(req, n)

    def _finish(self, req, now: float) -> None:
        self.batch_full = False                 # a running request left
        super()._finish(req, now)

    # ----------------------------------------------------------- radix cache
    def complete(self, step: Step, now: float) -> None:
        """As :meth:`ContinuousScheduler.complete`; with the radix cache, the tokens each
        prefill chunk computed are cached first (``cache_unfinished_req``)."""
        if self.caching:
            for req, n in step.prefills:
                if req.shareable:
                    self._register(req, req.num_computed + n)
        super().complete(step, now)

    def _cached_at_preemption(self, req, decoding: bool) -> int:
        """A retracted request's output is not inserted (``release_req``): what stays
        cached is what its prefill inserted."""
        return req.dec_computed0 if decoding else req.num_computed

    # --------------------------------------------------------------- decode runs
    def can_plan_run(self, step: Step) -> bool:
        """As :meth:`ContinuousScheduler.can_plan_run`, and no admission would be tried in
        the run's steps (nothing waits, or the batch is full until a request leaves)."""
        return super().can_plan_run(step) and (not self.waiting or self.batch_full)

    def grow_for_run(self, m: int, first: int = 1) -> RunBlocks:
        self._decays += m - first               # the ratio decays once per decode step
        return super().grow_for_run(m, first)

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

``--scheduler-recv-interval`` (``scheduler_recv_interval``, 1 by default: no skipper), read
in the sglang 0.5.7 wheel: ``managers/scheduler.py`` ``recv_requests`` (line 1186) asks
``managers/scheduler_recv_skipper.py`` ``SchedulerRecvSkipper.handle`` before polling the
tokenizer's socket: the last batch's forward mode adds its weight to a counter (decode 1, no
batch 1, anything else, a prefill, 1000: ``environ.py`` lines 212-215), and only when the
counter reaches the interval is it reset and are the arrivals taken in. capsim keeps them
in an inbox meanwhile; an idle engine takes them at once (SGLang's idle loop spins, each
pass weighing 1, without sleeping unless ``--sleep-on-idle``).

capsim's mapping: ``max_num_batched_tokens`` = ``chunked_prefill_size`` (with chunked
prefill) or ``max_prefill_tokens`` (without), ``max_num_seqs`` = ``max_running_requests``,
the page = capsim's KV block (SGLang pages by 1 token; its one-page allowances become one
block), free tokens = free blocks × block size, ``output_tokens`` = ``max_new_tokens`` (the
client's max_tokens); a request of a class with ``ignore_eos`` is admitted by SGLang's
ignore-EOS check when the radix cache is off (:mod:`.sglang_ignore_eos`).

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

from collections import deque

from capsim.engine.macro.plan import RunBlocks
from capsim.engine.request import RUNNING, WAITING
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.engine.scheduler.sglang_ignore_eos import ignore_eos_fits
from capsim.engine.step import Step
from capsim.profiles.policies import RECV_SKIPPER_KNOBS, policy_capabilities


#: SGLang's constants, read from the preset's ``scheduler.knobs``.
SGLANG_KNOBS = ("init_new_token_ratio", "min_new_token_ratio_factor",
                "new_token_ratio_decay_steps", "retract_decode_steps", "clip_max_new_tokens")


def recv_skipper_kwargs(args) -> dict:
    """``scheduler_recv_interval`` (the engine config's, else the preset's knob, else 1)
    and, above 1, the recv skipper's weights from the preset's ``scheduler.knobs``.

    Raises:
        ValueError: an interval above 1 with a preset that has no recv skipper (the
            scenario's resolution refuses it first, with the YAML path).
    """
    knobs = args.knobs or {}
    interval = args.engine.scheduler_recv_interval or knobs.get("scheduler_recv_interval", 1)
    if interval <= 1:
        return {"scheduler_recv_interval": 1}
    if any(k not in knobs for k in RECV_SKIPPER_KNOBS):
        raise ValueError("scheduler_recv_interval above 1 needs the preset's recv skipper "
                         f"weights ({', '.join(RECV_SKIPPER_KNOBS)} in scheduler.knobs)")
    return {"scheduler_recv_interval": interval, **{k: knobs[k] for k in RECV_SKIPPER_KNOBS}}


def ignore_eos_kwargs(args) -> dict:
    """The preset's ``ignore_eos_reserve_tokens`` (absent: SGLang's ignore-EOS admission
    is not modelled for that version)."""
    value = (args.knobs or {}).get("ignore_eos_reserve_tokens")
    return {} if value is None else {"ignore_eos_reserve_tokens": value}


class SglangScheduler(ContinuousScheduler):
    """SGLang's policy for one replica.

    Args:
        schedule_conservativeness: SGLang's knob (scales the initial ratio).
        init_new_token_ratio, min_new_token_ratio_factor, new_token_ratio_decay_steps,
            retract_decode_steps, clip_max_new_tokens: SGLang's constants (the preset's
            ``scheduler.knobs``).
        scheduler_recv_interval: ``--scheduler-recv-interval`` (1: every arrival is taken
            in at the next schedule).
        recv_weight_decode, recv_weight_other: what a decode step and any other step add
            to the recv skipper's counter (the preset's ``scheduler.knobs``; read only with
            an interval above 1).
        ignore_eos_reserve_tokens: ``IGNORE_EOS_RESERVE_TOKENS`` of SGLang's ignore-EOS
            admission (:mod:`.sglang_ignore_eos`), used for requests whose client sent
            ``ignore_eos`` when the radix cache is off; None: those requests are admitted
            as any other.
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

    With a recv interval above 1, arrivals wait in ``inbox`` until the recv skipper's
    counter reaches the interval (the module docstring); they join ``waiting`` then.

    Attributes: ``new_token_ratio`` (the current estimate), ``batch_full`` (SGLang's
    ``batch_is_full``: no admission is tried until a running request leaves), ``inbox``
    (arrivals not yet taken in; None without a recv skipper).
    """

    capabilities = policy_capabilities("sglang")
    registers_when_scheduled = False

    def __init__(self, *, schedule_conservativeness: float, init_new_token_ratio: float,
                 min_new_token_ratio_factor: float, new_token_ratio_decay_steps: int,
                 retract_decode_steps: int, clip_max_new_tokens: int,
                 scheduler_recv_interval: int = 1, recv_weight_decode: int = 1,
                 recv_weight_other: int = 1, ignore_eos_reserve_tokens: int | None = None,
                 **kwargs):
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
        # The recv skipper (SchedulerRecvSkipper): counter, interval, weights; the weight
        # the step last scheduled adds at the next schedule (0: none scheduled, idle).
        self.inbox: deque | None = deque() if scheduler_recv_interval > 1 else None
        self._recv_interval = scheduler_recv_interval
        self._recv_weights = (recv_weight_decode, recv_weight_other)
        self._recv_counter = 0
        self._last_weight = 0
        self.ignore_eos_reserve = ignore_eos_reserve_tokens

    @property
    def new_token_ratio(self) -> float:
        return max(self._ratio0 - self._decays * self.ratio_decay, self.ratio_min)

    # -------------------------------------------------------------- recv skipper
    def add(self, req) -> None:
        """Queue an arrival; with a recv skipper, in the inbox until the next recv."""
        if self.inbox is None:
            super().add(req)
        else:
            req.state = WAITING
            self.inbox.append(req)

    def has_work(self) -> bool:
        return super().has_work() or bool(self.inbox)

    def _recv(self) -> None:
        """``SchedulerRecvSkipper.handle``: add the last step's weight; at the interval,
        reset and take the inbox in. With no step scheduled last (idle) the loop spins to
        the interval at once."""
        weight = self._last_weight
        counter = self._recv_counter + (weight if weight else self._recv_interval)
        if counter >= self._recv_interval:
            counter = 0
            self.waiting.extend(self.inbox)
            self.inbox.clear()
        self._recv_counter = counter

    def _advance_recv(self, steps: int) -> None:
        """The counter after ``steps`` more decode steps of a run (no arrival in the inbox:
        the recvs they make take nothing in)."""
        w, n, c = self._recv_weights[0], self._recv_interval, self._recv_counter
        to_reset = -(-(n - c) // w)             # steps until the counter next resets
        if steps >= to_reset:
            c, steps = 0, (steps - to_reset) % -(-n // w)
        self._recv_counter = c + steps * w

    # -------------------------------------------------------------- schedule
    def schedule(self, now: float = 0.0) -> Step | None:
        if self.inbox is not None:
            self._recv()
            step = self._schedule(now)
            if step is None and self.inbox:
                # Nothing to run but arrivals not yet read: SGLang's idle loop spins, and
                # its next pass's recv (no batch run, weight 0) takes them in at once.
                self._last_weight = 0
                self._recv()
                step = self._schedule(now)
            self._last_weight = 0 if step is None else \
                self._recv_weights[1 if step.prefills else 0]
            return step
        return self._schedule(now)

    def _schedule(self, now: float) -> Step | None:
        self._preempted_now = False
        self._now = now
        if self._kv_ready:                  # decode role: transferred KV joins the batch
            self._join_transferred()
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
        bs = self.bs
        adder = _PrefillAdder(bs, self.kv.num_free_blocks * bs,
                              self._running_charge() if self.decoders.size else 0.0,
                              self.budget, self.budget if self.chunked else None)
        req = self._chunked
        if req is not None:                     # add_chunked_req
            avail = min(adder.rem_chunk, int(adder.free - adder.total))
            if avail <= 0:
                avail = adder.rem_chunk
            n = min(req.remaining_to_compute, avail)
            last = n == req.remaining_to_compute
            if self._reserve_prefill(req, n):
                step.add_prefill(req, n)
                adder.charge(n, min(req.output_tokens, self.clip) * req.n if last else 0)
                if last:
                    self._chunked = None
        self._add_waiting(step, adder)

    def _add_waiting(self, step: Step, adder: _PrefillAdder) -> None:
        """``add_one_req`` for the queue heads in order, until one does not fit (then
        ``batch_full`` says whether trying again before a request leaves is pointless)."""
        waiting, kv, bs = self.waiting, self.kv, self.bs
        while waiting:
            if adder.spent():
                break                           # OTHER: this pass's token budget is spent
            req = waiting[0]
            if self.num_running + req.n > self.max_num_seqs:
                self.batch_full = True          # no free request slot
                break
            hit = kv.get_computed_blocks(req)
            cached = len(hit) * bs
            locked = kv.num_free_among(hit) * bs                        # _lock_node
            todo = req.remaining_to_compute - cached
            if req.ignore_eos and self.ignore_eos_reserve is not None and not self.caching:
                fits = self._ignore_eos_fits(req, todo, adder)
            else:
                want = todo + min(max(req.output_tokens - req.num_generated, 0),
                                  self.clip) * req.n
                fits = want + bs < adder.free - locked - adder.total
            if not fits and self.running:       # capsim: an idle engine takes the head anyway
                self.batch_full = adder.admitted > 0 or self.decoders.size > 0   # NO_TOKEN
                break
            chunk = adder.chunk(todo, min(req.output_tokens, self.clip) * req.n)
            if chunk is None:
                break
            n, max_new = chunk
            if not kv.can_allocate(-(-(cached + n) // bs) - len(hit) + locked // bs):
                self.batch_full = adder.admitted > 0 or self.decoders.size > 0
                break
            if self.caching:
                self._take_prefix(req, hit)
                adder.free -= locked            # the prefix stays pinned by the request
            kv.allocate_slots(req, cached + n)
            self._start(req, step, n)
            if n < todo:
                self._chunked = req
            adder.charge(n, max_new)
            if adder.out_of_tokens():
                self.batch_full = True          # NO_TOKEN for whoever is next
                break

    def _ignore_eos_fits(self, req, todo: int, adder: _PrefillAdder) -> bool:
        """``add_one_req_ignore_eos`` (:mod:`.sglang_ignore_eos`) for ``req`` over the
        requests holding a slot (running, this pass's and the chunked one)."""
        self.decoders.sync()
        ratio, page = self.new_token_ratio, adder.page
        others = [((r.output_tokens if r.ignore_eos else r.output_tokens * ratio)
                   - r.num_generated, r.prompt_tokens + r.num_generated)
                  for r in self.running.values()]
        return ignore_eos_fits(req.output_tokens - req.num_generated,
                               req.prompt_tokens + req.num_generated, others,
                               adder.free - adder.current, -(-todo // page) * page,
                               adder.free - adder.total, self.ignore_eos_reserve)

    # ------------------------------------------------------------------ decode
    def _grow_decoders(self) -> None:
        """``update_running_batch``: blocks for the decode step's new tokens; retract if
        they are short, else decay the ratio by one step."""
        cow = self._cow_pending
        if self.kv.can_allocate(len(self.decoders.crossing()) + len(cow)):
            self._decays += 1
        else:
            self._retract()
        if cow:
            self._copy_on_write(cow)
        bucket = self.decoders.crossing()
        if bucket:
            self.kv.append_blocks(list(bucket.values()), self.decoders.shareable)

    def _retract(self, fits=None) -> None:
        """``retract_decode``: retract in SGLang's order (at least one, keeping at least one)
        until the step's blocks fit (``fits()``; default: one block per decoder crossing a
        block boundary). The ratio is then re-estimated over the requests left."""
        if fits is None:
            def fits() -> bool:
                return self.kv.can_allocate(len(self.decoders.crossing())
                                            + len(self._cow_pending))
        keep = self._retraction_order()
        first = True
        while first or not fits():
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
        need = self.kv.blocks_to_allocate(req, req.num_computed + n)
        if not self.kv.can_allocate(need):
            keep = self._retraction_order()
            while keep and not self.kv.can_allocate(need):
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
                    self.kv.cache_blocks(req, req.num_computed + n)
        super().complete(step, now)

    def _cached_at_preemption(self, req, decoding: bool) -> int:
        """A retracted request's output is not inserted (``release_req``): what stays
        cached is what its prefill inserted."""
        return req.dec_computed0 if decoding else req.num_computed

    # --------------------------------------------------------------- decode runs
    def can_plan_run(self, step: Step) -> bool:
        """As :meth:`ContinuousScheduler.can_plan_run`, and no admission would be tried in
        the run's steps (nothing waits, or the batch is full until a request leaves)."""
        return super().can_plan_run(step) and (not self.waiting or self.batch_full) \
            and not self.inbox                  # the recv it waits for is a step apart

    def grow_for_run(self, m: int, first: int = 1) -> RunBlocks:
        self._decays += m - first               # the ratio decays once per decode step
        if self.inbox is not None and m > first:
            self._advance_recv(m - first)       # and the recv skipper counts it
        return super().grow_for_run(m, first)


class _PrefillAdder:
    """One ``PrefillAdder`` pass's budgets (``mem_cache/prefill_budget.py``): tokens free
    (``free``) against the running requests' charge plus this pass's (``total``), this
    pass's offsets (``current``), the input and chunk budgets left, requests admitted."""

    __slots__ = ("page", "free", "total", "current", "rem_input", "rem_chunk", "admitted")

    def __init__(self, page: int, free: int, total: float, rem_input: int,
                 rem_chunk: int | None):
        self.page, self.free, self.total, self.current = page, free, total, 0
        self.rem_input, self.rem_chunk, self.admitted = rem_input, rem_chunk, 0

    def charge(self, n: int, max_new: int) -> None:
        """``PrefillBudget.reserve``: ceil_page(n) + page + max_new tokens."""
        page = self.page
        ext = -(-n // page) * page
        self.total += ext + page + max_new
        self.current += ext + page
        self.rem_input -= ext
        if self.rem_chunk is not None:
            self.rem_chunk -= ext
        self.admitted += 1

    def spent(self) -> bool:
        """Whether this pass's input or chunk budget is spent."""
        return self.rem_input <= 0 or (self.rem_chunk is not None and self.rem_chunk <= 0)

    def out_of_tokens(self) -> bool:
        """Whether the free tokens are spent (NO_TOKEN)."""
        return self.free - self.total <= 0 or self.free - self.current <= 0

    def chunk(self, todo: int, max_new: int) -> tuple[int, int] | None:
        """(tokens, max_new charged) of a new request with ``todo`` tokens to extend: all
        of them, or a chunk of whole pages when they exceed the chunk budget (one chunked
        request at a time; its max_new is charged with its last chunk); None when it does
        not fit (OTHER: without chunking only the first request may exceed the cap)."""
        page = self.page
        ext = -(-todo // page) * page
        if self.rem_chunk is None and self.admitted and ext >= self.rem_input:
            return None
        if self.rem_chunk is not None and ext > self.rem_chunk:
            n = self.rem_chunk // page * page
            return (n, 0) if n > 0 else None
        return todo, max_new

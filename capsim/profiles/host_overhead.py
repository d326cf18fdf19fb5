"""An engine preset's host terms: the CPU work per step and per request around the GPU
(:class:`HostOverhead`, the ``host_overhead:`` section of an engine preset YAML, loaded by
:mod:`capsim.profiles.engines`), with the bounds a value must keep."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from capsim.common.schema import MAX_SECONDS, Bool, Int, StrictModel

#: Ceiling on the host seconds to launch one kernel from Python (``draft_launch_s``): 1 ms,
#: 6.6x the slowest per-operator launch a preset holds (sglang-0.5's eager_prefill_op_s,
#: 151.36 us, from sgl-project/sglang PR 12160) and 28x vllm-0.9's 35.12 us (vllm-project/
#: vllm PR 1440). Above it the value is a unit slip (ms or us written as s), not a launch.
MAX_LAUNCH_S = 1e-3

#: Ceiling on the kernels a draft step or pass launches from Python: 100,000, 300x the 322
#: an eager Llama-2-7B forward launches (vllm-0.8's draft_launch_s source, vLLM PR 1440),
#: so an eager drafter of any shipped model's depth fits; above it, a typo.
MAX_DRAFT_LAUNCHES = 100_000

_DRAFT_COUNTS = ("draft_step_launches", "draft_pass_launches", "draft_update_launches")


class HostOverhead(StrictModel):
    """The engine's CPU work around the GPU (:mod:`capsim.cost.pricer` adds it to each step).

    Per step, ``host = per_step_s + per_seq_s × sequences scheduled + per_prefill_token_s ×
    prompt tokens``, plus ``per_prefill_step_s + per_prefill_seq_s × sequences`` on a step that
    computes prompt tokens (capsim sets them for vLLM 0.6's multi-step windows, where a prefill
    step is scheduled and prepared alone: :meth:`capsim.scenario.run_config.Pool.pricer`);
    ``overlap: serial`` (the host work and the GPU step run one after the
    other: vLLM V0, TGI) makes the step ``gpu + host``, ``async`` (the next step is scheduled
    while the GPU runs: vLLM V1 async scheduling, SGLang's overlap scheduler, TensorRT-LLM's
    executor) makes it ``max(gpu, host) + residual_s``. Per request, ``request_before_s``
    (HTTP, tokenization, the engine's wake-up) passes before the request can be scheduled:
    TTFT and E2EL grow by it, and so does the queue it joins.

    ``eager_prefill_op_s``: host seconds to launch one operator of a forward the engine runs
    eagerly (outside CUDA graphs) on a step with prompt tokens: SGLang captures graphs for
    decode batches only unless ``--enable-piecewise-cuda-graph``, so each prefill forward
    issues its kernels one by one from Python, and a short prefill waits on its launches, not
    its kernels. The GPU part of such a step is at least ``eager_prefill_op_s ×`` the model's
    operators per forward (:attr:`capsim.cost.operator_terms.OperatorTerms.eager_operators`);
    0: the engine's prefill runs in graphs, or the launches always hide behind the kernels.
    ``eager_all_reduce_ops``: at tensor parallelism the floor also counts the collectives the
    eager forward launches (:attr:`~capsim.cost.operator_terms.OperatorTerms.eager_all_reduces`:
    two all-reduces per layer, the embedding's all-reduce and the logits' gather), each one more
    Python dispatch and launch on every worker (vLLM V0: ``RowParallelLinear.forward``,
    ``VocabParallelEmbedding.forward`` and ``LogitsProcessor._get_logits`` call the TP group's
    collectives, and outside graph capture the custom all-reduce copies its input into the
    registered buffer first, ``CustomAllreduce.all_reduce_unreg``). False where the per-operator
    figure was derived with them inside it (SGLang 0.5's, from a tensor-parallel forward).
    ``eager_decode_above_graph_bs``: a decode step of more sequences than the engine
    captured CUDA graphs for runs without them, held to a launch floor too
    (:attr:`capsim.scenario.run_config.Pool.decode_graph_max_seqs` reads the largest
    captured batch: SGLang's ``cuda_graph_max_bs``, the preset's ``memory.static_fraction``
    table; vLLM V1's largest capture size, the preset's ``memory.cudagraph_capture``).
    ``eager_decode_op_s``: host seconds per operator of such an ungraphed decode forward
    (the floor is it × the operators, collectives included with ``eager_all_reduce_ops``);
    0: ``eager_prefill_op_s`` (SGLang's decode and prefill forwards launch alike; vLLM V1
    prefills in its piecewise graphs and has no prefill floor, so it gives the decode one).

    ``draft_*`` (speculative decoding, an engine whose drafting runs in series after the
    sampled tokens reach the host): ``draft_cuda_graph`` says what a draft pass's forward runs
    in (``full``, ``piecewise`` — vLLM's graphs split at the attention op — or ``none``:
    eagerly); ``draft_launch_s`` is the host seconds to launch one kernel from Python, and the
    counts are the kernels the version's drafting launches from Python: ``draft_step_launches``
    once per step (the drafter's inputs, the first pass's set-up, the rejection sampler's
    bookkeeping, the drafts' return), ``draft_pass_launches`` in every pass (its forward as
    ``draft_cuda_graph`` runs it, the LM head, the argmax) and ``draft_update_launches``
    before every pass after the first (positions, sequence lengths, slot mapping). With
    ``draft_launch_s`` set, a pass lasts the longer of its kernels and its launches, and the
    step adds its set-up launches (:class:`capsim.cost.speculative.DraftHost`); 0: each pass
    costs its kernels + the GPU's ``step_overhead_s``.

    ``per_extra_tp_worker_s``: host seconds per step for each tensor-parallel worker beyond
    the first (:meth:`for_tensor_parallel` adds ``× (TP − 1)`` to ``per_step_s``). vLLM V0's
    driver prepares every step's model input alone and broadcasts it to the TP − 1 other
    workers (``broadcast_tensor_dict``; the V0 differences listed in vLLM PR 9856's
    description); V1 workers each prepare their own inputs from one shared-memory message,
    so V1 presets leave it 0.

    ``async_output_proc`` (vLLM V0 from 0.6.0, ``use_async_output_proc``, on unless
    ``--disable-async-output-proc``, ``--enforce-eager``, pipeline parallelism or speculative
    decoding: ``ModelConfig.verify_async_output_proc``, vllm/config.py at v0.6.0, 32e7db2):
    step k's outputs are processed, detokenised and streamed during step k + 1, by the callback
    ``LLMEngine.step`` hands ``execute_model``, which the model runner calls after step k + 1
    is scheduled, its input prepared and broadcast and its forward launched
    (vllm/worker/model_runner.py ``execute_model``: ``async_callback()`` after
    ``compute_logits``, before ``sample``). So every chunk reaches its client one step's host
    work (``per_step_s`` with the TP term) after the step that computed it ends
    (:attr:`capsim.scenario.run_config.Pool.output_delay_s`), a first token the next step's
    own host work, its sequences' ``per_seq_s`` and, if it prefills, its eager launches
    included (:class:`capsim.engine.first_token.FirstTokenDelay`); vLLM 0.5 processed each step's
    outputs before scheduling the next, so they leave with the step (its ``per_seq_s`` is in
    series).

    ``outputs_wait_step_return`` (vLLM 0.6.0-0.6.1, with ``async_output_proc``): the callback
    runs in the executor thread that runs the driver's ``execute_model`` and puts each
    ``RequestOutput`` into an ``asyncio.Queue`` without waking the engine's event loop
    (vllm/engine/async_llm_engine.py ``AsyncStream.put``, vllm/utils.py ``make_async`` at v0.6.0,
    32e7db2), so an output processed inside a call that blocks on the GPU leaves when that call
    returns or when a new request wakes the loop. capsim applies it where it moves a figure:
    under multi-step windows a request finishing inside a window streams its last chunk at
    the window's end or the next arrival (:class:`capsim.engine.window_decode_set.
    WindowDecodeSet`). 0.6.2's MQLLMEngine sends from the callback itself.

    An ``async`` engine composes step k + 1 while step k runs, so a request that arrives
    during step k joins step k + 2 at the earliest (:class:`capsim.engine.replica.Replica`);
    an idle engine schedules an arrival at once. ``async_scheduling_knob``: the scenario's
    ``engine.async_scheduling`` (vLLM V1's ``--[no-]async-scheduling``) switches ``overlap``
    (:meth:`resolved`); without it ``overlap`` is fixed. ``serial_with_speculation``: the
    engine turns its overlap off for speculative decoding (SGLang 0.5's
    ``_handle_speculative_decoding``), unless ``engine.async_scheduling`` says otherwise.
    """

    # Bounded: a term of 1e30 s passed validation and broke the run's timeline (an
    # IndexError traceback); per step and per request up to MAX_SECONDS, per sequence, token
    # and operator up to MAX_LAUNCH_S (a unit slip above, as for draft_launch_s).
    per_step_s: float = Field(0.0, ge=0, le=MAX_SECONDS)
    per_seq_s: float = Field(0.0, ge=0, le=MAX_LAUNCH_S)
    per_prefill_token_s: float = Field(0.0, ge=0, le=MAX_LAUNCH_S)
    per_prefill_step_s: float = Field(0.0, ge=0, le=MAX_SECONDS)
    per_prefill_seq_s: float = Field(0.0, ge=0, le=MAX_LAUNCH_S)
    eager_prefill_op_s: float = Field(0.0, ge=0, le=MAX_LAUNCH_S)
    eager_all_reduce_ops: Bool = False
    eager_decode_above_graph_bs: Bool = False
    eager_decode_op_s: float = Field(0.0, ge=0)
    draft_cuda_graph: Literal["full", "piecewise", "none"] = "full"
    draft_launch_s: float = Field(0.0, ge=0, le=MAX_LAUNCH_S)
    draft_step_launches: Int = Field(0, ge=0, le=MAX_DRAFT_LAUNCHES)
    draft_pass_launches: Int = Field(0, ge=0, le=MAX_DRAFT_LAUNCHES)
    draft_update_launches: Int = Field(0, ge=0, le=MAX_DRAFT_LAUNCHES)
    overlap: Literal["serial", "async"] = "serial"
    residual_s: float = Field(0.0, ge=0, le=MAX_SECONDS)
    request_before_s: float = Field(0.0, ge=0, le=MAX_SECONDS)
    per_extra_tp_worker_s: float = Field(0.0, ge=0, le=MAX_SECONDS)
    async_scheduling_knob: Bool = False
    async_output_proc: Bool = False
    outputs_wait_step_return: Bool = False
    #: The overlap is off while a drafter runs unless the scenario sets
    #: ``engine.async_scheduling`` (SGLang 0.5 without SGLANG_ENABLE_SPEC_V2:
    #: :attr:`capsim.scenario.run_config.Pool.host_overhead`).
    serial_with_speculation: Bool = False

    @model_validator(mode="after")
    def _check_draft_launches(self) -> "HostOverhead":
        """The launch counts and ``draft_launch_s`` price together: either alone prices
        nothing (:meth:`capsim.scenario.run_config.Pool.draft_host`), a preset slip."""
        counts = [k for k in _DRAFT_COUNTS if getattr(self, k)]
        if counts and not self.draft_launch_s:
            raise ValueError(f"{', '.join(counts)} price nothing without draft_launch_s "
                             f"(valid: draft_launch_s > 0, the host seconds to launch one "
                             f"kernel, or the counts 0)")
        if self.draft_launch_s and not self.draft_pass_launches:
            raise ValueError("draft_launch_s prices no launch with draft_pass_launches 0 "
                             "(valid: draft_pass_launches >= 1, the kernels one draft pass "
                             "launches from Python, or draft_launch_s 0)")
        return self

    def for_tensor_parallel(self, tensor_parallel_size: int) -> "HostOverhead":
        """These terms for ``tensor_parallel_size`` workers: ``per_extra_tp_worker_s × (TP −
        1)`` folded into ``per_step_s`` (and itself then 0)."""
        if not self.per_extra_tp_worker_s:
            return self
        extra_s = self.per_extra_tp_worker_s * (tensor_parallel_size - 1)
        return self.model_copy(update={"per_step_s": self.per_step_s + extra_s,
                                       "per_extra_tp_worker_s": 0.0})

    def resolved(self, async_scheduling: bool | None) -> "HostOverhead":
        """These terms with the scenario's ``engine.async_scheduling`` applied (None: the
        preset's ``overlap``)."""
        if async_scheduling is None or not self.async_scheduling_knob:
            return self
        return self.model_copy(update={"overlap": "async" if async_scheduling else "serial"})

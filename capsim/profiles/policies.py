"""What each scheduling policy (``engine.scheduler``) can do, as data: one row per policy.

The scenario's checks read these rows (a knob of another policy, a prefix cache, chunked
prefill, a contiguous KV layout, a disaggregated pool, pipelining, speculative decoding,
replica failures), ``capsim roofline`` reads ``pipelining``, and the engine finds each
policy's class through ``module`` (``capsim/engine/scheduler/<module>.py``, whose
``build`` makes the scheduler from the engine config). Adding a policy is that file and
one row here. The rows live below the scenario layer so that its checks can read them
without importing the engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The disaggregation roles (``Pool.role``).
ALL_ROLES = ("colocated", "prefill", "decode")


@dataclass(frozen=True)
class PolicyCapabilities:
    """One scheduling policy's row.

    Attributes:
        name: the ``engine.scheduler`` value.
        module: the module under ``capsim/engine/scheduler/`` whose ``build`` makes it.
        knobs: engine knobs only this policy reads (refused with another policy).
        no_prefix_cache: why the policy has no prefix cache ('' when it has one: the
            allocator caches prefixes when ``enable_prefix_caching`` is on).
        chunking: whether it can split a prompt over steps (``enable_chunked_prefill``
            takes effect: vLLM's, SGLang's and TensorRT-LLM's chunked prefill).
        no_swap: why ``preemption_mode: swap`` contradicts the policy ('' when the engine
            preset decides: swap needs a preset that swaps, vLLM V0's).
        no_chunked_prefill: why ``enable_chunked_prefill: true`` is refused ('' when it is
            accepted).
        contiguous_kv: whether it runs over the contiguous KV layouts (the pre-paging
            baselines, ``engine.kv_allocator``).
        roles: the pool roles it can take (``prefill`` / ``decode``: a disaggregated pool).
        pipelining: whether it keeps up to PP batches in flight under pipeline parallelism
            (else one at a time, priced as the sum of the stages).
        speculative: whether it models speculative decoding (``engine.speculative``).
        failures: whether replica failures are modelled with it (``cluster.failures``).
        holds_replies: whether a reply reaches the client whole when its batch ends
            rather than streamed token by token (static batching, seed 002 Q1): no gap
            between its tokens is seen, so its ITL is n/a and its wait is all in TTFT.
    """

    name: str
    module: str
    knobs: tuple[str, ...] = ()
    no_prefix_cache: str = ""
    chunking: bool = False
    no_swap: str = ""
    no_chunked_prefill: str = ""
    contiguous_kv: bool = False
    roles: tuple[str, ...] = ("colocated",)
    pipelining: bool = False
    speculative: bool = False
    failures: bool = False
    holds_replies: bool = False

    @property
    def prefix_cache(self) -> bool:
        """Whether the policy can run over a prefix-caching allocator."""
        return not self.no_prefix_cache


_RESERVES = ("reserves each request's whole KV at admission and never preempts; swap "
             "preemption contradicts it (valid: recompute)")

_ROWS = (
    # TGI 2.1 had no prefix cache: the v3 router's radix allocator and USE_PREFIX_CACHING
    # came with TGI 2.3 (huggingface/text-generation-inference 8deeaca and b70ae09).
    PolicyCapabilities(
        "static", "static", contiguous_kv=True, holds_replies=True,
        no_prefix_cache="static batching (scheduler static) runs without a prefix cache"),
    PolicyCapabilities(
        "continuous", "vllm", knobs=("long_prefill_token_threshold",), chunking=True,
        contiguous_kv=True, roles=ALL_ROLES, pipelining=True, speculative=True,
        failures=True),
    PolicyCapabilities("trtllm", "trtllm",
                       knobs=("capacity_scheduler_policy", "batch_wait_timeout_iters",
                              "batch_wait_max_tokens_ratio"),
                       chunking=True, no_swap=_RESERVES),
    # module sglang_spec: its build makes SGLang's scheduler, with or without speculation
    PolicyCapabilities("sglang", "sglang_spec",
                       knobs=("schedule_conservativeness", "scheduler_recv_interval"),
                       chunking=True, speculative=True, roles=ALL_ROLES),
    PolicyCapabilities(
        "tgi", "tgi", knobs=("max_waiting_tokens", "waiting_served_ratio"), no_swap=_RESERVES,
        no_prefix_cache="TGI 2.1 has no prefix caching (it came with TGI 2.3's radix "
                        "allocator)",
        no_chunked_prefill="TGI 2.1 prefills whole prompts (chunked prefill came with "
                           "TGI 3.0); valid: false"),
)

#: ``engine.scheduler`` → its row, in the order the schema lists the values.
POLICY_TABLE: dict[str, PolicyCapabilities] = {row.name: row for row in _ROWS}

#: The ``engine.scheduler`` values.
POLICY_NAMES: tuple[str, ...] = tuple(POLICY_TABLE)


def policy_capabilities(name: str) -> PolicyCapabilities:
    """The row of policy ``name``.

    Raises:
        KeyError: no such policy (the schema refuses it first).
    """
    return POLICY_TABLE[name]


def label_holds_replies(label: str) -> bool:
    """Whether a run's scheduler label (``static``, ``continuous+chunked(2048)``, a pooled
    fleet's ``static+continuous``: :func:`capsim.scenario.describe.scheduler_label`) runs
    only policies that hold each reply whole (:attr:`PolicyCapabilities.holds_replies`)."""
    names = [re.split(r"[(]", part)[0] for part in re.split(r"\+(?![^(]*\))", label)]
    rows = [POLICY_TABLE.get(n) for n in names if n in POLICY_TABLE]
    return bool(rows) and all(r.holds_replies for r in rows)


#: SGLang's recv skipper (``--scheduler-recv-interval``), in a preset's ``scheduler.knobs``:
#: what a decode step, and any other step (a prefill), adds to its counter. Only presets
#: of SGLang versions that have it carry them.
RECV_SKIPPER_KNOBS = ("recv_weight_decode", "recv_weight_other")


def knob_policies() -> dict[str, str]:
    """Engine knob → the one policy that reads it."""
    return {knob: row.name for row in _ROWS for knob in row.knobs}

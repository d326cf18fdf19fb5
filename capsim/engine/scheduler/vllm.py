"""vLLM's policy (``engine.scheduler: continuous``) from the engine config: continuous
batching (:mod:`.continuous`), over a contiguous KV layout its pre-paging baseline
(:mod:`.contiguous`), with ``engine.speculative`` the verifying scheduler
(:mod:`.speculative`)."""

from __future__ import annotations

from capsim.engine.scheduler.base import PolicyArgs
from capsim.engine.scheduler.contiguous import ContiguousScheduler
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.engine.scheduler.speculative import SpeculativeScheduler


def build(args: PolicyArgs) -> ContinuousScheduler:
    """The scheduler of one replica running vLLM's policy.

    Raises:
        ValueError: a role the policy does not take.
    """
    if args.role not in ContinuousScheduler.capabilities.roles:
        raise ValueError(f"scheduler continuous has no role {args.role}")
    if args.engine.kv_allocator != "paged":
        return ContiguousScheduler.from_engine(args)
    if args.spec is not None:
        return SpeculativeScheduler.from_engine(args)
    return ContinuousScheduler.from_engine(args, num_scheduler_steps=args.engine.num_scheduler_steps)

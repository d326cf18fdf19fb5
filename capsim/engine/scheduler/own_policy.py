"""What the engines' own policies (TensorRT-LLM's, SGLang's, TGI's) share when they build
from the engine config: the combinations they refuse and their knobs, read from the
engine config or the preset's ``scheduler.knobs``."""

from __future__ import annotations

from capsim.engine.scheduler.base import PolicyArgs
from capsim.profiles.policies import policy_capabilities


def own_policy_kwargs(args: PolicyArgs, common: dict) -> dict:
    """``common`` (the continuous family's arguments), after the checks.

    Raises:
        ValueError: a role the policy does not take (``capabilities.roles``; the
            scenario's resolution refuses it first, with the YAML path), or a contiguous KV
            layout or swap preemption.
    """
    eng = args.engine
    name = eng.scheduler
    if args.role not in policy_capabilities(name).roles:
        raise ValueError(f"scheduler {name} runs co-located replicas only")
    if eng.kv_allocator != "paged" or eng.preemption_mode != "recompute":
        raise ValueError(f"scheduler {name} runs on the paged KV allocator with recompute "
                         "preemption only")
    return common


def knob(args: PolicyArgs, key: str):
    """Knob ``key`` of the policy: the engine config's, else the preset's
    ``scheduler.knobs``.

    Raises:
        ValueError: neither gives it.
    """
    value = getattr(args.engine, key, None)
    if value is None:
        value = (args.knobs or {}).get(key)
    if value is None:
        raise ValueError(f"scheduler {args.engine.scheduler} needs {key} (engine knob or the "
                         "preset's scheduler.knobs)")
    return value

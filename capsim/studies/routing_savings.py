"""GPUs a cache-aware router saves: ``capsim size`` sizes each cache-aware fleet option and
the same option behind a load-only router, at the same SLO, and reports the difference.

A co-located option whose router sees the KV cache (``prefix_aware``, ``kv_scorer``,
``session_affinity``: :data:`capsim.scenario.routing.KV_ROUTERS`) gets a *load-only twin*:
the same run behind ``least_outstanding_tokens`` (the load-aware router of llm-d's and
vLLM's production stack; variant ``<name> · load-only``), unless the scenario already has a
variant that differs from it only in a load-only router (``round_robin`` or
``least_outstanding_tokens``), which then serves as the baseline. Each cache-aware row that
met the SLOs gets ``gpus_saved`` = the baseline's GPUs − its own (negative: it needs more),
or, when the baseline met nothing within the search bound, at least ``max_gpus`` − its own.
Only the fewest-GPUs question is compared (a capacity search, ``--gpus N``, is not).
"""

from __future__ import annotations

from dataclasses import replace

from capsim.scenario.routing import KV_ROUTERS
from capsim.studies.fleet import FleetOption

#: The router a twin takes: load only (fewest outstanding prompt + output tokens).
LOAD_ONLY_ROUTER = "least_outstanding_tokens"
#: Routers that read no cache: the baselines a cache-aware option is compared with.
LOAD_ONLY_ROUTERS = ("round_robin", LOAD_ONLY_ROUTER)
TWIN_SUFFIX = " · load-only"


def _cache_aware(opt: FleetOption) -> bool:
    return opt.run is not None and opt.split is None and opt.run.router in KV_ROUTERS


def _shape(opt: FleetOption) -> tuple:
    return opt.hardware, opt.tensor_parallel_size, opt.pipeline_parallel_size


def _bare(opt: FleetOption):
    """The option's run without its name and router: what a baseline must share."""
    return replace(opt.run, variant="", description="", router="", router_options=None)


def _baseline(opt: FleetOption, options: list[FleetOption]) -> FleetOption | None:
    """An option of ``options`` that is ``opt`` behind a load-only router, or None."""
    bare = _bare(opt)
    for other in options:
        if (other.run is not None and other.split is None and _shape(other) == _shape(opt)
                and other.run.router in LOAD_ONLY_ROUTERS and _bare(other) == bare):
            return other
    return None


def with_load_only_twins(options: list[FleetOption]) -> list[FleetOption]:
    """``options`` and, after each cache-aware one without a baseline among them, its
    load-only twin (same run, ``least_outstanding_tokens``)."""
    out: list[FleetOption] = []
    for opt in options:
        out.append(opt)
        if _cache_aware(opt) and _baseline(opt, options) is None:
            name = opt.variant + TWIN_SUFFIX
            run = replace(opt.run, variant=name, router=LOAD_ONLY_ROUTER, router_options=None)
            out.append(replace(opt, variant=name, run=run))
    return out


def gpus_saved(rows: list, options: list[FleetOption], max_gpus: int) -> list:
    """``rows`` (:class:`capsim.studies.sizing.SizingRow`, one per option, in the order of
    ``options``) with ``gpus_saved`` / ``saved_against`` set on each cache-aware row that
    met the SLOs."""
    by_key = {o.key: r for o, r in zip(options, rows)}
    out = []
    for opt, row in zip(options, rows):
        base = _baseline(opt, options) if _cache_aware(opt) else None
        if base is None or row.status != "met":
            out.append(row)
            continue
        other = by_key[base.key]
        if other.status == "met":
            saved, note = other.num_gpus - row.num_gpus, f"{other.label}: {other.num_gpus} GPUs"
        else:
            saved, note = max_gpus - row.num_gpus, (f"{other.label}: not met within "
                                                    f"{max_gpus} GPUs (at least)")
        out.append(replace(row, gpus_saved=saved, saved_against=note))
    return out


def savings_lines(rows: list) -> list[str]:
    """One sentence per cache-aware row with a comparison, for the terminal and the page."""
    lines = []
    for r in rows:
        if r.gpus_saved is None:
            continue
        verb = "saves" if r.gpus_saved >= 0 else "needs"
        at_least = "at least " if "at least" in r.saved_against else ""
        lines.append(f"{r.label} {verb} {at_least}{abs(r.gpus_saved)} GPU(s) against a "
                     f"load-only router at the same SLO ({r.num_gpus} GPUs; "
                     f"{r.saved_against}).")
    return lines

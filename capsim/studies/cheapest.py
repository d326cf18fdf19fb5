"""The cheapest swept configuration meeting every SLO target at one load level.

Cheapest is the lowest $/h; among configurations at that price, the lowest $ per
million output tokens — but only when the difference is larger than run-to-run
noise (:data:`COST_TIE_FRAC`). Configurations within it are a *tie*, broken by the
widest SLO margins: each configuration's headroom to every target (relative to the
bound) sorted from the least, compared in that order — so a configuration 1 % under
its ITL target never wins over one 60 % under it for a 0.1 % cheaper token, and a
target every tied configuration meets alike (goodput 100 % against ≥ 90 %) does not
decide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from capsim.scenario.slo import UPPER_BOUND_TARGETS, SloConfig

#: Two passing configurations at the same $/h whose $ per million output tokens differ by
#: less than this fraction are a tie. At one offered load every passing configuration
#: serves the same requests of the same trace, so their output tokens are equal and $/M
#: differs only through the run's makespan (when the last request finishes). Measured:
#: rag_mix_chunk_sweep.yaml at 7 req/s, 3 seeds, chunked 512 / 1024 / 2048 and unchunked
#: (2 × H100): on each trace the six configurations' $/M lie within 0.17 % of each other
#: (seed 42: $2.4931-$2.4992), while the seeds' 95 % interval is ±15 %. 1 % is 6× the
#: measured spread and far below a real price step (one GPU more on 2 is +50 %).
COST_TIE_FRAC = 0.01


@dataclass(frozen=True)
class Choice:
    """The configuration chosen among one load level's passing ones.

    Attributes:
        index: its row label in the points frame.
        tied: row labels of the other configurations tied with it on cost.
        decided_by: when tied, the first margin (least headroom first) where the chosen
            configuration beats the runner-up: (its target, its margin, the runner-up's
            target at that rank, its margin, the runner-up's row label); None otherwise.
    """

    index: object
    tied: tuple
    decided_by: tuple | None = None


def slo_margins(row: pd.Series, slo: SloConfig) -> list[tuple[float, str]]:
    """(headroom ÷ bound, target) for every target on ``row``'s mean values, least
    headroom first; headroom is bound − value for upper bounds, value − bound for lower
    ones. A NaN value counts as −inf."""
    out = []
    for name, bound in slo.targets.items():
        value = float(row.get(name, math.nan))
        if math.isnan(value):
            margin = -math.inf
        else:
            diff = bound - value if name in UPPER_BOUND_TARGETS else value - bound
            margin = diff / bound if bound else (math.inf if diff >= 0 else -math.inf)
        out.append((margin, name))
    return sorted(out)


def cheapest(passing: pd.DataFrame, slo: SloConfig) -> Choice:
    """The cheapest of ``passing`` (one load level, every row met every target).

    Raises:
        ValueError: ``passing`` is empty.
    """
    if passing.empty:
        raise ValueError("no passing configuration to choose from")
    price = passing["cost_per_hour_usd"]
    at_price = passing[price == price.min()]
    per_token = at_price["cost_per_million_output_tokens_usd"]
    tied = at_price[per_token <= per_token.min() * (1 + COST_TIE_FRAC)]
    margins = {i: slo_margins(row, slo) for i, row in tied.iterrows()}
    # Widest margins first (least headroom compared first); all equal: lowest $/M, then order.
    key = {i: ([m for m, _ in margins[i]], -tied.at[i, "cost_per_million_output_tokens_usd"])
           for i in tied.index}
    ranked = sorted(tied.index, key=lambda i: key[i], reverse=True)
    best, others = ranked[0], tuple(i for i in tied.index if i != ranked[0])
    if not others:
        return Choice(best, others)
    runner = ranked[1]
    decided = next(((*margins[best][k][::-1], *margins[runner][k][::-1], runner)
                    for k in range(len(margins[best]))
                    if margins[best][k][0] != margins[runner][k][0]), None)
    return Choice(best, others, decided)

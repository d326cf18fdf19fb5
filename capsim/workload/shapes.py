"""Drawing request lengths from a named workload shape (:mod:`capsim.profiles.shapes`).

A pair is drawn as the shape describes it: two standard normals with the Gaussian-copula
correlation ``r = 2 sin(pi * rho_s / 6)`` of the shape's Spearman ``rho_s`` (the identity
between a Gaussian copula's Pearson and Spearman correlations), each turned into a
probability and read off its quantile table (linear in ln tokens between the table's
points), rounded to whole tokens. A pair outside the shape's filter is drawn again, as the
benchmark client skips it (vLLM's ``sample_sharegpt_requests``). Deterministic for a
generator state; vectorised (a few extra draws per batch, no per-request loop).
"""

from __future__ import annotations

import math

import numpy as np

from capsim.profiles.shapes import WorkloadShape

# Φ(z) elementwise, without SciPy (whose import costs more than a whole `capsim validate`).
_ERFC = np.frompyfunc(math.erfc, 1, 1)


def _probability(z: np.ndarray) -> np.ndarray:
    """The standard normal CDF of ``z``."""
    return 0.5 * _ERFC(-z / math.sqrt(2.0)).astype(np.float64)


def _lengths(u: np.ndarray, quantiles: np.ndarray, log_tokens: np.ndarray) -> np.ndarray:
    """Tokens at probabilities ``u`` of a quantile table, rounded (half to even)."""
    return np.rint(np.exp(np.interp(u, quantiles, log_tokens)))


def draw_pairs(shape: WorkloadShape, n: int,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (prompt, output) token lengths from ``shape``, each int64 of shape ``(n,)``,
    every pair inside ``shape.filter``."""
    q = np.asarray(shape.quantiles, dtype=np.float64)
    log_p = np.log(np.asarray(shape.prompt_tokens, dtype=np.float64))
    log_o = np.log(np.asarray(shape.output_tokens, dtype=np.float64))
    r = 2.0 * math.sin(math.pi * shape.rank_correlation / 6.0)
    f = shape.filter
    prompt, output, have = [], [], 0
    while have < n:
        k = 2 * (n - have) + 64         # more than the filter drops of any shipped shape
        z = rng.standard_normal((2, k))
        p = _lengths(_probability(z[0]), q, log_p)
        o = _lengths(_probability(r * z[0] + math.sqrt(1.0 - r * r) * z[1]), q, log_o)
        ok = ((p >= f.min_tokens) & (o >= f.min_tokens) & (p <= f.max_prompt_tokens)
              & (p + o <= f.max_total_tokens))
        prompt.append(p[ok])
        output.append(o[ok])
        have += int(ok.sum())
    return (np.concatenate(prompt)[:n].astype(np.int64),
            np.concatenate(output)[:n].astype(np.int64))

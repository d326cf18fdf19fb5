"""Fit the shipped ``sharegpt`` workload shape (capsim/profiles/data/workloads/sharegpt.yaml).

``vllm bench serve --dataset-name sharegpt`` takes each conversation's first turn of
ShareGPT_V3_unfiltered_cleaned_split.json (prompt = the human message, output = the reply's
token count, both tokenized with the model's tokenizer) and drops a pair when prompt < 4,
output < 4, prompt > 1024 or prompt + output > 2048. The shape is a compact quantile table
of each marginal (lengths at fixed probabilities, interpolated in ln tokens) joined by a
Gaussian copula with the table's Spearman rank correlation; a drawn pair outside the filter
is drawn again, as the benchmark skips it (capsim/workload/shapes.py).

Input: ``vllm bench serve --save-result`` JSONs of ShareGPT runs over the same prompts (one
seed and tokenizer: equal ``input_lens``), by different models; a reply ends at EOS or at the
dataset reply's length (``max_tokens``), so the longest of a request's replies is the best
lower bound of the dataset reply's length (see the YAML's ``sources`` for the ones shipped)::

    python benchmarks/fit_sharegpt_shape.py RESULT.json [RESULT.json ...] [--output-mean TOKENS]

``--output-mean`` scales the output quantiles so that their mean is TOKENS (the published
mean of the dataset's completions; the YAML says which). ``--output-lognormal MEAN MEDIAN``
instead replaces the output table by a log-normal's quantiles whose draw (with the prompt
table, the copula and the filter) has that mean and median, for published figures from a
larger sample than the table's. It prints the ``quantiles``,
``prompt_tokens``, ``output_tokens``, ``rank_correlation`` and ``fit`` blocks of the shipped
file as YAML: KS distances and means of a seeded draw of the shape against the table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import yaml
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capsim.profiles.shapes import WorkloadShape  # noqa: E402
from capsim.workload.shapes import draw_pairs  # noqa: E402

# The probabilities of the shipped quantile table: every 5 %, and the tails finer.
PROBABILITIES = (0.0, 0.01, 0.025, 0.05, *(round(0.05 * k, 2) for k in range(2, 19)),
                 0.95, 0.975, 0.99, 1.0)
# vLLM's ShareGPT filter (sample_sharegpt_requests / is_valid_sequence), tokens.
FILTER = {"min_tokens": 4, "max_prompt_tokens": 1024, "max_total_tokens": 2048}
CHECK_DRAWS, CHECK_SEED = 200_000, 0


def table(values: np.ndarray, scale: float = 1.0) -> list[float]:
    """The quantiles of ``values`` at :data:`PROBABILITIES`, times ``scale``, 0.1 token."""
    return [round(float(q) * scale, 1) for q in np.quantile(values, PROBABILITIES)]


def fit(prompt: np.ndarray, output: np.ndarray, output_mean: float | None) -> dict:
    """The shape's tables: prompt quantiles over every row (all passed the filter), output
    quantiles over the rows whose reply has >= 4 tokens (a shorter reply ended at EOS or
    failed: it is no dataset completion), scaled to ``output_mean`` when given."""
    replied = output >= FILTER["min_tokens"]
    scale = 1.0 if output_mean is None else output_mean / float(output[replied].mean())
    return {"quantiles": list(PROBABILITIES), "prompt_tokens": table(prompt),
            "output_tokens": table(output[replied], scale),
            "rank_correlation": round(float(stats.spearmanr(prompt[replied],
                                                            output[replied]).statistic), 3),
            "output_scale": round(scale, 4)}


def lognormal_table(shape: WorkloadShape, mean: float, median: float) -> list[float]:
    """Output quantiles of a log-normal (ends: the filter's bounds, 3.5 and 2044.5 tokens)
    calibrated so that a seeded draw of the shape has output ``mean`` and ``median``."""
    f = shape.filter
    inner = [stats.norm.ppf(q) for q in PROBABILITIES[1:-1]]
    mu, sigma = math.log(median), math.sqrt(2.0 * math.log(mean / median))
    for _ in range(40):
        values = [f.min_tokens - 0.5, *(math.exp(mu + sigma * z) for z in inner),
                  f.max_total_tokens - f.min_tokens + 0.5]
        trial = shape.model_copy(update={"output_tokens": values})
        _, o = draw_pairs(trial, CHECK_DRAWS, np.random.default_rng(CHECK_SEED))
        got_mean, got_median = float(o.mean()), float(np.median(o))
        mu += math.log(median / got_median)
        sigma *= math.sqrt(math.log(mean / median) / math.log(got_mean / got_median))
    return [round(v, 1) for v in values]


def report(shape: WorkloadShape, prompt: np.ndarray, output: np.ndarray,
           replied: np.ndarray) -> dict:
    """The fit's errors: KS distance per marginal, rank correlation and means of a seeded
    draw of the shape against the table (output over the ``replied`` rows, scaled)."""
    p, o = draw_pairs(shape, CHECK_DRAWS, np.random.default_rng(CHECK_SEED))
    return {"sample_size": int(len(prompt)), "rows_with_reply": int(replied.sum()),
            "ks_prompt": round(float(stats.ks_2samp(prompt, p).statistic), 3),
            "ks_output": round(float(stats.ks_2samp(output[replied], o).statistic), 3),
            "rank_correlation_shape": round(float(stats.spearmanr(p, o).statistic), 3),
            "mean_prompt_table": round(float(prompt.mean()), 1),
            "mean_prompt_shape": round(float(p.mean()), 1),
            "mean_output_table": round(float(output[replied].mean()), 1),
            "mean_output_shape": round(float(o.mean()), 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result_json", nargs="+",
                    help="vllm bench serve --save-result JSONs on ShareGPT, same prompts")
    ap.add_argument("--output-mean", type=float, default=None,
                    help="scale the output quantiles to this mean, tokens")
    ap.add_argument("--output-lognormal", type=float, nargs=2, default=None,
                    metavar=("MEAN", "MEDIAN"),
                    help="output quantiles of a log-normal drawn to this mean and median")
    args = ap.parse_args(argv)
    prompt, output = None, None
    for path in args.result_json:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        p = np.asarray(doc["input_lens"], dtype=np.float64)
        o = np.asarray(doc["output_lens"], dtype=np.float64)
        if p.shape != o.shape or not len(p) or (prompt is not None and
                                                   not np.array_equal(p, prompt)):
            sys.exit(f"{path}: input_lens must equal the first file's, one output per input")
        prompt, output = p, o if output is None else np.maximum(output, o)
    tables = fit(prompt, output, args.output_mean)
    shape = WorkloadShape(name="fit", filter=FILTER, **{k: v for k, v in tables.items()
                                                        if k != "output_scale"})
    replied = output >= FILTER["min_tokens"]
    scaled = output * tables["output_scale"]
    fit_block = report(shape, prompt, scaled, replied)
    if args.output_lognormal is not None:
        tables["output_tokens"] = lognormal_table(shape, *args.output_lognormal)
        shape = shape.model_copy(update={"output_tokens": tables["output_tokens"]})
        _, o = draw_pairs(shape, CHECK_DRAWS, np.random.default_rng(CHECK_SEED))
        p_, _ = draw_pairs(shape, CHECK_DRAWS, np.random.default_rng(CHECK_SEED))
        fit_block.update(ks_output_vs_table=round(float(stats.ks_2samp(scaled[replied], o)
                                                        .statistic), 3),
                         mean_output_shape=round(float(o.mean()), 1),
                         median_output_shape=float(np.median(o)),
                         mean_prompt_shape=round(float(p_.mean()), 1))
        del fit_block["ks_output"]
    print(yaml.safe_dump({**tables, "fit": fit_block}, sort_keys=False,
                         default_flow_style=None, width=100), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

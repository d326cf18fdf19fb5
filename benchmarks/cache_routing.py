"""Cache-aware against load-only routing: a published comparison, reproduced.

The case is llm-d's precise prefix-cache aware scheduling benchmark (case
``route_llmd_8x2h100_qwen3_32b_shared_prefix_150x5_qps3_60_schedulers`` of
benchmarks/fidelity/supplementary_cases.yaml, ``test`` in fit_test_split.yaml: nothing in
capsim is fitted to it): Qwen3-32B on 8 vLLM pods of 2 x H100, 150 groups of a 6,000-token
shared prompt with 5 repeated 1,200-token questions each, Poisson stages from 3 to 60 QPS, and
three endpoint-picker configurations (load only; + the approximate prefix scorer; + the
precise one). The scenario, written from the published configuration, is
benchmarks/cache_routing/llm_d_precise_prefix_73pct.yaml.

The published throughput of a configuration is the mean over the 16 ladder stages of each
stage's output tokens/s (the report's "Summary across QPS" equals that mean of its "Per-QPS"
rows); capsim's is read the same way from ``requests.csv``: each stage's requests (by arrival
time, the warm-up stage left out), their output tokens over their first arrival to last
completion. The script prints, per ratio, the published figure, capsim's and the error; the
last line is the headline (precise against load-only scheduling). The whole-run throughput
(summary.csv) is printed beside it: the fleets are overloaded (capsim has no client timeout,
so a stage's span stretches to the end of the drain), and the stage-mean reading depends on
how long that drain is; the source's figures also imply ~245 output tokens per request
(8,730 tok/s at 35.6 requests/s) against its configured 1,000.

Usage::

    python benchmarks/cache_routing.py                 # simulates (about 6 CPU-minutes)
    python benchmarks/cache_routing.py --reuse DIR     # reads a finished `capsim run -o DIR`

Exit 2 with one line when the case, the scenario or a reused run is missing or malformed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from capsim.common.yamlio import load_yaml

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "benchmarks" / "cache_routing" / "llm_d_precise_prefix_73pct.yaml"
CASES = ROOT / "benchmarks" / "fidelity" / "supplementary_cases.yaml"
CASE_ID = "route_llmd_8x2h100_qwen3_32b_shared_prefix_150x5_qps3_60_schedulers"
SOURCE = "llm-d precise prefix-cache scheduling, 8 x 2 H100, Qwen3-32B"
#: The headline ratio: cache-aware (precise) against load-only scheduling.
HEADLINE = "precise_over_load_output_tok_s"
#: Stages before the ladder (inference-perf's warm-up stage), left out as the report does.
WARMUP_STAGES = 1


class BadInput(Exception):
    """A missing or malformed input: one line, exit 2."""


def stage_edges_s(scenario: dict) -> np.ndarray:
    """The stage boundaries, s ``(k + 1,)``, from the scenario's piecewise schedule
    (``workload.schedule.durations_s``)."""
    try:
        durations = scenario["workload"]["schedule"]["durations_s"]
    except (KeyError, TypeError) as err:
        raise BadInput(f"{SCENARIO}: workload.schedule.durations_s: missing ({err})") from None
    return np.concatenate(([0.0], np.cumsum(np.asarray(durations, dtype=np.float64))))


def stage_throughput(requests: pd.DataFrame, edges_s: np.ndarray,
                     skip: int = WARMUP_STAGES) -> float:
    """Mean over the stages (the first ``skip`` left out) of each stage's output tokens/s:
    the finished requests arriving in ``[edges_s[j], edges_s[j + 1])``, their output tokens
    over their first arrival to last completion (``arrival_s + e2el_ms / 1000``); a stage
    with no finished request counts 0.

    Args:
        requests: one variant's rows of ``requests.csv`` (arrival_s, e2el_ms,
            output_tokens, n, status).
        edges_s: stage boundaries, s, increasing.
    """
    done = requests[requests["status"] == "finished"]
    arrival = done["arrival_s"].to_numpy()
    finish = arrival + done["e2el_ms"].to_numpy() / 1000.0
    tokens = (done["output_tokens"] * done["n"]).to_numpy()
    rates = []
    for lo, hi in zip(edges_s[skip:-1], edges_s[skip + 1:]):
        mask = (arrival >= lo) & (arrival < hi)
        span = finish[mask].max() - arrival[mask].min() if mask.any() else 0.0
        rates.append(tokens[mask].sum() / span if span > 0 else 0.0)
    return float(np.mean(rates))


def read_case() -> dict:
    """The case's record (published figures and the ratios to score)."""
    for case in load_yaml(CASES.read_text()):
        if case.get("id") == CASE_ID:
            return case
    raise BadInput(f"{CASES}: no case {CASE_ID}")


def run_capsim(out: Path) -> None:
    """``capsim run`` the scenario into ``out`` (one worker: the machine is shared)."""
    cmd = [sys.executable, "-m", "capsim", "run", str(SCENARIO), "-o", str(out),
           "--workers", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:]
        raise BadInput(f"capsim run {SCENARIO.name} failed: {' '.join(last)}")


def capsim_figures(out: Path, edges_s: np.ndarray) -> dict[str, dict[str, float]]:
    """Per variant: the stage-mean output tokens/s and the prefix hit rate."""
    try:
        requests = pd.read_csv(out / "requests.csv")
        summary = pd.read_csv(out / "summary.csv")
    except (OSError, pd.errors.ParserError) as err:
        raise BadInput(f"{out}: not a finished capsim run ({err})") from None
    summary = summary[summary["cls"] == "all"].set_index("variant")
    return {v: {"output_tok_s": stage_throughput(rows, edges_s),
                "run_output_tok_s": float(summary.loc[v, "output_throughput_tok_per_s"]),
                "prefix_hit_rate": float(summary.loc[v, "prefix_hit_rate"]),
                "ttft_p90_s": float(summary.loc[v, "ttft_p90_ms"]) / 1000.0}
            for v, rows in requests.groupby("variant")}


def report(case: dict, figures: dict[str, dict[str, float]]) -> list[str]:
    """The printed lines: each variant's figures, then each ratio, the headline last."""
    published = case["measured"]["summary_across_qps"]
    lines = [f"{'variant':<22} {'published tok/s':>15} {'capsim tok/s':>13} "
             f"{'(whole run)':>11} {'capsim hit rate':>15} {'TTFT p90 s pub / capsim':>24}"]
    for v, fig in figures.items():
        pub = published.get(v, {})
        lines.append(f"{v:<22} {pub.get('output_token_throughput_tok_s', float('nan')):>15,.1f} "
                     f"{fig['output_tok_s']:>13,.1f} {fig.get('run_output_tok_s', float('nan')):>11,.1f} "
                     f"{fig['prefix_hit_rate']:>15.3f} "
                     f"{pub.get('p90_ttft_s', float('nan')):>11.3f} / {fig['ttft_p90_s']:.3f}")
    ratios = case["measured"]["scored_ratios"]
    order = [k for k in ratios if k != HEADLINE] + [HEADLINE]
    for key in order:
        top, bottom = ratios[key]
        if top not in figures or bottom not in figures:
            raise BadInput(f"{CASES}: {CASE_ID}.measured.scored_ratios.{key}: variant "
                           f"{top if top not in figures else bottom} is not in the run")
        pub = (published[top]["output_token_throughput_tok_s"]
               / published[bottom]["output_token_throughput_tok_s"])
        sim = figures[top]["output_tok_s"] / figures[bottom]["output_tok_s"]
        err = (sim - pub) / pub * 100.0
        what = (f"cache-aware routing ({SOURCE}): published" if key == HEADLINE
                else f"{top} / {bottom}: published")
        whole = ""
        if "run_output_tok_s" in figures[top] and key != HEADLINE:
            run = figures[top]["run_output_tok_s"] / figures[bottom]["run_output_tok_s"]
            whole = f" (whole-run throughput {run:.2f}x, {(run - pub) / pub * 100.0:+.1f} %)"
        lines.append(f"{what} output-throughput ratio {pub:.2f}x, capsim {sim:.2f}x, "
                     f"error {err:+.1f} %{whole}")
        if key == HEADLINE and "run_output_tok_s" in figures[top]:
            run = figures[top]["run_output_tok_s"] / figures[bottom]["run_output_tok_s"]
            lines.insert(-1, f"{top} / {bottom}: whole-run throughput ratio {run:.2f}x, "
                             f"{(run - pub) / pub * 100.0:+.1f} % (the stage mean is the "
                             f"published reading)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reuse", type=Path, help="a finished `capsim run` of the scenario")
    args = parser.parse_args(argv)
    try:
        case = read_case()
        edges = stage_edges_s(load_yaml(SCENARIO.read_text()))
        if args.reuse is not None:
            figures = capsim_figures(args.reuse, edges)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                run_capsim(Path(tmp) / "run")
                figures = capsim_figures(Path(tmp) / "run", edges)
        for line in report(case, figures):
            print(line)
    except BadInput as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

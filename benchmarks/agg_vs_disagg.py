"""Aggregated against disaggregated serving: does capsim pick the published winner, and by how much?

Issue 33's target: on one published comparison, capsim picks the same winner and its
throughput-per-GPU ratio is within 15 %. The comparison is the measured case
``agg_disagg_dynamo_vllm072_8xh100_llama70b_fp8_isl3000_osl150_1node`` of
``benchmarks/fidelity/supplementary_cases.yaml`` (a held-out ``test`` case): NVIDIA Dynamo's
one-node result, Llama-3.x-70B FP8 on 8 x H100 under vLLM 0.7.2, ISL 3,000 / OSL 150 —
the disaggregated 4P1D deployment's output tokens/s per GPU is 1.3x the aggregated 2 x TP 4
one's at 50 output tokens/s per user (ai-dynamo/dynamo docs/architecture.md, 2025-03-17).

What it does, as the publication did: every variant of the case's scenario (each arm at
closed-loop concurrency 1 ... 256) is simulated once; each gives a point

- x: output tokens/s per user as the publication's genai-perf reported it: Dynamo's container
  pins genai-perf at triton-inference-server/perf_analyzer 25d01887 (2025-02-25;
  container/Dockerfile.vllm GENAI_PERF_TAG at both of the case's Dynamo commits), whose only
  per-user figure is ``output_token_throughput_per_request`` (avg), the mean over the measured
  requests of output tokens / request latency (request sent -> last response), TTFT included
  (genai-perf/genai_perf/profile_data_parser/llm_profile_data_parser.py there). The
  1 / inter-token-latency ``output_token_throughput_per_user`` came later (perf_analyzer
  bae673ee, 2025-04-07). The figure's own points agree: along each arm y = C x / 8 GPUs holds
  within 3 % from C = 1 to 8 (the case's ``figure.gridline_scale_how``), which 1 / ITL would
  not (it leaves each point's TTFT out);
- y: output tokens/s per GPU, genai-perf's ``output_token_throughput`` over the GPUs: the
  measured requests' output tokens / (last response - first request sent),

each arm's Pareto front (points no other point of the arm beats on both axes) is read at the
published interactivity by linear interpolation between its neighbours, and the ratio
disaggregated / aggregated is compared with the published one. The winner is the arm with the
higher front there; an arm whose front does not reach that interactivity loses (it cannot
serve it). Run-time: about half a minute on a busy 2-CPU machine (18 runs, 13 CPU-seconds).

It also prints the figure read point by point (the case's ``figure``: both sweeps, y at 20.3
tokens/s/GPU a gridline) beside capsim's points, and the figure's own ratio at 50
tokens/s/user: 1.55, where the label says 1.3 (the case says how it was read).

    python benchmarks/agg_vs_disagg.py [--jobs N] [--csv points.csv]

It also prints where each arm saturates (requests/s at its highest tokens/s per GPU; for the
split, seconds a request on each prefill worker) and how much longer one user's split request
takes than a co-located one, capsim beside the figure: the two readings that locate an error
in the prefill pool.

Where capsim stands (2026-12-07, this metric): 2.14x against the quoted 1.30x (+65 %) and the
figure's 1.55x (+38 %), the same winner. Per arm at 50 tokens/s/user: co-located 65.4 against
the figure's 62.3 tokens/s/GPU (+5 %), split 139.9 against 96.8 (+45 %). Saturation: co-located
10.0 against 8.0 requests/s (+25 %), split 9.3 against 5.8 (+60 %), 0.43 against 0.69 s a
request on each TP 1 prefill worker; one user: the split's request 0.26 s longer than the
co-located one's, 0.60 s in the figure. Both readings put the error in the prefill: the
figure's prefill worker needs about 0.27 s more a request than capsim's 0.40 s TP 1 FP8
prefill of 3,000 tokens, and its TP 4 replicas about 0.05 s more than capsim's 0.16 s (the
co-located saturation): as if its FP8 GEMMs (305 and 76 ms in capsim) took 1.9x and 1.7x as
long. Measured vLLM FP8 GEMMs at these shapes on an H100 SXM (M 2,048-4,096; the tables
aiconfigurator collected: ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/systems/
data/h100_sxm/gemm/vllm/<version>/gemm_perf.parquet) run at 1,108-1,238 TFLOP/s under vLLM
0.19.0 and 0.24.0 (TensorRT-LLM 1.2.0rc5's: 985-1,160; capsim's curve: ~1,350), so 10-20 %
slower than capsim prices them, not 1.7x. Its vLLM 0.14.0 table (709-789) is as slow as the
figure asks, but not for the GEMM: that collection ran vLLM's activation quantization as eager
PyTorch ops (~10 ps an M x K element), which neither vLLM 0.7.2 (one CUDA kernel) nor a
serving 0.14.0 runs, and 0.7.2, 0.14.0 and 0.19.0 run the same SM90 CUTLASS tile above 128
rows (128 x 128 x 128, 2 x 1 x 1 cluster;
benchmarks/calibration/vllm_fp8_gemm_versions.md). Not built: no version of vLLM prices its
FP8 linear slower, and no constant is moved for a held-out case. What the split adds to a
request in Dynamo's code, each sized in the case's header and small: the KV over InfiniBand, not NVLink (expressed: ~20 ms after the
prefill, the worker free meanwhile), the NIXL write posted from the worker's step (not built:
640-15,360 descriptors, 1.6-37 ms at the one published per-descriptor cost), the staging copy
(never binding: 48 of 152 blocks). Common to both arms: vLLM's activation quantization
before every FP8 linear, priced inside the vLLM FP8 curve as the static per-tensor pass the
0.19.0 tables timed; the per-token remainder is not (under 8 ms, 2 % of the TP 1 prefill).

The last line reads ``agg-vs-disagg (SOURCE): published 1.30x, capsim R.RRx, error E %, winner
W (same|different)``. Exit 2 with one line, before anything is simulated, when the case or its
scenario cannot be read, the scenario's variants are not ``agg_c<C>`` / ``disagg_c<C>``, the
``--csv`` folder does not exist (or ``--csv`` is a folder) or ``--jobs`` is below 1.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from capsim.common.errors import ScenarioError
from capsim.common.yamlio import load_yaml
from capsim.metrics.summary import summarize
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import TraceCache

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "benchmarks" / "fidelity" / "supplementary_cases.yaml"
CASE_ID = "agg_disagg_dynamo_vllm072_8xh100_llama70b_fp8_isl3000_osl150_1node"
SCENARIO = ROOT / "benchmarks" / "fidelity" / "supplementary" / f"{CASE_ID}.yaml"
SOURCE = "Dynamo docs/architecture.md, 1 node, 8 x H100"
ARMS = ("agg", "disagg")
SHORT = {"aggregated": "agg", "disaggregated": "disagg"}
#: The issue's bound on the ratio's error.
TOLERANCE_PCT = 15.0


@dataclass(frozen=True)
class Point:
    """One simulated concurrency of one arm."""

    arm: str
    users: int
    gpus: int
    tokens_per_s_per_user: float
    tokens_per_s_per_gpu: float
    ttft_mean_ms: float
    tpot_mean_ms: float
    output_tokens_per_request: float = float("nan")   # mean over the measured requests
    prefill_workers: int = 0                          # the split's prefill replicas (0: co-located)


def _simulate(job: tuple[Path, str]) -> Point:
    """Simulate one variant of a scenario (a child process's job)."""
    scenario, variant = job
    loaded = load(scenario)
    run = next(r for r in loaded.runs if r.variant == variant)
    traces = TraceCache(loaded.base_dir, str(loaded.path))
    result = simulate(run, traces.get(run.workload, run.seed))
    row = summarize(result, loaded.spec.slo, loaded.class_slos)[0]
    per_user, per_gpu = genai_perf_axes(result.requests, run.num_gpus)
    done = np.asarray(result.requests.status) == "finished"
    tokens = float(np.mean(np.asarray(result.requests.output_tokens)[done]))
    workers = next((p.num_replicas for p in run.pools if p.role == "prefill"), 0)
    return Point(variant.split("_c")[0], run.workload.arrival.users, run.num_gpus, per_user,
                 per_gpu, row.ttft_mean_ms, row.tpot_mean_ms, tokens, workers)


def genai_perf_axes(requests, gpus: int) -> tuple[float, float]:
    """(output tokens/s per user, output tokens/s per GPU) of the measured (finished, not
    warm-up) requests of a run, as genai-perf reported them on the figure's date (module
    docstring): per user, the mean over requests of output tokens / (last response - request
    sent); per GPU, all their tokens / (last response - first request sent) / ``gpus``."""
    done = np.asarray(requests.status) == "finished"
    last = np.asarray(requests.finish_s)[done]
    tokens = np.asarray(requests.output_tokens)[done]
    sent = np.asarray(requests.arrival_s)[done]
    per_user = float(np.mean(tokens / (last - sent)))
    return per_user, float(tokens.sum() / (last.max() - sent.min()) / gpus)


def figure_points(case: dict) -> list[Point]:
    """The case's figure read point by point (``figure.points``: [users, tokens/s per user,
    gridlines]), y scaled to tokens/s per GPU by ``figure.gpu_tokens_per_s_per_gridline``;
    TTFT and TPOT unknown (NaN)."""
    fig = case["figure"]
    scale = float(fig["gpu_tokens_per_s_per_gridline"])
    nan = float("nan")
    return [Point(SHORT[arm], int(users), 8, float(x), float(y) * scale, nan, nan)
            for arm, rows in fig["points"].items() for users, x, y in rows]


def print_beside(points: list[Point], published: list[Point]) -> None:
    """Each concurrency of each arm: the figure's point beside capsim's."""
    print(f"{'arm':<7} {'users':>5} {'tok/s/user fig':>14} {'capsim':>7} "
          f"{'tok/s/GPU fig':>13} {'capsim':>7} {'error':>7}")
    mine = {(p.arm, p.users): p for p in points}
    for f in published:
        p = mine.get((f.arm, f.users))
        if p is None:
            continue
        err = (p.tokens_per_s_per_gpu / f.tokens_per_s_per_gpu - 1.0) * 100.0
        print(f"{f.arm:<7} {f.users:>5} {f.tokens_per_s_per_user:>14.1f} "
              f"{p.tokens_per_s_per_user:>7.1f} {f.tokens_per_s_per_gpu:>13.1f} "
              f"{p.tokens_per_s_per_gpu:>7.1f} {err:>+6.0f}%")


def front(points: list[Point]) -> list[Point]:
    """The Pareto front of one arm: the points no other point matches or beats on both axes
    (as plot_pareto.py marks them), by increasing tokens/s per user."""
    kept = [p for p in points if not any(
        q is not p and q.tokens_per_s_per_user >= p.tokens_per_s_per_user
        and q.tokens_per_s_per_gpu >= p.tokens_per_s_per_gpu for q in points)]
    return sorted(kept, key=lambda p: p.tokens_per_s_per_user)


def front_at(points: list[Point], per_user: float) -> float:
    """Tokens/s per GPU of the arm's front at ``per_user`` tokens/s per user, interpolated
    linearly between the front's neighbours; 0.0 when the front does not reach it (the arm
    cannot serve that interactivity), the front's highest throughput when every front point
    is faster than asked for."""
    line = front(points)
    if per_user > line[-1].tokens_per_s_per_user:
        return 0.0
    if per_user <= line[0].tokens_per_s_per_user:
        return max(p.tokens_per_s_per_gpu for p in line)
    for lo, hi in zip(line, line[1:]):
        if lo.tokens_per_s_per_user <= per_user <= hi.tokens_per_s_per_user:
            span = hi.tokens_per_s_per_user - lo.tokens_per_s_per_user
            w = (per_user - lo.tokens_per_s_per_user) / span if span else 0.0
            return lo.tokens_per_s_per_gpu + w * (hi.tokens_per_s_per_gpu - lo.tokens_per_s_per_gpu)
    raise AssertionError("unreachable: per_user lies within the front")


def verdict(points: list[Point], published_ratio: float, per_user: float,
            published_winner: str) -> tuple[float, float, str, str]:
    """(capsim's ratio disagg / agg at ``per_user``, its error % against ``published_ratio``,
    capsim's winner, "same" or "different")."""
    agg = front_at([p for p in points if p.arm == "agg"], per_user)
    disagg = front_at([p for p in points if p.arm == "disagg"], per_user)
    ratio = disagg / agg if agg else float("inf")
    winner = "disaggregated" if disagg > agg else "aggregated"
    error = (ratio - published_ratio) / published_ratio * 100.0
    return ratio, error, winner, "same" if winner == published_winner else "different"


def saturation_lines(points: list[Point], figure: list[Point]) -> list[str]:
    """Where each arm saturates and what one user waits, capsim beside the figure: requests/s at
    the arm's highest tokens/s per GPU (tokens/s x GPUs / output tokens a request, capsim's
    workload for both), for the split also seconds a request on each prefill worker (workers /
    requests/s: the prefill pool is what saturates it), and the one-user request latency (output
    tokens / tokens/s per user) of the split less the co-located one's. [] when the points
    carry no request size (not simulated here)."""
    tokens = {p.arm: p.output_tokens_per_request for p in points}
    if not all(tokens.get(arm, 0.0) > 0.0 for arm in ARMS):      # NaN or absent: nothing to say
        return []
    top = {}
    for arm in ARMS:
        rates = []
        for pts in (points, figure):
            best = max((p for p in pts if p.arm == arm), key=lambda p: p.tokens_per_s_per_gpu)
            rates.append(best.tokens_per_s_per_gpu * best.gpus / tokens[arm])
        top[arm] = rates
    (ca, fa), (cd, fd) = top["agg"], top["disagg"]
    workers = max(p.prefill_workers for p in points)
    lines = [f"saturation (each arm's highest tokens/s/GPU): co-located capsim {ca:.1f} "
             f"requests/s, the figure {fa:.1f} ({(ca / fa - 1.0) * 100.0:+.0f} %); split capsim "
             f"{cd:.1f}, the figure {fd:.1f} ({(cd / fd - 1.0) * 100.0:+.0f} %): "
             f"{workers / cd:.2f} against {workers / fd:.2f} s a request on each of its "
             f"{workers} prefill workers"]
    gaps = []
    for pts in (points, figure):
        one = {p.arm: tokens[p.arm] / p.tokens_per_s_per_user for p in pts if p.users == 1}
        gaps.append(one["disagg"] - one["agg"] if len(one) == 2 else float("nan"))
    lines.append(f"one user: the split's request takes {gaps[0]:.2f} s longer than the "
                 f"co-located one's in capsim, {gaps[1]:.2f} s in the figure")
    return lines


def beside_the_figure(points: list[Point], case: dict, per_user: float, published: float,
                      ratio: float) -> None:
    """Print capsim's points beside the case's figure, each arm's front at ``per_user`` against
    the figure's, and the figure's own ratio there against ``published`` (its label)."""
    figure = figure_points(case)
    print("the figure read point by point (the case's figure; y at "
          f"{case['figure']['gpu_tokens_per_s_per_gridline']:g} tokens/s/GPU a gridline):")
    print_beside(points, figure)
    fronts = {}
    for arm in ARMS:
        fronts[arm] = front_at([p for p in figure if p.arm == arm], per_user)
        mine = front_at([p for p in points if p.arm == arm], per_user)
        print(f"{arm} front at {per_user:g} tokens/s/user: capsim {mine:.1f}, the figure "
              f"{fronts[arm]:.1f} tokens/s/GPU ({(mine / fronts[arm] - 1.0) * 100.0:+.0f} %)")
    for line in saturation_lines(points, figure):
        print(line)
    fig_ratio = fronts["disagg"] / fronts["agg"]
    print(f"the figure's fronts at {per_user:g} tokens/s/user: {fig_ratio:.2f}x (its label: "
          f"{published:.2f}x); capsim {ratio:.2f}x, error {(ratio / fig_ratio - 1.0) * 100.0:+.1f} "
          "% against it")


def read_case() -> dict:
    """The measured case; exit 2 with one line when it or its scenario is missing."""
    case = next((c for c in load_yaml(CASES.read_text()) if c.get("id") == CASE_ID), None)
    if case is None or not SCENARIO.is_file():
        print(f"error: {CASES}: no case {CASE_ID} with its scenario {SCENARIO.name}",
              file=sys.stderr)
        sys.exit(2)
    return case


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def read_variants(scenario: Path, csv_path: Path | None) -> list[str]:
    """The scenario's variants, each arm at one or more concurrencies (``agg_c<C>`` /
    ``disagg_c<C>``); exit 2 with one line, before anything is simulated, when the scenario
    cannot be read, its variants are not of that form or ``csv_path`` cannot be written."""
    if csv_path is not None and not csv_path.parent.is_dir():
        _fail(f"{csv_path}: --csv: no folder {csv_path.parent} to write it in")
    if csv_path is not None and csv_path.is_dir():     # found only at the end, a traceback
        _fail(f"{csv_path}: --csv: is a folder; give a file name in it, e.g. "
              f"{csv_path / 'points.csv'}")
    try:
        variants = [run.variant for run in load(scenario).runs]
    except ScenarioError as exc:
        _fail(str(exc))
    odd = [v for v in variants if not re.fullmatch(r"(agg|disagg)_c\d+", v)]
    arms = {v.split("_c")[0] for v in variants}
    if odd or arms != set(ARMS):
        _fail(f"{scenario}: variants: each arm needs variants named agg_c<C> and disagg_c<C> "
              f"(C the closed-loop users), got {', '.join(variants)}")
    return variants


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1, help="child processes (default 1)")
    parser.add_argument("--csv", type=Path, help="write every simulated point here")
    parser.add_argument("--scenario", type=Path, default=SCENARIO,
                        help="another expression of the case (same agg_c<C> / disagg_c<C> "
                             "variants), e.g. to see what a knob moves")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"argument --jobs: must be >= 1, got {args.jobs}")
    case = read_case()
    measured = case["measured"]
    variants = read_variants(args.scenario, args.csv)
    jobs = [(args.scenario, v) for v in variants]
    if args.jobs <= 1:                      # in this process, one after the other
        points = [_simulate(job) for job in jobs]
    else:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            points = list(pool.map(_simulate, jobs))
    per_user = float(measured["at_output_tokens_per_s_per_user"])
    published = float(measured["throughput_per_gpu_ratio_disagg_over_agg"])
    print(f"{'arm':<7} {'users':>5} {'GPUs':>4} {'tok/s/user':>10} {'tok/s/GPU':>9} "
          f"{'TTFT ms':>8} {'TPOT ms':>7}  front")
    for arm in ARMS:
        mine = [p for p in points if p.arm == arm]
        on = set(map(id, front(mine)))
        for p in mine:
            print(f"{p.arm:<7} {p.users:>5} {p.gpus:>4} {p.tokens_per_s_per_user:>10.1f} "
                  f"{p.tokens_per_s_per_gpu:>9.1f} {p.ttft_mean_ms:>8.0f} {p.tpot_mean_ms:>7.2f}"
                  f"  {'*' if id(p) in on else ''}")
        print(f"{arm} front at {per_user:g} tokens/s/user: "
              f"{front_at(mine, per_user):.1f} tokens/s/GPU")
    if args.csv:
        with args.csv.open("w", newline="") as f:
            out = csv.writer(f)
            out.writerow(list(Point.__dataclass_fields__))
            out.writerows([[getattr(p, k) for k in Point.__dataclass_fields__] for p in points])
    ratio, error, winner, same = verdict(points, published, per_user, measured["winner"])
    if "figure" in case:
        beside_the_figure(points, case, per_user, published, ratio)
    met = same == "same" and abs(error) <= TOLERANCE_PCT
    print(f"issue 33's target (the same winner, the ratio within {TOLERANCE_PCT:g} %): "
          f"{'met' if met else 'missed'}")
    print(f"agg-vs-disagg ({SOURCE}): published {published:.2f}x, capsim {ratio:.2f}x, "
          f"error {error:+.1f} %, winner {SHORT[winner]} ({same})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

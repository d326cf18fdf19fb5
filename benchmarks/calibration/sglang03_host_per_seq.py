"""Fit SGLang 0.3's serial host time per step and per running sequence jointly to the rows of
its fit case.

The mechanism (read in the sglang 0.3.0 wheel, PyPI sglang-0.3.0-py3-none-any.whl): SGLang 0.3
has no overlap scheduler (it arrived in 0.4), so everything the scheduler process does between
two forwards is in series with the GPU. Per decode step, ``ModelTpServer.forward_decode_batch``
(python/sglang/srt/managers/tp_worker.py) walks the running requests several times in Python:
``ScheduleBatch.check_for_jump_forward`` (one check per request), ``prepare_for_decode``
(schedule_batch.py: the last token of each request into a list, copied to the GPU), after the
forward ``next_token_ids.tolist()`` and a loop that appends each token, runs
``Req.check_finished`` and frees finished requests' cache, then ``handle_finished_requests``
builds, for every streamed request (``stream_interval`` 1: every step), its incremental
detokenisation input (``Req.init_incremental_detokenize``: prompt + output ids concatenated and
sliced), a meta_info dict and the lists of a ``BatchTokenIDOut``, which
``ControllerSingle.loop_for_forward`` (controller_single.py) pickles to the detokenizer over
ZMQ before the next step is scheduled (streaming requests end ``num_continue_decode_steps``'s
run after every step). So the step's CPU time grows with the running batch: ``per_step_s +
per_seq_s x sequences`` (capsim's existing host terms, :class:`capsim.cost.host.HostTime`).
With TP > 1 every rank runs the same scheduler in its own process and rank 0 broadcasts only
the newly received requests (``broadcast_recv_input``): the per-sequence work is not
multiplied by the workers.

No published profile gives 0.3's CPU time per step against the batch (the v0.4 blog,
lmsys.org 2024-12-04, shows an Nsight timeline of the overlapped scheduler and a 1.1x
throughput, not a split), so both terms are fitted, jointly, to the rows of the `fit` case
load_sglang030_a100_llama31_8b_sharegpt_rps4_rps8 that the decode step's time sets (its median
TPOT and ITL at 4 and 8 req/s, its offline request and output-token throughput;
../shared/reference/measured/cases.yaml): the least sum of squared relative errors over a
grid, coarse then fine. TTFT is request_before_s's row and E2EL a composite: not in the fit.

Usage: python benchmarks/calibration/sglang03_host_per_seq.py   (prints the grid's best)
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

from capsim.metrics.summary import summarize
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import TraceCache

ROOT = Path(__file__).resolve().parents[2]
CASE = "load_sglang030_a100_llama31_8b_sharegpt_rps4_rps8"
#: (variant, capsim summary field) -> measured value (../shared/reference/measured/cases.yaml,
#: sgl-project/sglang benchmark/benchmark_vllm_060/README.md at 120affb9).
FIT_ROWS = {("rps_4", "tpot_p50_ms"): 13.17, ("rps_4", "itl_p50_ms"): 11.93,
            ("rps_8", "tpot_p50_ms"): 17.85, ("rps_8", "itl_p50_ms"): 14.41,
            ("rps_inf", "request_throughput_per_s"): 22.03,
            ("rps_inf", "output_throughput_tok_per_s"): 4281.51}
#: The grid (seconds): coarse over the plausible range, then fine around the coarse best.
COARSE_STEP_S, COARSE_SEQ_S = np.arange(0.0, 1.01e-3, 0.1e-3), np.arange(0.0, 80.1e-6, 5e-6)
FINE_STEP_S, FINE_SEQ_S = 0.02e-3, 1e-6
FINE_SPAN = 5                                   # fine points each side of the coarse best


def case_rows(per_step_s: float, per_seq_s: float) -> dict[tuple[str, str], float]:
    """capsim's values of :data:`FIT_ROWS` with the sglang-0.3 preset's host terms set."""
    path = ROOT / "benchmarks" / "fidelity" / f"{CASE}.yaml"
    loaded = load(path)
    traces = TraceCache(loaded.base_dir, str(path))
    out = {}
    for run in loaded.runs:
        pool = run.pools[0]
        host = pool.preset.host_overhead.model_copy(
            update={"per_step_s": float(per_step_s), "per_seq_s": float(per_seq_s)})
        preset = pool.preset.model_copy(update={"host_overhead": host})
        run = dataclasses.replace(run, pools=(dataclasses.replace(pool, preset=preset),))
        row = summarize(simulate(run, traces.get(run.workload, run.seed)),
                        loaded.spec.slo, loaded.class_slos)[0]
        out.update({(v, f): float(getattr(row, f)) for v, f in FIT_ROWS if v == run.variant})
    return out


def loss(per_step_s: float, per_seq_s: float) -> float:
    """Sum over :data:`FIT_ROWS` of (capsim / measured - 1)^2."""
    rows = case_rows(per_step_s, per_seq_s)
    return float(sum((rows[k] / m - 1.0) ** 2 for k, m in FIT_ROWS.items()))


def best_on(steps: np.ndarray, seqs: np.ndarray) -> tuple[float, float, float]:
    """(per_step_s, per_seq_s, loss) of the grid point of least :func:`loss`."""
    scored = [(loss(a, b), float(a), float(b)) for a in steps for b in seqs if a >= 0 and b >= 0]
    value, step, seq = min(scored)
    return step, seq, value


def fit() -> tuple[float, float, float]:
    """The coarse grid's best, then the fine grid's around it: (per_step_s, per_seq_s, loss)."""
    step, seq, _ = best_on(COARSE_STEP_S, COARSE_SEQ_S)
    offsets = np.arange(-FINE_SPAN, FINE_SPAN + 1)
    return best_on(np.round(step + offsets * FINE_STEP_S, 7),
                   np.round(seq + offsets * FINE_SEQ_S, 8))


def main() -> int:
    step, seq, value = fit()
    print(f"per_step_s = {step * 1e3:.2f} ms, per_seq_s = {seq * 1e6:.1f} us (loss {value:.5f})")
    rows = case_rows(step, seq)
    for key, measured in FIT_ROWS.items():
        print(f"  {key[0]:8s} {key[1]:28s} {measured:9.2f} {rows[key]:9.2f} "
              f"{(rows[key] / measured - 1) * 100:+6.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Derive vLLM V0's host seconds per operator of an eagerly run forward, and refit the V0
host step terms with it.

V0 replays CUDA graphs for decode-only batches alone: ``_use_captured_graph`` needs
``decode_only`` (no prompt in the batch), not ``enforce_eager``, a batch of at most the largest
captured size and contexts of at most ``max_seq_len_to_capture`` (vllm/worker/model_runner.py
in the 0.5.4, 0.6.0 and 0.6.3.post1 wheels); ``execute_model`` runs ``self.model`` itself for
any step with a prefill, one Python dispatch and kernel launch per operator, on every
tensor-parallel worker.

The measurement: vllm-project/vllm PR 1440 ("CUDA graph for Llama", 2023-10-20, the first
attempt before PR 1926): Llama-2-7B without tensor parallelism, a batch of 1, 5 prompt and 100
output tokens, about 1.05 s with the decode forward in a CUDA graph and about 1.2 s without.
The prefill runs eagerly in both, so the 0.15 s is the 99 decode steps' launches that the GPU
waited on. An eager step that is slower than its graph replay is launch-bound: its forward
lasts its launches, ``N × op_s``, where the graph replay lasts the GPU's seconds ``G``, so

    op_s = (G + (1.2 - 1.05) s / 99) / N,

with N capsim's operators per Llama-2-7B forward (192) and G capsim's seconds of the graph
decode step. The PR does not name the GPU; its graph step (10.5 ms a token, host included) fits
an A100 80GB (capsim's GPU step 9.79 ms) and not an A100 40GB (12.2 ms); on an H100 the figure
would be 41 us instead of 59 us.

The V0 host step terms were fitted to the fixed batch of step_vllm_perfbench_latency_bs8_in32_
out128_a100 / _h100 (one prefill of 8 x 32 tokens, then 127 decode steps), ``(measured - capsim
without host overhead) / 128 steps`` on the 8B rows (per_step_s) and ``(measured - capsim with
per_step_s) / 128 / 3`` on the 70B TP 4 rows (per_extra_tp_worker_s); :func:`refit` repeats that
with the eager floor on the prefill step.

Usage: python benchmarks/calibration/v0_eager_prefill_op.py   (prints op_s and the refit)
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

from capsim.cost.pricer import StepPricer
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import TraceCache

PR1440_EAGER_S, PR1440_GRAPH_S = 1.2, 1.05      # 5 prompt + 100 output tokens, batch 1
PR1440_PROMPT, PR1440_DECODE_STEPS = 5, 99
PR1440_GPU = "a100-80gb"
ROOT = Path(__file__).resolve().parents[2]
FIDELITY = ROOT / "benchmarks" / "fidelity"
# measured median batch latency (s) of the fit rows (../shared/reference/measured/cases.yaml)
FIT_ROWS = {("step_vllm_perfbench_latency_bs8_in32_out128_a100", "llama8B_tp1"): 1.57934,
            ("step_vllm_perfbench_latency_bs8_in32_out128_h100", "llama8B_tp1"): 0.997365,
            ("step_vllm_perfbench_latency_bs8_in32_out128_a100", "llama70B_tp4"): 3.99039,
            ("step_vllm_perfbench_latency_bs8_in32_out128_h100", "llama70B_tp4"): 2.4443}
STEPS = 128                                      # 1 prefill + 127 decode steps


def eager_op_s(gpu: str = PR1440_GPU) -> float:
    """Seconds per operator of an eager Llama forward, from PR 1440 on ``gpu``."""
    pricer = StepPricer(load_model("llama-2-7b"), load_hardware(gpu), 1, engine="vllm")
    ctx = np.arange(PR1440_PROMPT, PR1440_PROMPT + PR1440_DECODE_STEPS)
    graph_s = np.mean([pricer.cost(decode_seqs=1, decode_ctx_tokens=int(c)).seconds
                       for c in ctx])
    launches_s = graph_s + (PR1440_EAGER_S - PR1440_GRAPH_S) / PR1440_DECODE_STEPS
    return float(launches_s / pricer.terms.eager_operators)


def batch_latency_s(case: str, variant: str, host: dict) -> float:
    """capsim's latency of the fixed batch of ``case`` / ``variant`` with the V0 preset's
    host terms replaced by ``host``."""
    loaded = load(FIDELITY / f"{case}.yaml")
    run = next(r for r in loaded.runs if r.variant == variant)
    pool = run.pools[0]
    preset = pool.preset.model_copy(update={
        "host_overhead": pool.preset.host_overhead.model_copy(update=host)})
    run = dataclasses.replace(run, pools=(dataclasses.replace(pool, preset=preset),))
    result = simulate(run, TraceCache(loaded.base_dir, str(FIDELITY / f"{case}.yaml")).get(
        run.workload, run.seed))
    return float(np.nanmax(result.requests.finish_s))


def refit(op_s: float) -> tuple[float, float]:
    """(per_step_s, per_extra_tp_worker_s) fitted as their sources say, with the eager floor
    ``op_s`` on the prefill step."""
    none = {"per_step_s": 0.0, "per_seq_s": 0.0, "per_extra_tp_worker_s": 0.0,
            "eager_prefill_op_s": op_s}
    per_step = np.mean([(measured - batch_latency_s(case, variant, none)) / STEPS
                        for (case, variant), measured in FIT_ROWS.items()
                        if variant == "llama8B_tp1"])
    with_step = none | {"per_step_s": float(per_step)}
    per_worker = np.mean([(measured - batch_latency_s(case, variant, with_step)) / STEPS / 3
                          for (case, variant), measured in FIT_ROWS.items()
                          if variant == "llama70B_tp4"])
    return float(per_step), float(per_worker)


def main() -> int:
    op_s = eager_op_s()
    print(f"eager_prefill_op_s = {op_s * 1e6:.2f} us ({PR1440_GPU}); "
          f"h100-sxm would give {eager_op_s('h100-sxm') * 1e6:.2f} us")
    for floor in (0.0, op_s):
        per_step, per_worker = refit(floor)
        print(f"floor {floor * 1e6:6.2f} us: per_step_s = {per_step * 1e3:.4f} ms, "
              f"per_extra_tp_worker_s = {per_worker * 1e3:.4f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

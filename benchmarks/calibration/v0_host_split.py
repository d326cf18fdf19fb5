"""Split vLLM V0's host time per running sequence into what async output processing hides and
what stays in series, and refit ``per_step_s`` with the serial part charged.

Three sources, one unknown each:

1. vLLM's RFC "Asynchronous Output Processor" (vllm-project/vllm issue 6913, 2024-07-29)
   timed ``LLMEngine._process_model_outputs`` (append the token, detokenise, stop checks,
   free finished sequences, build each RequestOutput) on Llama-3-70B, 4 x H100, 128 input
   tokens: 0.2 ms at batch 1, 3.4 ms at batch 32. Its slope is the output processing per
   running sequence per step: ``OUTPUT_PROC_PER_SEQ_S`` = (3.4 - 0.2) ms / 31. From 0.6.0
   (PRs 7049 / 7921) that work runs while the next step's forward runs.
2. vLLM's v0.5.3 profile (blog 2024-09-05; benchmarks/calibration/v0_host_per_seq.py): the
   scheduling share (output gathering + scheduling + input preparation) in series is 0.29 /
   0.38 of the GPU seconds of its benchmark: ``x_total = (share x G - n x per_step_s) / S``.
3. The V0 perf-benchmark latency rows capsim's ``per_step_s`` was fitted to
   (step_vllm_perfbench_latency_bs8_in32_out128_a100 / _h100, batch 8, fit cases): their
   fit, (measured - capsim without host overhead) / 128 steps, 1.00 and 1.09 ms, mean 1.05
   ms shipped (``FIT_HOST_AT_BS8_S``; benchmarks/calibration/v0_eager_prefill_op.py ``refit``
   gives 1.0226 ms with the eager prefill floor, within its 3 %), is the host time of a step
   of 8 sequences (every one of the 128 steps has 8), so with a serial per-sequence term
   ``s`` the refit is ``per_step_s = 1.05 ms - 8 s``: every batch-8 step costs what it did.

The serial part ``s = x_total - OUTPUT_PROC_PER_SEQ_S`` (scheduling, input preparation and
the sampler's Python output per sequence) is assumed the same in 0.5.4 and the V0 builds of
late 2024; x_total depends on per_step_s, which depends on s: the three equations are linear
and solved at once.

Usage: python benchmarks/calibration/v0_host_split.py   (prints s, per_step_s, x_total)
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import yaml

OUTPUT_PROC_PER_SEQ_S = (3.4e-3 - 0.2e-3) / (32 - 1)   # issue 6913's table, batch 1 and 32
FIT_HOST_AT_BS8_S = 1.05e-3    # the latency rows' fitted host time of a batch-8 step (shipped)
FIT_BATCH = 8                  # the latency rows' batch: 8 sequences in each of their steps


def _per_seq_script():
    """benchmarks/calibration/v0_host_per_seq.py (the blog's benchmark and its shares)."""
    path = Path(__file__).with_name("v0_host_per_seq.py")
    spec = importlib.util.spec_from_file_location("v0_host_per_seq", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def solve(path: Path) -> dict[str, float]:
    """The split from the blog's benchmark scenario at ``path``: seconds per sequence in
    series (``serial_per_seq_s``), the refitted ``per_step_s`` and 0.5's ``total_per_seq_s``."""
    cal = _per_seq_script()
    gpu = cal.run_length_s(0.0, 0.0, path)
    probe_s = 1e-4
    steps = (cal.run_length_s(probe_s, 0.0, path) - gpu) / probe_s
    seq_steps = (cal.run_length_s(0.0, probe_s, path) - gpu) / probe_s
    serial_budget_s = cal.SERIAL_SHARE / cal.GPU_SHARE * gpu
    host_bs8_s = FIT_HOST_AT_BS8_S
    # x = (B - n (R - 8 s)) / S and s = x - o  =>  s (S - 8 n) = B - n R - o S
    serial = ((serial_budget_s - steps * host_bs8_s - OUTPUT_PROC_PER_SEQ_S * seq_steps)
              / (seq_steps - FIT_BATCH * steps))
    per_step_s = host_bs8_s - FIT_BATCH * serial
    return {"serial_per_seq_s": serial, "per_step_s": per_step_s, "host_bs8_s": host_bs8_s,
            "total_per_seq_s": serial + OUTPUT_PROC_PER_SEQ_S,
            "output_proc_per_seq_s": OUTPUT_PROC_PER_SEQ_S}


def main() -> int:
    cal = _per_seq_script()
    path = Path("/tmp") / f"{cal.SCENARIO['name']}.yaml"
    path.write_text(yaml.safe_dump(cal.SCENARIO))
    out = solve(path)
    print(f"latency rows' batch-8 host step R = {out['host_bs8_s'] * 1e3:.4f} ms")
    print(f"output processing {out['output_proc_per_seq_s'] * 1e6:.1f} us/seq (hidden from 0.6.0)")
    print(f"serial per_seq_s = {out['serial_per_seq_s'] * 1e6:.1f} us (0.6.x presets)")
    print(f"per_step_s = {out['per_step_s'] * 1e3:.3f} ms (all V0 presets)")
    print(f"0.5 per_seq_s = {out['total_per_seq_s'] * 1e6:.1f} us (serial + output processing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Derive the host seconds per kernel launched from Python (the vLLM V1 presets'
``host_overhead.draft_launch_s``) from the measurement behind vLLM V0's eager operator cost.

The measurement (benchmarks/calibration/v0_eager_prefill_op.py): vllm-project/vllm PR 1440
(2023-10-20), Llama-2-7B at batch 1, 5 prompt and 100 output tokens, about 1.2 s eager and
1.05 s with the decode forward in a CUDA graph. An eager decode forward slower than its replay
lasts its launches: capsim's graph decode step on an A100 80GB + 0.15 s / 99 steps, which
that script divides by capsim's 192 operators (``eager_op_s``). Here the same seconds are
divided by the kernels that forward launches from Python, counted in the v0.2.5 wheel's
Llama (vllm/model_executor/models/llama.py and layers/, the nearest release to the PR held
here, with the same layers): per decoder layer the input RMSNorm (``rms_norm`` or
``fused_add_rms_norm``), ``qkv_proj``, the rotary embedding, ``reshape_and_cache``,
``paged_attention_v1``, ``o_proj``, the post-attention ``fused_add_rms_norm``,
``gate_up_proj``, ``silu_and_mul`` and ``down_proj`` (10; the q / k / v split and views
launch nothing), plus the embedding and the final norm: 32 x 10 + 2 = 322.

The unit is the one vLLM V1's drafting launches in: each of its small PyTorch calls between
draft passes launches one kernel (the counts in the vllm-0.8 / vllm-0.9 presets).

Usage: python benchmarks/calibration/draft_launch_s.py   (prints the seconds per launch)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from v0_eager_prefill_op import eager_op_s  # noqa: E402  (the same measurement and GPU)

from capsim.cost.pricer import StepPricer  # noqa: E402
from capsim.profiles.hardware import load_hardware  # noqa: E402
from capsim.profiles.models import load_model  # noqa: E402

#: Kernels one v0.2.5 Llama decoder layer launches in an eager decode (module docstring).
V0_LAUNCHES_PER_LAYER = 10
#: Kernels outside the layers: the embedding and the final norm.
V0_LAUNCHES_OUTSIDE = 2


def launches_per_forward(model: str = "llama-2-7b") -> int:
    """Kernels vLLM 0.2.5's eager Llama decode forward launches (322 for Llama-2-7B)."""
    return load_model(model).num_hidden_layers * V0_LAUNCHES_PER_LAYER + V0_LAUNCHES_OUTSIDE


def draft_launch_s() -> float:
    """Seconds per kernel launched from Python: PR 1440's eager forward over its launches."""
    pricer = StepPricer(load_model("llama-2-7b"), load_hardware("a100-80gb"), 1, engine="vllm")
    forward_s = eager_op_s() * pricer.terms.eager_operators
    return forward_s / launches_per_forward()


def main() -> int:
    s = draft_launch_s()
    print(f"eager Llama-2-7B decode forward: {launches_per_forward()} launches, "
          f"{s * launches_per_forward() * 1e3:.2f} ms: {s * 1e6:.2f} us per launch")
    return 0


if __name__ == "__main__":
    sys.exit(main())

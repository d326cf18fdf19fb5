"""The launch-bound eager prefill (``host_overhead.eager_prefill_op_s``): a prefill forward
run outside CUDA graphs lasts at least its operators' host launches.

Source of the figure: sgl-project/sglang PR 12160 (2025-10-26), DeepSeek-V3 under SGLang
with TP: a prefill of 1 new token logged ``forward cost`` 82.64 ms run eagerly and 23.10 ms
replayed from a CUDA graph ("prefill latency is similar when new_tokens < 100"). capsim
counts 546 operators in one DeepSeek-V3 forward (61 layers: 4 MLA projections, attention and
the elementwise kernels on each; the dense MLP's 2 matmuls on the first 3; shared expert,
router and routed experts on the 58 MoE layers), so 82.64 ms / 546 per operator.
"""

from __future__ import annotations

import pytest

from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import HostOverhead
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

PR12160_EAGER_S = 82.64e-3
DSV3_OPERATORS = 3 * 8 + 58 * 9
OP_S = PR12160_EAGER_S / DSV3_OPERATORS
H200 = load_hardware("h200-sxm")
DSV3 = load_model("deepseek-v3")


def _pricer(host: HostOverhead | None, model=DSV3, tp: int = 8) -> StepPricer:
    return StepPricer(model, H200, tp, quantization="fp8_block", host=host)


def test_operator_counts():
    """DeepSeek-V3: 546 = 3 dense layers × 8 + 58 MoE layers × 9; Llama-3.1-70B: 80 × 6
    (qkv, o, gate_up, down, attention, elementwise); the count does not depend on TP."""
    assert DSV3_OPERATORS == 546
    assert _pricer(None).terms.eager_operators == 546
    assert _pricer(None, tp=4).terms.eager_operators == 546
    assert _pricer(None, load_model("llama-3.1-70b"), 4).terms.eager_operators == 480


def test_short_prefill_costs_the_measured_eager_forward():
    """A 1-token prefill of DeepSeek-V3 costs PR 12160's 82.64 ms plus the profile's step
    overhead (the engine's async host terms hide behind it); the floor is in overhead_s."""
    host = HostOverhead(eager_prefill_op_s=OP_S, overlap="async")
    cost = _pricer(host).cost(prefill_tokens=1)
    step_overhead_s = H200.step_overhead_s
    assert cost.seconds == pytest.approx(PR12160_EAGER_S + step_overhead_s, rel=1e-9)
    assert cost.seconds - cost.overhead_s == pytest.approx(
        _pricer(None).cost(prefill_tokens=1).seconds - step_overhead_s, rel=1e-9)


def test_floor_only_binds_short_eager_prefills():
    """Decode steps (graph replays) are unchanged; a prefill long enough that its kernels
    outlast the launches (8,192 tokens: ~0.3 s on 8 × H200) is unchanged; without the
    field every step is bit-for-bit the old price."""
    eager = _pricer(HostOverhead(eager_prefill_op_s=OP_S))
    plain = _pricer(HostOverhead())
    decode = dict(decode_seqs=8, decode_ctx_tokens=8 * 1500)
    assert eager.cost(**decode).seconds == plain.cost(**decode).seconds
    long = plain.cost(prefill_tokens=8192)
    assert long.seconds > PR12160_EAGER_S
    assert eager.cost(prefill_tokens=8192).seconds == long.seconds
    short = plain.cost(prefill_tokens=256)
    assert short.seconds < PR12160_EAGER_S
    assert eager.cost(prefill_tokens=256).seconds > short.seconds
    assert _pricer(None).cost(prefill_tokens=256).seconds == short.seconds


def test_engines_table_names_the_floor():
    """``capsim engines`` lists the per-operator floor with the other host terms."""
    from capsim.cli.engines import _host_text
    text = _host_text(HostOverhead(per_step_s=0.58e-3, eager_prefill_op_s=OP_S))
    assert text.startswith("0.58 ms/step, 0.151355 ms/operator of an eager prefill (floor)")
    assert "eager" not in _host_text(HostOverhead(per_step_s=0.58e-3))


def test_pipeline_stages_each_launch_their_own_layers():
    """PP 2 of Llama-3.1-70B (40 + 40 layers, 240 operators each): a 1-token prefill
    costs at least 2 × 240 × OP_S, each stage's floor in turn; without the field the
    pipeline's price is unchanged."""
    from capsim.cost.pipeline import PipelinePricer
    llama = load_model("llama-3.1-70b")
    host = HostOverhead(eager_prefill_op_s=OP_S)
    pipe = PipelinePricer(llama, H200, 4, 2, host=host)
    assert [s.terms.eager_operators for s in pipe.stages] == [240, 240]
    short = pipe.cost(prefill_tokens=1)
    plain = PipelinePricer(llama, H200, 4, 2).cost(prefill_tokens=1)
    assert short.seconds >= 480 * OP_S
    # each stage's GPU part (seconds less its step overhead) is raised to 240 × OP_S
    gpu_parts = [(c := s.cost(prefill_tokens=1)).seconds - c.overhead_s
                 for s in PipelinePricer(llama, H200, 4, 2).stages]
    assert all(g < 240 * OP_S for g in gpu_parts)
    assert short.seconds - plain.seconds == pytest.approx(
        sum(240 * OP_S - g for g in gpu_parts), rel=1e-9)


def test_sglang_05_prefills_eagerly_at_the_measured_cost():
    """SGLang 0.5 runs prefill outside CUDA graphs by default (server_args.py
    enable_piecewise_cuda_graph False, 0.5.7 wheel): the sglang-0.5 preset carries PR 12160's
    82.64 ms over DeepSeek-V3's 546 operators."""
    from capsim.profiles.engines import load_engine_preset
    op_s = load_engine_preset("sglang-0.5").host_overhead.eager_prefill_op_s
    assert op_s * 546 == pytest.approx(82.64e-3, rel=1e-4)
    assert load_engine_preset("vllm-v1").host_overhead.eager_prefill_op_s == 0.0

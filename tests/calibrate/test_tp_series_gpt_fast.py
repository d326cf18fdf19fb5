"""A TP 1 / 2 / 4 / 8 series of one dense model with nothing but the GPU in the loop: what it
says about the Llama-70B TP 4 perf-benchmark gap (issue 14).

Source: pytorch-labs/gpt-fast README.md, "Tensor Parallelism" table (snapshot HEAD 32971d31,
2024-09-15; the Llama-2 rows since c5d34546, 2023-12-16, "Added updated TP results with new
custom collectives: https://github.com/pytorch/pytorch/pull/114001"; the Llama-3.1 rows since
c9f683ed, 2024-09-13). Tokens per second at batch 1 on "an 8xA100-80GB, power limited to 330W
with a hybrid cube mesh topology", prompt "just 5 tokens"; generate.py's defaults
(``--max_new_tokens 200``, ``--num_samples 5``: the mean over 5 timed generations of 200
tokens, prefill included) with the decode step compiled by ``torch.compile(mode=
"reduce-overhead")`` (CUDA graphs); TP by ``ENABLE_INTRA_NODE_COMM=1 torchrun`` (PyTorch's
intra-node one-shot / two-shot all-reduce, pytorch PR 114001).

gpt-fast is not a capsim engine, so the series is no fidelity case: it is read here as
kernel-level evidence. Every rank runs the same Python loop (SPMD): no scheduler and nothing
broadcast to workers, and the loop never waits on the GPU between tokens (generate.py samples
with ``multinomial_sample_one_no_sync``), so a token costs the GPU's step alone. capsim's GPU price of that step (:class:`StepPricer` without host terms:
kernels, vLLM's custom all-reduce of the vllm-v1 preset, the profile's step overhead) is
compared with 1000 / tokens-per-second.

What it says: on the A100, capsim's kernels and all-reduces price Llama-3.1-8B at TP 1 / 2 /
4 / 8 within +1.7 … −1.8 % and Llama-2-70B at TP 2 / 4 / 8 within −2.8 … −1.7 % (Llama-2-7B
is over-priced at TP 4 / 8, +11 / +13 %; the Llama-3.1-70B TP 2 row, 16.03 tok/s, is below
the Llama-2-70B one of the same size, 21.32, by 25 % and taken as an outlier). So the GPU side
of a tensor-parallel decode step, the 70B TP 4 shape included, is priced right when nothing
else is in the loop; the two forms of test_tp_step_gap.py that act on the GPU (a wait at every
all-reduce, a straggler fraction) would put the 8B TP 2 / 4 rows 7–20 % high and the 70B
TP 4 row 6–8 % high. What vLLM's 70B TP 4 rows miss (2.8 ms a step on the A100) is
therefore outside the GPU work: the engine's host path at TP > 1 (scheduler output sent to
every worker), which this series cannot see; the last test prices one such form, a host
cost per extra worker, on the held-out TP rows. Caveats: the
330 W power limit (capsim's TP 1 rows come out +1.6 / +2.9 %, so it costs little on this
memory-bound step) and the hybrid cube mesh (no NVSwitch; at batch 1 each all-reduce sends
8–16 KiB, latency-bound).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import HostOverhead, load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model
from capsim.scenario.run_config import Pool

from conftest import shared_or_skip

_spec = importlib.util.spec_from_file_location(
    "capsim_test_tp_step_gap", Path(__file__).with_name("test_tp_step_gap.py"))
_gap = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_gap)
#: The candidate terms of test_tp_step_gap.py, patched into StepPricer the same way.
_patch = _gap._patch

#: gpt-fast README "Tensor Parallelism": model → {GPUs (TP): tokens per second}, batch 1.
MEASURED_TOK_S = {
    "llama-3.1-8b": {1: 93.83, 2: 149.10, 4: 217.21, 8: 276.01},
    "llama-2-7b": {1: 104.9, 2: 168.84, 4: 254.02, 8: 328.43},
    "llama-2-70b": {2: 21.32, 4: 38.01, 8: 62.50},
    "llama-3.1-70b": {2: 16.03, 4: 37.45, 8: 58.78},
}
PROMPT_TOKENS, NEW_TOKENS = 5, 200
#: Mean context of the decode steps: 5 prompt tokens + half of the 200 generated.
MEAN_CTX_TOKENS = PROMPT_TOKENS + NEW_TOKENS // 2
#: The two GPU-side forms of test_tp_step_gap.py at the sizes fitted there to the two vLLM
#: 70B TP 4 perf-benchmark rows: 13.7 µs per all-reduce, GPU time x 1.138.
FORMS = {"all_reduce": 13.7e-6, "straggler": 0.138}

#: Signed % error of capsim's GPU step against 1000 / tok/s: no term, all-reduce wait,
#: straggler.
EXPECTED = {
    ("llama-3.1-8b", 1): (+1.6, +1.6, +1.6),
    ("llama-3.1-8b", 2): (+1.7, +14.9, +10.7),
    ("llama-3.1-8b", 4): (+0.8, +20.1, +7.3),
    ("llama-3.1-8b", 8): (-1.8, +22.8, +2.4),
    ("llama-2-7b", 1): (+2.9, +2.9, +2.9),
    ("llama-2-7b", 2): (+6.5, +21.6, +15.5),
    ("llama-2-7b", 4): (+11.4, +34.0, +18.2),
    ("llama-2-7b", 8): (+12.7, +41.9, +17.0),
    ("llama-2-70b", 2): (-2.8, +1.9, +9.0),
    ("llama-2-70b", 4): (-2.5, +5.9, +8.0),
    ("llama-2-70b", 8): (-1.7, +12.1, +6.9),
    ("llama-3.1-70b", 2): (-26.1, -22.6, -17.2),
    ("llama-3.1-70b", 4): (-3.0, +5.2, +7.4),
    ("llama-3.1-70b", 8): (-6.9, +6.1, +1.3),
}


def _step_ms(model: str, tp: int) -> float:
    """capsim's GPU time of one batch-1 decode step on the A100 (no host terms), ms."""
    pricer = StepPricer(load_model(model), load_hardware("a100-80gb"), tp,
                        all_reduce=load_engine_preset("vllm-v1").tp_all_reduce, engine="vllm")
    return pricer.cost(decode_seqs=1, decode_ctx_tokens=MEAN_CTX_TOKENS).seconds * 1e3


def _errors() -> dict[tuple[str, int], float]:
    return {(m, tp): (_step_ms(m, tp) - 1e3 / tok_s) / (1e3 / tok_s) * 100
            for m, rows in MEASURED_TOK_S.items() for tp, tok_s in rows.items()}


@pytest.fixture(scope="module")
def priced() -> dict[str, dict[tuple[str, int], float]]:
    out = {"none": _errors()}
    for form, value in FORMS.items():
        with pytest.MonkeyPatch.context() as mp:
            _patch(mp, form, value)
            out[form] = _errors()
    return out


@pytest.mark.parametrize("key", list(EXPECTED), ids=[f"{m}-tp{tp}" for m, tp in EXPECTED])
def test_each_row_with_and_without_the_gpu_forms(priced, key):
    got = [priced[form][key] for form in ("none", *FORMS)]
    assert got == pytest.approx(list(EXPECTED[key]), abs=0.15)


def test_the_gpu_side_of_tp_scales_as_measured(priced):
    """Llama-3.1-8B TP 1 → 8 and Llama-2-70B TP 2 → 8 (the 70B TP 4 shape of the vLLM rows
    included) within 3 % with no tensor-parallel term; the 70B TP 4 step is priced 25.7 ms
    against 26.3 measured, where the vLLM A100 row misses 2.8 ms a step."""
    base = priced["none"]
    rows = [("llama-3.1-8b", tp) for tp in (1, 2, 4, 8)] + [("llama-2-70b", tp) for tp in (2, 4, 8)]
    assert max(abs(base[k]) for k in rows) < 3.0
    assert _step_ms("llama-2-70b", 4) == pytest.approx(25.66, abs=0.05)
    # Measured TP-scaling ratios are kept: TP 4 / TP 1 for the 8B, TP 4 / TP 2 for the 70B.
    ratio = _step_ms("llama-3.1-8b", 4) / _step_ms("llama-3.1-8b", 1)
    assert ratio == pytest.approx(93.83 / 217.21, rel=0.01)
    ratio = _step_ms("llama-2-70b", 4) / _step_ms("llama-2-70b", 2)
    assert ratio == pytest.approx(21.32 / 38.01, rel=0.01)


def test_neither_gpu_form_survives_the_series(priced):
    """The all-reduce wait and the straggler fraction that close the vLLM 70B TP 4 rows put
    the 8B's TP 2 / 4 rows 7-20 % high and the 70B TP 4 row (the vLLM rows' shape) 6-8 %
    high, where those rows sit within 3 % without them."""
    for form in FORMS:
        errs = priced[form]
        assert min(errs[("llama-3.1-8b", tp)] for tp in (2, 4)) > 7, form
        assert errs[("llama-2-70b", 4)] > 5, form


#: Host time per TP worker beyond the first that the V0 presets ship
#: (``host_overhead.per_extra_tp_worker_s`` of vllm-0.6 / vllm-0.6.4, fitted to the vLLM 70B TP 4
#: rows' mean miss per step: (2.81 + 1.60) / 2 ms ÷ 3 workers).
HOST_PER_EXTRA_WORKER_S = load_engine_preset("vllm-0.6.4").host_overhead.per_extra_tp_worker_s
PERF = "step_vllm_perfbench_latency_bs8_in32_out128_"
#: (case, quantity) → signed % error without the term, and with it (shipped on the V0 presets
#: the first seven rows are expressed with; patched onto vllm-v1 for the last).
PER_WORKER_EXPECTED = {
    (f"{PERF}a100", "llama70B_tp4 median_ms"): (-9.0, -1.9),
    # The 70B TP 4 prefills of 8 x 32 tokens on H100 / H200 last V0's eager launches with
    # the TP collectives counted (host_overhead.eager_all_reduce_ops: 642 operators; -8.4 /
    # +3.2 and -10.6 / +3.0 with 480).
    (f"{PERF}h100", "llama70B_tp4 median_ms"): (-8.1, +3.5),
    (f"{PERF}a100", "mixtral8x7B_tp2 median_ms"): (+0.2, +2.8),
    (f"{PERF}h100", "mixtral8x7B_tp2 median_ms"): (-2.1, +1.9),
    # H200 attention is measured.
    (f"{PERF}h200", "llama70B_tp4 median_ms"): (-10.1, +3.5),
    (f"{PERF}h200", "mixtral8x7B_tp2 median_ms"): (-2.7, +2.2),
    ("step_vllm_pr9856_a100_llama31_8b_tp2_bs8_in128_out256", "llama8B_tp2 median_ms"):
        (-7.3, +0.9),
    ("load_vllm0151_8xh100_gptoss120b_tp8_random_isl_osl_concurrency_sweep",
     "1k/1k c=4 tpot_ms"): (+4.6, +66.9),
}
V1_ROW = ("load_vllm0151_8xh100_gptoss120b_tp8_random_isl_osl_concurrency_sweep",
          "1k/1k c=4 tpot_ms")


def _only_v1_row(case: dict) -> dict:
    """The gpt-oss-120b TP 8 sweep reduced to the row asserted here (1k/1k at c = 4): the
    benchmark simulates that one variant, the same as in the whole case, not its five
    others (two thirds of this test's time); every other case unchanged."""
    if case["id"] != V1_ROW[0]:
        return case
    m = case["measured"]
    keep = [row for row in m["rows"]
            if (lambda r: (r["isl_osl"], r["conc"]) == ("1k/1k", 4))(
                dict(zip(m["table_columns"], row)))]
    assert len(keep) == 1
    return {**case, "measured": {**m, "rows": keep}}


def test_a_host_cost_per_extra_worker_fits_v0_rows_and_would_break_v1_tp8(repo_root,
                                                                         monkeypatch):
    """0.735 ms × (TP − 1) of host per step, shipped on the V0 presets (vllm-0.6,
    vllm-0.6.4), closes the vLLM 70B TP 4 rows it is fitted to and holds on the held-out
    H200, PR 9856 and Mixtral rows (each within 4 %); patched onto vLLM V1 it would put
    gpt-oss-120b TP 8 on the H100 (async: 5.1 ms of host against a 3.9 ms step) +67 % high,
    which is why V1 presets leave it 0 (V1 workers prepare their own inputs from one
    shared-memory message: vLLM PR 9856)."""
    shared_or_skip("reference/measured/cases.yaml", "the measured cases")
    # The per-worker host term alone: V0's output delay (one host step after the step ends,
    # tests/sim/test_v0_output_delay.py) also grows with TP and would blur the comparison.
    monkeypatch.setattr(Pool, "output_delay_s", property(lambda self: 0.0))
    spec = importlib.util.spec_from_file_location("capsim_fidelity_tp_series",
                                                  repo_root / "benchmarks/fidelity.py")
    fidelity = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, fidelity)
    spec.loader.exec_module(fidelity)
    monkeypatch.chdir(repo_root)
    cases = [_only_v1_row(c) for c in fidelity.read_cases()
             if c["id"] in {k[0] for k in PER_WORKER_EXPECTED}]

    def errors():
        rows, _ = fidelity.evaluate(cases)
        return {(r.case, r.quantity): (r.predicted - r.measured) / r.measured * 100
                for r in rows}

    shipped = errors()
    with monkeypatch.context() as mp:
        mp.setattr(HostOverhead, "for_tensor_parallel", lambda self, tp: self)
        base = errors()
        init_host = StepPricer._init_host

        def host(self, h, *rest):
            init_host(self, h, *rest)
            if self.tensor_parallel_size > 1 and (self.engine or "").startswith("vllm"):
                self.host.step_s += HOST_PER_EXTRA_WORKER_S * (self.tensor_parallel_size - 1)
                self.host.active = True
        mp.setattr(StepPricer, "_init_host", host)
        patched = errors()
    for key, expected in PER_WORKER_EXPECTED.items():
        assert (base[key], patched[key]) == pytest.approx(expected, abs=0.15), key
        if key != V1_ROW:          # the shipped V0 presets price exactly the patched term
            assert shipped[key] == pytest.approx(patched[key], abs=1e-9), key
    assert shipped[V1_ROW] == pytest.approx(base[V1_ROW], abs=1e-9)

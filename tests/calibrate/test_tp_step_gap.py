"""No single tensor-parallel step term closes the Llama-70B TP 4 gap (issue 14).

capsim prices the Llama-70B TP 4 rows of vLLM's perf-benchmark latency test (batch 8,
32 in / 128 out; step_vllm_perfbench_latency_bs8_in32_out128_a100 / _h100) 9.0 / 8.4 %
low, while the Llama-8B TP 1 rows the host step was fitted to are exact. The kernels
were ruled out (tests/calibrate/test_gemm_shape_tp4.py). These tests fit, on those two
70B rows only, each of three physically motivated forms of what a TP step costs beyond
capsim's kernels, and price every TP > 1 row of the fidelity benchmark with it:

- ``host``: a constant per step on the host when TP > 1 — the scheduler output sent to
  every TP worker (vLLM V0 ``broadcast_tensor_dict`` in vllm/worker/worker_base.py; V1
  ``MultiprocExecutor.collective_rpc`` over the shared-memory ``MessageQueue``, which
  TP 1 does not use). In series with the GPU on serial presets, hidden under it on async
  ones;
- ``all_reduce``: a wait at every all-reduce — each is a barrier, so it waits for the
  slowest rank (vLLM issue 5792: Llama-3-70B TP 4 ranks idling in all-reduce for a rank
  that launched late; llm-compressor issue 2050: vLLM's one-stage kernel taking 10.8 µs a
  call inside a Qwen3-30B-A3B TP 4 H100 step, 26 µs with fp8 experts, where the kernel
  alone takes ~5–6 µs);
- ``straggler``: the step waits for the slowest rank, a fixed fraction of the GPU time
  when TP > 1 (HBM bandwidth and peak FLOP/s ÷ (1 + k); launch latencies and the
  all-reduce unchanged).

Each closes the two fitted rows and the dense 70B rows of other engines (TGI 2.1 TP 4 on
the A100, NIM Llama-3.3-70B fp8 TP 2 on the H100 at 1–5 users) — and each makes rows of
the same builds worse beyond their noise (~0.4 %, cases.yaml's second A100 copy): Mixtral
TP 2 (+0.2 / −2.1 % → +2.8 … +12.2 %); the all-reduce wait gpt-oss-120b TP 8 on the H100
(TPOT +4.6 → +31.5 %); the straggler the prefill and large-batch rows (TensorRT-LLM v0.5
70B TP 4 first token +2.9 / +13.9 → +13.2 / +27.3 %, NIM ITL at 100–250 users +1.0 … +6.3
→ +12.9 … +18.9 %); the host
constant vLLM PR 9856's 8B TP 2 row (−7.3 → +17.3 %). So none is shipped; the figures are
in docs/fidelity.md ("The Llama-70B TP 4 perf-benchmark rows were −9.0 % / −8.4 %"). Two
measured TP > 1 checks outside the fidelity cases are priced alongside (:data:`EXTERNAL`): vLLM PR
9856 (V0 main, Llama-3.1-8B TP 2 on A100s, batch 8, 128 in / 256 out, median 2.2919 s)
and the perf-benchmark's H200 build 9513 (since then held-out supplementary cases of the fidelity
benchmark too; tests/calibrate/test_tp_series_gpt_fast.py reads a TP 1 / 2 / 4 / 8 series).

The candidate terms are patched into :class:`capsim.cost.pricer.StepPricer` here only;
capsim ships none of them. It ships a fourth form instead, on its V0 presets only: host
time per TP worker beyond the first (``host_overhead.per_extra_tp_worker_s``;
tests/calibrate/test_tp_series_gpt_fast.py), which is switched off here so that every
figure below is against the model these forms were weighed on. Skipped without ../shared.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.optimize import brentq

from capsim.cost.communication import Communication
from capsim.cost.pricer import StepPricer
from capsim.metrics.summary import summarize
from capsim.profiles.engines import HostOverhead
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import TraceCache

from conftest import shared_or_skip

PERF = "step_vllm_perfbench_latency_bs8_in32_out128_"
#: Every fidelity case with a TP > 1 variant.
TP_CASES = (f"{PERF}a100", f"{PERF}h100",
            "load_vllm_nightly_a100_tgi21_llama3_8b_qps4_and_70b_tp4_qps2",
            "load_nim180_2xh100_llama33_70b_fp8_tp2_isl5000_osl500_concurrency_sweep",
            "step_trtllm_v05_first_token_latency_bs1_a100_fp16",
            "load_vllm0151_8xh100_gptoss120b_tp8_random_isl_osl_concurrency_sweep",
            "load_vllm_main202606_4xb200_qwen3_235b_fp8_tp4_random30k1k_c64")
#: The rows every term is fitted to (case, quantity).
FIT = ((f"{PERF}a100", "llama70B_tp4 median_ms"), (f"{PERF}h100", "llama70B_tp4 median_ms"))
STEPS = 128                    # 1 prefill + 127 decode steps of 8 sequences
ALL_REDUCES_70B = 2 * 80 + 1   # two per layer and the embedding's

#: Measured TP > 1 batch latencies outside cases.yaml, ms: (model, GPU, TP, batch, in, out,
#: engine preset) → median. vLLM PR 9856 description ("main", benchmark_latency.py
#: --tensor-parallel-size 2 --batch-size 8 --input-len 128 --output-len 256, 50 %
#: percentile 2.2919 s; V0 of 2024-11: preset vllm-0.6.4); the perf-benchmark's H200 run
#: (buildkite.com/vllm/performance-benchmark/builds/9513: 8B 834.0, 70B TP 4 2,075.4,
#: Mixtral TP 2 1,920.2 ms; the test of the fitted rows, preset vllm-v1 in series).
EXTERNAL = {
    "pr9856 8B TP2 A100": (("llama-3.1-8b", "a100-80gb", 2, 8, 128, 256, "vllm-0.6.4"), 2291.9),
    "build9513 70B TP4 H200": (("llama-3.1-70b", "h200-sxm", 4, 8, 32, 128, "vllm-v1"), 2075.4),
    "build9513 Mixtral TP2 H200": (("mixtral-8x7b", "h200-sxm", 2, 8, 32, 128, "vllm-v1"),
                                   1920.2),
}


@pytest.fixture(scope="module")
def fidelity(repo_root):
    """benchmarks/fidelity.py as a module (it reads ../shared/reference/measured)."""
    shared_or_skip("reference/measured/cases.yaml", "the measured cases")
    spec = importlib.util.spec_from_file_location("capsim_fidelity_bench",
                                                  repo_root / "benchmarks/fidelity.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _patch(mp: pytest.MonkeyPatch, form: str, value: float) -> None:
    """Add the candidate term ``form`` of size ``value`` to every TP > 1 step."""
    if form == "host":
        init_host = StepPricer._init_host

        def host(self, h, *rest):
            init_host(self, h, *rest)
            if self.tensor_parallel_size > 1:
                self.host.step_s += value
                self.host.active = True
        mp.setattr(StepPricer, "_init_host", host)
    elif form == "all_reduce":
        pieces = Communication.all_reduce_pieces
        mp.setattr(Communication, "all_reduce_pieces", lambda self, bw, lat: [
            (limit, fixed + value, per_token) for limit, fixed, per_token in pieces(self, bw, lat)])
    elif form == "straggler":
        init_rates = StepPricer._init_rates

        def rates(self):
            if self.tensor_parallel_size > 1:
                hw = self.hw
                self.hw = hw.model_copy(update={
                    "hbm_bandwidth_bytes_per_s": hw.hbm_bandwidth_bytes_per_s / (1 + value),
                    "peak_flops_per_s": {d: v / (1 + value)
                                         for d, v in hw.peak_flops_per_s.items()}})
            init_rates(self)
        mp.setattr(StepPricer, "_init_rates", rates)


def _batch_ms(tmp: Path, model, hardware, tp, batch, prompt, output, preset) -> float:
    """benchmark_latency.py's batch latency: ``batch`` requests at t = 0, in series."""
    (tmp / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n"
                               + f"0,{prompt},{output}\n" * batch)
    engine = {"preset": preset, "scheduler": "continuous", "enable_chunked_prefill": False,
              "max_model_len": 4096, "max_num_seqs": 256, "enable_prefix_caching": False,
              "tensor_parallel_size": tp}
    if preset == "vllm-v1":
        engine["async_scheduling"] = False
    (tmp / "s.yaml").write_text(yaml.safe_dump({
        "name": "batch", "seed": 0, "model": model, "hardware": hardware, "engine": engine,
        "workload": {"trace": {"path": "t.csv", "format": "columns", "columns": {
            "arrival": "arrival_s", "prompt_tokens": "prompt_tokens",
            "output_tokens": "output_tokens"}}}}))
    loaded = load(str(tmp / "s.yaml"))
    run = loaded.runs[0]
    result = simulate(run, TraceCache(loaded.base_dir, str(loaded.path)).get(run.workload,
                                                                              run.seed))
    return summarize(result, loaded.spec.slo, loaded.class_slos)[0].e2el_p50_ms


def _errors(fidelity, cases, tmp: Path,
            measured_out: dict | None = None) -> dict[tuple[str, str], float]:
    """Signed % error of every TP > 1 quantity (and of the external checks); each row's
    measured value also put in ``measured_out`` when given."""
    rows, _ = fidelity.evaluate(cases)
    if measured_out is not None:
        measured_out.update({(r.case, r.quantity): r.measured for r in rows})
    out = {(r.case, r.quantity): (r.predicted - r.measured) / r.measured * 100 for r in rows}
    for name, (args, measured) in EXTERNAL.items():
        out[("external", name)] = (_batch_ms(tmp, *args) - measured) / measured * 100
    return out


@pytest.fixture(scope="module")
def priced(fidelity, tmp_path_factory):
    """{form: (fitted value, {(case, quantity): error %})} for the baseline and each form,
    without the V0 presets' per-worker host term."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(HostOverhead, "for_tensor_parallel", lambda self, tp: self)
        return _priced(fidelity, tmp_path_factory)


def _priced(fidelity, tmp_path_factory):
    cases = [c for c in fidelity.read_cases() if c["id"] in TP_CASES]
    fit_cases = [c for c in cases if c["id"] in {f[0] for f in FIT}]
    tmp = tmp_path_factory.mktemp("tp_step")
    # the measured values of the fit rows: read from the cases, the same in any evaluation
    # (the fit cases' rows are among the base rows), so not simulated again
    measured: dict[tuple[str, str], float] = {}
    base = _errors(fidelity, cases, tmp, measured)
    # host / all_reduce: the mean missing time per step (per all-reduce) of the fit rows
    gap_s = np.mean([-base[k] / 100 * measured[k] * 1e-3 / STEPS for k in FIT])
    out = {"none": (0.0, base)}
    for form, value in (("host", gap_s), ("all_reduce", gap_s / ALL_REDUCES_70B)):
        with pytest.MonkeyPatch.context() as mp:
            _patch(mp, form, value)
            out[form] = (value, _errors(fidelity, cases, tmp))

    def fit_mean(k):
        with pytest.MonkeyPatch.context() as mp:
            _patch(mp, "straggler", k)
            rows = fidelity.evaluate(fit_cases)[0]
        return np.mean([(r.predicted - r.measured) / r.measured
                        for r in rows if (r.case, r.quantity) in FIT])
    k = brentq(fit_mean, 0.0, 0.3, xtol=1e-4)
    with pytest.MonkeyPatch.context() as mp:
        _patch(mp, "straggler", k)
        out["straggler"] = (k, _errors(fidelity, cases, tmp))
    return out


NIM, TGI, TRT, OSS, QWEN = (TP_CASES[3], TP_CASES[2], TP_CASES[4], TP_CASES[5], TP_CASES[6])
#: (case, quantity) → signed % error with no term, host, all_reduce, straggler: every TP > 1
#: quantity of the fidelity cases, then the measured checks outside them (EXTERNAL).
EXPECTED = {
    # The NIM rows moved on 2026-12-06 when the trtllm presets started pricing TensorRT-LLM's
    # own all-reduce (h100-sxm all_reduce_tables.trtllm_auto) instead of NCCL's ring: decode
    # steps are faster (ITL at 1-5 users -8 / -10 % before, -13 / -15 % now, no form).
    (NIM, "isl5000/osl500 c=1 ttft_ms"): (-0.8, -0.3, -0.3, +10.9),
    (NIM, "isl5000/osl500 c=1 itl_ms"): (-13.1, -1.5, -1.5, -4.9),
    (NIM, "isl5000/osl500 c=1 throughput_tokens_per_s"): (+14.4, +1.4, +1.4, +4.5),
    (NIM, "isl5000/osl500 c=5 ttft_ms"): (+34.1, +34.9, +34.9, +49.9),
    (NIM, "isl5000/osl500 c=5 itl_ms"): (-12.6, -2.6, -2.6, -4.0),
    (NIM, "isl5000/osl500 c=5 throughput_tokens_per_s"): (+11.6, +0.9, +0.9, +1.5),
    (NIM, "isl5000/osl500 c=25 ttft_ms"): (+16.7, +17.3, +17.3, +30.5),
    (NIM, "isl5000/osl500 c=25 itl_ms"): (-6.4, -0.8, -0.8, +3.9),
    (NIM, "isl5000/osl500 c=25 throughput_tokens_per_s"): (+6.0, +0.3, +0.3, -4.4),
    (NIM, "isl5000/osl500 c=50 ttft_ms"): (-1.5, -1.0, -1.0, +10.2),
    (NIM, "isl5000/osl500 c=50 itl_ms"): (-3.2, +0.5, +0.5, +7.8),
    (NIM, "isl5000/osl500 c=50 throughput_tokens_per_s"): (+3.4, -0.2, -0.2, -7.2),
    (NIM, "isl5000/osl500 c=100 ttft_ms"): (-24.9, -23.5, -23.5, -16.0),
    (NIM, "isl5000/osl500 c=100 itl_ms"): (+1.0, +3.3, +3.3, +12.8),
    (NIM, "isl5000/osl500 c=100 throughput_tokens_per_s"): (+3.2, +0.9, +0.9, -7.6),
    (NIM, "isl5000/osl500 c=150 ttft_ms"): (-0.5, +1.5, +1.5, +11.1),
    (NIM, "isl5000/osl500 c=150 itl_ms"): (+4.7, +7.1, +7.1, +17.0),
    (NIM, "isl5000/osl500 c=150 throughput_tokens_per_s"): (-2.0, -4.1, -4.1, -12.3),
    (NIM, "isl5000/osl500 c=200 ttft_ms"): (+3.0, +5.2, +5.2, +15.1),
    (NIM, "isl5000/osl500 c=200 itl_ms"): (+5.6, +7.9, +7.9, +17.9),
    (NIM, "isl5000/osl500 c=200 throughput_tokens_per_s"): (-3.5, -5.5, -5.5, -13.6),
    (NIM, "isl5000/osl500 c=250 ttft_ms"): (+4.1, +6.2, +6.2, +16.2),
    (NIM, "isl5000/osl500 c=250 itl_ms"): (+6.3, +8.6, +8.6, +18.7),
    (NIM, "isl5000/osl500 c=250 throughput_tokens_per_s"): (-4.1, -6.1, -6.1, -14.1),
    (NIM, "isl500/osl2000 c=1 ttft_ms"): (+9.7, +14.2, +14.2, +21.9),
    (NIM, "isl500/osl2000 c=1 itl_ms"): (-15.2, -3.7, -3.7, -7.2),
    (NIM, "isl500/osl2000 c=1 throughput_tokens_per_s"): (+17.8, +3.8, +3.8, +7.7),
    (NIM, "isl500/osl2000 c=5 ttft_ms"): (+50.3, +52.0, +52.0, +67.5),
    # The TGI case draws the shipped sharegpt shape since 2026-12-06 (it had a hand-picked
    # lognormal per row): its rows moved with the lengths, not with the forms.
    # Since vLLM 0.6's output delay (a step's tokens leave after the next step's host work),
    # the fit rows' batch ends one host step later, so each form fitted to them is slightly
    # smaller; this row, near its queueing knee, moved (+5.8 / +10.3 before).
    (TGI, "llama70B_tp4_qps_2 tput_req_s"): (+2.6, +1.9, +1.9, +1.6),
    (TGI, "llama70B_tp4_qps_2 mean_ttft_ms"): (-6.3, +4.2, +4.2, +9.1),
    (TGI, "llama70B_tp4_qps_2 mean_itl_ms"): (-8.5, -2.9, -2.9, +0.0),
    (TGI, "llama70B_tp4_qps_2 input_tput_tok_s"): (+1.8, +1.1, +1.1, +0.8),
    (TGI, "llama70B_tp4_qps_2 output_tput_tok_s"): (+8.6, +7.8, +7.8, +7.5),
    # Since V0's eager prefill counts its TP collectives (host_overhead.eager_all_reduce_ops:
    # 162 more launches at 70B TP 4), the H100 70B row's 8 x 32-token prefill lasts its 642
    # launches (-8.4 -> -8.0 % with no form) and each form fitted to the two rows is slightly
    # smaller; the rows of other engines moved by at most 0.5 point with them.
    (f"{PERF}a100", "llama70B_tp4 median_ms"): (-9.0, -2.0, -2.0, +0.3),
    (f"{PERF}a100", "mixtral8x7B_tp2 median_ms"): (+0.2, +7.8, +3.3, +12.1),
    (f"{PERF}h100", "llama70B_tp4 median_ms"): (-8.0, +3.3, +3.2, -0.3),
    (f"{PERF}h100", "mixtral8x7B_tp2 median_ms"): (-2.1, +9.8, +2.7, +8.2),
    (TRT, "llama70B_tp4_in128 first_token_latency_ms"): (+2.9, +2.9, +7.5, +13.0),
    (TRT, "llama70B_tp4_in2048 first_token_latency_ms"): (+13.9, +13.9, +14.5, +27.1),
    (OSS, "1k/1k c=4 tpot_ms"): (+4.6, +4.6, +31.0, +6.2),
    (OSS, "1k/1k c=4 tput_per_gpu_tok_s"): (-2.3, -2.3, -22.0, -3.8),
    (OSS, "1k/1k c=64 tpot_ms"): (-7.8, -7.8, +5.5, -2.8),
    (OSS, "1k/1k c=64 tput_per_gpu_tok_s"): (+9.2, +9.2, -4.8, +3.6),
    (OSS, "1k/8k c=4 tpot_ms"): (+5.7, +5.7, +32.4, +7.4),
    (OSS, "1k/8k c=4 tput_per_gpu_tok_s"): (-5.5, -5.5, -24.6, -7.0),
    (OSS, "1k/8k c=64 tpot_ms"): (-57.5, -57.5, -51.4, -55.1),
    (OSS, "1k/8k c=64 tput_per_gpu_tok_s"): (+133.9, +133.9, +104.1, +121.2),
    (OSS, "8k/1k c=4 tpot_ms"): (+2.9, +2.9, +27.7, +4.8),
    (OSS, "8k/1k c=4 tput_per_gpu_tok_s"): (+1.4, +1.4, -18.2, -0.5),
    (OSS, "8k/1k c=8 tpot_ms"): (+1.0, +1.0, +22.4, +3.9),
    (OSS, "8k/1k c=8 tput_per_gpu_tok_s"): (+4.2, +4.2, -13.9, +1.3),
    (QWEN, "request_throughput_req_s"): (+6.3, +6.3, +2.2, -3.2),
    (QWEN, "output_token_throughput_tok_s"): (+6.7, +6.7, +2.5, -2.9),
    (QWEN, "mean_ttft_ms"): (-23.9, -23.9, -22.9, -16.0),
    (QWEN, "median_ttft_ms"): (-63.8, -63.8, -63.3, -60.0),
    ("external", "pr9856 8B TP2 A100"): (-7.2, +17.0, +2.5, +0.0),
    ("external", "build9513 70B TP4 H200"): (-10.8, +2.5, +2.5, -3.3),
    ("external", "build9513 Mixtral TP2 H200"): (-2.7, +11.8, +3.2, +7.2),
}
FORMS = ("none", "host", "all_reduce", "straggler")


def test_fitted_sizes(priced):
    """Fitted on the two 70B TP 4 rows: 2.17 ms per step, 13.5 µs per all-reduce, 13.6 %
    of the GPU time (2.20 ms, 13.7 µs, 13.8 % before V0's eager prefill counted its TP
    collectives: the H100 row's prefill now lasts its launches, 0.4 % of the batch)."""
    assert priced["host"][0] == pytest.approx(2.17e-3, rel=0.01)
    assert priced["all_reduce"][0] == pytest.approx(13.5e-6, rel=0.01)
    assert priced["straggler"][0] == pytest.approx(0.136, abs=0.002)


@pytest.mark.parametrize("key", list(EXPECTED), ids=[f"{c[:24]}:{q}" for c, q in EXPECTED])
def test_every_tp_row_under_each_form(priced, key):
    """The TP > 1 rows before and after each form (docs/fidelity.md's table)."""
    got = [priced[form][1][key] for form in FORMS]
    assert got == pytest.approx(list(EXPECTED[key]), abs=0.15)


def test_no_form_passes(priced):
    """Each form leaves a row of the fitted builds (Mixtral TP 2, same perf-benchmark
    builds) or another held-out family worse by more than its run-to-run noise (~0.4 %,
    cases.yaml's second A100 copy): the bar a term must pass to ship."""
    base = priced["none"][1]
    mixtral = [(f"{PERF}a100", "mixtral8x7B_tp2 median_ms"),
               (f"{PERF}h100", "mixtral8x7B_tp2 median_ms")]
    for form in ("host", "all_reduce", "straggler"):
        errs = priced[form][1]
        worse = [k for k in mixtral if abs(errs[k]) > abs(base[k]) + 2.0]
        assert worse, form
    # the all-reduce wait that closes 70B TP 4 on the H100 cannot exist at TP 8 there
    assert priced["all_reduce"][1][(OSS, "1k/1k c=4 tpot_ms")] > 30
    # the straggler fraction over-prices the prefill-heavy rows
    assert priced["straggler"][1][(TRT, "llama70B_tp4_in2048 first_token_latency_ms")] > 25

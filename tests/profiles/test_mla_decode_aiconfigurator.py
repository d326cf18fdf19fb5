"""MLA decode attention on H200 and B200 (``efficiency.attention_decode_mla``) against the
kernel tables it was fitted to.

Kernel tables: NVIDIA's aiconfigurator (ai-dynamo/aiconfigurator at 095f58a5),
``aic-core/src/aiconfigurator_core/systems/data/{h200_sxm,b200_sxm}/mla/sglang/0.5.10/
generation_mla_perf.parquet``: SGLang 0.5.10's MLA decode layer (RadixAttention forward,
the new token's latent KV written, absorbed q) with the backend SGLang picks for
DeepSeek-V3 (H200: ``fa3``, FlashAttention 3; B200: ``trtllm_mla``), timed in a CUDA graph by
``collector/sglang/collect_mla.py``: ``num_heads`` the heads per GPU (16 = DeepSeek-V3's
128 at ``tp_size`` 8), ``step`` + 1 the context, ``latency`` ms per layer. Rows below: bf16
KV, 16 heads, in µs rounded to 0.1 µs. Fitted to the 100 rows of context >= 128 (t =
launch_s + max(flops / (bf16 peak x compute), bytes / (HBM x memory)), mean |log error|);
``compute`` kept at FlashMLA's 0.667 (no row is compute-bound). Held out: the 32-head
(TP 4) rows. Since 2026-12-07 the fit has a third constant, ``seq_s``, the kernel's time per
decoding sequence and layer (on the memory side), refitted with ``launch_s`` and ``memory`` to
the same rows (benchmarks/calibration/mla_decode_per_seq.py), and the H100 entry is fitted the
same way to ``h100_sxm/mla/sglang/0.5.10`` (fa3), replacing FlashMLA's H800 rates.
"""

from __future__ import annotations

import pytest

from capsim.common.errors import ScenarioError
from capsim.cost.describe import describe_step
from capsim.cost.pricer import StepPricer
from capsim.profiles.hardware import HardwareProfile, load_hardware
from capsim.profiles.models import load_model

#: (batch, context) -> µs, H200, FA3, 16 heads, bf16 KV.
H200_US = {(1, 1024): 16.4, (1, 4096): 18.7, (1, 16384): 24.7, (8, 1024): 17.6,
           (8, 4096): 24.6, (8, 16384): 52.2, (64, 1024): 35.3, (64, 4096): 89.7,
           (64, 16384): 292.4, (256, 1024): 95.0, (256, 4096): 297.3}
#: The same on B200, trtllm_mla.
B200_US = {(1, 1024): 14.6, (1, 4096): 14.6, (1, 16384): 20.7, (8, 1024): 14.5,
           (8, 4096): 18.6, (8, 16384): 45.5, (64, 1024): 20.6, (64, 4096): 70.7,
           (64, 16384): 231.4, (256, 1024): 71.1, (256, 4096): 228.5}
#: The same on H100 SXM (NVIDIA H100 80GB HBM3), fa3.
H100_US = {(1, 1024): 16.5, (1, 4096): 19.4, (1, 16384): 25.4, (8, 1024): 17.7,
           (8, 4096): 26.3, (8, 16384): 72.4, (64, 1024): 43.7, (64, 4096): 120.2,
           (64, 16384): 419.6, (256, 1024): 126.8, (256, 4096): 422.6}
#: 256 and 1,024 sequences of 512 keys (``step`` 511), µs, per GPU: where the per-sequence
#: time shows (the wide ShareGPT decode of issue 30 reads ~400 keys a sequence).
WIDE_US = {"h200-sxm": (60.5, 207.0), "b200": (44.3, 130.1), "h100-sxm": (75.6, 263.3)}


def _layer_us(hw: str | HardwareProfile, batch: int, context: int) -> float:
    """capsim's µs for one layer's decode attention of DeepSeek-V3 at TP 8."""
    d = describe_step("deepseek-v3", hw, 8, decode_batch=batch, context=context,
                      quantization="fp8_block", engine="sglang")
    row = next(o for o in d["operators"] if o["name"] == "attention_decode")
    return row["seconds"] / row["count"] * 1e6


def _without_seq_s(hw: str) -> HardwareProfile:
    """``hw`` with the MLA decode entry's per-sequence time removed (the bandwidth-only form)."""
    p = load_hardware(hw)
    mla = p.efficiency.attention_decode_mla.model_copy(update={"seq_s": 0.0})
    return p.model_copy(update={"efficiency": p.efficiency.model_copy(
        update={"attention_decode_mla": mla})})


@pytest.mark.parametrize("hw, memory, launch_us, seq_ns", [
    ("h200-sxm", 0.895, 15.77, 34.5), ("b200", 0.706, 12.34, 7.3),
    ("h100-sxm", 0.878, 15.57, 24.9)])
def test_entries_are_the_fit(hw, memory, launch_us, seq_ns):
    mla = load_hardware(hw).efficiency.attention_decode_mla
    assert (mla.compute, mla.memory) == (0.667, memory)
    assert mla.launch_s * 1e6 == pytest.approx(launch_us)
    assert mla.seq_s * 1e9 == pytest.approx(seq_ns)


def test_long_context_streams_at_the_fitted_fraction():
    """Where the latent KV dominates the table itself gives the memory term: H200 batch 16
    at 131,072 keys reads 16 x 131,072 x 576 x 2 B = 2.416 GB in 557.7 µs, 0.90 of 4.8 TB/s
    (FlashMLA's README: 0.896 on H800); B200 424.2 µs, 0.74 of 7.7 TB/s."""
    gb = 16 * 131072 * 576 * 2 / 1e9
    assert gb / 557.7e-6 / 4800 == pytest.approx(0.90, abs=0.005)
    assert gb / 424.2e-6 / 7700 == pytest.approx(0.74, abs=0.005)


@pytest.mark.parametrize("hw, table, worst", [
    ("h200-sxm", H200_US, 0.19), ("b200", B200_US, 0.31), ("h100-sxm", H100_US, 0.14)])
def test_pricer_reproduces_table_rows(hw, table, worst):
    """All 100 fitted rows: H200 median |error| 3.1 %, -21 ... +41 % (3.1 %, -40 ... +20 %
    before seq_s); B200 7.5 %, -31 ... +47 % (7.1 %, -35 ... +43 %); H100 3.4 %, -14 ... +41 %
    (FlashMLA's H800 rates before: 5.5 %, -29 ... +28 %). These rows within ``worst`` (H200
    -18 ... +4 %, B200 -24 ... +30 %, H100 -13 ... +9 %)."""
    errs = {k: _layer_us(hw, *k) / t - 1 for k, t in table.items()}
    assert all(abs(e) <= worst for e in errs.values()), errs
    assert errs[(64, 16384)] == pytest.approx(0.0, abs=0.03)


@pytest.mark.parametrize("hw", ["h200-sxm", "b200", "h100-sxm"])
def test_wide_batches_at_short_context(hw):
    """The per-sequence term at two batch sizes against the table (aiconfigurator 095f58a5,
    <gpu>/mla/sglang/0.5.10/generation_mla_perf.parquet, 16 heads, bf16 KV, step 511):
    256 and 1,024 sequences of 512 keys within 6.5 % (H200 -0.2 / -6.1 %, B200 -4.0 / +2.2 %,
    H100 -1.7 / -4.9 %)."""
    for batch, table_us in zip((256, 1024), WIDE_US[hw]):
        assert _layer_us(hw, batch, 512) / table_us - 1 == pytest.approx(0.0, abs=0.065)


@pytest.mark.parametrize("hw, short", [("h200-sxm", 0.22), ("h100-sxm", 0.14)])
def test_fa3_wide_step_needs_the_per_sequence_time(hw, short):
    """On Hopper (fa3) the bandwidth-only form with the same launch and memory is
    ``short`` or more below the table at 1,024 x 512 keys (H200: 160 µs against 207.0, H100 225 against 263.3: the
    ~45 µs a layer of per-sequence work the term adds back)."""
    assert _layer_us(_without_seq_s(hw), 1024, 512) / WIDE_US[hw][1] - 1 < -short


def test_per_sequence_time_is_each_gpus_share_under_dp_attention():
    """Data-parallel attention: each GPU attends for attention_tp / TP of the step's
    sequences, so it pays that share of the per-sequence time (as of the KV bytes)."""
    v3, h200 = load_model("deepseek-v3"), load_hardware("h200-sxm")
    seq_s = h200.efficiency.attention_decode_mla.seq_s
    for attention_tp in (1, 2):
        args = dict(dp_attention=True, expert_parallel=True, attention_tp=attention_tp,
                    engine="sglang")
        with_term = StepPricer(v3, h200, 8, **args).terms.attn_d[2]
        without = StepPricer(v3, _without_seq_s("h200-sxm"), 8, **args).terms.attn_d[2]
        assert with_term - without == pytest.approx(61 * seq_s * attention_tp / 8)


def test_seq_s_outside_decode_attention_is_refused(tmp_path, repo_root):
    """A per-sequence time on a prefill entry would price nothing: one line naming the file,
    the entry's YAML path and where seq_s belongs."""
    text = (repo_root / "capsim/profiles/data/hardware/h200-sxm.yaml").read_text()
    entry = "  attention_prefill_mla:          # aiconfigurator SGLang 0.5.10 MLA prefill, fa3 (sources)\n"
    assert entry in text
    path = tmp_path / "h200.yaml"
    path.write_text(text.replace(entry, entry + "    seq_s: 3.0e-08\n"))
    with pytest.raises(ScenarioError) as err:
        load_hardware(str(path))
    assert err.value.file == str(path)
    assert err.value.path == "efficiency.attention_prefill_mla"
    assert "seq_s prices decode attention only" in err.value.message
    assert "attention_decode_mla" in err.value.message

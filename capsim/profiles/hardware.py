"""GPU hardware profiles: datasheet numbers, calibrated efficiencies, prices.

A profile is data, not code: one YAML file per SKU under
``capsim/profiles/data/hardware/`` (also reachable as ``hardware/`` at the repo top).
Every number in a shipped profile carries a source in its ``sources`` mapping — a
datasheet URL, the measured file it was calibrated from, or the word
"estimate" with a reason (``tests/profiles/test_hardware.py`` holds them to it). A
user's own profile may leave numbers unsourced: it loads, and a warning on the
``capsim`` logger names the file and the fields without a source.

Public API:
    HardwareProfile          pydantic model of one GPU SKU
    Efficiency               achieved ÷ peak factors (calibration inputs)
    Curve, GemmCurve, KernelEfficiency   per-operator-class factors inside Efficiency
    Calibration              provenance and error figures of a calibrated profile
    Derivation               provenance of efficiencies derived (not fitted) from another profile
    OperatorRates            the numbers one pricer reads, resolved once (HardwareProfile.operator_rates)
    load_hardware(name_or_path) -> HardwareProfile
    list_hardware() -> list[HardwareProfile]
    hardware_names() -> list[str]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import Field, ValidationError, field_validator, model_validator

from capsim.common.errors import ScenarioError
from capsim.common.schema import MAX_SECONDS, Float, Int, StrictModel
from capsim.profiles.all_reduce_table import AllReduceTable
from capsim.profiles.moe_runners import CURVE_OF, runner_curve_error
from capsim.profiles.files import (FittedTo, check_sources, is_path, packaged_file,
                                   packaged_names, read_yaml_mapping,
                                   scenario_error_from_validation)
from capsim.profiles.provenance import (Calibration, ClassError, Derivation,  # noqa: F401
                                        ErrorFigures, SameDie, check_derivation_sources)

#: Numeric formats a profile may quote peak Tensor-Core throughput for (``fp4``: the
#: NVFP4 / MXFP4 block-scaled rate of Blackwell's tensor cores).
DType = Literal["bf16", "fp16", "fp8", "int8", "fp4"]

#: Profile fields that hold numbers and therefore need an entry in ``sources``.
_SOURCED_FIELDS = (
    "peak_flops_per_s",
    "hbm_bytes",
    "memory_total_gib",
    "num_sms",
    "max_threads_per_sm",
    "compute_capability",
    "hbm_bandwidth_bytes_per_s",
    "nvlink_bandwidth_bytes_per_s",
    "nvlink_latency_s",
    "pcie_bandwidth_bytes_per_s",
    "pcie_latency_s",
    "gpus_per_node",
    "scale_out_link",
    "custom_all_reduce",
    "all_reduce_tables",
    "efficiency",
    "step_overhead_s",
    "price_per_gpu_hour_usd",
)

_FOLDER = "hardware"

#: Ceiling on one GPU's device memory (bytes): twice the largest announced, NVIDIA's Rubin
#: Ultra with 1 TB of HBM4E (GTC 2025 keynote). Above it a profile or override is a typo
#: (``1e9`` GiB), and the KV pool's block list would not fit in the host's memory.
MAX_DEVICE_MEMORY_BYTES = 2 * 2**40



class Curve(StrictModel):
    """An efficiency as a function of a count (tokens, keys per query).

    ``e`` is piecewise linear in ``log(count)`` between the knots and flat
    outside them (:func:`capsim.cost.operators.curve_efficiency` evaluates it).

    Attributes:
        tokens: knot counts, strictly increasing, >= 1.
        efficiency: e at each knot, in (0, 1].
    """

    tokens: list[Int] = Field(min_length=1)
    efficiency: list[Float] = Field(min_length=1)

    @model_validator(mode="after")
    def _check_knots(self) -> "Curve":
        if len(self.tokens) != len(self.efficiency):
            raise ValueError(f"tokens ({len(self.tokens)}) and efficiency "
                             f"({len(self.efficiency)}) must have the same length")
        if self.tokens[0] < 1 or any(b <= a for a, b in zip(self.tokens, self.tokens[1:])):
            raise ValueError(f"tokens must be >= 1 and strictly increasing, got {self.tokens}")
        bad = [e for e in self.efficiency if not 0.0 < e <= 1.0]
        if bad:
            raise ValueError(f"efficiency values must be in (0, 1], got {bad}")
        return self


class GemmCurve(Curve):
    """GEMM efficiency as a function of the tokens in the step (the GEMM's row count).

    A weight matmul of ``n`` rows costs
    ``launch_s + max(flops / peak, bytes / hbm_bandwidth) / e(n)``: the ideal
    roofline divided by an efficiency that depends on ``n`` (small GEMMs reach
    a smaller fraction of either roof, and the roofline's corner is the
    worst fit). ``launch_s`` is the fixed time per GEMM kernel (s), >= 0.
    """

    launch_s: float = Field(0.0, ge=0.0)


#: The engine families of :class:`capsim.profiles.engines.EnginePreset` (``engine``).
EngineFamily = Literal["vllm", "sglang", "tensorrt-llm", "tgi"]


class KernelEfficiency(StrictModel):
    """Roofline factors of one non-GEMM operator class, plus its fixed kernel time.

    ``t = launch_s + max(flops / (peak × compute), bytes / (bandwidth × memory))``;
    ``launch_s`` is per layer (one kernel, or for ``elementwise`` the layer's
    group of norm / RoPE / activation / add kernels). With ``compute_curve``
    (prefill attention), ``compute`` is replaced by ``e(keys per query)``:
    FlashAttention's inner loop over keys is short for a short context, and
    then reaches a small fraction of peak. With ``seq_s`` (decode attention only)
    each decoding sequence adds a fixed time per layer to the memory side:
    ``bytes / (bandwidth × memory) + seq_s × sequences`` (the kernel's per-sequence
    work: its split / tile scheduling and page-table reads, measured in the profiles'
    sources), so ``t = launch_s + max(compute side, memory side)``.
    """

    compute: float = Field(1.0, gt=0.0, le=1.0, description="achieved ÷ peak FLOP/s")
    memory: float = Field(1.0, gt=0.0, le=1.0, description="achieved ÷ peak HBM bytes/s")
    launch_s: float = Field(0.0, ge=0.0, description="fixed time per layer (s)")
    seq_s: float = Field(0.0, ge=0.0, description="decode attention only: fixed time per "
                                                   "decoding sequence and layer (s)")
    compute_curve: Curve | None = Field(
        None, description="attention_prefill only: compute efficiency over the whole number "
                          "of keys each query attends to (Σ pairs ÷ prefill tokens); "
                          "replaces `compute`")


class Efficiency(StrictModel):
    """Fractions of datasheet peak that real kernels reach (calibration inputs).

    The three scalars apply to every operator that has no entry of its own:
    ``t = flops / (peak × compute)`` and ``t = bytes / (bandwidth × memory)``;
    ``interconnect`` scales the tensor-parallel link bandwidth. The optional
    per-operator-class entries (written by ``capsim calibrate``) override them:
    ``gemm`` (QKV / O / MLP / LM-head matmuls, a curve over tokens),
    ``gemm_fp8`` (the same matmuls with fp8 weights and activations, at the fp8
    peak; without it fp8 matmuls use ``gemm`` at the fp8 peak),
    ``attention_prefill``, ``attention_decode`` and ``elementwise`` (norms,
    RoPE, activation, residual adds and the embedding gather; memory only).
    ``fused_moe``: a mixture-of-experts layer's fused-MoE call (top-k, block alignment,
    the two grouped GEMMs, the activation and the top-k sum; fitted to published kernel
    times): ``launch_s`` is its fixed time per layer, replacing the two GEMM launches the
    routed experts get without it, and ``memory`` caps the GEMM curve's efficiency for
    the experts' weight streaming (``compute`` unused).
    ``attention_decode_fp8``: decode attention over an fp8 KV cache, per engine family
    (``vllm``, ``sglang``, ``tensorrt-llm``, ``tgi``), because each runs its own fp8
    kernel (vLLM: FlashAttention 3 in full fp8 on Hopper, FlashInfer on Blackwell); an
    engine without an entry prices fp8 KV with ``attention_decode`` at the fp8 bytes.
    ``attention_decode_fp8_head_dim``: ``attention_decode_fp8`` for models of one head_dim,
    per engine family and head_dim (``{vllm: {64: ...}}``), where the engine's fp8 kernel
    runs another configuration at that head_dim (FlashAttention 3: its fp8 decode tiles
    differ by head_dim); a model of another head_dim takes ``attention_decode_fp8``.
    ``fused_moe_mxfp4``: the same terms as ``fused_moe`` for routed experts stored in
    MXFP4 (gpt-oss), per engine family, because the engine runs its own MXFP4 MoE path
    there, not the fused-MoE call ``fused_moe`` was measured on (vLLM: OpenAI's
    triton_kernels ``matmul_ogs`` on Hopper and ROCm, FlashInfer's TRT-LLM MoE on
    Blackwell; ``vllm/model_executor/layers/fused_moe/oracle/mxfp4.py``). An engine
    without an entry, or run with ``moe_backend: marlin``, prices them with ``fused_moe``.
    ``grouped_gemm_fp8``: the fused-MoE call's grouped GEMMs with fp8 (W8A8) routed experts,
    a curve over the rows each expert multiplies (``n·k / experts hit``, the "tokens per
    expert"), measured on the fused-MoE kernel itself: where the experts compute in fp8 it
    replaces the layer matmuls' curve and the ``fused_moe.memory`` cap for them; the call's
    fixed time per MoE layer is the curve's ``launch_s`` where it is > 0 (measured with the
    curve), else ``fused_moe.launch_s``. Small m: the expert weights streamed at a
    fraction of HBM bandwidth; large m: the kernel falls far below the dense GEMM's
    efficiency (the measured kernel tables in the profiles' sources).
    ``attention_decode_mla``: decode attention of an MLA model (DeepSeek-V2/V3) over its
    latent KV, as the MLA decode kernel (FlashMLA) runs it: it replaces
    ``attention_decode`` (and ``attention_decode_fp8``) for MLA models only; its ``seq_s``
    is the kernel's time per decoding sequence and layer (measured where the profile says).
    ``attention_prefill_mla``: prefill attention of an MLA model (the engines run it as
    multi-head attention over the up-projected keys and values, 192-wide q·k, 128-wide v,
    with their own kernel: FlashAttention 3 on Hopper, TRT-LLM's on Blackwell): it replaces
    ``attention_prefill`` for MLA models only, ``compute_curve`` over keys per query as there.
    ``fused_moe_runners``: the fused-MoE call of one named MoE runner (the engines' own names:
    SGLang's ``--moe-runner-backend``, vLLM's ``--moe-backend``), per expert format
    (``fp8_block``, ``mxfp4``): a ``grouped_gemm_fp8``-style curve over rows per expert with
    its own ``launch_s``, measured on that runner's kernel. It replaces the experts' curve,
    cap and fixed time when the scenario's ``engine.moe_backend`` names the runner and the
    model's experts are of that format (else the generic entries apply).
    ``gemm_fp8_block``: the layer matmuls (the shared expert and dense MLP included) with
    block-scaled fp8 weights (``fp8_block``: DeepSeek-V3, Qwen3-FP8), which the engines run
    with DeepGEMM on Hopper; without it they take ``gemm_fp8``.
    ``gemm_fp8_engine``: ``gemm_fp8`` as one engine family runs it, per family: the
    engine's own fp8 linear measured whole (vLLM: the dynamic activation quant kernel and
    ``cutlass_scaled_mm``, timed together), replacing ``gemm_fp8`` for that engine's
    per-channel / per-tensor fp8 layer matmuls; an engine without an entry takes ``gemm_fp8``.
    ``grouped_gemm_fp8_engine``: ``grouped_gemm_fp8`` as one engine build runs it, keyed
    ``<family>-<version>`` (``sglang-0.5.14``): the same fused-MoE call timed under that
    build (its kernel code, tuned configs and Triton); an engine preset naming the key
    (its ``grouped_gemm_fp8_engine``) prices its fp8 routed experts with it, any other
    preset, or a GPU profile without the key, with ``grouped_gemm_fp8``.
    """

    compute: float = Field(gt=0.0, le=1.0, description="achieved ÷ peak Tensor-Core FLOP/s")
    memory: float = Field(gt=0.0, le=1.0, description="achieved ÷ peak HBM bytes/s")
    interconnect: float = Field(
        1.0, gt=0.0, le=1.0, description="all-reduce bus bandwidth ÷ link bandwidth per direction"
    )
    gemm: GemmCurve | None = None
    gemm_fp8: GemmCurve | None = None
    attention_prefill: KernelEfficiency | None = None
    attention_decode: KernelEfficiency | None = None
    elementwise: KernelEfficiency | None = None
    fused_moe: KernelEfficiency | None = None
    attention_decode_fp8: dict[EngineFamily, KernelEfficiency] | None = None
    attention_decode_fp8_head_dim: dict[EngineFamily, dict[Int, KernelEfficiency]] | None = None
    fused_moe_mxfp4: dict[EngineFamily, KernelEfficiency] | None = None
    grouped_gemm_fp8: GemmCurve | None = None
    attention_decode_mla: KernelEfficiency | None = None
    gemm_fp8_block: GemmCurve | None = None
    attention_prefill_mla: KernelEfficiency | None = None
    fused_moe_runners: dict[str, dict[str, GemmCurve]] | None = None
    gemm_fp8_engine: dict[EngineFamily, GemmCurve] | None = None
    grouped_gemm_fp8_engine: dict[str, GemmCurve] | None = None

    @field_validator("grouped_gemm_fp8_engine")
    @classmethod
    def _check_build_keys(cls, curves: dict[str, GemmCurve] | None
                          ) -> dict[str, GemmCurve] | None:
        """A key is an engine build, ``<family>-<version>``, that a preset can name."""
        families = get_args(EngineFamily)
        for key in curves or {}:
            family, _, version = key.rpartition("-")
            if family not in families or not version:
                raise ValueError(f"{key!r} is not an engine build (valid: <family>-<version>, "
                                 f"family one of {', '.join(families)}; e.g. sglang-0.5.14)")
        return curves

    def grouped_curve(self, build: str | None) -> GemmCurve | None:
        """The fused-MoE curve of fp8 routed experts under engine ``build`` (a preset's
        ``grouped_gemm_fp8_engine``): its ``grouped_gemm_fp8_engine`` entry where the
        profile measured that build, else ``grouped_gemm_fp8`` (None: neither)."""
        own = (self.grouped_gemm_fp8_engine or {}).get(build) if build is not None else None
        return own if own is not None else self.grouped_gemm_fp8

    @field_validator("attention_decode_fp8_head_dim", mode="before")
    @classmethod
    def _head_dim_keys(cls, table: Any) -> Any:
        """A head_dim key written back as text (JSON-mode dumps, ``capsim calibrate``'s
        profile) is read as the integer it spells."""
        if not isinstance(table, dict):
            return table
        return {engine: {int(k) if isinstance(k, str) and k.isdigit() else k: v
                         for k, v in dims.items()} if isinstance(dims, dict) else dims
                for engine, dims in table.items()}

    @field_validator("attention_prefill", "attention_prefill_mla", "elementwise", "fused_moe")
    @classmethod
    def _check_no_seq_s(cls, k: KernelEfficiency | None) -> KernelEfficiency | None:
        """``seq_s`` is a decode-attention term; anywhere else it would price nothing."""
        if k is not None and k.seq_s:
            raise ValueError("seq_s prices decode attention only (valid: 0 here; set it on "
                             "attention_decode, attention_decode_mla or attention_decode_fp8)")
        return k

    @field_validator("fused_moe_runners")
    @classmethod
    def _check_runner_keys(cls, runners: dict[str, dict[str, GemmCurve]] | None
                           ) -> dict[str, dict[str, GemmCurve]] | None:
        """A runner or format key no scenario can reach is a typo, not a curve to ignore."""
        for runner, curves in (runners or {}).items():
            for expert_format in [None, *curves]:
                why = runner_curve_error(runner, expert_format)
                if why:
                    at = runner if expert_format is None else f"{runner}.{expert_format}"
                    raise ValueError(f"{at}: {why}")
        return runners

    def runner_curve(self, moe_backend: str, expert_format: str) -> GemmCurve | None:
        """``fused_moe_runners[moe_backend][expert_format]``, a runner of the same kernels
        under its measured twin's name (:data:`~capsim.profiles.moe_runners.CURVE_OF`; None:
        the profile did not measure that runner with experts of that format)."""
        if not self.fused_moe_runners:
            return None
        key = CURVE_OF.get(moe_backend, moe_backend)
        return self.fused_moe_runners.get(key, {}).get(expert_format)

    def matmul_curve(self, weight_dtype: str, block_scaled: bool = False,
                     engine: str | None = None) -> GemmCurve | None:
        """The GEMM curve weight matmuls of ``weight_dtype`` use: ``gemm_fp8_block`` for
        block-scaled fp8 weights (``block_scaled``) when the profile has one, else
        ``engine``'s ``gemm_fp8_engine`` entry for fp8 weights where there is one, else
        ``gemm_fp8`` when the profile has it, else ``gemm`` (None: the scalar factors)."""
        if weight_dtype == "fp8":
            if block_scaled and self.gemm_fp8_block is not None:
                return self.gemm_fp8_block
            own = (self.gemm_fp8_engine or {}).get(engine) if engine is not None else None
            if own is not None:
                return own
            if self.gemm_fp8 is not None:
                return self.gemm_fp8
        return self.gemm

    def kernel(self, op_class: str) -> KernelEfficiency:
        """The factors of ``attention_prefill`` / ``attention_decode`` / ``elementwise``;
        the scalars (no launch time) when the profile has no entry for the class."""
        own = getattr(self, op_class)
        return own if own is not None else KernelEfficiency(compute=self.compute,
                                                            memory=self.memory)

    def moe_kernel(self, expert_format: str, engine: str | None = None,
                   moe_backend: str = "auto") -> KernelEfficiency | None:
        """The fused-MoE terms the routed experts run at: ``engine``'s
        ``fused_moe_mxfp4`` entry for MXFP4 experts under ``moe_backend`` ``auto`` where
        the profile has one, else ``fused_moe`` (None: neither; the experts then get two
        GEMM launches). ``marlin``: vLLM's Marlin MoE (``--moe-backend marlin``, formerly
        ``VLLM_MXFP4_USE_MARLIN=1``), whose align + two grouped GEMMs + activation + sum
        are the call ``fused_moe`` was fitted to."""
        if (expert_format == "mxfp4" and moe_backend == "auto" and self.fused_moe_mxfp4
                and engine is not None):
            own = self.fused_moe_mxfp4.get(engine)
            if own is not None:
                return own
        return self.fused_moe

    def decode_attention(self, kv_cache_dtype_bytes: int, engine: str | None = None,
                         head_dim: int | None = None) -> KernelEfficiency:
        """The factors decode attention runs at: for a 1-byte (fp8) KV cache, ``engine``'s
        ``attention_decode_fp8_head_dim`` entry for the model's ``head_dim`` where the
        profile has one, else its ``attention_decode_fp8`` entry where there is one; else
        :meth:`kernel` of ``attention_decode``."""
        if kv_cache_dtype_bytes == 1 and engine is not None:
            by_dim = (self.attention_decode_fp8_head_dim or {}).get(engine, {})
            own = by_dim.get(head_dim) if head_dim is not None else None
            if own is None and self.attention_decode_fp8:
                own = self.attention_decode_fp8.get(engine)
            if own is not None:
                return own
        return self.kernel("attention_decode")


@dataclass(frozen=True, slots=True)
class OperatorRates:
    """Everything a step pricer reads of a profile, resolved once for its dtypes and engine
    (:meth:`HardwareProfile.operator_rates`): peaks in FLOP/s, bandwidth in bytes/s, the
    GEMM curves (None: the scalar ``compute`` / ``memory`` factors) and each operator
    class's :class:`KernelEfficiency`.

    ``matmul_*``: the layer matmuls at their format's compute dtype; ``expert_*``: the
    routed experts at theirs; ``lm_head_*``: the LM head, 16-bit in every format;
    ``attention_peak_flops_per_s``: the bf16 (else fp16) peak attention runs at;
    ``fused_moe``: :meth:`Efficiency.moe_kernel` (None: two GEMM launches per MoE layer);
    ``expert_grouped_curve``: the named MoE runner's curve for the experts' format
    (:meth:`Efficiency.runner_curve`), else ``grouped_gemm_fp8`` when the routed experts
    compute in fp8 (None: the experts take ``expert_curve`` capped at ``fused_moe.memory``).
    """

    hbm_bandwidth_bytes_per_s: float
    compute: float
    memory: float
    matmul_peak_flops_per_s: float
    expert_peak_flops_per_s: float
    lm_head_peak_flops_per_s: float
    attention_peak_flops_per_s: float
    matmul_curve: GemmCurve | None
    expert_curve: GemmCurve | None
    lm_head_curve: GemmCurve | None
    attention_prefill: KernelEfficiency
    attention_decode: KernelEfficiency
    elementwise: KernelEfficiency
    fused_moe: KernelEfficiency | None
    step_overhead_s: float
    expert_grouped_curve: GemmCurve | None = None


class CustomAllReduceCost(StrictModel):
    """An engine's peer-to-peer all-reduce kernels on this GPU's NVLink
    (:class:`capsim.profiles.engines.TpAllReduce`, :mod:`capsim.cost.operators`):

    - one-shot: ``one_shot_latency_s + (TP − 1) × bytes / (link BW × one_shot_link_efficiency)``
      (every GPU reads the whole message from each peer and reduces it);
    - two-shot: ``two_shot_latency_s + 2(TP − 1)/TP × bytes / (link BW ×
      two_shot_link_efficiency)`` (reduce-scatter, then all-gather, with a barrier between).
    """

    one_shot_latency_s: float = Field(gt=0)
    one_shot_link_efficiency: float = Field(gt=0, le=1)
    two_shot_latency_s: float = Field(gt=0)
    two_shot_link_efficiency: float = Field(gt=0, le=1)


class HardwareProfile(StrictModel):
    """One GPU SKU as the roofline and the KV sizer see it.

    Units are in the field names. Bandwidths are per GPU and per direction.
    ``nvlink_bandwidth_bytes_per_s`` and ``nvlink_latency_s`` are both ``None``
    for a PCIe-only card; tensor-parallel traffic then goes over PCIe. They hold
    the scale-up link whatever its vendor name (AMD Infinity Fabric too);
    ``scale_up_link`` names it.
    ``hbm_bytes`` is the device memory (HBM or GDDR) as the datasheet's
    "GB" read as GiB; each YAML says why. ``memory_total_gib`` is what the
    engines see (``torch.cuda.mem_get_info`` total, e.g. 79.19 GiB on an H100 80GB:
    the driver reserves the rest); KV sizing uses it, and ``hbm_bytes`` when it is
    not given. ``num_sms``: streaming multiprocessors (vLLM sizes its sampler's
    top-k/top-p scratch by them). ``max_threads_per_sm``: resident threads per SM (CUDA
    compute capability); with ``num_sms`` it sizes the CUDA context's local-memory
    reservation (:mod:`capsim.kv.memory`). ``gpus_per_node``: GPUs in one NVLink domain (a
    server); ``scale_out_link``: the link profile (``capsim/profiles/data/links``) between
    nodes, one port per GPU. A replica's GPUs fill nodes in order; expert-parallel and
    pipeline traffic between GPUs of different nodes goes over ``scale_out_link``. Both
    None: every GPU of a replica shares one NVLink (or PCIe) domain.
    ``custom_all_reduce``: the cost terms of an engine's own all-reduce kernels over the
    NVLink (:class:`CustomAllReduceCost`); None: engines that have one are priced with
    NCCL's ring here too. ``all_reduce_tables``: measured all-reduce latencies of engines
    whose kernels differ from that family, keyed by the engine's kernel name (e.g.
    ``trtllm_auto``; :class:`~capsim.profiles.all_reduce_table.AllReduceTable`), which an
    engine preset names (``tp_all_reduce.table``). ``platform``: the software stack the engines run on, ``cuda``
    (NVIDIA) or ``rocm`` (AMD): kernels that exist on one only (vLLM's Marlin MoE) are
    refused on the other. ``compute_capability``: an NVIDIA GPU's CUDA compute capability,
    ``"9.0"`` (Hopper), ``"10.0"`` (B200): kernels built for one architecture family only
    (vLLM's TRT-LLM-gen MoE, Blackwell's 10.x) are refused on the others; None (a ROCm GPU,
    or a profile that does not say) checks nothing.
    """

    name: str = Field(min_length=1)
    display_name: str = Field(min_length=1)
    platform: Literal["cuda", "rocm"] = "cuda"
    peak_flops_per_s: dict[DType, float] = Field(min_length=1)
    hbm_bytes: Int = Field(gt=0)
    memory_total_gib: float | None = Field(None, gt=0)
    num_sms: Int | None = Field(None, gt=0)
    max_threads_per_sm: Int | None = Field(None, gt=0)
    compute_capability: str | None = Field(None, examples=['"9.0"', '"10.0"'])
    hbm_bandwidth_bytes_per_s: float = Field(gt=0)
    scale_up_link: str = Field("", description="the GPU-to-GPU link tensor parallelism uses "
                                                "(NVLink generation, Infinity Fabric, PCIe)")
    nvlink_bandwidth_bytes_per_s: float | None = Field(None, gt=0)
    # bounded: 1e30 s passed and broke the run's timeline (IndexError traceback)
    nvlink_latency_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    pcie_bandwidth_bytes_per_s: float = Field(gt=0)
    pcie_latency_s: float = Field(gt=0, le=MAX_SECONDS)
    gpus_per_node: Int | None = Field(None, gt=0)
    scale_out_link: str | None = Field(None, min_length=1)
    custom_all_reduce: CustomAllReduceCost | None = None
    all_reduce_tables: dict[str, AllReduceTable] = Field(default_factory=dict)
    efficiency: Efficiency
    step_overhead_s: float = Field(ge=0, le=MAX_SECONDS)
    price_per_gpu_hour_usd: float = Field(gt=0)
    sources: dict[str, str] = Field(default_factory=dict)
    fitted_to: FittedTo = Field(default_factory=dict)
    calibration: Calibration | None = None
    derivation: Derivation | None = None
    notes: str = ""

    @field_validator("compute_capability", mode="before")
    @classmethod
    def _capability_text(cls, value: Any) -> Any:
        """``MAJOR.MINOR``; ``9.0`` written unquoted is YAML's float, read as ``"9.0"``."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = f"{value:.1f}" if round(value, 1) == value else repr(value)   # 8.65: refused
        if isinstance(value, str) and not re.fullmatch(r"[1-9][0-9]?\.[0-9]", value):
            raise ValueError(f"not MAJOR.MINOR (valid: e.g. "
                             f'"9.0" for Hopper, "10.0" for the B200; NVIDIA\'s CUDA GPUs list)')
        return value

    @model_validator(mode="after")
    def _check_consistency(self) -> "HardwareProfile":
        for dtype, flops in self.peak_flops_per_s.items():
            if flops <= 0:
                raise ValueError(f"peak_flops_per_s.{dtype} must be > 0, got {flops}")
        if self.hbm_bytes > MAX_DEVICE_MEMORY_BYTES:
            raise ValueError(f"hbm_bytes {self.hbm_bytes:,} ({self.hbm_bytes / 2**30:,.0f} GiB) "
                             f"is more than any GPU holds (valid: <= "
                             f"{MAX_DEVICE_MEMORY_BYTES:,}, {MAX_DEVICE_MEMORY_BYTES // 2**30:,} "
                             f"GiB)")
        if self.memory_total_gib is not None and \
                self.memory_total_gib > self.hbm_bytes / 2**30:
            raise ValueError(f"memory_total_gib {self.memory_total_gib:g} is more than the "
                             f"device memory, hbm_bytes = {self.hbm_bytes / 2**30:g} GiB: the "
                             f"engines see the device memory less the driver's reserve (valid: "
                             f"0 < memory_total_gib <= {self.hbm_bytes / 2**30:g}; for a "
                             f"larger GPU set hbm_bytes too)")
        if self.compute_capability is not None and self.platform != "cuda":
            raise ValueError(f"compute_capability is NVIDIA's (CUDA); a {self.platform} GPU "
                             f"has none (valid: null, or platform cuda)")
        if (self.gpus_per_node is None) != (self.scale_out_link is None):
            raise ValueError("gpus_per_node and scale_out_link must both be set (a node of "
                             "that many GPUs, joined by that link) or both be null")
        if (self.nvlink_bandwidth_bytes_per_s is None) != (self.nvlink_latency_s is None):
            raise ValueError(
                "nvlink_bandwidth_bytes_per_s and nvlink_latency_s must both be set "
                "(NVLink card) or both be null (PCIe-only card)"
            )
        if self.derivation is not None:
            d = self.derivation
            unset = [c for c in d.classes + (d.same_die.classes if d.same_die else [])
                     if getattr(self.efficiency, c) is None]
            if unset:
                raise ValueError(f"derivation lists efficiency entries the profile does not "
                                 f"set: {', '.join(unset)}")
            check_derivation_sources(d, self.name)
        return self

    def missing_sources(self) -> list[str]:
        """The numeric fields set without an entry in ``sources``, in field order (none in a
        shipped profile; a user's profile loads with a warning listing them)."""
        return [f for f in _SOURCED_FIELDS if f not in self.sources and _is_set(self, f)]

    # -- derived values ---------------------------------------------------

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype`` (datasheet, no sparsity).

        Raises:
            ScenarioError: the chip has no Tensor-Core rate for ``dtype``
                (e.g. fp8 on an A100); the message lists the ones it has.
        """
        try:
            return self.peak_flops_per_s[dtype]  # type: ignore[index]
        except KeyError:
            valid = ", ".join(sorted(self.peak_flops_per_s))
            raise ScenarioError(
                f"hardware '{self.name}' has no {dtype!r} peak; valid: {valid}"
            ) from None

    def operator_rates(self, matmul_dtype: str, expert_dtype: str, model_dtype: str,
                       kv_cache_dtype_bytes: int, engine: str | None = None,
                       expert_format: str = "", moe_backend: str = "auto",
                       mla: bool = False, block_scaled: bool = False,
                       moe_build: str | None = None, head_dim: int | None = None) -> OperatorRates:
        """The profile's rates for one pricer, in one object (:class:`OperatorRates`).

        Args:
            matmul_dtype, expert_dtype: the compute dtypes of the layer matmuls and of the
                routed experts (:meth:`~capsim.profiles.quantization.QuantFormat.compute_dtype`).
            model_dtype: the model's 16-bit dtype (``bf16`` / ``fp16``), the LM head's.
            kv_cache_dtype_bytes, head_dim: 1 for an fp8 KV cache; the model's head_dim
                (decode attention: :meth:`Efficiency.decode_attention`; None: any).
            engine, expert_format, moe_backend: as :meth:`Efficiency.moe_kernel`; ``engine``
                also picks its own fp8 layer-matmul curve (:meth:`Efficiency.matmul_curve`),
                ``moe_build`` its fp8 experts' curve (:meth:`Efficiency.grouped_curve`).
            mla: the model attends with MLA (decode and prefill attention then take
                ``attention_decode_mla`` and ``attention_prefill_mla`` where there).
            block_scaled: the layer matmuls' weights are block-scaled (:meth:`Efficiency.
                matmul_curve`; the routed experts and the LM head are not affected).

        Raises:
            ScenarioError: the chip has no peak for one of the dtypes (:meth:`peak_flops`;
                asked in the order matmul, attention, experts, LM head).
        """
        eff = self.efficiency
        matmul_peak = self.peak_flops(matmul_dtype)
        attention_peak = self.peak_flops("bf16" if "bf16" in self.peak_flops_per_s else "fp16")
        expert_peak = matmul_peak if expert_dtype == matmul_dtype else self.peak_flops(expert_dtype)
        return OperatorRates(
            hbm_bandwidth_bytes_per_s=self.hbm_bandwidth_bytes_per_s,
            compute=eff.compute, memory=eff.memory,
            matmul_peak_flops_per_s=matmul_peak, expert_peak_flops_per_s=expert_peak,
            lm_head_peak_flops_per_s=self.peak_flops(model_dtype),
            attention_peak_flops_per_s=attention_peak,
            matmul_curve=eff.matmul_curve(matmul_dtype, block_scaled, engine),
            expert_curve=eff.matmul_curve(expert_dtype),
            lm_head_curve=eff.matmul_curve(model_dtype),
            attention_prefill=eff.attention_prefill_mla
            if mla and eff.attention_prefill_mla is not None
            else eff.kernel("attention_prefill"),
            attention_decode=eff.attention_decode_mla
            if mla and eff.attention_decode_mla is not None
            else eff.decode_attention(kv_cache_dtype_bytes, engine, head_dim),
            elementwise=eff.kernel("elementwise"),
            fused_moe=eff.moe_kernel(expert_format, engine, moe_backend),
            step_overhead_s=self.step_overhead_s,
            expert_grouped_curve=eff.runner_curve(moe_backend, expert_format)
            or (eff.grouped_curve(moe_build) if expert_dtype == "fp8" else None))

    @property
    def memory_total_bytes(self) -> int:
        """Device memory the engines see, bytes (``memory_total_gib``, else ``hbm_bytes``)."""
        if self.memory_total_gib is None:
            return self.hbm_bytes
        return int(self.memory_total_gib * 2**30)

    @property
    def has_nvlink(self) -> bool:
        """True if GPUs of this SKU talk over NVLink rather than PCIe."""
        return self.nvlink_bandwidth_bytes_per_s is not None

    @property
    def tp_link_bandwidth_bytes_per_s(self) -> float:
        """Per-direction bandwidth of the link tensor-parallel collectives use."""
        if self.nvlink_bandwidth_bytes_per_s is not None:
            return self.nvlink_bandwidth_bytes_per_s
        return self.pcie_bandwidth_bytes_per_s

    def check_tp_nodes(self, tp: int) -> None:
        """Refuse a tensor-parallel group over part of a node beyond the first
        (``gpus_per_node``; no limit when the profile gives none: one domain).

        Within a node the pricer charges every all-reduce on NVLink (or PCIe); a group of
        whole nodes runs them over ``scale_out_link`` too (the hierarchical all-reduce of
        :mod:`capsim.cost.communication`), as SGLang's ``--tp 16 --nnodes 2`` and vLLM's
        multi-node TP deploy DeepSeek on 2 × 8 H100. Uneven groups (TP 12 on 8-GPU nodes)
        are refused: the engines place ranks node by node and the two-level price assumes
        equal nodes.

        Raises:
            ScenarioError: ``tp`` exceeds ``gpus_per_node`` and is not a multiple of it.
        """
        g = self.gpus_per_node
        if g is not None and tp > g and tp % g:
            raise ScenarioError(
                f"tensor_parallel_size {tp} spans nodes of {g} {self.name} GPUs unevenly: a "
                f"tensor-parallel group across nodes takes whole nodes (its all-reduces "
                f"are priced over NVLink inside each node and {self.scale_out_link} between "
                f"them); valid: at most {g}, or a multiple of {g}")

    @property
    def tp_link_latency_s(self) -> float:
        """Per-hop latency of the tensor-parallel link (NVLink, else PCIe)."""
        if self.nvlink_latency_s is not None:
            return self.nvlink_latency_s
        return self.pcie_latency_s

    def ideal(self) -> "HardwareProfile":
        """Copy with every efficiency 1.0, no per-class entries (nor their derivation),
        no kernel launch times, no step overhead and no custom all-reduce costs or tables (the ring
        formula: textbook roofline)."""
        return self.model_copy(
            update={
                "efficiency": Efficiency(compute=1.0, memory=1.0, interconnect=1.0),
                "step_overhead_s": 0.0,
                "derivation": None,
                "custom_all_reduce": None,
                "all_reduce_tables": {},
            }
        )


def _is_set(profile: HardwareProfile, field: str) -> bool:
    value = getattr(profile, field)
    return value is not None and value != {}


# -- loading ----------------------------------------------------------------


def hardware_names() -> list[str]:
    """Names of the packaged profiles, sorted (``a100-80gb``, ``h100-sxm``, ...)."""
    return packaged_names(_FOLDER)


def _parse_profile(data: dict[str, Any], file: str) -> HardwareProfile:
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as exc:
        raise scenario_error_from_validation(exc, file, HardwareProfile) from None


def _load_file(path: Path, shipped: bool = False) -> HardwareProfile:
    profile = _parse_profile(read_yaml_mapping(path), str(path))
    _check_same_die(profile, path)
    check_sources(profile.missing_sources(), path, shipped, "profile")
    return profile


def _same_die(a: HardwareProfile, b: HardwareProfile) -> bool:
    """One die (one clock): the same platform and the same peak FLOP/s for every dtype
    both list (the MI300X and MI325X: gfx942, 1,307.4 dense bf16 TFLOP/s each)."""
    return a.platform == b.platform and all(
        a.peak_flops_per_s[t] == b.peak_flops_per_s[t]
        for t in a.peak_flops_per_s.keys() & b.peak_flops_per_s.keys())


def _check_same_die(profile: HardwareProfile, path: Path) -> None:
    """``derivation.same_die.from_profile`` names a profile of this GPU's die.

    Raises:
        ScenarioError: another platform or other peaks, naming the profiles that qualify.
    """
    d = profile.derivation
    if d is None or d.same_die is None:
        return
    source = load_hardware(d.same_die.from_profile)
    if _same_die(profile, source):
        return
    bf16 = "bf16" if "bf16" in profile.peak_flops_per_s else next(iter(profile.peak_flops_per_s))
    valid = [n for n in hardware_names() if n not in (profile.name, source.name)
             and _same_die(profile, load_hardware(n))]
    raise ScenarioError(
        f"'{source.name}' is not this GPU's die: its platform {source.platform} and peak "
        f"{bf16} {source.peak_flops_per_s.get(bf16, 0) / 1e12:,.1f} TFLOP/s differ from "
        f"{profile.platform} and {profile.peak_flops_per_s[bf16] / 1e12:,.1f} here (a same-die "
        f"profile has this platform and these peaks; valid: {', '.join(valid) or 'none'})",
        file=str(path), path="derivation.same_die.from_profile")


def load_hardware(name_or_path: str | Path) -> HardwareProfile:
    """Load a hardware profile by packaged name or from a YAML file.

    Args:
        name_or_path: a packaged name (``h100-sxm``), a path ending in
            ``.yaml``/``.yml``, or any :class:`~pathlib.Path` (read as a profile YAML);
            a relative path is relative to the working directory (a scenario's are
            made relative to the scenario file by :mod:`capsim.scenario.paths`).

    A profile file that leaves numbers without a source loads, with a warning on the
    ``capsim`` logger naming the file and those fields.

    Raises:
        ScenarioError: unknown name (the message lists the valid names),
            unreadable or malformed file, or an invalid field (names the
            file and the dotted field path).
    """
    if is_path(name_or_path):
        return _load_file(Path(name_or_path))
    with packaged_file(_FOLDER, str(name_or_path), "hardware") as path:
        return _load_file(path, shipped=True)


def list_hardware() -> list[HardwareProfile]:
    """Every packaged profile, sorted by name."""
    return [load_hardware(name) for name in hardware_names()]

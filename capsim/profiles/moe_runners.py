"""The MoE runners a scenario may name (``engine.moe_backend``), per engine family, in the
engines' own words, and the expert formats each runs.

``auto`` is the engine's default path as capsim prices it (the GPU profile's generic
fused-MoE entries; vLLM's MXFP4 experts: ``fused_moe_mxfp4``). A named runner takes the
GPU profile's measured curve for it where there is one
(:meth:`~capsim.profiles.hardware.Efficiency.runner_curve`), else the generic entries.

Sources:
    vLLM: ``--moe-backend`` (MoEBackend of vllm/config/kernel.py: auto, triton, deep_gemm,
    cutlass, flashinfer_trtllm, flashinfer_cutlass, flashinfer_cutedsl, marlin, aiter, ...);
    ``marlin`` see the scenario schema's ``moe_backend``; ``flashinfer_trtllm`` the
    TRT-LLM-gen MoE via FlashInfer (fp8 / nvfp4 experts, and MXFP4 with bf16 activations,
    FLASHINFER_TRTLLM_MXFP4_BF16 of vllm/model_executor/layers/fused_moe/oracle/mxfp4.py at
    001eda31, the Blackwell default of moe_backend auto).
    SGLang: ``--moe-runner-backend``, MOE_RUNNER_BACKEND_CHOICES of
    python/sglang/srt/server_args.py in the sglang 0.5.6.post1 wheel (PyPI
    sglang-0.5.6.post1-py3-none-any.whl); ``flashinfer_trtllm`` asserts quantization
    ``fp8`` / ``modelopt_fp8`` / ``modelopt_fp4`` (ServerArgs.__post_init__ checks, the
    ``if self.moe_runner_backend == "flashinfer_trtllm"`` block), capsim's fp8 formats and
    nvfp4; ``flashinfer_mxfp4`` is the MXFP4 MoE method's (quantization/mxfp4.py,
    Mxfp4MoEMethod: FlashInfer's TRT-LLM-gen MXFP4 MoE, mxfp8 activations under the default
    ``--flashinfer-mxfp4-moe-precision``); ``triton`` is SGLang's Triton fused_moe, the
    generic entries' kernel.
    TensorRT-LLM: ``moe_config.backend`` of MoeConfig (tensorrt_llm/llmapi/llm_args.py:
    CUTLASS, the default, CUTEDSL, WIDEEP, TRTLLM, DEEPGEMM, VANILLA, TRITON); ``TRTLLM`` runs
    the TRT-LLM-gen block-scale MoE kernels (torch.ops.trtllm fp8_block_scale_moe_runner),
    the kernels FlashInfer ships as trtllm_fp8_block_scale_moe and SGLang runs as
    ``flashinfer_trtllm``: it is priced with that runner's curve (``CURVE_OF``).

Public API:
    MOE_RUNNERS, CURVE_OF, CUDA_ONLY, ARCH_FAMILY, EXPERT_FORMATS, moe_runner_error,
    runner_curve_error
"""

from __future__ import annotations

#: engine family -> runner name -> the expert formats it runs (None: any).
MOE_RUNNERS: dict[str, dict[str, tuple[str, ...] | None]] = {
    "vllm": {"auto": None, "marlin": None,
             "flashinfer_trtllm": ("fp8", "fp8_channel", "fp8_block", "nvfp4", "mxfp4")},
    "sglang": {"auto": None, "triton": None,
               "flashinfer_trtllm": ("fp8", "fp8_channel", "fp8_block", "nvfp4"),
               "flashinfer_mxfp4": ("mxfp4",)},
    "tensorrt-llm": {"auto": None, "TRTLLM": ("fp8_block", "nvfp4")},
    "tgi": {"auto": None},
}


#: A runner priced with another runner's measured curve (the same kernels): name -> key of
#: ``efficiency.fused_moe_runners``.
CURVE_OF: dict[str, str] = {"TRTLLM": "flashinfer_trtllm"}

#: Runners whose kernels exist for NVIDIA GPUs only -> what they are (a ROCm GPU is refused).
#: FlashInfer's TRT-LLM-gen MoE kernels: vLLM's experts that run them support "only
#: Blackwell-family GPUs" (_supports_current_device: is_cuda() and device capability family
#: 100, vllm/model_executor/layers/quantization/utils/flashinfer_fp4_moe.py at 296ce48d);
#: TensorRT-LLM builds for NVIDIA GPUs only (its presets' ``platforms``). Where a runner is
#: built for one architecture family only, :data:`ARCH_FAMILY` says which.
CUDA_ONLY: dict[str, str] = {
    "flashinfer_trtllm": "FlashInfer's TRT-LLM-gen MoE kernels",
    "flashinfer_mxfp4": "FlashInfer's TRT-LLM-gen MXFP4 MoE kernels",
    "TRTLLM": "TensorRT-LLM's TRT-LLM-gen MoE kernels",
}

#: (engine family, runner) -> (compute capability major, the family): runners the engine
#: refuses at start-up on a GPU of another family (a GPU profile's ``compute_capability``).
#: vLLM's flashinfer_trtllm: an explicit ``--moe-backend`` goes to the oracle's
#: ``_return_or_raise``, which raises ValueError ("... does not support the deployment
#: configuration") when the experts class's ``is_supported_config`` fails
#: (select_fp8_moe_backend, vllm/model_executor/layers/fused_moe/oracle/fp8.py; likewise
#: oracle/nvfp4.py), and ``TrtLlmFp8Experts._supports_current_device`` is ``is_cuda() and
#: is_device_capability_family(100)``, "Supports only Blackwell-family GPUs"
#: (vllm/model_executor/layers/fused_moe/experts/trtllm_fp8_moe.py at 903fcbb2; the NVFP4
#: experts the same, flashinfer_fp4_moe.py at 296ce48d). SGLang's and TensorRT-LLM's
#: TRT-LLM-gen runners were not read for this: they stay warned (no measured curve).
ARCH_FAMILY: dict[tuple[str, str], tuple[int, str]] = {
    ("vllm", "flashinfer_trtllm"): (10, "Blackwell (compute capability 10.x)"),
}

#: The formats routed experts may be stored in: the keys of
#: capsim/profiles/data/quantization/formats.yaml (tests/profiles/test_moe_runners.py holds
#: them equal), spelled out here because the GPU profile, which checks its runner curves
#: against them, sits below the quantization module.
EXPERT_FORMATS = ("bf16", "fp8", "fp8_channel", "fp8_block", "int8", "awq", "gptq", "nvfp4",
                  "mxfp4")


def runner_curve_error(runner: str, expert_format: str | None) -> str | None:
    """Why a GPU profile's ``efficiency.fused_moe_runners[runner][expert_format]`` curve
    would never be read (None: some engine's runner of that name runs experts of that
    format; ``expert_format`` None: the runner alone is checked), as one line ending in
    what would be valid. ``auto`` and ``marlin`` price with
    the generic entries and a runner in :data:`CURVE_OF` with its twin's curve, so neither
    names a curve."""
    measured: dict[str, set[str]] = {}
    for runners in MOE_RUNNERS.values():
        for name, formats in runners.items():
            if name not in ("auto", "marlin") and name not in CURVE_OF:
                measured.setdefault(name, set()).update(formats or EXPERT_FORMATS)
    if runner not in measured:
        return (f"no engine's MoE runner named {runner!r} reads a curve here "
                f"(valid: {', '.join(sorted(measured))})")
    if expert_format is not None and expert_format not in measured[runner]:
        valid = [f for f in EXPERT_FORMATS if f in measured[runner]]
        return (f"{runner} runs no experts of format {expert_format!r} "
                f"(valid: {', '.join(valid)})")
    return None


def moe_runner_error(engine: str, moe_backend: str, expert_format: str | None) -> str | None:
    """Why ``moe_backend`` cannot run under ``engine`` with experts of ``expert_format``
    (None: it can; ``expert_format`` None: a dense model, which any runner name leaves
    unpriced), as one line ending in what would be valid."""
    runners = MOE_RUNNERS.get(engine, {"auto": None})
    if moe_backend not in runners:
        flag = {"vllm": "vLLM's --moe-backend", "sglang": "SGLang's --moe-runner-backend",
                "tensorrt-llm": "TensorRT-LLM's moe_config.backend"}.get(engine)
        if flag is None:
            return f"{engine} has no MoE runner knob in capsim (valid: auto)"
        return (f"moe_backend {moe_backend!r} is not a runner of {flag} that capsim prices "
                f"(valid: {', '.join(runners)})")
    formats = runners[moe_backend]
    if formats is not None and expert_format is not None and expert_format not in formats:
        valid = [r for r, f in runners.items() if f is None or expert_format in f]
        return (f"moe_backend {moe_backend} runs experts of {', '.join(formats)}, not "
                f"{expert_format} (valid here: {', '.join(valid)})")
    return None

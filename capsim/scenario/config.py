"""The scenario file: pydantic schema, YAML loading, ``--set`` overrides, variants.

A scenario names a model, a GPU profile, engine defaults (vLLM knob names),
a cluster, a workload, SLOs and a list of variants; each variant overrides
engine/cluster/hardware fields. :func:`load` validates everything once at the
edge and turns every mistake into one :class:`~capsim.common.errors.ScenarioError`
naming the file and the YAML path of the field.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from capsim.scenario.sweep import SizingConfig, SweepGrid
from capsim.scenario.disagg import DisaggRun, DisaggregationConfig, resolve_disaggregated
from capsim.scenario.workload import WorkloadConfig
from capsim.common.errors import ScenarioError
from capsim.profiles.hardware import HardwareProfile, load_hardware
from capsim.kv.capacity import KVCapacity, activation_reserve_bytes, kv_capacity
from capsim.profiles.models import ModelShape, load_model
from capsim.cost.roofline import check_tensor_parallel
from capsim.common.yamlio import describe_yaml_error, safe_load_unique
from capsim.common.schema import Int, StrictModel
from capsim.scenario.slo import RequestSlo, SloConfig

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
GIB = 2**30


class EngineConfig(StrictModel):
    """One engine replica's knobs, named as vLLM names them (vllm/config/scheduler.py, cache.py).

    ``max_num_batched_tokens`` defaults like vLLM: 8192 with chunked prefill
    (v1 online-serving default), else max(max_model_len, 2048) (v0, where a
    whole prompt must fit one step).
    """

    scheduler: Literal["static", "continuous"] = "continuous"
    enable_chunked_prefill: bool = True
    max_num_seqs: Int = Field(default=256, gt=0)
    max_num_batched_tokens: Int | None = Field(default=None, gt=0)
    max_model_len: Int | None = Field(default=None, gt=0)
    tensor_parallel_size: Int = Field(default=1, gt=0)
    block_size: Int = Field(default=16, gt=0)
    enable_prefix_caching: bool = True        # vLLM v1 default
    # Non-KV memory per GPU besides weights and activations (capsim.kv.capacity):
    non_torch_memory_gib: float = Field(default=0.2, ge=0)   # CUDA context, cuBLAS, NCCL
    cudagraph_memory_gib: float = Field(default=0.0, ge=0)   # graph pool (vLLM >= 0.11 subtracts it)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    dtype: Literal["bf16", "fp16", "fp8"] = "bf16"
    kv_cache_dtype: Literal["auto", "bf16", "fp16", "fp8"] = "auto"
    preemption_mode: Literal["recompute", "swap"] = "recompute"
    # KV layout: vLLM's paged blocks, or the contiguous baselines of seed 000 / the
    # PagedAttention paper (reserve max_model_len, or prompt + max_tokens, first fit).
    kv_allocator: Literal["paged", "contiguous_max_model_len", "contiguous_max_tokens"] = "paged"
    # Fixed KV cache size per GPU instead of gpu_memory_utilization's leftover
    # (vLLM CacheConfig.kv_cache_memory_bytes); weights must still fit.
    kv_cache_memory_gib: float | None = Field(default=None, gt=0)
    swap_space_gib: float = Field(default=4.0, ge=0)    # host swap per GPU (vLLM --swap-space)
    host_memory_gib: float = Field(default=512.0, gt=0)  # host RAM available to this replica

    @field_validator("block_size")
    @classmethod
    def _power_of_two(cls, v: int) -> int:
        if v & (v - 1):
            raise ValueError(f"block_size must be a power of two (vLLM's paged-attention "
                             f"kernels use 8, 16, 32, ...), got {v}")
        return v

    @model_validator(mode="after")
    def _swap_fits_host(self) -> "EngineConfig":
        swap = self.swap_space_gib * self.tensor_parallel_size
        if self.preemption_mode == "swap" and swap > self.host_memory_gib:
            raise ValueError(f"swap space {self.swap_space_gib:g} GiB × {self.tensor_parallel_size} "
                             f"GPUs = {swap:g} GiB exceeds host_memory_gib "
                             f"{self.host_memory_gib:g}")
        return self

    @property
    def kv_dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype if self.kv_cache_dtype == "auto" else self.kv_cache_dtype]

    @property
    def chunked(self) -> bool:
        return self.scheduler == "continuous" and self.enable_chunked_prefill

    def resolved(self, model: ModelShape) -> "EngineConfig":
        """Fill model-dependent defaults and check the cross-field rules vLLM enforces.

        Raises ValueError (turned into a ScenarioError by the caller) when
        max_num_batched_tokens < max_num_seqs, or when an unchunked engine's
        token budget cannot hold a max_model_len prompt (vLLM SchedulerConfig).
        """
        max_len = self.max_model_len or model.max_position_embeddings
        if max_len > model.max_position_embeddings:
            raise ValueError(f"max_model_len {max_len} exceeds the model's "
                             f"max_position_embeddings {model.max_position_embeddings}")
        budget = self.max_num_batched_tokens or (8192 if self.chunked else max(max_len, 2048))
        if budget < self.max_num_seqs:
            raise ValueError(f"max_num_batched_tokens ({budget}) must be >= max_num_seqs "
                             f"({self.max_num_seqs})")
        if not self.chunked and budget < max_len:
            raise ValueError(f"max_num_batched_tokens ({budget}) is smaller than max_model_len "
                             f"({max_len}) without chunked prefill; raise it, lower "
                             "max_model_len or set enable_chunked_prefill: true")
        return self.model_copy(update={"max_model_len": max_len, "max_num_batched_tokens": budget})


class ClusterConfig(StrictModel):
    """Replicas (each one tensor-parallel engine) behind a router."""

    num_replicas: Int = Field(default=1, gt=0)
    router: Literal["round_robin", "least_outstanding_tokens"] = "round_robin"


class VariantSpec(StrictModel):
    """One variant: a name and overrides of the scenario's defaults."""

    name: str = Field(min_length=1)
    description: str = ""
    hardware: str | None = None
    model: str | None = None
    engine: dict[str, Any] = Field(default_factory=dict)
    cluster: dict[str, Any] = Field(default_factory=dict)
    disaggregation: DisaggregationConfig | None = None   # prefill/decode pools (config_disagg)
    # Any other scenario field for this variant only, as dotted paths (like --set),
    # e.g. {"workload.classes.0.shared_prefix.fraction": 0.5}. A variant that changes
    # the workload gets its own trace (same seed and streams).
    set: dict[str, Any] = Field(default_factory=dict)


class Scenario(StrictModel):
    """The top level of a scenario YAML file."""

    # Names the report directory (reports/<name>), so no path separators.
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    description: str = ""
    seed: Int = Field(default=0, ge=0)   # SeedSequence entropy
    model: str
    hardware: str
    engine: EngineConfig = Field(default_factory=EngineConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    workload: WorkloadConfig
    slo: SloConfig = Field(default_factory=SloConfig)
    variants: list[VariantSpec] = Field(default_factory=list)
    sweep: SweepGrid | None = None          # capsim sweep: dotted field → values (config_sweep)
    sizing: SizingConfig | None = None      # capsim size: load, options, search bound

    @field_validator("variants")
    @classmethod
    def _unique_variant_names(cls, variants: list) -> list:
        names = [v.name for v in variants]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"variant names must be unique; repeated: {', '.join(dupes)}")
        return variants


@dataclass(frozen=True)
class RunConfig:
    """One variant, fully resolved: everything ``sim.simulate`` needs besides the trace."""

    variant: str
    description: str
    seed: int
    workload: WorkloadConfig
    model: ModelShape
    hardware: HardwareProfile
    engine: EngineConfig
    cluster: ClusterConfig
    kv: KVCapacity
    disagg: DisaggRun | None = None   # prefill/decode pools; hardware/engine/kv above = decode pool's

    @property
    def num_gpus(self) -> int:
        if self.disagg is not None:
            return self.disagg.num_gpus
        return self.cluster.num_replicas * self.engine.tensor_parallel_size


@dataclass(frozen=True)
class LoadedScenario:
    """A validated scenario plus where it came from."""

    spec: Scenario
    path: Path
    runs: tuple[RunConfig, ...]
    class_slos: dict[str, RequestSlo]
    resolved: dict[str, Any]          # the raw document after --set, for scenario.resolved.yaml

    @property
    def base_dir(self) -> Path:
        return self.path.parent


def load(path: str | Path, overrides: list[str] = (), seed: int | None = None) -> LoadedScenario:
    """Read, override, validate and resolve a scenario file.

    Args:
        path: the scenario YAML.
        overrides: ``dotted.key=value`` strings (value parsed as YAML), applied
            to the raw document before validation, e.g. ``engine.max_num_seqs=64``
            or ``variants.0.cluster.num_replicas=4``.
        seed: replaces the scenario's ``seed`` when given.

    Raises:
        ScenarioError: unreadable file, bad YAML, unknown or invalid field,
            unknown hardware/model, a model that does not fit in memory.
    """
    path = Path(path)
    raw = _read_yaml(path)
    for item in overrides:
        _apply_override(raw, item, path)
    if seed is not None:
        raw["seed"] = seed
    spec = _validate(Scenario, raw, path)
    runs = tuple(_resolve_variant(_variant_scenario(raw, spec, i, v, path), i, v, path)
                 for i, v in enumerate(_variants(spec)))
    return LoadedScenario(spec=spec, path=path, runs=runs,
                          class_slos=_class_slos(spec, path), resolved=raw)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario: {exc.strerror}", file=str(path)) from None
    try:
        doc = safe_load_unique(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"invalid YAML {describe_yaml_error(exc)}", file=str(path)) from None
    if not isinstance(doc, dict):
        raise ScenarioError("a scenario must be a YAML mapping (name:, model:, ...)", file=str(path))
    return doc


def _apply_override(raw: dict[str, Any], item: str, path: Path) -> None:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ScenarioError(f"--set expects dotted.key=value, got '{item}'", file=str(path))
    try:
        parsed = yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError as exc:
        raise ScenarioError(f"--set {key.strip()}: value is not valid YAML "
                            f"({getattr(exc, 'problem', None) or exc})", file=str(path)) from None
    _set_dotted(raw, key.strip(), parsed, path)


def _set_dotted(raw: dict[str, Any], key: str, parsed: Any, path: Path) -> None:
    """Set ``raw[a][b][0][c] = parsed`` for ``key`` = ``a.b.0.c`` (creating mappings)."""
    parts = key.split(".")
    node: Any = raw
    for i, part in enumerate(parts[:-1]):
        node = _child(node, part, parts[: i + 1], path)
    last = parts[-1]
    if isinstance(node, list):
        node[_index(node, last, parts, path)] = parsed
    elif isinstance(node, dict):
        node[last] = parsed
    else:
        raise ScenarioError(f"cannot set '{last}' inside {type(node).__name__} value "
                            f"{node!r}",
                            file=str(path), path=".".join(parts[:-1]))


def _child(node: Any, part: str, so_far: list[str], path: Path) -> Any:
    if isinstance(node, list):
        return node[_index(node, part, so_far, path)]
    if not isinstance(node, dict):
        raise ScenarioError("--set: not a mapping", file=str(path), path=".".join(so_far[:-1]))
    return node.setdefault(part, {})


def _index(node: list, part: str, so_far: list[str], path: Path) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise ScenarioError(f"list index must be 0..{len(node) - 1}",
                            file=str(path), path=".".join(so_far))
    return int(part)


def _validate(model: type[BaseModel], data: Any, path: Path, prefix: str = "") -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _one_line(exc, model, path, prefix) from None


def _one_line(exc: ValidationError, model: type[BaseModel], path: Path, prefix: str) -> ScenarioError:
    """The first pydantic error as one ScenarioError (file, dotted path, what is valid)."""
    errors = exc.errors(include_url=False)
    # A typo'd key also makes its field "missing": name the typo, it is the real mistake.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = [str(p) for p in err["loc"] if not _is_union_tag(p)]
    dotted = ".".join(([prefix] if prefix else []) + loc)
    if err["type"] == "extra_forbidden":
        valid = _valid_keys(model, loc[:-1])
        hint = difflib.get_close_matches(loc[-1], valid, n=1)
        msg = f"unknown key '{loc[-1]}'" + (f" (did you mean '{hint[0]}'?)" if hint else "")
        if valid:
            msg += f"; valid keys: {', '.join(valid)}"
    elif err["type"] == "missing":
        msg = "required field is missing"
    else:
        msg = err["msg"].removeprefix("Value error, ")
        if ("input" in err and not isinstance(err["input"], (dict, list))
                and not msg.endswith(f"got {err['input']}")):
            msg += f" (got {err['input']!r})"
    return ScenarioError(msg, file=str(path), path=dotted or None)


def _is_union_tag(part: Any) -> bool:
    # pydantic puts the discriminator tag / union member name into loc.
    return isinstance(part, str) and ("[" in part or part in {"fixed", "uniform", "normal",
                                                              "lognormal", "empirical"})


def _valid_keys(model: type[BaseModel], loc: list[str]) -> list[str]:
    """Field names accepted at ``loc`` inside ``model`` (best effort; [] if unknown)."""
    current: Any = model
    for part in loc:
        if part.isdigit():
            continue
        cls = _model_class(current)
        if cls is None or part not in cls.model_fields:
            return []
        current = cls.model_fields[part].annotation
    cls = _model_class(current)
    return sorted(cls.model_fields) if cls else []


def _model_class(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_class(arg)
        if found is not None:
            return found
    return None


def _variants(spec: Scenario) -> list[VariantSpec]:
    return spec.variants or [VariantSpec(name="default")]


def _variant_scenario(raw: dict[str, Any], spec: Scenario, index: int, v: VariantSpec,
                      path: Path) -> Scenario:
    """The scenario as variant ``index`` sees it: ``spec`` with the variant's ``set:`` applied."""
    if not v.set:
        return spec
    doc = copy.deepcopy(raw)
    for key, value in v.set.items():
        try:
            _set_dotted(doc, key, value, path)
        except ScenarioError as exc:
            raise ScenarioError(exc.message, file=str(path),
                                path=f"variants.{index}.set.{key}") from None
    try:
        return _validate(Scenario, doc, path)
    except ScenarioError as exc:
        raise ScenarioError(exc.message, file=str(path),
                            path=f"variants.{index}.set: {exc.path}") from None


def _resolve_variant(spec: Scenario, index: int, v: VariantSpec, path: Path) -> RunConfig:
    where = f"variants.{index}" if spec.variants else ""
    if v.disaggregation is not None:
        return resolve_disaggregated(spec, index, v, path, _resolve_variant)
    model = _named(load_model, v.model or spec.model, path, f"{where}.model" if v.model else "model")
    hw = _named(load_hardware, v.hardware or spec.hardware, path,
                f"{where}.hardware" if v.hardware else "hardware")
    engine = _merged(EngineConfig, spec.engine, v.engine, path, where, "engine")
    cluster = _merged(ClusterConfig, spec.cluster, v.cluster, path, where, "cluster")
    try:
        engine = engine.resolved(model)
    except ValueError as exc:
        raise ScenarioError(str(exc), file=str(path),
                            path=f"{where}.engine" if v.engine else "engine") from None
    if engine.dtype == "fp8":   # the chip must have FP8 tensor cores (datasheet)
        _named(hw.peak_flops, "fp8", path, f"{where}.engine.dtype" if where else "engine.dtype")
    _named(lambda _: check_tensor_parallel(model, engine.tensor_parallel_size), "", path,
           f"{where}.engine.tensor_parallel_size" if "tensor_parallel_size" in v.engine
           else "engine.tensor_parallel_size")
    memory_knobs = {"gpu_memory_utilization", "tensor_parallel_size", "kv_cache_memory_gib"}
    kv = _capacity(model, hw, engine, path,
                   where if (memory_knobs & set(v.engine) or v.hardware or v.model) else "")
    return RunConfig(variant=v.name, description=v.description, seed=spec.seed,
                     workload=spec.workload, model=model,
                     hardware=hw, engine=engine, cluster=cluster, kv=kv)


def _named(loader, name: str, path: Path, field: str):
    try:
        return loader(name)
    except ScenarioError as exc:
        raise exc.with_context(file=str(path), path=field) from None


def _merged(model: type[StrictModel], base: StrictModel, override: dict[str, Any], path: Path,
            where: str, section: str):
    data = {**base.model_dump(exclude_unset=True), **override}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        prefix = f"{where}.{section}" if where and field in override else section
        raise _one_line(exc, model, path, prefix) from None


def _capacity(model: ModelShape, hw: HardwareProfile, engine: EngineConfig, path: Path,
              where: str) -> KVCapacity:
    try:
        kv = kv_capacity(
            hbm_bytes=hw.hbm_bytes,
            tensor_parallel_size=engine.tensor_parallel_size,
            gpu_memory_utilization=engine.gpu_memory_utilization,
            weight_bytes=model.weight_bytes(DTYPE_BYTES[engine.dtype]),
            kv_bytes_per_token=kv_bytes_per_token(model, engine),
            block_size=engine.block_size,
            activation_reserve_bytes=activation_reserve_bytes(
                model.hidden_size, model.intermediate_size, model.vocab_size,
                engine.max_num_batched_tokens, engine.tensor_parallel_size),
            non_torch_bytes=int(engine.non_torch_memory_gib * GIB) * engine.tensor_parallel_size,
            cudagraph_bytes=int(engine.cudagraph_memory_gib * GIB) * engine.tensor_parallel_size,
        )
    except ScenarioError as exc:
        field = f"{where}.engine.gpu_memory_utilization" if where else "engine.gpu_memory_utilization"
        raise exc.with_context(file=str(path), path=field) from None
    if engine.kv_cache_memory_gib is None:
        return kv
    kv_bytes = int(engine.kv_cache_memory_gib * GIB) * engine.tensor_parallel_size
    if kv_bytes > kv.kv_cache_bytes:
        raise ScenarioError(
            f"kv_cache_memory_gib {engine.kv_cache_memory_gib:g} per GPU exceeds the "
            f"{kv.kv_cache_bytes / GIB / engine.tensor_parallel_size:.2f} GiB left after weights "
            "and activations", file=str(path),
            path=f"{where}.engine.kv_cache_memory_gib" if where else "engine.kv_cache_memory_gib")
    return dataclasses.replace(kv, kv_cache_bytes=kv_bytes,
                               num_gpu_blocks=kv_bytes // (engine.block_size * kv.kv_bytes_per_token))


def kv_bytes_per_token(model: ModelShape, engine: EngineConfig) -> int:
    """KV bytes per token of one replica, all TP shards together.

    When tensor_parallel_size exceeds the KV heads, vLLM replicates heads so
    each GPU holds one (vllm/model_executor/models/llama.py, num_kv_heads =
    max(1, total_kv_heads // tp_size)).
    """
    per_token = model.kv_bytes_per_token(engine.kv_dtype_bytes)
    tp, heads = engine.tensor_parallel_size, model.num_key_value_heads
    return per_token * tp // heads if tp > heads else per_token


def _class_slos(spec: Scenario, path: Path) -> dict[str, RequestSlo]:
    """Per-class SLO overrides (``workload.classes[i].slo``), merged over the scenario's."""
    out: dict[str, RequestSlo] = {}
    base = spec.slo.model_dump(include={"ttft_ms", "tpot_ms", "e2el_ms"})
    for i, cls in enumerate(spec.workload.classes or []):
        if cls.slo:
            out[cls.name] = _validate(RequestSlo, {**base, **cls.slo}, path,
                                      f"workload.classes.{i}.slo")
    return out


def dump_resolved(loaded: LoadedScenario, version: str, seed: int) -> str:
    """scenario.resolved.yaml: the document as run, with the capsim version and seed."""
    doc = {"capsim_version": version, **loaded.resolved, "seed": seed}
    return yaml.safe_dump(doc, sort_keys=False)

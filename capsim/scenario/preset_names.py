"""Names in a user's own engine preset file that no rule can match: a GPU, ``model_type`` or
expert format misspelt in a rule's ``hardware:`` / ``model_types:`` / ``expert_formats:``
list makes the rule silently never apply, so each is warned, once, naming the file, the
YAML path, the name and the known ones.

A GPU profile of the user's own is known by its ``name:`` when its file sits beside the
scenario, beside the preset file, or in a ``hardware/`` folder of either (or is the GPU the
variant runs on), so a custom GPU is not taken for a typo. Shipped presets are held to
known names by their tests, not here.

A rule whose ``hardware:`` names the GPU the variant runs on, of a platform its kernels do
not run on (FlashInfer's fused all-reduce on a ROCm GPU, aiter's GEMM on an NVIDIA one: each
rule's ``PLATFORM``), is refused: it would price a kernel the engine cannot run there.

Public API:
    check_user_preset_names(name, preset, scenario, hw)
    warn_shipped_name(preset, file)
    warn_unknown_rule_names(preset, file, scenario, hw_name)
    check_rule_platforms(preset, file, hw)
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator

from capsim.common.errors import ScenarioError
from capsim.profiles.engines import EnginePreset, engine_preset_names
from capsim.profiles.files import read_yaml_mapping
from capsim.profiles.hardware import HardwareProfile, hardware_names
from capsim.profiles.hf_config import MODEL_TYPES
from capsim.profiles.quantization import quant_format_names
from capsim.scenario.paths import locate

log = logging.getLogger(__name__)

#: The kinds of name a rule's list holds, by the list's key.
_KINDS = {"hardware": "GPU", "model_types": "model_type", "expert_formats": "expert format"}

#: GPU profile names found in a directory, by (directory, its mtime): a sweep resolves the
#: same preset once per point.
_SEEN: dict[tuple[str, int], frozenset[str]] = {}


def check_user_preset_names(name: str, preset: EnginePreset, scenario: Path,
                            hw: HardwareProfile) -> None:
    """:func:`warn_unknown_rule_names` and :func:`check_rule_platforms` for the preset a
    scenario names as ``name``, when it is a file of the user's (a shipped preset: nothing).

    Raises:
        ScenarioError: :func:`check_rule_platforms`'s.
    """
    if name in engine_preset_names():
        return
    file = Path(locate(name, scenario.parent, kind="engine preset",
                       shipped=engine_preset_names(), what="an engine preset YAML"))
    warn_shipped_name(preset, file)
    warn_unknown_rule_names(preset, file, scenario, hw.name)
    check_rule_platforms(preset, file, hw)


def warn_shipped_name(preset: EnginePreset, file: Path) -> None:
    """Warn when the user's preset ``file`` calls itself by a shipped preset's ``name:``
    (a copy edited but not renamed): every table and line would name it as the shipped
    preset, whose values it may no longer have, and the trust line (looked up by name) would
    quote the shipped preset's measured errors."""
    if preset.name in engine_preset_names():
        log.warning("%s: name: '%s' is the name of a shipped preset, so capsim's tables and "
                    "lines will call this file by it and its 'how far to trust it' line will "
                    "quote that preset's measured errors (valid: a name of your own, e.g. "
                    "'my-%s')", file, preset.name, preset.name)


def check_rule_platforms(preset: EnginePreset, file: Path, hw: HardwareProfile) -> None:
    """A rule that names ``hw`` in its ``hardware:`` list, whose kernels do not run on
    ``hw``'s platform.

    Raises:
        ScenarioError: naming the preset ``file`` and the list entry, and the platform the
            rule's kernels run on.
    """
    for key in ("all_reduce_fusion", "untuned_fp8_gemm", "absorbed_bmm_dequant"):
        rule = getattr(preset, key)
        if rule is None or hw.name not in rule.hardware or hw.platform == rule.PLATFORM:
            continue
        raise ScenarioError(
            f"{key} runs on {rule.PLATFORM} GPUs only, and '{hw.name}' is a {hw.platform} "
            f"GPU: the rule would price a kernel the engine cannot run there (valid: "
            f"{rule.PLATFORM} GPUs only in this list)", file=str(file),
            path=f"{key}.hardware.{rule.hardware.index(hw.name)}")


def warn_unknown_rule_names(preset: EnginePreset, file: Path, scenario: Path,
                            hw_name: str | None) -> None:
    """Warn (on the ``capsim`` logger) for each name in ``preset``'s rule lists, read from
    the user's preset ``file``, that capsim does not know: a GPU that is neither shipped,
    ``hw_name`` nor a GPU profile file of the user's (see the module docstring), a
    ``model_type`` capsim does not price, or an expert format it does not have.
    ``capsim engines FILE`` has no scenario and no GPU: ``scenario`` is then a path in the
    working directory and ``hw_name`` None."""
    known = {"GPU": None, "model_type": set(MODEL_TYPES),
             "expert format": set(quant_format_names())}
    for at, names in _rule_lists(preset):
        kind = _KINDS[at.rsplit(".", 1)[-1]]
        if known[kind] is None:          # scanned once, and only when a list names GPUs
            known[kind] = {*hardware_names(), *([hw_name] if hw_name else []),
                           *_user_gpu_names([scenario.parent, file.parent])}
        for i, name in enumerate(names):
            if name not in known[kind]:
                log.warning("%s: %s.%d: unknown %s %r, so this rule never applies to it "
                            "(known: %s)", file, at, i, kind, name,
                            ", ".join(sorted(known[kind])))


def _rule_lists(preset: EnginePreset) -> Iterator[tuple[str, list[str]]]:
    """(YAML path, names) of every rule list in ``preset`` that a GPU, model or format must
    match for the rule to apply."""
    for key in ("all_reduce_fusion", "untuned_fp8_gemm", "absorbed_bmm_dequant",
                "shared_experts_fusion"):
        rule = getattr(preset, key)
        for field in ("hardware", "model_types"):
            if rule is not None and hasattr(rule, field):
                yield f"{key}.{field}", getattr(rule, field)
    for key in ("shared_experts_fusion", "piecewise_cuda_graph"):
        rule = getattr(preset, key)
        for i, off in enumerate(rule.off_on if rule is not None else ()):
            for field in _KINDS:
                if hasattr(off, field):
                    yield f"{key}.off_on.{i}.{field}", getattr(off, field)


def _user_gpu_names(dirs: list[Path]) -> set[str]:
    """The ``name:`` of every GPU profile YAML (a mapping with ``name`` and ``hbm_bytes``)
    in ``dirs`` and their ``hardware/`` folders; a file that does not read is skipped."""
    out: set[str] = set()
    for d in {p.resolve() for base in dirs for p in (base, base / "hardware") if p.is_dir()}:
        key = (str(d), d.stat().st_mtime_ns)
        if key not in _SEEN:
            _SEEN[key] = frozenset(_gpu_names_in(d))
        out |= _SEEN[key]
    return out


#: A GPU profile file is tens of kB; larger YAML beside it (traces, sweeps) is not read.
_MAX_PROFILE_BYTES = 2**20


def _gpu_names_in(d: Path) -> Iterator[str]:
    for path in sorted([*d.glob("*.yaml"), *d.glob("*.yml")]):
        try:
            if not path.is_file() or path.stat().st_size > _MAX_PROFILE_BYTES:
                continue
            data = read_yaml_mapping(path)
        except (ScenarioError, OSError):
            continue
        if isinstance(data.get("name"), str) and "hbm_bytes" in data:
            yield data["name"]

"""Where a GPU profile's efficiencies came from: a calibration's data, method and error
(:class:`Calibration`), or a derivation from another profile (:class:`Derivation`,
:class:`SameDie`); the ``calibration:`` and ``derivation:`` sections of a hardware YAML,
loaded by :mod:`capsim.profiles.hardware`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from capsim.common.schema import Int, StrictModel
from capsim.profiles.files import packaged_names

_FOLDER = "hardware"


class ErrorFigures(StrictModel):
    """Absolute percentage error of predicted vs measured times over ``n`` rows."""

    n: Int = Field(ge=0)
    median_pct: float = Field(ge=0.0)
    p90_pct: float = Field(ge=0.0)


class ClassError(StrictModel):
    """One operator class's error with the profile before and after calibration."""

    before: ErrorFigures
    after: ErrorFigures


class Calibration(StrictModel):
    """Where a profile's efficiencies came from: data, date, method and resulting error."""

    date: str = Field(min_length=1, description="ISO date the fit was run")
    tool: str = ""
    data: list[str] = Field(min_length=1, description="measured files and their provenance")
    method: str = ""
    error: dict[str, ClassError] = Field(default_factory=dict)


#: Efficiency entries a :class:`Derivation` may list.
EfficiencyClass = Literal["gemm", "gemm_fp8", "attention_prefill", "attention_decode",
                          "elementwise", "fused_moe", "attention_decode_fp8",
                          "attention_decode_fp8_head_dim",
                          "fused_moe_mxfp4", "grouped_gemm_fp8", "attention_decode_mla",
                          "gemm_fp8_block", "attention_prefill_mla", "fused_moe_runners",
                          "gemm_fp8_engine", "grouped_gemm_fp8_engine"]


class SameDie(StrictModel):
    """Efficiency entries measured on another GPU of the same die, carried over unchanged as
    fractions of this GPU's own roofline (the MI325X takes the MI300X's: one gfx942 die, one
    clock, faster HBM). Not derived by a scaling, but not measured on this GPU either.

    Attributes:
        from_profile: the profile they were measured on (``mi300x``).
        classes: the efficiency entries carried over (each must be set in ``efficiency``).
    """

    from_profile: str = Field(min_length=1)
    classes: list[EfficiencyClass] = Field(min_length=1)


class Derivation(StrictModel):
    """Efficiencies derived from another (measured) profile, not fitted to this GPU.

    Marks a profile whose per-operator-class curves were carried over from the
    closest calibrated GPU with a documented scaling, because no kernel timings of
    this GPU were at hand. ``status`` is always ``"derived, uncalibrated"``: treat
    its timings as an estimate until ``capsim calibrate`` fits measured ones.

    Attributes:
        status: the flag, ``"derived, uncalibrated"``.
        from_profile: the calibrated profile the entries come from (``h100-sxm``).
        classes: the efficiency entries derived (each must be set in ``efficiency``).
        method: how they were carried over (the scaling and why).
        date: ISO date of the derivation.
        same_die: entries measured on a GPU of the same die instead (:class:`SameDie`), or
            None.
    """

    status: Literal["derived, uncalibrated"]
    from_profile: str = Field(min_length=1)
    classes: list[EfficiencyClass] = Field(min_length=1)
    method: str = Field(min_length=1)
    date: str = Field(min_length=1)
    same_die: SameDie | None = None


def check_derivation_sources(d: Derivation, name: str) -> None:
    """Each class carried over once, from a packaged profile that is not this one.

    Raises:
        ValueError: a class listed twice (or both derived and same-die), or a
            ``from_profile`` that is this profile or no packaged one (naming the valid).
    """
    same = d.same_die.classes if d.same_die else []
    twice = sorted({c for c in d.classes + same if (d.classes + same).count(c) > 1})
    if twice:
        raise ValueError(f"derivation lists {', '.join(twice)} twice (each class comes from "
                         f"one place: derivation.classes or derivation.same_die.classes)")
    valid = [n for n in packaged_names(_FOLDER) if n != name]
    for where, source in (("derivation.from_profile", d.from_profile),
                          ("derivation.same_die.from_profile",
                           d.same_die.from_profile if d.same_die else None)):
        if source is not None and source not in valid:
            raise ValueError(f"{where} {source!r} is not a packaged profile other than this "
                             f"one (valid: {', '.join(valid)})")

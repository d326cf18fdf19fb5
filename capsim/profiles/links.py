"""Interconnect links for KV-cache transfers: data, not code.

One YAML file per link under ``capsim/profiles/data/links/`` (NVLink within a node,
PCIe, InfiniBand, RoCE), each number with its source in ``sources`` (a user's
own link file may leave them out: it loads with a warning naming the fields). A
scenario's ``disaggregation.link`` names one, or gives the numbers itself
(:class:`LinkNumbers`).

Units: ``bandwidth_bytes_per_s`` is per GPU and per direction (datasheets
quote NVLink and PCIe as bidirectional totals, halved here; network ports are
quoted per direction); ``latency_s`` is the fixed cost of one transfer before
its bytes flow.

Public API:
    LinkProfile               one link (pydantic)
    LinkNumbers               a scenario's inline link
    load_link(name_or_path) -> LinkProfile
    link_names() -> list[str]
    resolve_link(spec) -> LinkProfile
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from capsim.profiles.files import (check_sources, is_path, packaged_file, packaged_names,
                                   read_yaml_mapping, scenario_error_from_validation)
from capsim.common.schema import StrictModel

_FOLDER = "links"
_SOURCED_FIELDS = ("bandwidth_bytes_per_s", "latency_s")
BITS_PER_BYTE = 8


class LinkProfile(StrictModel):
    """One interconnect as the KV-transfer model sees it.

    Attributes:
        name: file name without ``.yaml`` (``infiniband-ndr``).
        kind: nvlink | pcie | infiniband | roce | ethernet | custom.
        bandwidth_bytes_per_s: per GPU, per direction, > 0.
        latency_s: fixed cost of one transfer (setup + completion), >= 0.
        sources: a datasheet URL or "estimate: why" for each number.
    """

    name: str = Field(min_length=1)
    display_name: str = Field(min_length=1)
    kind: Literal["nvlink", "pcie", "infiniband", "roce", "ethernet", "custom"]
    bandwidth_bytes_per_s: float = Field(gt=0)
    latency_s: float = Field(ge=0)
    sources: dict[str, str] = Field(default_factory=dict)
    notes: str = ""

    def missing_sources(self) -> list[str]:
        """The numbers without an entry in ``sources`` (none in a shipped link)."""
        return [f for f in _SOURCED_FIELDS if f not in self.sources]

    def transfer_time_s(self, nbytes: float, lanes: int = 1) -> float:
        """Seconds to move ``nbytes`` alone on the link: ``latency + bytes / (lanes × bw)``.

        ``lanes`` parallel links (one per GPU of a tensor-parallel replica)
        each carry ``1 / lanes`` of the bytes. Concurrent transfers share the
        bandwidth (see :mod:`capsim.engine.transfer`); this is the unshared time.
        """
        return self.latency_s + nbytes / (lanes * self.bandwidth_bytes_per_s)


class LinkNumbers(StrictModel):
    """A link given by numbers in the scenario instead of by name.

    Exactly one of ``bandwidth_bytes_per_s`` / ``bandwidth_gbit_per_s``
    (network convention: 400 Gb/s = 50e9 bytes/s). With ``name`` of a packaged
    link, the numbers given override that link's.
    """

    name: str | None = None
    bandwidth_bytes_per_s: float | None = Field(default=None, gt=0)
    bandwidth_gbit_per_s: float | None = Field(default=None, gt=0)
    latency_s: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one_bandwidth(self) -> "LinkNumbers":
        if self.bandwidth_bytes_per_s is not None and self.bandwidth_gbit_per_s is not None:
            raise ValueError("give bandwidth_bytes_per_s or bandwidth_gbit_per_s, not both")
        if self.name is None and self.bandwidth_bytes_per_s is None \
                and self.bandwidth_gbit_per_s is None:
            raise ValueError("a link needs a name (see capsim/profiles/data/links) or a bandwidth "
                             "(bandwidth_bytes_per_s or bandwidth_gbit_per_s)")
        return self

    @property
    def bandwidth(self) -> float | None:
        if self.bandwidth_gbit_per_s is not None:
            return self.bandwidth_gbit_per_s * 1e9 / BITS_PER_BYTE
        return self.bandwidth_bytes_per_s


def link_names() -> list[str]:
    """Names of the packaged links, sorted (``infiniband-ndr``, ``nvlink-4``, ...)."""
    return packaged_names(_FOLDER)


def _load_file(path: Path, shipped: bool = False) -> LinkProfile:
    try:
        link = LinkProfile.model_validate(read_yaml_mapping(path))
    except ValidationError as exc:
        raise scenario_error_from_validation(exc, str(path), LinkProfile) from None
    check_sources(link.missing_sources(), path, shipped, "link")
    return link


def load_link(name_or_path: str | Path) -> LinkProfile:
    """A packaged link by name, or a link YAML by path (``.yaml``/``.yml``).

    Raises:
        ScenarioError: unknown name (lists the valid ones), unreadable or
            invalid file.
    """
    if is_path(name_or_path):
        return _load_file(Path(name_or_path))
    with packaged_file(_FOLDER, str(name_or_path), "link",
                       ", or give {bandwidth_gbit_per_s: ..., latency_s: ...}") as path:
        return _load_file(path, shipped=True)


def resolve_link(spec: str | Path | LinkNumbers) -> LinkProfile:
    """The scenario's ``link:`` as a LinkProfile (by name, by numbers, or a name with overrides).

    An inline link without a latency gets 0 s; its sources say "scenario".

    Raises:
        ScenarioError: unknown link name.
    """
    if isinstance(spec, (str, Path)):
        return load_link(spec)
    if spec.name is not None:
        base = load_link(spec.name)
        update: dict[str, Any] = {}
        if spec.bandwidth is not None:
            update["bandwidth_bytes_per_s"] = spec.bandwidth
        if spec.latency_s is not None:
            update["latency_s"] = spec.latency_s
        sources = {**base.sources, **{k: "scenario" for k in update}}
        return base.model_copy(update={**update, "sources": sources})
    bw = spec.bandwidth
    return LinkProfile(name="custom", display_name=f"custom {bw * BITS_PER_BYTE / 1e9:g} Gb/s",
                       kind="custom", bandwidth_bytes_per_s=bw, latency_s=spec.latency_s or 0.0,
                       sources={f: "scenario" for f in _SOURCED_FIELDS})

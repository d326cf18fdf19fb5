"""Write a (calibrated) hardware profile as YAML that :func:`capsim.profiles.hardware.load_hardware` reads.

Public API:
    profile_yaml(profile, header) -> str
    write_profile(profile, path, header)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import yaml

from capsim.common.errors import ScenarioError
from capsim.profiles.hardware import HardwareProfile


class _Dumper(yaml.SafeDumper):
    """Block style for mappings, flow style for lists of scalars (curve knots)."""


def _list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flow = all(isinstance(v, (int, float)) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _list)


def profile_yaml(profile: HardwareProfile, header: str = "") -> str:
    """The profile as YAML text (fields in schema order, ``None`` fields left out),
    preceded by ``header`` as ``#`` comment lines."""
    body = yaml.dump(profile.model_dump(mode="json", exclude_none=True), Dumper=_Dumper,
                     sort_keys=False, width=100, allow_unicode=True)
    comment = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    return comment + body


def write_profile(profile: HardwareProfile, path: Path, header: str = "") -> Path:
    """Write :func:`profile_yaml` to ``path`` atomically (temp file + rename).

    Raises:
        ScenarioError: the folder cannot be created or written.
    """
    path = Path(path)
    text = profile_yaml(profile, header)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise ScenarioError(f"cannot write profile: {exc.strerror or exc}", file=str(path)) from None
    return path

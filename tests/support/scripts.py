"""The repository's scripts (``benchmarks/*.py``, ``benchmarks/calibration/*.py``) imported
as modules by the tests that check them.

Public API: load_script.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_script(relative: str, name: str | None = None, keep: bool = True) -> ModuleType:
    """The script at ``relative`` (to the repository root, e.g.
    ``"benchmarks/calibration/mla_decode_per_seq.py"``) imported as module ``name`` (default:
    the file's stem). It is in ``sys.modules`` while it runs (its dataclasses look their module
    up) and stays there unless ``keep`` is False.

    Raises:
        FileNotFoundError: no such script.
    """
    path = REPO / relative
    if not path.is_file():
        raise FileNotFoundError(path)
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        if not keep:
            del sys.modules[spec.name]
    return module

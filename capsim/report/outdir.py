"""The report directory given with ``-o``: which ones capsim may replace, and replacing one whole.

Every report (run, sweep, sizing) is built in a hidden sibling temporary
directory and swapped in at the end (:func:`write_atomically`); on any error
nothing is left half-written and a previous report stays as it was.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from capsim.common.errors import ScenarioError

REPORT_MARKERS = ("index.html", "summary.csv")   # every capsim report directory has both


def check_out_dir(out_dir: Path) -> None:
    """Refuse an output directory capsim must not replace (before any simulation runs).

    A report replaces ``out_dir`` whole, so it must not exist yet, be empty, or be
    a previous capsim report (it holds index.html and summary.csv); it must not be
    the working directory or one of its parents; its parent must be creatable.

    Raises:
        ScenarioError: naming the directory and what would be valid.
    """
    resolved = out_dir.resolve()
    cwd = Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        raise ScenarioError(f"-o {out_dir}: is the working directory or one of its parents; "
                            "give a directory for the report, e.g. reports/NAME")
    if resolved.exists():
        if not resolved.is_dir():
            raise ScenarioError(f"-o {out_dir}: exists and is not a directory")
        contents = {p.name for p in resolved.iterdir()}
        if contents and not all(m in contents for m in REPORT_MARKERS):
            raise ScenarioError(f"-o {out_dir}: exists and is not a capsim report (it would be "
                                "replaced whole); choose a new or empty directory")
    try:
        resolved.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScenarioError(f"-o {out_dir}: cannot create its parent: {exc.strerror}") from None


def write_atomically(out_dir: Path, build: Callable[[Path], None]) -> Path:
    """Run ``build(tmp)`` on a new empty sibling of ``out_dir``, then put it in ``out_dir``'s place.

    On any exception the temporary directory is removed, the previous
    ``out_dir`` is left untouched and the exception propagates. Returns ``out_dir``.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        os.chmod(tmp, 0o755)
        build(tmp)
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def replace_dir(tmp: Path, out_dir: Path) -> None:
    """Replace ``out_dir`` by ``tmp``: move the old one aside, rename, then delete the old one."""
    old = None
    if out_dir.exists() or out_dir.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        old.rmdir()
        os.replace(out_dir, old)
    try:
        os.replace(tmp, out_dir)
    except BaseException:
        if old is not None:
            os.replace(old, out_dir)
        raise
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink()

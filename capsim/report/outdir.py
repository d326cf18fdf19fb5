"""The report directory given with ``-o``: which ones capsim may replace, and replacing one whole.

Every report (run, sweep, sizing) is built in a hidden sibling temporary
directory and swapped in at the end (:func:`write_atomically`); on any error
nothing is left half-written and a previous report stays as it was. A run killed
hard (SIGKILL, power loss) cannot remove its temporary directory: each one holds
an owner file (host and process id), and the next report written next to it
removes it once that process is gone (:func:`remove_stale`).
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

from capsim.common.errors import ScenarioError

REPORT_MARKERS = ("index.html", "summary.csv")   # every capsim report directory has both

#: File inside a temporary report directory naming the process writing it: "HOST PID".
OWNER_FILE = ".capsim-owner"


def check_out_dir(out_dir: Path) -> None:
    """Refuse an output directory capsim must not replace (before any simulation runs).

    A report replaces ``out_dir`` whole, so it must not exist yet, be empty, or be
    a previous capsim report (it holds index.html and summary.csv); it must not be
    the working directory or one of its parents; its parent must be creatable and
    writable (a hidden directory is created there and removed again, so a read-only
    place such as ``/proc`` or a name the file system refuses is caught here, before
    anything runs).

    Raises:
        ScenarioError: naming the directory and what would be valid.
    """
    try:
        _check(out_dir, out_dir.resolve())
    except OSError as exc:            # e.g. a name the file system refuses (too long)
        raise ScenarioError(f"-o {out_dir}: {_why(exc)}; give a directory you can write, "
                            "e.g. reports/NAME") from None


def _check(out_dir: Path, resolved: Path) -> None:
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
        raise ScenarioError(f"-o {out_dir}: cannot create its parent: {_why(exc)}") from None
    try:
        Path(tempfile.mkdtemp(prefix=_tmp_prefix(resolved), dir=resolved.parent)).rmdir()
    except OSError as exc:
        raise ScenarioError(f"-o {out_dir}: cannot create a directory in {resolved.parent}: "
                            f"{_why(exc)}; give a directory you can write, e.g. "
                            "reports/NAME") from None


def check_writable_dir(out_dir: Path, option: str = "-o") -> None:
    """Refuse a folder capsim adds files to (``capsim calibrate -o``) unless it can be
    created and written, before any work and without creating it: a hidden directory
    is made in its nearest existing ancestor (or in it) and removed.

    Raises:
        ScenarioError: naming the folder and why.
    """
    try:
        probe = out_dir.resolve()
        while not probe.exists():
            probe = probe.parent
        if not probe.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "a file is in the way", str(probe))
        Path(tempfile.mkdtemp(prefix=".capsim-check-", dir=probe)).rmdir()
    except OSError as exc:
        raise ScenarioError(f"{option} {out_dir}: cannot write there: {_why(exc)}; give a "
                            "directory you can write, e.g. reports/NAME") from None


def write_atomically(out_dir: Path, build: Callable[[Path], None]) -> Path:
    """Run ``build(tmp)`` on a new empty sibling of ``out_dir``, then put it in ``out_dir``'s place.

    On any exception the temporary directory is removed, the previous
    ``out_dir`` is left untouched and the exception propagates; an ``OSError``
    (disk full, permission, a name too long) becomes a :class:`ScenarioError`
    naming the directory. Stale temporary directories of ``out_dir`` left by a
    killed run are removed first (:func:`remove_stale`). Returns ``out_dir``.
    """
    out_dir = Path(out_dir)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(out_dir)
        tmp = Path(tempfile.mkdtemp(prefix=_tmp_prefix(out_dir), dir=out_dir.parent))
    except OSError as exc:
        raise ScenarioError(f"cannot write the report: {_why(exc)}", file=str(out_dir)) from None
    try:
        os.chmod(tmp, 0o755)
        (tmp / OWNER_FILE).write_text(_owner(), encoding="utf-8")
        build(tmp)
        (tmp / OWNER_FILE).unlink()
        replace_dir(tmp, out_dir)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise ScenarioError(f"cannot write the report: {_why(exc)}",
                                file=str(out_dir)) from None
        raise
    return out_dir


def _tmp_prefix(out_dir: Path) -> str:
    return f".{out_dir.name}.tmp-"


def _owner() -> str:
    return f"{socket.gethostname()} {os.getpid()}"


def _why(exc: OSError) -> str:
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long"
    return exc.strerror or str(exc)


def remove_stale(out_dir: Path) -> list[Path]:
    """Remove ``out_dir``'s hidden temporary siblings whose writer is gone; returns them.

    A temporary directory (``.NAME.tmp-*``) is stale when its owner file names
    this host and a process id that no longer runs. One without an owner file
    (being created this instant, or left by a capsim older than the owner file)
    or owned by another host is left alone: removing a directory another
    process is still writing would break that process's report.
    """
    removed = []
    host = socket.gethostname()
    for tmp in out_dir.parent.glob(_tmp_prefix(out_dir) + "*"):
        try:
            owner_host, pid = (tmp / OWNER_FILE).read_text(encoding="utf-8").split()
            alive = owner_host != host or _running(int(pid))
        except (OSError, ValueError):
            continue
        if not alive and tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    return removed


def _running(pid: int) -> bool:
    """True if process ``pid`` exists on this host (signal 0 only checks)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:          # exists, another user's
        return True
    return True


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

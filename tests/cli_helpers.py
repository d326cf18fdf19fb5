"""Shared by the CLI tests: run ``capsim`` in-process and capture what it printed."""

from __future__ import annotations

import pytest

from capsim.cli.main import main


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``capsim ARGS``."""
    with pytest.raises(SystemExit) as exc:
        main(args)
        raise SystemExit(0)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err

"""What the shipped-scenario modules share: runs of a scenario that more than one of them reads."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from capsim.cli.main import main


@pytest.fixture(scope="session")
def rag_mix_run(tmp_path_factory, scenarios_dir) -> tuple[Path, str]:
    """(report folder, stdout) of ``capsim run scenarios/rag_mix.yaml -o FOLDER``, in-process,
    run once for test_scenarios.py and test_disagg_scenarios.py, which read the same report
    (6 s of the suite each; one pytest-xdist worker runs both modules: tests/conftest.py's
    ``SAME_WORKER``)."""
    out = tmp_path_factory.mktemp("rag") / "report"
    printed = io.StringIO()
    with pytest.raises(SystemExit) as exc, contextlib.redirect_stdout(printed):
        main(["run", str(scenarios_dir / "rag_mix.yaml"), "-o", str(out)])
        raise SystemExit(0)
    assert exc.value.code == 0
    return out, printed.getvalue()

"""A test that needs ../shared skips without it, except in CI (``CI=true``), where it fails:
the fidelity and reference tests cannot pass there by skipping."""

from __future__ import annotations

import pytest

from conftest import shared_or_skip


def test_in_ci_a_missing_shared_file_fails(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true: a test that needs ../shared fails"):
        shared_or_skip("reference/no-such-file.yaml", "a file")


@pytest.mark.parametrize("ci", [None, "false", ""])
def test_outside_ci_a_missing_shared_file_skips(monkeypatch, ci):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match="a file not found at .*no-such-file.yaml"):
        shared_or_skip("reference/no-such-file.yaml", "a file")

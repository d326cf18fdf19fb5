"""The collector settings a command runs under (capsim.cli.collector)."""

from __future__ import annotations

import gc

from capsim.cli.collector import GEN0_THRESHOLD, fewer_collections


def test_imports_frozen_and_young_threshold_raised_then_restored():
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    with fewer_collections():
        assert gc.get_threshold() == (GEN0_THRESHOLD, *before[1:])
        assert gc.get_freeze_count() > 1000           # this process's modules, at least
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_restored_when_the_command_fails():
    before = gc.get_threshold()
    try:
        with fewer_collections():
            raise SystemExit(2)
    except SystemExit:
        pass
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0

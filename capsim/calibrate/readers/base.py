"""What a result reader declares: :class:`ResultFormat`.

Public API:
    ResultFormat
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from capsim.calibrate.measured import MeasuredRun


@dataclass(frozen=True)
class ResultFormat:
    """One supported result format.

    Attributes:
        key: short name (``vllm-bench``), kept in :attr:`MeasuredRun.format`.
        label: the tool, for messages ("vllm bench serve").
        source: the schema's source: repository, file and commit.
        hint: how to get a file this reader can use (ends every missing-field error).
        runs: the file's runs from its JSON documents (one per line for JSON lines).
        describe: one line about a run, listed when a file holds several.
        read: ``read(run, path, run_label)`` → :class:`MeasuredRun`; raises
            :class:`~capsim.common.errors.ScenarioError` naming missing fields.
    """

    key: str
    label: str
    source: str
    hint: str
    runs: Callable[[list[Any]], list[Any]]
    describe: Callable[[Any], str]
    read: Callable[[Any, str, str], MeasuredRun]

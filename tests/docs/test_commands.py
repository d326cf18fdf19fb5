"""Every ``capsim`` command the documentation shows works as written.

The commands are collected from the fenced ``bash`` / ``console`` / ``sh`` blocks of
``README.md`` and ``docs/**/*.md`` (a ``capsim …`` line, or a ``capsim …`` part of an
``a && b`` line). The quick ones (``validate``, ``hardware``, ``models``, ``engines``,
``roofline``, ``--help``, ``--template``) run for real and exit 0. The long ones
(``run``, ``sweep``, ``size``, ``calibrate``, ``compare``) are parsed by the command line
itself (every option known, every value of the right type), every file they name exists,
and ``capsim validate`` accepts the scenario they name with the same ``--set`` values.
A page whose commands work on files it has the reader write is run by a test of its own.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"

#: Pages whose commands use files the page has the reader write, → the test that runs them.
RUN_BY = {"docs/own-gpu.md": "tests/docs/test_own_gpu.py"}
QUICK = {"validate", "hardware", "models", "engines", "roofline"}
LONG = {"run", "sweep", "size", "calibrate", "compare"}
BLOCK = re.compile(r"^```(?:bash|console|sh|shell)\n(.*?)^```", flags=re.S | re.M)


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _commands(text: str) -> list[str]:
    """The ``capsim`` commands of one fenced block: lines joined while a quote is open,
    ``#`` comments dropped, ``a && b`` split, a leading ``$ `` prompt removed."""
    out, pending = [], ""
    for line in text.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        try:
            shlex.split(pending, comments=True)
        except ValueError:                     # an open quote: the command goes on
            continue
        for part in re.split(r"\s&&\s", pending.strip().removeprefix("$ ")):
            words = shlex.split(part, comments=True)
            if words and words[0] == "capsim":
                out.append(shlex.join(words))
        pending = ""
    assert not pending, f"unterminated command: {pending!r}"
    return out


def _collected() -> list[tuple[str, str]]:
    found = []
    for page in _pages():
        rel = page.relative_to(REPO).as_posix()
        for block in BLOCK.findall(page.read_text()):
            found += [(rel, cmd) for cmd in _commands(block)]
    return found


COMMANDS = _collected()


def test_the_pages_show_commands_of_every_kind():
    kinds = {shlex.split(cmd)[1] for _, cmd in COMMANDS}
    assert {"run", "validate", "sweep", "size", "roofline", "hardware"} <= kinds, kinds
    for page, test in RUN_BY.items():
        assert any(p == page for p, _ in COMMANDS), page
        assert (REPO / test).is_file(), test


def test_collecting_joins_quoted_lines_and_splits_chains():
    block = ("mkdir -p x && capsim hardware --template a -o x/a.yaml\n"
             "capsim size s.yaml --set 'variants=[{name: a,\n    engine: {}}]'   # note\n")
    assert _commands(block) == ["capsim hardware --template a -o x/a.yaml",
                                "capsim size s.yaml --set 'variants=[{name: a,\n"
                                "    engine: {}}]'"]


_validated: dict[tuple, tuple[int, str]] = {}


@pytest.mark.parametrize("page,command", COMMANDS,
                         ids=[f"{p}: {c[:60]}" for p, c in COMMANDS])
def test_a_documented_command_works(page, command, run_cli, monkeypatch, tmp_path):
    if page in RUN_BY:
        pytest.skip(f"run as written, with the files the page writes, by {RUN_BY[page]}")
    words = shlex.split(command)[1:]
    sub = words[0]
    monkeypatch.chdir(REPO)
    if sub in QUICK or "--help" in words or "--template" in words:
        code, out, err = run_cli(_out_to(words, tmp_path))
        assert code == 0, f"{command}\n{out}{err}"
        return
    assert sub in LONG, f"{command}: a command this test does not know (add it above)"
    _parses(words)
    for path in _paths(words):
        if path.startswith("../shared/") and not SHARED.is_dir():
            continue                           # the reference data, optional here
        assert (REPO / path).exists(), f"{command}: {path} does not exist"
    scenario = _scenario(words)
    if scenario is not None:
        sets = tuple(v for k, v in zip(words, words[1:]) if k == "--set")
        key = (scenario, sets)
        if key not in _validated:
            args = ["validate", scenario, *(a for s in sets for a in ("--set", s))]
            code, out, err = run_cli(args)
            _validated[key] = (code, out + err)
        code, text = _validated[key]
        assert code == 0, f"capsim validate refuses the scenario of {command}:\n{text}"


def _out_to(words: list[str], tmp_path: Path) -> list[str]:
    """``words`` with an ``-o`` / ``--out`` file moved into ``tmp_path``."""
    out = list(words)
    for i, w in enumerate(out[:-1]):
        if w in ("-o", "--out"):
            out[i + 1] = str(tmp_path / Path(out[i + 1]).name)
    return out


def _parses(words: list[str]) -> None:
    """The command line accepts ``words`` (options known, values of the right type)."""
    from capsim.cli.main import cli

    with cli.make_context("capsim", list(words), resilient_parsing=True) as ctx:
        cmd = cli.get_command(ctx, words[0])
        assert cmd is not None, words[0]
        cmd.make_context(words[0], list(words[1:]), parent=ctx)


def _paths(words: list[str]) -> list[str]:
    """The files a command names: positional arguments and path-like option values (not
    ``-o``, which a command creates; not ``--set`` values, which are scenario values)."""
    found, skip = [], False
    for prev, w in zip(["", *words], words):
        if skip or prev in ("-o", "--out", "--set"):
            skip = False
            continue
        if w.startswith("-"):
            continue
        if "/" in w or w.endswith((".yaml", ".yml", ".csv", ".json", ".jsonl")):
            found.append(w)
    return found


def _scenario(words: list[str]) -> str | None:
    """The scenario file a long command runs (``compare RESULT SCENARIO``; ``calibrate
    --scenario S``; else the first positional), or None."""
    if words[0] == "calibrate":
        return words[words.index("--scenario") + 1] if "--scenario" in words else None
    positional = [w for prev, w in zip(["", *words[1:]], words[1:])
                  if not w.startswith("-") and not prev.startswith("-")]
    if words[0] == "compare":
        return positional[1] if len(positional) > 1 else None
    return positional[0] if positional else None

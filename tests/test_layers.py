"""The package's dependencies point one way (ARCHITECTURE.md "Layers").

Reads every module of ``capsim/`` with :mod:`ast` (nothing is imported) and checks
that (1) a module imports only from its own package or from packages in a lower
layer, and (2) no set of modules imports itself around a cycle. Imports inside
functions count; imports under ``if TYPE_CHECKING:`` (annotations only) do not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "capsim"

#: Bottom to top; a package may import from any package listed before it.
LAYERS = ("common", "results", "profiles", "kv", "cost", "scenario", "workload", "engine",
          "sim", "metrics", "studies", "calibrate", "report", "cli")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """capsim modules ``path`` imports (``from capsim.x import y`` → ``capsim.x`` and
    ``capsim.x.y`` when that is a module), outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text(), str(path))
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING"
            for n in ast.walk(node)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("capsim")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.startswith("capsim"):
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


MODULES = {_module(p): p for p in sorted(ROOT.rglob("*.py"))}
GRAPH = {mod: {m for m in _imports(path) if m in MODULES and m != mod}
         for mod, path in MODULES.items()}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_package_is_in_a_layer():
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(LAYERS)
    top = {p.name for p in ROOT.glob("*.py")}
    assert top == {"__init__.py", "__main__.py"}, "the top level keeps only packages"


def test_every_folder_of_modules_is_a_package():
    """setuptools' ``find`` ships only folders with an ``__init__.py``: a folder without
    one works from a checkout and is missing from ``pip install .``."""
    folders = {p.parent for p in ROOT.rglob("*.py")}
    assert sorted(str(f) for f in folders if not (f / "__init__.py").is_file()) == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m)))
def test_imports_point_down_the_layers(module):
    rank = LAYERS.index(_layer(module))
    upward = sorted(m for m in GRAPH[module]
                    if _layer(m) is not None and LAYERS.index(_layer(m)) > rank)
    assert not upward, f"{module} ({_layer(module)}) imports from a higher layer: {upward}"


def test_no_import_cycle():
    """Tarjan's strongly connected components over the module graph: all of size 1."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert cycles == []


def test_the_reader_sees_imports_and_skips_annotation_only_ones(tmp_path):
    """An import of a higher layer is an edge; one under ``if TYPE_CHECKING:`` is not."""
    (tmp_path / "a.py").write_text("from capsim.cli.main import main\n"
                                   "if TYPE_CHECKING:\n    from capsim.report import run\n")
    assert _imports(tmp_path / "a.py") == {"capsim.cli.main", "capsim.cli.main.main"}
    assert sum(map(len, GRAPH.values())) > 300              # the real graph was read
    assert "capsim.scenario.run_config" in GRAPH["capsim.engine.replica"]

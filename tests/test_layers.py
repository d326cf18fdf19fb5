"""The package's dependencies point one way (docs/architecture.md "The layers").

Reads every module of ``capsim/`` with :mod:`ast` (nothing is imported) and checks
that (1) a module imports only from its own package or from packages in a lower
layer, and (2) no set of modules imports itself around a cycle. Every import counts:
inside functions, relative ones, and those under ``if TYPE_CHECKING:`` — a loop dodged
at run time is still a loop in the design, and an annotation that names a higher
layer's type still makes the lower layer know about it. The graph is the one
issue 28's acceptance check reads, plus edges into a module's own parent package,
which that check drops: a package ``__init__`` that re-exported a submodule
importing it back would be a real loop.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "capsim"

#: Bottom to top; a package may import from any package listed before it.
LAYERS = ("common", "results", "profiles", "kv", "cost", "scenario", "workload", "engine",
          "sim", "metrics", "studies", "calibrate", "report", "cli")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, module: str | None = None) -> set[str]:
    """Names of what ``path`` imports that may be capsim modules: ``from capsim.x import y``
    → ``capsim.x`` and ``capsim.x.y`` (kept when that is a module); relative imports are
    resolved against the package of ``module`` (default: the module ``path`` is)."""
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("capsim")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = (module or _module(path)).split(".")
                package = package if path.name == "__init__.py" else package[:-1]
                base = package[: len(package) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("capsim"):
                out.add(name)
                out |= {f"{name}.{a.name}" for a in node.names}
    return out


MODULES = {_module(p): p for p in sorted(ROOT.rglob("*.py"))}


@functools.cache
def _graph() -> dict[str, set[str]]:
    """Module → the capsim modules it imports: read when a test first asks (once per
    process), not at import: every pytest-xdist worker collects this file, one runs it."""
    return {mod: {m for m in _imports(path) if m in MODULES and m != mod}
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
    upward = sorted(m for m in _graph()[module]
                    if _layer(m) is not None and LAYERS.index(_layer(m)) > rank)
    assert not upward, f"{module} ({_layer(module)}) imports from a higher layer: {upward}"


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's strongly connected components of ``graph`` with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
                cycles.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycle():
    """Every strongly connected component of the module graph is one module
    (``TYPE_CHECKING`` imports included: a loop dodged at run time is still a loop)."""
    assert sorted(sorted(c) for c in _cycles(_graph())) == []


def test_a_new_loop_fails():
    """An edge that closes a loop, directly or through a third module, is found whole."""
    graph = {m: set(ts) for m, ts in _graph().items()}
    graph["capsim.common.errors"] |= {"capsim.cli.main"}
    graph["capsim.profiles.models"] |= {"capsim.profiles.hardware"}
    graph["capsim.profiles.hardware"] |= {"capsim.profiles.quantization"}
    graph["capsim.profiles.quantization"] |= {"capsim.profiles.models"}
    loops = _cycles(graph)
    assert any("capsim.common.errors" in c for c in loops)
    assert any({"capsim.profiles.models", "capsim.profiles.hardware",
                "capsim.profiles.quantization"} <= c for c in loops)


def test_the_reader_counts_every_import(tmp_path):
    """Imports at the top, in functions, relative ones and those under ``if TYPE_CHECKING:``
    are all edges."""
    (tmp_path / "a.py").write_text("from capsim.cli.main import main\n"
                                   "if TYPE_CHECKING:\n    from capsim.report import run\n"
                                   "def f():\n    import capsim.sim.simulate\n")
    assert _imports(tmp_path / "a.py") == {"capsim.cli.main", "capsim.cli.main.main",
                                           "capsim.report", "capsim.report.run",
                                           "capsim.sim.simulate"}
    assert sum(map(len, _graph().values())) > 300              # the real graph was read
    assert "capsim.scenario.run_config" in _graph()["capsim.engine.replica"]


def test_the_reader_resolves_relative_imports(tmp_path):
    """``from . import x`` and ``from ..y import z`` name the modules they load, in a module
    and in a package's ``__init__``."""
    (tmp_path / "page.py").write_text("from . import cdf\nfrom ..plotting import NAME_CHARS\n")
    assert _imports(tmp_path / "page.py", "capsim.report.run.page") == {
        "capsim.report.run", "capsim.report.run.cdf",
        "capsim.report.plotting", "capsim.report.plotting.NAME_CHARS"}
    (tmp_path / "__init__.py").write_text("from .cdf import Distribution\n")
    assert _imports(tmp_path / "__init__.py", "capsim.report.run") == {
        "capsim.report.run.cdf", "capsim.report.run.cdf.Distribution"}

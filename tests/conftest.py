"""What the tests share: where the repository and the reference data are, capsim's command
line in-process, scenario files written for a test, and hand-made request traces.

``tests/`` mirrors the packages of ``capsim/`` (``tests/kv`` tests ``capsim.kv``, ...);
``tests/shipped_scenarios`` runs the files of ``scenarios/`` end to end. Test modules are
imported with ``--import-mode=importlib`` (pyproject.toml): two folders may hold files of
the same name, and no test module imports another or this file, so the helpers here reach
the tests as fixtures.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _cache_bytecode() -> None:
    """With PYTHONDONTWRITEBYTECODE set (as in many container images), every pytest process
    (each xdist worker) would rewrite the asserts of all 3,000+ tests' modules and compile
    capsim from source again: 13 s of CPU per process for collection alone, 6 s with the
    compiled files kept. Keep them, but under .pytest_cache/pycache (sys.pycache_prefix,
    which pytest's assertion rewriting honours), never beside the sources, and so for the
    ``capsim`` subprocesses a test starts."""
    if not sys.dont_write_bytecode:
        return
    prefix = os.environ.get("PYTHONPYCACHEPREFIX") or str(REPO / ".pytest_cache" / "pycache")
    sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


_cache_bytecode()

import numpy as np  # after _cache_bytecode(): capsim compiles once
import pytest
import yaml

from capsim.workload import RequestTrace

#: The reference data (traces, Vidur's profiling, seeds) next to the repository:
#: optional; the tests that read it are skipped without it.
SHARED = REPO.parent / "shared"


# ------------------------------------------------------------------- xdist workers

_TERMINAL_ENV = ("COLUMNS", "LINES")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config) -> None:
    """With pytest-xdist, ``python -m pytest`` runs one worker per CPU (``-n auto --dist
    loadscope --no-loadscope-reorder``, modules in :func:`pytest_collection_modifyitems`'s
    order) unless ``-n`` is given; ``-p no:xdist`` runs in one process (in addopts ``-n``
    would be an unknown option there).

    loadscope sends a module's tests to one worker, so a module-scoped fixture (a simulated
    scenario, the fidelity benchmark's rows) is computed once, not once per worker that
    runs one of its tests. (``--dist loadgroup`` with ``xdist_group`` marks would do it per
    mark, but pytest-xdist 3.8 renames the test ids through ``item._nodeid``, which pytest 9
    no longer reads: the marks group nothing.)"""
    if hasattr(config, "workerinput") or os.environ.get("PYTEST_XDIST_WORKER"):
        return       # a worker: setting -n here would make every worker a controller
    if config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses") is None:
        config.option.numprocesses = "auto"
        if config.getoption("dist") == "no":
            config.option.dist = "loadscope"
            config.option.loadscopereorder = False


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """pytest-xdist controller: hand each worker the terminal size variables of the run as
    started (None when unset), and whether to put the long modules first (a worker reads
    ``--dist`` from the command line only, not :func:`pytest_cmdline_main`'s default)."""
    for name in _TERMINAL_ENV:
        node.workerinput[f"capsim_env_{name}"] = os.environ.get(name)
    node.workerinput["capsim_long_first"] = (node.config.getoption("dist") == "loadscope"
                                             and not node.config.option.loadscopereorder)


#: Fixture scopes computed once per module or package: such a module is long (it simulates
#: a scenario or prices the fidelity cases before its first test).
_SHARED_SCOPES = ("module", "package")

#: The longest modules, started first (longest-processing-time first: the short ones left
#: for the end fill both workers up): CPU seconds of each module's tests (setup included) in
#: one process (``-p no:xdist``), measured package by package at commit 43eee3e on the shared
#: 2-CPU machine; for the studies modules, whose process pools are counted when the pool's
#: server ends, half their wall time; test_report.py with its report written once. Every
#: module of 2 s or more; only their order counts.
_LONG_MODULES_S = {
    "tests/engine/test_macro_steps.py": 55.6, "tests/profiles/test_trust.py": 34.9,
    "tests/sim/test_fleet.py": 25.6, "tests/cli/test_cli.py": 17.5,
    "tests/studies/test_sweep.py": 16.2, "tests/studies/test_sizing.py": 14.8,
    "tests/studies/test_queueing.py": 14.1,
    "tests/shipped_scenarios/test_disagg_scenarios.py": 13.2,
    "tests/shipped_scenarios/test_scenarios.py": 12.7,
    "tests/calibrate/test_tp_step_gap.py": 12.4, "tests/report/test_report.py": 11.2,
    "tests/report/test_day_report.py": 11.1, "tests/metrics/test_day.py": 9.7,
    "tests/cli/test_bad_input_late.py": 9.6, "tests/cli/test_bad_input_runners.py": 9.1,
    "tests/report/test_results_json.py": 8.6, "tests/profiles/test_fitted.py": 8.3,
    "tests/studies/test_mix.py": 7.4, "tests/engine/test_step_trace.py": 7.4,
    "tests/studies/test_variants.py": 7.0, "tests/cli/test_multinode_cases.py": 6.3,
    "tests/cli/test_stop.py": 6.1, "tests/calibrate/test_calibrate.py": 5.8,
    "tests/shipped_scenarios/test_day_in_the_life.py": 5.0,
    "tests/shipped_scenarios/test_hetero_fleet.py": 4.8, "tests/docs/test_site.py": 4.2,
    "tests/report/test_compare_report.py": 4.2, "tests/cli/test_first_screen.py": 4.2,
    "tests/studies/test_percentiles.py": 4.0, "tests/kv/test_allocator.py": 4.0,
    "tests/shipped_scenarios/test_moe_deepseek_v3.py": 3.9,
    "tests/sim/test_closed_loop.py": 3.4, "tests/sim/test_pooled.py": 3.2,
    "tests/docs/test_commands.py": 3.2, "tests/calibrate/test_calibrate_vidur.py": 2.9,
    "tests/cost/test_moe_cost.py": 2.9, "tests/calibrate/test_compare.py": 2.5,
    "tests/cli/test_shedding_report.py": 2.2, "tests/cli/test_bad_input_sweep.py": 2.2,
    "tests/docs/test_own_gpu.py": 2.0,
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    """On the workers of the default run (:func:`pytest_cmdline_main`): the longest modules
    first (:data:`_LONG_MODULES_S`, longest first), then those with a module- or
    package-scoped fixture, then the rest, each by its number of tests, most first (within
    a module the order is kept). loadscope hands the modules out in this order, so the long
    ones start at the beginning and the short ones fill both workers up at the end, instead
    of one worker finishing a long module alone."""
    if not getattr(config, "workerinput", {}).get("capsim_long_first"):
        return
    count: dict[str, int] = {}
    shared: set[str] = set()
    for item in items:
        module = item.nodeid.split("::")[0]
        count[module] = count.get(module, 0) + 1
        info = getattr(item, "_fixtureinfo", None)
        if info is not None and any(defs and defs[-1].scope in _SHARED_SCOPES
                                    for defs in info.name2fixturedefs.values()):
            shared.add(module)
    first = {module: i for i, module in enumerate(sorted(
        count, key=lambda m: (-_LONG_MODULES_S.get(m, 0.0), m not in shared, -count[m])))}
    items.sort(key=lambda item: first[item.nodeid.split("::")[0]])


#: Modules that read one session-scoped fixture (the run of a scenario): loadscope hands
#: each group to one worker as one unit, so the fixture is computed once, not once per worker.
SAME_WORKER = {
    "tests/shipped_scenarios/test_scenarios.py": "rag_mix_run",       # shipped_scenarios/
    "tests/shipped_scenarios/test_disagg_scenarios.py": "rag_mix_run",  # conftest.py
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist controller, ``--dist loadscope``: loadscope's scheduling with the modules
    of each :data:`SAME_WORKER` group as one scope (one work unit); any other ``--dist``:
    pytest-xdist's own."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupedScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = SAME_WORKER.get(nodeid.split("::")[0])
            return f"same worker: {group}" if group else super()._split_scope(nodeid)

    return GroupedScopes(config, log)


def pytest_configure(config) -> None:
    """A pytest-xdist worker starts with COLUMNS and LINES set to the controller's terminal
    size even when the run had neither; the CLI would then fold its tables and one-line
    errors at 80 columns (``capsim.cli.common.make_console``). Give the worker the run's own
    values, so a test sees the same environment with or without workers."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return
    for name in _TERMINAL_ENV:
        value = workerinput.get(f"capsim_env_{name}")
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


# ------------------------------------------------------------------------------ paths


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def scenarios_dir() -> Path:
    """The shipped scenario files."""
    return REPO / "scenarios"


def load_fidelity(name: str):
    """benchmarks/fidelity.py imported as module ``name`` (registered while it executes:
    its dataclasses look their module up)."""
    from support.scripts import load_script

    return load_script("benchmarks/fidelity.py", name, keep=False)


def shared_or_skip(relative: str, what: str) -> Path:
    """``../shared/RELATIVE``, or skip the test (with where it was looked for) if absent; in CI
    (``CI=true``) a test that cannot find it fails instead, so the fidelity and reference tests
    never pass there by skipping."""
    path = SHARED / relative
    if not path.exists():
        message = f"{what} not found at {path} (../shared absent)"
        if os.environ.get("CI", "").strip().lower() == "true":
            pytest.fail(f"{message}; CI=true: a test that needs ../shared fails instead of "
                        "skipping", pytrace=False)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def azure_conv_trace() -> Path:
    """The Azure LLM inference 2023 conversation trace (19,366 requests)."""
    return shared_or_skip("reference/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
                          "Azure 2023 conversation trace")


@pytest.fixture(scope="session")
def splitwise_conv_trace() -> Path:
    """The same conversation trace in Splitwise's column format."""
    return shared_or_skip("reference/traces/splitwise_conv.csv",
                          "Splitwise conversation trace")


@pytest.fixture(scope="session")
def vidur_profiling() -> Path:
    """Microsoft Vidur's profiling folder (its measurements are under data/profiling)."""
    shared_or_skip("reference/vidur_profiling/data/profiling", "Vidur profiling data")
    return SHARED / "reference" / "vidur_profiling"


# -------------------------------------------------------------------------- the CLI


@pytest.fixture
def run_cli(capsys):
    """``run_cli(ARGS)`` → (exit code, stdout, stderr) of ``capsim ARGS``, in-process."""
    from capsim.cli.main import main

    def run(args: list[str]) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exc:
            main(args)
            raise SystemExit(0)
        out = capsys.readouterr()
        return exc.value.code, out.out, out.err
    return run


# ------------------------------------------------------------------ scenario files


def _write_scenario(directory: Path, doc: dict, name: str = "s.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def write_scenario():
    """``write_scenario(DIRECTORY, DOC, NAME="s.yaml")`` → the path of DOC written as YAML
    (keys in DOC's order)."""
    return _write_scenario


def _disagg(p: int = 1, d: int = 1, link="infiniband-ndr", **extra) -> dict:
    out = {"prefill": {"num_replicas": p}, "decode": {"num_replicas": d}, "link": link}
    for key, value in extra.items():
        if key in ("prefill", "decode"):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


@pytest.fixture(scope="session")
def disagg():
    """``disagg(P, D, LINK, **extra)`` → a variant's ``disaggregation:`` section: P prefill
    and D decode replicas over LINK; ``prefill=`` / ``decode=`` dicts add to a pool."""
    return _disagg


@pytest.fixture
def disagg_scenario(tmp_path):
    """``disagg_scenario(VARIANTS, **top)`` → the path of the disaggregation tests' scenario
    (Llama-3.1-8B on H100s, 120 chat requests), written in tmp_path, with these variants
    and top-level keys replaced by ``top``."""
    def write(variants: list[dict], **top) -> Path:
        doc = {"name": "disagg", "seed": 3, "model": "llama-3.1-8b", "hardware": "h100-sxm",
               "engine": {"max_model_len": 8192},
               "workload": {"num_requests": 120,
                            "arrival": {"process": "poisson", "rate_per_s": 6},
                            "classes": [{"name": "chat", "weight": 1,
                                         "prompt_tokens": {"dist": "uniform", "min": 50,
                                                           "max": 4000},
                                         "output_tokens": {"dist": "uniform", "min": 1,
                                                           "max": 300}}]},
               "variants": variants, **top}
        return _write_scenario(tmp_path, doc)
    return write


# ------------------------------------------------------------------------- traces


def _trace_of(rows: list[tuple], classes: tuple[str, ...] = ("chat",)) -> RequestTrace:
    """rows: (arrival_s, prompt_tokens, output_tokens[, class_id])."""
    rows = [r if len(r) == 4 else (*r, 0) for r in rows]
    a, p, o, c = (np.array(col) for col in zip(*rows))
    n = len(rows)
    return RequestTrace(arrival_s=a.astype(np.float64), prompt_tokens=p.astype(np.int64),
                        output_tokens=o.astype(np.int64), class_id=c.astype(np.int32),
                        prefix_id=np.full(n, -1, np.int32), class_names=classes)


@pytest.fixture(scope="session")
def trace_of():
    """``trace_of(ROWS, CLASSES=("chat",))`` → a RequestTrace of exactly these requests."""
    return _trace_of

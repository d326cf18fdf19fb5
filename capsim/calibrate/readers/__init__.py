"""Benchmark-client results → :class:`~capsim.calibrate.measured.MeasuredRun`, format detected
from the content.

- ``vllm-bench`` — ``vllm bench serve --save-result --save-detailed`` JSON (JSON lines
  with ``--append-result``): keys ``model_id``, ``num_prompts``, ``start_times``, … or the
  per-request lists ``input_lens`` / ``ttfts`` / ``itls``;
- ``sglang-bench`` — ``python -m sglang.bench_serving --output-file F --output-details``
  JSON lines: ``total_output_tokens_retokenized``, ``mean_e2e_latency_ms``, …;
- ``guidellm`` — ``guidellm benchmark --output-path F.json`` (or ``F.yaml``): a
  ``benchmarks`` list;
- ``aiperf`` — AIPerf ``profile_export.jsonl``: lines with ``metadata.request_start_ns``
  (earlier builds: ``timestamp_ns``) and ``metrics``;
- ``genai-perf`` — genai-perf ``profile_export.json``: an ``experiments`` list.

Each reader module cites the tool's source file and commit it follows. The summaries
genai-perf and AIPerf write next to their per-request files
(``profile_export_genai_perf.json`` / ``.csv``, ``profile_export_aiperf.json`` /
``.csv``) hold statistics only and are refused with a pointer to the per-request file;
so is a vLLM / SGLang result saved without its per-request lists (the clients'
default), quoting the statistics it does hold. A capsim ``results.json`` (``capsim
run``'s, vLLM's key names) is refused as simulated, not measured. Every reader was tried
on result files published by others (tests/calibrate/fixtures/published/README.md).

Public API:
    FORMATS, detect, read_result
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capsim.calibrate.measured import MeasuredRun, load_documents
from capsim.calibrate.readers.aiperf import AIPERF, is_aiperf_record
from capsim.calibrate.readers.base import ResultFormat
from capsim.calibrate.readers.genai_perf import GENAI_PERF, is_genai_perf_export
from capsim.calibrate.readers.guidellm import GUIDELLM, is_guidellm
from capsim.calibrate.readers.serving_bench import SGLANG, SIMULATED, VLLM, is_sglang, is_vllm
from capsim.common.errors import ScenarioError

FORMATS: tuple[ResultFormat, ...] = (VLLM, SGLANG, GUIDELLM, AIPERF, GENAI_PERF)

_TESTS = ((is_guidellm, GUIDELLM), (is_genai_perf_export, GENAI_PERF),
          (is_aiperf_record, AIPERF), (is_sglang, SGLANG), (is_vllm, VLLM))

EXPECTED = ("expected a vllm bench serve --save-result JSON (model_id, input_lens, ttfts, "
            "itls, …), an sglang.bench_serving --output-file JSON line (input_lens, ttfts, "
            "itls, total_output_tokens_retokenized, …), a GuideLLM report (benchmarks), an "
            "AIPerf profile_export.jsonl (metadata.request_start_ns, metrics) or a genai-perf "
            "profile_export.json (experiments)")


#: The first cell of the statistics CSV genai-perf and AIPerf write next to their
#: per-request files (``profile_export_genai_perf.csv``, ``profile_export_aiperf.csv``).
CSV_HEADER = "Metric,"


def _keys(doc: Any) -> str:
    if isinstance(doc, dict):
        if not doc:
            return "an empty JSON object"
        keys = list(doc)[:8]
        return "a JSON object with keys " + ", ".join(keys) + (", …" if len(doc) > 8 else "")
    return f"a JSON {type(doc).__name__}"


def detect(docs: list[Any], path: str | Path) -> ResultFormat:
    """The format of a file's JSON documents (judged on the first one).

    Raises:
        ScenarioError: an empty file, a genai-perf / AIPerf statistics summary, or
            anything else, naming the formats expected and what was found.
    """
    if not docs:
        raise ScenarioError(f"empty file; {EXPECTED}", file=str(path))
    first = docs[0]
    for test, fmt in _TESTS:
        if test(first):
            return fmt
    if isinstance(first, dict) and "workload" in first and ("model" in first
                                                             or "hardware" in first):
        raise ScenarioError("a capsim scenario, not a benchmark result: the measured run's "
                            "file goes here, the scenario in its own argument (capsim compare "
                            "RESULT SCENARIO; capsim calibrate --from RESULT --scenario "
                            "SCENARIO)", file=str(path))
    if isinstance(first, dict) and "capsim_results" in first:
        variants = first.get("variants")
        count = f"{len(variants)} variant(s)" if isinstance(variants, list) else "variants"
        raise ScenarioError(f"a capsim run report's results.json ({count}): {SIMULATED}",
                            file=str(path))
    if isinstance(first, dict) and ("input_config" in first or _statistics_summary(first)):
        raise ScenarioError(
            "a genai-perf / AIPerf summary (profile_export_genai_perf.json / "
            "profile_export_aiperf.json) holds statistics only: missing per-request records; "
            "give the profile_export.json (genai-perf) or profile_export.jsonl (AIPerf) from "
            "the same artifacts directory", file=str(path))
    raise ScenarioError(f"not a supported benchmark result ({_keys(first)}); {EXPECTED}",
                        file=str(path))


def read_result(path: str | Path, run: int | None = None) -> MeasuredRun:
    """Read one run of a benchmark result file, detecting its format from the content.

    Args:
        path: the result file.
        run: which run (0-based) when the file holds several (JSON lines of appended
            runs, GuideLLM benchmarks, genai-perf experiments); None = the only one.

    Raises:
        ScenarioError: unreadable or unrecognised file, missing fields (naming them and
            how to get them), a field of the wrong type or shape, several runs and no
            ``run``, ``run`` out of range.
    """
    try:
        docs = load_documents(path)
    except ScenarioError:
        if _first_line(path).startswith(CSV_HEADER):
            raise ScenarioError(
                "a genai-perf / AIPerf statistics CSV (profile_export_genai_perf.csv / "
                "profile_export_aiperf.csv) holds statistics only: missing per-request "
                "records; give the profile_export.json (genai-perf) or profile_export.jsonl "
                "(AIPerf) from the same artifacts directory", file=str(path)) from None
        raise
    fmt = detect(docs, path)
    runs = fmt.runs(docs)
    if not runs:
        raise ScenarioError(f"{fmt.label} result holds no run", file=str(path))
    if run is None and len(runs) > 1:
        listing = "; ".join(f"{i}: {fmt.describe(r)}" for i, r in enumerate(runs[:12]))
        raise ScenarioError(f"{fmt.label} result holds {len(runs)} runs ({listing}"
                            f"{'; …' if len(runs) > 12 else ''}); choose one with --run N",
                            file=str(path))
    index = 0 if run is None else run
    if not 0 <= index < len(runs):
        raise ScenarioError(f"--run {index}: the {fmt.label} result holds {len(runs)} run(s), "
                            f"numbered 0 to {len(runs) - 1}", file=str(path))
    label = f"run {index} of {len(runs)}: {fmt.describe(runs[index])}" if len(runs) > 1 else ""
    try:
        return fmt.read(runs[index], str(path), label)
    except (TypeError, KeyError, AttributeError, IndexError, ValueError) as exc:
        # A field of the wrong type or shape deep in the file (hand-edited, cut short or
        # written by another version): one line, not a traceback.
        where = f" ({label})" if label else ""
        raise ScenarioError(f"{fmt.label} result{where}: not laid out as {fmt.label} writes it "
                            f"({type(exc).__name__}: {' '.join(str(exc).split())})",
                            file=str(path)) from None


def _statistics_summary(doc: dict) -> bool:
    """A genai-perf / AIPerf summary without its ``input_config``: metrics as objects of
    statistics (``{"time_to_first_token": {"unit": "ms", "avg": …, "p99": …}}``)."""
    return any(isinstance(doc.get(k), dict) and "avg" in doc[k]
               for k in ("time_to_first_token", "request_latency", "ttft"))


def _first_line(path: str | Path) -> str:
    """The file's first line (at most 256 characters), "" when unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline(256)
    except OSError:
        return ""

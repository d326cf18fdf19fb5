"""``vllm bench serve`` and ``python -m sglang.bench_serving`` results.

Both clients keep vLLM's old ``benchmark_serving.py`` layout: one JSON object per run
with run statistics and, when asked for, per-request lists of one entry per request
(``input_lens``, ``output_lens``, ``ttfts`` s, ``itls`` list of chunk gaps s, ``errors``).

**vllm bench serve** — schema: ``vllm/benchmarks/serve.py`` of vllm-project/vllm at
commit 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1 (``benchmark()`` builds ``result``,
``main_async()`` adds ``date``, ``backend``, ``model_id``, ``num_prompts``,
``request_rate`` (a number or ``"inf"``), ``burstiness``, ``max_concurrency`` and drops
the per-request lists unless ``--save-detailed``). ``--save-result`` writes one JSON
object; ``--append-result`` appends one per line. Per request it also saves
``start_times`` (``time.perf_counter()`` when the request was sent, after the
concurrency semaphore) and ``latencies`` (E2E, s); older versions lack both: then
E2E = TTFT + Σ ITL and the arrivals are derived (:mod:`capsim.calibrate.replay`).

**sglang.bench_serving** — schema: ``python/sglang/bench_serving.py`` of
sgl-project/sglang at commit 0033168f0f58b2bc05aa0273bd475d9c01bafb1c (``benchmark()``:
``result`` with ``backend``, ``request_rate``, ``max_concurrency``, ``duration``, …, and
with ``--output-details`` ``result_details``: ``input_lens``, ``output_lens``, ``ttfts``,
``itls``, ``generated_texts``, ``errors``), appended as one JSON line per run to
``--output-file``; documented in ``docs/developer_guide/bench_serving.md`` (commit
0229689b6730cccb5b7f0d4eeef06d7de423b6e1, "JSONL output format"). It saves no send
times and no per-request latency: E2E = TTFT + Σ ITL, arrivals derived.

A request counts as successful when its error is empty and TTFT, prompt and output
lengths are positive (both clients record a failed request with zeros).

Public API:
    VLLM, SGLANG (the formats), is_vllm, is_sglang
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from capsim.calibrate.measured import (MeasuredRun, as_float, missing_fields, opt_float, opt_int,
                                       ragged, token_counts)
from capsim.calibrate.readers.base import ResultFormat
from capsim.common.errors import ScenarioError

PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls")

#: Keys only a vLLM result has (``main_async``'s setup block and ``start_times``).
VLLM_KEYS = ("model_id", "tokenizer_id", "num_prompts", "burstiness", "endpoint_type",
             "start_times", "request_goodput")
#: Keys only an SGLang result has (its ``result`` dict).
SGLANG_KEYS = ("total_output_tokens_retokenized", "mean_e2e_latency_ms", "accept_length",
               "random_range_ratio", "sharegpt_output_len")


#: Why a capsim results.json (or one variant of it: vLLM's key names plus ``capsim``)
#: cannot be compared.
SIMULATED = ("capsim's own simulated statistics under vllm bench serve's key names "
             "(request_throughput, mean_ttft_ms, …), no measured requests: no per-request "
             "input_lens, output_lens, ttfts, itls to replay; give the result file of a "
             "benchmark client run against a real server (vllm bench serve --save-result "
             "--save-detailed, sglang.bench_serving --output-details, GuideLLM, AIPerf, "
             "genai-perf)")

#: Run statistics quoted when a file holds nothing else: (key, label, unit).
STATISTICS = (("completed", "completed requests", ""), ("mean_ttft_ms", "mean TTFT", " ms"),
              ("median_ttft_ms", "median TTFT", " ms"), ("mean_e2e_latency_ms", "mean E2E", " ms"),
              ("mean_e2el_ms", "mean E2EL", " ms"))


def is_sglang(doc: Any) -> bool:
    """An SGLang bench_serving result object."""
    return isinstance(doc, dict) and any(k in doc for k in SGLANG_KEYS)


def is_vllm(doc: Any) -> bool:
    """A vllm bench serve result object (or one with its per-request lists)."""
    return isinstance(doc, dict) and not is_sglang(doc) and any(
        k in doc for k in VLLM_KEYS + PER_REQUEST)


def _rate(doc: dict, fmt: ResultFormat, path: str, where: str) -> float | None:
    """``request_rate`` as saved: a number > 0 of requests per second, or everything at
    once as ``"inf"`` (vLLM's ``main_async`` writes the string for ``float("inf")``),
    ``Infinity`` or ``"infinity"``; None when absent or null.

    Raises:
        ScenarioError: anything else (``"fast"``, ``0``, ``-2``, ``true``, a list), naming
            the file, the run and the key: the arrivals of a run without send times are
            derived from it, so a value read as "no rate" would change the replay silently.
    """
    value = doc.get("request_rate")
    if value is None:
        return None
    rate = math.nan
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            rate = math.inf if text in ("inf", "infinity") else float(text)
        except ValueError:
            pass
    else:
        rate = as_float(value)
    if not rate > 0:     # NaN, a word, 0, a negative, a boolean or a list
        raise ScenarioError(f"{fmt.label} result{where}: request_rate is {value!r}: expected "
                            f"a number of requests per second > 0 or \"inf\" (all at once), "
                            f"as {fmt.label} saves it", file=path)
    return rate


def _describe(doc: Any) -> str:
    if not isinstance(doc, dict):
        return "not a JSON object"
    parts = [f"request rate {doc.get('request_rate', '?')}"]
    if doc.get("max_concurrency") is not None:
        parts.append(f"max concurrency {doc['max_concurrency']}")
    if isinstance(doc.get("input_lens"), list):
        parts.append(f"{len(doc['input_lens']):,} requests")
    elif opt_int(doc.get("completed")) is not None:     # statistics only
        parts.append(f"{opt_int(doc.get('completed')):,} completed")
    if isinstance(doc.get("dataset_name"), str):
        parts.append(f"dataset {doc['dataset_name']}")
    return ", ".join(parts)


def _statistics(doc: dict) -> str:
    """The run statistics the file quotes ("40 completed requests, mean TTFT 330.8 ms"),
    "" when it has none."""
    parts = []
    for key, label, unit in STATISTICS:
        value = opt_float(doc.get(key))
        if value is not None and len(parts) < 3:
            parts.append(f"{value:,.0f} {label}" if not unit else f"{label} {value:.1f}{unit}")
    return ", ".join(parts)


def _columns(doc: dict, fmt: ResultFormat, path: str, where: str) -> dict[str, Any]:
    """The shared per-request lists as arrays; raises when any is missing or ragged."""
    if isinstance(doc.get("capsim"), dict):
        raise ScenarioError(f"{fmt.label} result{where}: a capsim results.json variant: "
                            f"{SIMULATED}", file=path)
    missing = [k for k in PER_REQUEST if not isinstance(doc.get(k), list)]
    stats = _statistics(doc)
    if len(missing) == len(PER_REQUEST) and stats:
        # Saved without the per-request lists (the clients' default): say what it has.
        fields = [f"per-request {k}" for k in missing]
        fields[-1] += f" (the file holds run statistics only: {stats})"
        raise missing_fields(path, fmt.label, fields, fmt.hint, where)
    if missing:
        raise missing_fields(path, fmt.label, [f"per-request {k}" for k in missing],
                             fmt.hint, where)
    n = len(doc["input_lens"])
    uneven = [k for k in PER_REQUEST if len(doc[k]) != n]
    if uneven:
        raise ScenarioError(f"{fmt.label} result{where}: {', '.join(uneven)} do not have "
                            f"the {n} entries of input_lens", file=path)
    odd = next((i for i, g in enumerate(doc["itls"]) if g is not None and not isinstance(g, list)),
               None)
    if odd is not None:
        raise ScenarioError(f"{fmt.label} result{where}: itls[{odd}] is {doc['itls'][odd]!r}, not "
                            f"a list of one request's chunk gaps (s) as {fmt.label} saves them",
                            file=path)
    errors = doc.get("errors")
    errors = errors if isinstance(errors, list) and len(errors) == n else [""] * n
    prompt = np.array([as_float(v) for v in doc["input_lens"]])
    output = np.array([as_float(v) for v in doc["output_lens"]])
    ttft = np.array([as_float(v) for v in doc["ttfts"]])
    gaps, counts = ragged(doc["itls"])
    failed = np.array([bool(e) for e in errors])
    ok = ~failed & (ttft > 0) & (prompt > 0) & (output > 0)
    no_ttft = int((~failed & ~(ttft > 0) & (prompt > 0) & (output > 0)).sum())
    notes = [f"{no_ttft:,} request(s) without an error but with no usable TTFT (null, NaN or "
             "<= 0) counted as failed"] if no_ttft else []
    return {"notes": notes,"prompt_tokens": token_counts(prompt, "input_lens", fmt.label, path, where),
            "output_tokens": token_counts(output, "output_lens", fmt.label, path, where),
            "ttft_s": np.where(ok, ttft, np.nan), "success": ok,
            "itl_gaps_s": gaps, "itl_counts": counts, "n": n}


def _ttft_plus_itl(cols: dict[str, Any]) -> np.ndarray:
    """E2E = TTFT + Σ ITL per request (the last chunk's arrival), NaN where TTFT is."""
    owner = np.repeat(np.arange(cols["n"]), cols["itl_counts"])
    return cols["ttft_s"] + np.bincount(owner, weights=cols["itl_gaps_s"],
                                        minlength=cols["n"])


def _read_vllm(doc: Any, path: str, run_label: str) -> MeasuredRun:
    where = f" ({run_label})" if run_label else ""
    cols = _columns(doc, VLLM, path, where)
    n, notes = cols.pop("n"), cols.pop("notes")
    latencies, starts = doc.get("latencies"), doc.get("start_times")
    if isinstance(latencies, list) and len(latencies) == n:
        e2e = np.where(cols["success"], [as_float(v) for v in latencies], np.nan)
    else:
        e2e = _ttft_plus_itl({**cols, "n": n})
        notes.append("E2E = TTFT + Σ ITL: this vllm bench serve version saves no latencies")
    send = None
    if isinstance(starts, list) and len(starts) == n:
        t = np.array([as_float(v) for v in starts])
        send = t - np.nanmin(t) if np.isfinite(t).any() else None
    return MeasuredRun(
        path=path, format=VLLM.key, label=VLLM.label, source=VLLM.source, run_label=run_label,
        send_s=send, e2e_s=e2e, **cols, request_rate_per_s=_rate(doc, VLLM, path, where),
        max_concurrency=opt_int(doc.get("max_concurrency")),
        burstiness=opt_float(doc.get("burstiness")),
        model=doc.get("model_id") if isinstance(doc.get("model_id"), str) else None,
        duration_s=opt_float(doc.get("duration")),
        notes=tuple(notes))


def _read_sglang(doc: Any, path: str, run_label: str) -> MeasuredRun:
    where = f" ({run_label})" if run_label else ""
    cols = _columns(doc, SGLANG, path, where)
    n, notes = cols.pop("n"), cols.pop("notes")
    model = doc.get("model_id", doc.get("model"))
    return MeasuredRun(
        path=path, format=SGLANG.key, label=SGLANG.label, source=SGLANG.source,
        run_label=run_label, send_s=None, e2e_s=_ttft_plus_itl({**cols, "n": n}), **cols,
        request_rate_per_s=_rate(doc, SGLANG, path, where),
        max_concurrency=opt_int(doc.get("max_concurrency")), burstiness=1.0,
        model=model if isinstance(model, str) else None, duration_s=opt_float(doc.get("duration")),
        notes=(*notes, "E2E = TTFT + Σ ITL: sglang.bench_serving saves no per-request latency"))


VLLM = ResultFormat(
    key="vllm-bench", label="vllm bench serve",
    source="vllm-project/vllm vllm/benchmarks/serve.py @ 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1",
    hint="rerun vllm bench serve with --save-result --save-detailed",
    runs=lambda docs: list(docs), describe=_describe, read=_read_vllm)

SGLANG = ResultFormat(
    key="sglang-bench", label="sglang.bench_serving",
    source="sgl-project/sglang python/sglang/bench_serving.py @ "
           "0033168f0f58b2bc05aa0273bd475d9c01bafb1c",
    hint="rerun python -m sglang.bench_serving with --output-file FILE --output-details",
    runs=lambda docs: list(docs), describe=_describe, read=_read_sglang)

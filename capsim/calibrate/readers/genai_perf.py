"""genai-perf's raw per-request export (``artifacts/<run>/profile_export.json``).

Schema: written by perf_analyzer's ``ProfileDataExporter``
(``src/profile_data_exporter.cc`` of triton-inference-server/perf_analyzer at commit
263c5f6e0c7a6c15472a54409174981f67930cfe) and read back by genai-perf's
``LLMProfileDataParser`` (``genai-perf/genai_perf/profile_data_parser/llm_profile_data_parser.py``,
same commit)::

    {"experiments": [{"experiment": {"mode": "concurrency" | "request_rate", "value": N},
                      "requests": [{"timestamp": <send, ns>,
                                    "request_inputs": {"payload": "<request JSON>"},
                                    "response_timestamps": [<ns>, ...],
                                    "response_outputs": [{"response": "data: {...}\\n\\n"}, ...]}],
                      "window_boundaries": [...]}],
     "version": ..., "service_kind": "openai", "endpoint": ...}

What the file provides per request: the send time, every response's arrival time and
its raw text (server-sent events for OpenAI streaming). As genai-perf does, responses
without content (the role-only first chat chunk, ``[DONE]``, a usage-only last chunk)
are dropped before timing: TTFT = first content response − send, E2E = last content
response − send, ITL = gaps between content responses. Token counts are *not* in the
file: genai-perf counts them with its tokenizer and keeps only the statistics
(``profile_export_genai_perf.json``). They are read from the ``usage`` object the
server streams (``prompt_tokens``, ``completion_tokens``; OpenAI
``stream_options.include_usage``); without it the file cannot be replayed and is
refused, naming ``usage``. Only ``service_kind: openai`` is read.

Public API:
    GENAI_PERF (the format), is_genai_perf_export
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from capsim.calibrate.measured import (MeasuredRun, as_float, missing_fields, opt_float, ragged,
                                       token_counts)
from capsim.calibrate.readers.base import ResultFormat


def is_genai_perf_export(doc: Any) -> bool:
    """perf_analyzer / genai-perf's raw export: an object with an ``experiments`` list."""
    return isinstance(doc, dict) and isinstance(doc.get("experiments"), list)


def _events(text: Any) -> list[dict]:
    """The JSON objects of one response's server-sent events (``data: {...}``)."""
    out = []
    for event in str(text or "").split("\n\n"):
        data = event.strip().removeprefix("data:").strip()
        if not data or data == "[DONE]":
            continue
        try:
            value = json.loads(data)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def _content(event: dict) -> bool:
    """The event carries generated text (chat ``delta.content`` or completions ``text``)."""
    choices = event.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    delta = choices[0].get("delta")
    return bool(choices[0].get("text") or (isinstance(delta, dict) and (
        delta.get("content") or delta.get("reasoning_content"))))


def _request(r: dict) -> tuple[float, list[float], float, float, str | None]:
    """(send ns, content response times ns, prompt tokens, output tokens, model)."""
    times, prompt, output = [], float("nan"), float("nan")
    for t, out in zip(r.get("response_timestamps") or [], r.get("response_outputs") or []):
        events = _events(out.get("response") if isinstance(out, dict) else None)
        if any(_content(e) for e in events):
            times.append(as_float(t))
        for e in events:
            usage = e.get("usage")
            if isinstance(usage, dict):
                prompt = as_float(usage.get("prompt_tokens"))
                output = as_float(usage.get("completion_tokens"))
    try:
        payload = json.loads((r.get("request_inputs") or {}).get("payload") or "{}")
    except (TypeError, ValueError, RecursionError):
        payload = {}
    model = payload.get("model") if isinstance(payload, dict) else None
    return as_float(r.get("timestamp")), times, prompt, output, \
        model if isinstance(model, str) else None


def _describe(exp: Any) -> str:
    e = exp.get("experiment") if isinstance(exp, dict) else None
    return f"{e.get('mode')} {e.get('value')}" if isinstance(e, dict) else "?"


def _read(exp: Any, path: str, run_label: str) -> MeasuredRun:
    where = f" ({run_label})" if run_label else ""
    if not isinstance(exp, dict) or not isinstance(exp.get("requests"), list):
        raise missing_fields(path, GENAI_PERF.label, ["experiments[].requests"],
                             GENAI_PERF.hint, where)
    parsed = [_request(r) for r in exp["requests"] if isinstance(r, dict)]
    send = np.array([p[0] for p in parsed])
    times = [np.asarray(p[1], np.float64) for p in parsed]
    prompt = np.array([p[2] for p in parsed])
    output = np.array([p[3] for p in parsed])
    answered = np.array([len(t) > 0 for t in times])
    if answered.any() and not (np.isfinite(prompt) & np.isfinite(output))[answered].any():
        raise missing_fields(
            path, GENAI_PERF.label,
            [("per-request token counts (usage.prompt_tokens, usage.completion_tokens in the "
              "streamed responses)")],
            "genai-perf counts tokens with its tokenizer and does not save the counts; rerun "
            "asking the server to stream usage (OpenAI stream_options.include_usage) or use "
            "AIPerf, whose profile_export.jsonl saves them", where)
    ok = answered & (prompt > 0) & (output > 0)
    first = np.array([t[0] if len(t) else np.nan for t in times])
    last = np.array([t[-1] if len(t) else np.nan for t in times])
    gaps, counts = ragged([list(np.diff(t) * 1e-9) for t in times])
    e = exp.get("experiment") if isinstance(exp.get("experiment"), dict) else {}
    mode, value = e.get("mode"), opt_float(e.get("value"))
    models = {p[4] for p in parsed if p[4]}
    t0 = np.nanmin(send) if np.isfinite(send).any() else 0.0
    return MeasuredRun(
        path=path, format=GENAI_PERF.key, label=GENAI_PERF.label, source=GENAI_PERF.source,
        run_label=run_label, send_s=(send - t0) * 1e-9,
        prompt_tokens=token_counts(prompt, "usage.prompt_tokens", GENAI_PERF.label, path, where),
        output_tokens=token_counts(output, "usage.completion_tokens", GENAI_PERF.label, path,
                                   where),
        ttft_s=np.where(ok, (first - send) * 1e-9, np.nan),
        e2e_s=np.where(ok, (last - send) * 1e-9, np.nan), success=ok,
        itl_gaps_s=gaps, itl_counts=counts,
        request_rate_per_s=value if mode == "request_rate" else None,
        max_concurrency=int(value) if mode == "concurrency" and value else None,
        model=models.pop() if len(models) == 1 else None,
        duration_s=float((np.nanmax(last) - t0) * 1e-9) if np.isfinite(last).any() else None)


GENAI_PERF = ResultFormat(
    key="genai-perf", label="genai-perf",
    source="triton-inference-server/perf_analyzer src/profile_data_exporter.cc, "
           "genai-perf/genai_perf/profile_data_parser/llm_profile_data_parser.py @ "
           "263c5f6e0c7a6c15472a54409174981f67930cfe",
    hint="give the raw profile_export.json of a genai-perf profile run",
    runs=lambda docs: list(docs[0]["experiments"]), describe=_describe, read=_read)

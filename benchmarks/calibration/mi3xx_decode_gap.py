"""The decode step capsim prices against the one measured on MI300X / MI325X, per case and
concurrency: where the time a token is still missing (issue 30, item 1).

For each scored MI3xx point of benchmarks/fidelity/supplementary_cases.yaml the measured
median ITL (TPOT where the source gives no ITL: InferenceX's sweeps) is set
against capsim's pure decode step (:class:`~capsim.cost.pricer.StepPricer`) at a batch of
the point's concurrency, each sequence over the mean prompt plus half the mean output
(the point's token totals; the case's scenario classes where the source has none), under
the case's preset with and without its ``untuned_fp8_gemm`` rule. A decode-only step, so
an ITL that includes prefill chunks (the P95 of most high-concurrency points) is above
it for reasons this table does not price; the c1 rows are the clean ones.

Usage: python benchmarks/calibration/mi3xx_decode_gap.py
"""

from __future__ import annotations

from pathlib import Path

from capsim.common.yamlio import load_yaml
from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

FIDELITY = Path(__file__).resolve().parents[1] / "fidelity"


def _scenario(case_id: str) -> dict:
    return load_yaml((FIDELITY / "supplementary" / f"{case_id}.yaml").read_text())


def _points(case_id: str) -> list[dict]:
    cases = load_yaml((FIDELITY / "supplementary_cases.yaml").read_text())
    measured = next(c for c in cases if c["id"] == case_id)["measured"]
    if "points" in measured:
        return measured["points"]
    cols = measured["table_columns"]            # InferenceX's table: one row a concurrency
    return [dict(zip(cols, row), label=f"c{row[0]}", max_concurrency=row[0])
            for row in measured["rows"]]


def _context(point: dict, scenario: dict) -> float:
    """Mean prompt + half the mean output of the point (its totals), else of the scenario's
    first class (uniform bounds)."""
    n = point.get("num_prompts")
    if n and point.get("total_input_tokens"):
        return point["total_input_tokens"] / n + point["total_generated_tokens"] / n / 2
    cls = scenario["workload"]["classes"][0]
    mean = lambda d: (d["min"] + d["max"]) / 2   # noqa: E731
    return mean(cls["prompt_tokens"]) + mean(cls["output_tokens"]) / 2


def _pricer(scenario: dict, rule: bool) -> StepPricer:
    eng = scenario["engine"]
    p = load_engine_preset(eng["preset"])
    dp = bool(eng.get("enable_dp_attention"))
    return StepPricer(load_model(scenario["model"]), load_hardware(scenario["hardware"]),
                      eng.get("tensor_parallel_size", 1), engine=p.engine,
                      all_reduce=p.tp_all_reduce, shared_experts_fusion=p.shared_experts_fusion,
                      absorbed_bmm_dequant=p.absorbed_bmm_dequant, dp_attention=dp,
                      expert_parallel=bool(eng.get("enable_expert_parallel")),
                      kv_cache_dtype_bytes=1 if eng.get("kv_cache_dtype") == "fp8" else 2,
                      untuned_fp8_gemm=p.untuned_fp8_gemm if rule else None)


def rows() -> list[tuple[str, str, int, float, float, float]]:
    """(case, point, batch, measured ms, capsim ms without the rule, with it)."""
    out = []
    for path in sorted((FIDELITY / "supplementary").glob("load_*mi3*.yaml")):
        case_id, scenario = path.stem, _scenario(path.stem)
        plain, ruled = _pricer(scenario, False), _pricer(scenario, True)
        for point in _points(case_id):
            if point["label"].startswith("maverick") or "eagle" in point["label"]:
                continue
            measured = point.get("median_itl_ms") or point.get("mean_tpot_ms") \
                or point.get("median_tpot_ms")
            batch = point["max_concurrency"]
            step = dict(decode_seqs=batch, decode_ctx_tokens=int(batch * _context(point, scenario)))
            out.append((case_id, point["label"], batch, measured,
                        plain.cost(**step).seconds * 1e3, ruled.cost(**step).seconds * 1e3))
    return out


def main() -> int:
    print(f"{'case':58} {'point':22} {'batch':>5} {'measured':>9} {'before':>7} "
          f"{'after':>7} {'missing':>8}")
    for case, label, batch, measured, before, after in rows():
        print(f"{case[:58]:58} {label:22} {batch:5d} {measured:9.2f} {before:7.2f} "
              f"{after:7.2f} {measured - after:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""capsim size with a cache-aware router: each cache-aware option is sized beside its
load-only twin (or the scenario's own load-only variant) and the row says how many GPUs the
cache-aware router saves at the same SLO."""

from __future__ import annotations

import yaml

from capsim.scenario.load import load
from capsim.studies import sizing
from capsim.studies.routing_savings import gpus_saved, savings_lines, with_load_only_twins

DOC = {
    "name": "kvsz", "seed": 0, "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "engine": {"max_model_len": 16384, "enable_prefix_caching": True},
    "cluster": {"router": "kv_scorer"},
    "workload": {"num_requests": 200, "arrival": {"process": "poisson", "rate_per_s": 30},
                 "classes": [{"name": "rag", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 200},
                              "output_tokens": {"dist": "fixed", "value": 30},
                              "shared_prefix": {"tokens": 8000, "num_templates": 40,
                                                "questions_per_template": 4}}]},
    "slo": {"targets": {"ttft_p99_ms": 1500}},
    "sizing": {"max_gpus": 16},
}


def _plan(tmp_path, doc):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return sizing.plan(load(path), [])


def test_a_cache_aware_option_gets_a_load_only_twin(tmp_path):
    p = _plan(tmp_path, DOC)
    assert [(o.variant, o.run.router) for o in p.options] == [
        ("default", "kv_scorer"), ("default · load-only", "least_outstanding_tokens")]
    assert p.options[1].run.router_options is None
    assert p.options[1].run.pools == p.options[0].run.pools


def test_a_load_only_variant_of_the_same_run_is_the_baseline(tmp_path):
    """A round-robin variant that differs only in its router is the comparison: no twin."""
    doc = {**DOC, "variants": [{"name": "cache"}, {"name": "rr",
                                                    "cluster": {"router": "round_robin"}}]}
    p = _plan(tmp_path, doc)
    assert [o.variant for o in p.options] == ["cache", "rr"]
    other = {**DOC, "variants": [{"name": "cache"}, {"name": "rr-small", "engine": {
        "max_num_seqs": 8}, "cluster": {"router": "round_robin"}}]}
    assert [o.variant for o in _plan(tmp_path, other).options] == [
        "cache", "cache · load-only", "rr-small"]


def test_the_saving_is_the_baselines_gpus_minus_its_own(tmp_path):
    p = _plan(tmp_path, DOC)
    met = sizing.SizingRow(rank=1, variant="default", hardware="h100-sxm",
                           tensor_parallel_size=1, status="met", num_replicas=3, num_gpus=3)
    base = sizing.SizingRow(rank=2, variant="default · load-only", hardware="h100-sxm",
                            tensor_parallel_size=1, status="met", num_replicas=5, num_gpus=5)
    rows = gpus_saved([met, base], p.options, 16)
    assert (rows[0].gpus_saved, rows[1].gpus_saved) == (2, None)
    assert savings_lines(rows) == [
        "default · h100-sxm TP1 saves 2 GPU(s) against a load-only router at the same SLO "
        "(3 GPUs; default · load-only · h100-sxm TP1: 5 GPUs)."]
    failed = sizing.SizingRow(rank=0, variant="default · load-only", hardware="h100-sxm",
                              tensor_parallel_size=1, status="not met")
    rows = gpus_saved([met, failed], p.options, 16)
    assert rows[0].gpus_saved == 13
    assert savings_lines(rows)[0].startswith("default · h100-sxm TP1 saves at least 13 GPU(s)")


def test_load_only_options_get_no_twin(tmp_path):
    doc = {**DOC, "cluster": {"router": "round_robin"}}
    p = _plan(tmp_path, doc)
    assert [o.variant for o in p.options] == ["default"]
    assert with_load_only_twins(p.options) == p.options

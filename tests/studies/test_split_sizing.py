"""capsim size on disaggregated fleets: the (prefill, decode) search, split options, the
sizing.csv columns and bad input (issue 33, item 1)."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from capsim.scenario.load import load
from capsim.studies import sizing
from capsim.studies.parallel import ExecutorSpec, open_runner
from capsim.studies.search import drive, fewest_split_passing

DOC = {
    "name": "split", "seed": 3, "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "engine": {"max_model_len": 4096, "max_num_seqs": 32, "max_num_batched_tokens": 512},
    "cluster": {"router": "least_outstanding_tokens"},
    "workload": {"num_requests": 120, "arrival": {"process": "poisson", "rate_per_s": 20},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "uniform", "min": 64, "max": 2000},
                              "output_tokens": {"dist": "uniform", "min": 8, "max": 96}}]},
    "slo": {"targets": {"itl_p99_ms": 30, "ttft_p99_ms": 600}},
    "sizing": {"max_gpus": 12, "disaggregation": {
        "prefill": [{"tensor_parallel_size": 1}], "decode": [{"tensor_parallel_size": 1},
                                                             {"tensor_parallel_size": 2}]}},
    "variants": [{"name": "chunked"},
                 {"name": "split", "disaggregation": {
                     "prefill": {"num_replicas": 1, "engine": {"max_num_batched_tokens": 2048}},
                     "decode": {"num_replicas": 1}, "link": "nvlink-4"}}],
}


def with_(**sections) -> dict:
    doc = yaml.safe_load(yaml.safe_dump(DOC))
    doc.update(sections)
    return doc


# --------------------------------------------------------------------------
# The (P, D) search
# --------------------------------------------------------------------------


@given(p=st.integers(1, 40), d=st.integers(1, 40), x=st.integers(1, 3), y=st.integers(1, 3),
       steps=st.integers(1, 32))
def test_a_rectangular_pass_set_is_found_exactly_in_log_steps(p, d, x, y, steps):
    """Passing iff P >= p and D >= d (the pools uncoupled): the search finds (p, d) when a
    step along the ratio reaches it, in O(log) runs per pool, none run twice."""
    result = drive(fewest_split_passing((x, y), steps), lambda c: c[0] >= p and c[1] >= d)
    k_needed = max(-(-p // x), -(-d // y))
    assert result.best == ((p, d) if k_needed <= steps else None)
    bits = (steps * max(x, y)).bit_length()
    assert len(result.tested) <= steps.bit_length() + 1 + 2 * bits
    assert all(ok == (c[0] >= p and c[1] >= d) for c, ok in result.tested.items())


@given(knee=st.integers(1, 20), steps=st.integers(1, 16))
def test_a_coupled_pass_set_gives_a_minimal_pair(knee, steps):
    """A staircase (P + D >= 2·knee, both >= 1: decode replicas substitute for prefill
    ones): the answer passes and neither pool can lose a replica and still pass."""
    passes = lambda c: c[0] + c[1] >= 2 * knee  # noqa: E731
    result = drive(fewest_split_passing((1, 1), steps), passes)
    if knee > steps:
        assert result.best is None
        return
    pre, dec = result.best
    assert passes((pre, dec)) and not passes((pre, dec - 1))
    assert pre == 1 or not passes((pre - 1, result.bracket[1]))


def test_a_ratio_below_one_replica_is_refused_by_the_search():
    with pytest.raises(ValueError, match="ratio >= "):
        next(fewest_split_passing((0, 1), 4))


# --------------------------------------------------------------------------
# Options and the end-to-end answer
# --------------------------------------------------------------------------


def test_split_options_cross_pool_shapes_links_and_ratios(tmp_path, write_scenario):
    doc = with_()
    doc["sizing"]["disaggregation"].update(link=["nvlink-4", "infiniband-ndr"],
                                           ratios=["1P1D", "1P2D"])
    plan = sizing.plan(load(write_scenario(tmp_path, doc)), [])
    splits = [o for o in plan.options if o.split is not None]
    assert len(splits) == 1 * 2 * 2 * 2 and len(plan.options) == 9
    labels = {o.split.label for o in splits}
    assert "P TP1 + D TP2 · infiniband-ndr from 1P2D" in labels
    one = next(o for o in splits if o.split.label == "P TP1 + D TP2 · nvlink-4 from 1P2D")
    assert one.gpus_per_replica == 1 * 1 + 2 * 2             # one step along 1P2D
    assert one.run.pool("decode").engine.tensor_parallel_size == 2
    assert one.run.pool("prefill").engine.max_num_batched_tokens == 2048   # the variant's own


@pytest.fixture(scope="module")
def sized(tmp_path_factory):
    from tests.conftest import _write_scenario

    path = _write_scenario(tmp_path_factory.mktemp("split"), with_())
    plan = sizing.plan(load(path), [])
    with open_runner(ExecutorSpec("process", workers=2)) as runner:
        return plan, sizing.run(plan, runner)


def test_the_split_answer_is_minimal_in_each_pool(sized):
    """Every split row's (P, D) passed, and one replica fewer in either pool failed where
    the search ran it (the decode neighbour always is, unless D = 1)."""
    plan, result = sized
    runs = result.runs[result.runs["cls"] == "all"]
    for row in (r for r in result.rows if r.pools):
        assert row.status == "met" and row.num_gpus == \
            row.prefill_replicas * row.prefill_tp + row.decode_replicas * row.decode_tp
        at = runs[(runs.pools == row.pools) & (runs.prefill_replicas == row.prefill_replicas)]
        assert bool(at[at.decode_replicas == row.decode_replicas].slo_pass.iloc[0])
        fewer = at[at.decode_replicas == row.decode_replicas - 1]
        assert row.decode_replicas == 1 or not fewer.slo_pass.any()


def test_split_and_colocated_options_are_ranked_together_by_cost(sized):
    _, result = sized
    met = [r for r in result.rows if r.status == "met"]
    assert {bool(r.pools) for r in met} == {True, False}
    costs = [r.cost_per_hour_usd for r in met]
    assert costs == sorted(costs) and [r.rank for r in met] == list(range(1, len(met) + 1))
    # a 1-GPU replica costs the H100's price: $/h = GPUs × 6.88 (h100-sxm.yaml, AWS p5)
    assert all(r.cost_per_hour_usd == pytest.approx(6.88 * r.num_gpus) for r in met)


def test_sizing_csv_has_pool_columns_empty_for_colocated_rows(sized):
    frame = sizing.rows_frame(sized[1].rows)
    cols = ["prefill_replicas", "decode_replicas", "prefill_tp", "decode_tp"]
    assert all(str(frame[c].dtype) == "Int64" for c in cols)
    colocated = frame[frame.variant == "chunked"]
    assert colocated[cols].isna().all().all()
    split = frame[frame.variant == "split"]
    assert sorted(split.decode_tp) == [1, 2] and (split.prefill_tp == 1).all()
    assert (split.num_replicas == split.prefill_replicas + split.decode_replicas).all()


# --------------------------------------------------------------------------
# Bad input: one line naming the key, exit 2, nothing written
# --------------------------------------------------------------------------


@pytest.mark.parametrize("change, where, what", [
    ({"ratios": ["0P1D"]}, "sizing.disaggregation.ratios", "x, y >= 1 replicas"),
    ({"ratios": ["2P0D"]}, "sizing.disaggregation.ratios", "x, y >= 1 replicas"),
    ({"prefill": [{"tensor_parallel_size": 64}]},
     "sizing.disaggregation.prefill.0.tensor_parallel_size", "beyond llama-3.1-8b's 32"),
    ({"decode": [{"tensor_parallel_size": 1, "enable_expert_parallel": True}]},
     "sizing.disaggregation.decode.0.enable_expert_parallel", "is dense"),
    ({"link": ["nvlink-9"]}, "sizing.disaggregation.link.0", "valid: infiniband-hdr"),
])
def test_bad_disaggregated_sizing_is_one_line(tmp_path, run_cli, write_scenario, change,
                                              where, what):
    doc = with_()
    doc["sizing"]["disaggregation"].update(change)
    out = tmp_path / "r"
    code, _, err = run_cli(["size", str(write_scenario(tmp_path, doc)), "-o", str(out)])
    assert code == 2 and err.count("\n") == 1, err
    assert where in err and what in err and not out.exists()


def test_sizing_disaggregation_without_a_split_variant_is_refused(tmp_path, run_cli,
                                                                  write_scenario):
    doc = with_(variants=[DOC["variants"][0]])
    code, _, err = run_cli(["size", str(write_scenario(tmp_path, doc)), "-o",
                            str(tmp_path / "r")])
    assert code == 2 and err.count("\n") == 1
    assert "sizing.disaggregation: no variant has a disaggregation: section" in err


def test_every_answer_gets_a_launch_script_and_a_split_one_a_manifest(sized):
    """launch/rank-N.sh per met row with the engine command per pool at the answer's
    replica counts; launch/rank-N-dynamo.yaml for split rows (none with --orchestrator
    none)."""
    import yaml as _yaml

    from capsim.studies.launch import launch_files

    plan, result = sized
    files = launch_files(result, plan.options)
    met = [r for r in result.rows if r.status == "met"]
    assert sorted(f for f in files if f.endswith(".sh")) == sorted(
        f"launch/rank-{r.rank}.sh" for r in met)
    for r in met:
        script = files[f"launch/rank-{r.rank}.sh"]
        assert script.count("vllm serve meta-llama/Llama-3.1-8B") == (2 if r.pools else 1)
        if r.pools:
            doc = _yaml.safe_load(files[f"launch/rank-{r.rank}-dynamo.yaml"])
            workers = doc["spec"]["services"]
            assert workers["VllmPrefillWorker"]["replicas"] == r.prefill_replicas
            assert workers["VllmDecodeWorker"]["replicas"] == r.decode_replicas
            assert f"--tensor-parallel-size {r.decode_tp}" in script
        else:
            assert f"# {r.num_replicas} replica(s) of this command" in script
    assert not any(f.endswith(".yaml") for f in launch_files(result, plan.options, "none"))
    # --orchestrator llm-d: launch/rank-N-llm-d.yaml, a DisaggregatedSet, for the split rows.
    llmd = launch_files(result, plan.options, "llm-d")
    split = [r for r in met if r.pools]
    assert sorted(f for f in llmd if f.endswith(".yaml")) == sorted(
        f"launch/rank-{r.rank}-llm-d.yaml" for r in split)
    for r in split:
        roles = _yaml.safe_load(llmd[f"launch/rank-{r.rank}-llm-d.yaml"])["spec"]["roles"]
        assert [(x["name"], x["spec"]["replicas"]) for x in roles] == [
            ("prefill", r.prefill_replicas), ("decode", r.decode_replicas)]
        assert "(the llm-d DisaggregatedSet next to this file)" in llmd[f"launch/rank-{r.rank}.sh"]

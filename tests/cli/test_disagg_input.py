"""Bad disaggregation input through the command line: one line naming the file and the
YAML path, exit code 2, nothing written (issue 3)."""

from __future__ import annotations

import pytest


BAD = [
    ({"link": "infiniband-xdr"}, "variants.0.disaggregation.link: unknown link 'infiniband-xdr'"),
    ({"decode": {"num_replicas": 1, "hardware": "h900"}},
     "variants.0.disaggregation.decode.hardware: unknown hardware 'h900'"),
    ({"prefill": {"num_replicas": 0}}, "variants.0.disaggregation.prefill.num_replicas: "),
    ({"decode": {"num_replicas": 0}}, "variants.0.disaggregation.decode.num_replicas: "),
    ({"decode": {"num_replicas": 1, "engine": {"scheduler": "static"}}},
     "variants.0.disaggregation.decode.engine.scheduler: a disaggregated pool runs vLLM's "
     "continuous batching or SGLang's scheduler"),
    ({"prefill": {"num_replicas": 1, "engine": {"preset": "trtllm"}}},
     "variants.0.disaggregation.prefill.engine.preset: a disaggregated pool runs vLLM's "
     "continuous batching or SGLang's scheduler (capsim hands a request from prefill to "
     "decode pool in those policies only); this pool runs scheduler trtllm (engine preset "
     "'trtllm')"),
    ({"link": {"bandwidth_gbit_per_s": 0}}, "variants.0.disaggregation.link: "),
]


@pytest.mark.parametrize("change,expected", BAD)
def test_bad_disaggregation_is_one_line_exit_2(tmp_path, run_cli, disagg_scenario, disagg,
                                               change, expected):
    pools = {**disagg(), **change}
    path = disagg_scenario([{"name": "d", "disaggregation": pools}])
    out_dir = tmp_path / "report"
    code, _, err = run_cli(["run", str(path), "-o", str(out_dir)])
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {path}: ")
    assert expected in err and "Traceback" not in err
    assert not out_dir.exists()


def test_model_that_does_not_fit_on_the_decode_gpus(run_cli, disagg_scenario, disagg):
    """Llama-3.1-70B (131 GiB of weights) fits a TP2 H100 prefill replica, not one decode H100."""
    pools = disagg(prefill={"tensor_parallel_size": 2}, decode={"tensor_parallel_size": 1})
    path = disagg_scenario([{"name": "d", "disaggregation": pools}], model="llama-3.1-70b")
    code, _, err = run_cli(["validate", str(path)])
    assert code == 2 and err.count("\n") == 1
    assert "variants.0.disaggregation.decode" in err and "do not fit" in err


def test_cluster_num_replicas_next_to_pools_is_refused(run_cli, disagg_scenario, disagg):
    path = disagg_scenario([{"name": "d", "cluster": {"num_replicas": 2},
                             "disaggregation": disagg()}])
    code, _, err = run_cli(["validate", str(path)])
    assert code == 2 and "variants.0.cluster.num_replicas" in err

"""Launch files for a sizing answer (issue 33, item 4): each engine's command line with the
knobs capsim simulated, the Dynamo manifest of a split answer, and every flag name held to
the argument parser it was read from."""

from __future__ import annotations

import yaml
import pytest

from capsim.scenario.load import load
from capsim.studies.launch import (SGLANG_FLAGS, TRTLLM_FLAGS, VLLM_FLAGS, dynamo_manifest,
                                   engine_argv, launch_script, llmd_manifest, model_id)
from capsim.studies.fleet import fleet_at
from tests.conftest import _write_scenario

# The flags read from each tool's published parser (what the launch files may use):
#: vllm-project/vllm 99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b, vllm/engine/arg_utils.py
#: EngineArgs.add_cli_args (model_group, parallel_group, cache_group, scheduler_group,
#: vllm_group); bool fields get argparse.BooleanOptionalAction (get_kwargs), so --no-X too.
VLLM_READ = {"--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
             "--enable-expert-parallel", "--max-num-seqs", "--max-num-batched-tokens",
             "--max-model-len", "--gpu-memory-utilization", "--block-size",
             "--enable-chunked-prefill", "--enable-prefix-caching", "--kv-cache-dtype",
             "--kv-transfer-config"}
VLLM_BOOLEAN = {"--enable-chunked-prefill", "--enable-prefix-caching",
                "--enable-expert-parallel"}
#: sgl-project/sglang 4bc0b6e6ff9151ab629fa8bff9d672abbcbf9fb7, python/sglang/srt/args/:
#: model_args.py (--model-path, --context-length), runtime_args.py (--tp-size, --pp-size),
#: memory_args.py (--mem-fraction-static, --max-running-requests, --chunked-prefill-size,
#: --page-size), parallel_args.py (--dp-size, --ep-size), optimization_args.py
#: (--disable-radix-cache, --enable-dp-attention), disagg_args.py (--disaggregation-mode).
SGLANG_READ = {"--model-path", "--context-length", "--tp-size", "--pp-size",
               "--mem-fraction-static", "--max-running-requests", "--chunked-prefill-size",
               "--page-size", "--dp-size", "--ep-size", "--disable-radix-cache",
               "--enable-dp-attention", "--disaggregation-mode"}
#: NVIDIA/TensorRT-LLM 4c05a74891e4df8066f08ed4ce14b0972abe4e25,
#: tensorrt_llm/commands/serve.py, trtllm-serve's click options.
TRTLLM_READ = {"--tp_size", "--pp_size", "--ep_size", "--max_batch_size", "--max_num_tokens",
               "--max_seq_len", "--kv_cache_free_gpu_memory_fraction",
               "--enable_chunked_prefill", "--server_role"}


@pytest.mark.parametrize("table, read", [(VLLM_FLAGS, VLLM_READ), (SGLANG_FLAGS, SGLANG_READ),
                                         (TRTLLM_FLAGS, TRTLLM_READ)])
def test_every_flag_is_one_read_from_the_tools_parser(table, read):
    assert set(table.values()) <= read, set(table.values()) - read


DOC = {"name": "l", "seed": 1, "model": "llama-3.1-70b", "hardware": "h100-sxm",
       "engine": {"max_num_seqs": 128, "max_num_batched_tokens": 1024, "max_model_len": 8192,
                  "tensor_parallel_size": 4, "enable_prefix_caching": False},
       "workload": {"num_requests": 10, "arrival": {"process": "poisson", "rate_per_s": 1},
                    "classes": [{"name": "c", "weight": 1,
                                 "prompt_tokens": {"dist": "fixed", "value": 100},
                                 "output_tokens": {"dist": "fixed", "value": 10}}]},
       "variants": [{"name": "agg"},
                    {"name": "split", "disaggregation": {
                        "prefill": {"num_replicas": 1, "tensor_parallel_size": 8},
                        "decode": {"num_replicas": 1}, "link": "nvlink-4"}}]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = load(_write_scenario(tmp_path_factory.mktemp("l"), DOC), [], None)
    return {rc.variant: rc for rc in base.runs}


def test_vllm_command_carries_the_simulated_knobs(runs):
    argv = engine_argv(runs["agg"].pools[0], "m/x")
    assert argv[:3] == ["vllm", "serve", "m/x"]
    text = " ".join(argv)
    for pair in ("--tensor-parallel-size 4", "--max-num-seqs 128",
                 "--max-num-batched-tokens 1024", "--max-model-len 8192",
                 "--gpu-memory-utilization 0.9", "--block-size 16"):
        assert pair in text
    assert "--enable-chunked-prefill" in argv and "--no-enable-prefix-caching" in argv
    assert {a for a in argv if a.startswith("--")} <= VLLM_READ | {
        f.replace("--", "--no-", 1) for f in VLLM_BOOLEAN}


def test_the_model_is_the_checkpoint_the_profile_cites(runs):
    # capsim/profiles/data/models/llama-3.1-70b.yaml source: huggingface.co/meta-llama/...
    assert model_id(runs["agg"]) == "meta-llama/Llama-3.1-70B"


def test_sglang_and_trtllm_commands_use_their_own_names(tmp_path):
    for preset, head in (("sglang", ["python", "-m", "sglang.launch_server"]),
                         ("trtllm", ["trtllm-serve", "m/x"])):
        doc = {**DOC, "engine": {**DOC["engine"], "preset": preset,
                                 "enable_prefix_caching": True}, "variants": [{"name": "a"}]}
        pool = load(_write_scenario(tmp_path, doc, f"{preset}.yaml"), [], None).runs[0].pools[0]
        argv = engine_argv(pool, "m/x")
        assert argv[:len(head)] == head
        text = " ".join(argv)
        if preset == "sglang":
            assert "--model-path m/x --tp-size 4" in text and "--max-running-requests 128" in text
            assert "--chunked-prefill-size 1024" in text and "--context-length 8192" in text
            assert {a for a in argv if a.startswith("--")} <= SGLANG_READ
        else:
            assert "--tp_size 4" in text and "--max_batch_size 128" in text
            assert "--max_num_tokens 1024" in text and "--max_seq_len 8192" in text
            assert {a for a in argv if a.startswith("--")} <= TRTLLM_READ


def test_an_moe_pool_with_dp_attention_is_vllm_data_parallel_with_expert_parallel(tmp_path):
    doc = {**DOC, "model": "qwen3-30b-a3b",
           "engine": {**DOC["engine"], "enable_dp_attention": True}, "variants": [{"name": "a"}]}
    pool = load(_write_scenario(tmp_path, doc), [], None).runs[0].pools[0]
    text = " ".join(engine_argv(pool, "m"))
    assert "--tensor-parallel-size 1" in text and "--data-parallel-size 4" in text
    assert "--enable-expert-parallel" in text


def test_a_split_answer_gets_per_pool_commands_and_a_dynamo_manifest(runs):
    run = fleet_at(runs["split"], (3, 2))
    counts = {"prefill": 3, "decode": 2}
    script = launch_script(run, ["rank 1"], counts)
    assert "# prefill pool: 3 replica(s)" in script and "# decode pool: 2 replica(s)" in script
    assert script.count("--tensor-parallel-size 8") == 1 and "NixlConnector" in script
    doc = yaml.safe_load(dynamo_manifest(run, "x", counts))
    # ai-dynamo/dynamo 416ff06e7fea components/backends/vllm/deploy/disagg.yaml's schema
    assert doc["apiVersion"] == "nvidia.com/v1alpha1" and doc["kind"] == "DynamoGraphDeployment"
    services = doc["spec"]["services"]
    pre, dec = services["VllmPrefillWorker"], services["VllmDecodeWorker"]
    assert (pre["replicas"], dec["replicas"]) == (3, 2)
    assert (pre["resources"]["limits"]["gpu"], dec["resources"]["limits"]["gpu"]) == ("8", "4")
    args = pre["extraPodSpec"]["mainContainer"]["args"]
    assert args[-1] == "--is-prefill-worker" and "--is-prefill-worker" not in \
        dec["extraPodSpec"]["mainContainer"]["args"]
    assert {a for a in args[:-1] if a.startswith("--")} <= VLLM_READ | {"--model"} | {
        f.replace("--", "--no-", 1) for f in VLLM_BOOLEAN}


def test_a_split_answer_gets_an_llmd_disaggregated_set(runs):
    """llm-d/llm-d 5554114958fcd78760cb9557335109c875b295d6,
    guides/pd-disaggregation/modelserver/gpu/vllm/base/disaggregatedset.yaml: the schema and
    names read there (roles prefill / decode, leaderWorkerTemplate of one pod, container
    modelserver running vllm serve, NIXL kv_producer / kv_consumer, the decode pod's
    routing-proxy sidecar on 8000 in front of vLLM on 8200, GPUs as nvidia.com/gpu), and the
    labels guides/pd-disaggregation/gaie-pd/values.yaml's InferencePool selects (126f65d65f42)."""
    run = fleet_at(runs["split"], (3, 2))
    text = llmd_manifest(run, "x", {"prefill": 3, "decode": 2})
    assert text.startswith("# the routing sidecar's image is REPLACE_ROUTING_SIDECAR_IMAGE")
    doc = yaml.safe_load(text)
    assert doc["apiVersion"] == "disaggregatedset.x-k8s.io/v1"
    assert doc["kind"] == "DisaggregatedSet" and doc["spec"]["slices"] == 1
    pre, dec = doc["spec"]["roles"]
    assert (pre["name"], dec["name"]) == ("prefill", "decode")
    assert (pre["spec"]["replicas"], dec["spec"]["replicas"]) == (3, 2)
    pods = [r["spec"]["leaderWorkerTemplate"] for r in (pre, dec)]
    assert [p["size"] for p in pods] == [1, 1]
    for role, pod in zip(("prefill", "decode"), pods):
        assert pod["workerTemplate"]["metadata"]["labels"] == {
            "llm-d.ai/inference-serving": "true", "llm-d.ai/guide": "pd-disaggregation",
            "llm-d.ai/role": role}
    (p_server,), (d_server,) = (p["workerTemplate"]["spec"]["containers"] for p in pods)
    assert p_server["name"] == d_server["name"] == "modelserver"
    assert p_server["command"] == ["vllm", "serve"]
    assert p_server["image"] == "docker.io/vllm/vllm-openai:v" + run.pools[0].preset.version
    assert p_server["resources"]["limits"]["nvidia.com/gpu"] == "8"       # prefill TP 8
    assert d_server["resources"]["limits"]["nvidia.com/gpu"] == "4"       # decode TP 4
    p_args, d_args = p_server["args"], d_server["args"]
    assert p_args[0] == d_args[0] == "meta-llama/Llama-3.1-70B"
    assert '"kv_role":"kv_producer"' in p_args[p_args.index("--kv-transfer-config") + 1]
    assert '"kv_role":"kv_consumer"' in d_args[d_args.index("--kv-transfer-config") + 1]
    assert d_args[-1] == "--port=8200" and "--port=8200" not in p_args
    flags = {a.split("=")[0] for a in p_args + d_args if a.startswith("--")}
    assert flags <= VLLM_READ | {"--port"} | {f.replace("--", "--no-", 1) for f in VLLM_BOOLEAN}
    (sidecar,) = pods[1]["workerTemplate"]["spec"]["initContainers"]
    assert sidecar["name"] == "routing-proxy" and sidecar["restartPolicy"] == "Always"
    assert sidecar["args"][:2] == ["--port=8000", "--kv-connector=nixlv2"]
    assert "initContainers" not in pods[0]["workerTemplate"]["spec"]


def test_an_orchestrator_capsim_cannot_write_is_refused(tmp_path, run_cli):
    out = tmp_path / "r"
    code, _, err = run_cli(["size", "scenarios/size_disagg.yaml", "--orchestrator", "kserve",
                            "-o", str(out)])
    assert code == 2 and err.count("\n") == 1 and "--orchestrator" in err and "'dynamo'" in err
    assert not out.exists()

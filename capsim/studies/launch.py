"""Launch files for a sizing answer: the engine's own command line per pool, with the knobs
capsim simulated, and for a split answer an NVIDIA Dynamo or an llm-d manifest.

Every flag name is the engine's, checked against its published argument parser
(tests/studies/test_launch.py holds the lists read):

- vLLM: ``vllm/engine/arg_utils.py`` ``EngineArgs.add_cli_args`` at vllm-project/vllm
  99d7eb5d6a51 (booleans are ``argparse.BooleanOptionalAction``: ``--x`` / ``--no-x``).
- SGLang: ``python/sglang/srt/args/{model,runtime,memory,parallel,optimization,disagg}_args.py``
  at sgl-project/sglang 4bc0b6e6ff91.
- TensorRT-LLM: ``tensorrt_llm/commands/serve.py`` (``trtllm-serve``'s click options) at
  NVIDIA/TensorRT-LLM 4c05a74891e4.
- Dynamo: ``components/backends/vllm/deploy/disagg.yaml`` (a ``DynamoGraphDeployment`` of
  ``nvidia.com/v1alpha1``, prefill workers marked ``--is-prefill-worker``) at ai-dynamo/dynamo
  416ff06e7fea; its ``dynamo.vllm`` worker takes vLLM's engine flags
  (``components/src/dynamo/vllm/args.py`` ``AsyncEngineArgs.add_cli_args`` at b6d5e48722e4).
- llm-d: ``guides/pd-disaggregation/modelserver/gpu/vllm/base/disaggregatedset.yaml`` (a
  ``DisaggregatedSet`` of ``disaggregatedset.x-k8s.io/v1``: roles ``prefill`` and ``decode``,
  each a ``leaderWorkerTemplate`` of one pod running ``vllm serve`` with NIXL as
  ``kv_producer`` / ``kv_consumer``, the decode pod behind llm-d's routing sidecar on port
  8000, vLLM on 8200) at llm-d/llm-d 5554114958fc; the pods are found by the guide's
  InferencePool through the labels ``llm-d.ai/inference-serving`` and ``llm-d.ai/guide``
  (``guides/pd-disaggregation/gaie-pd/values.yaml`` at 126f65d65f42) and told apart by
  ``llm-d.ai/role``.

TGI answers get a comment saying no launch line is written.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import yaml

from capsim.scenario.run_config import Pool, RunConfig

__all__ = ["ORCHESTRATORS", "VLLM_FLAGS", "SGLANG_FLAGS", "TRTLLM_FLAGS", "engine_argv",
           "model_id", "launch_script", "dynamo_manifest", "llmd_manifest", "launch_files"]

#: Deployment manifests capsim writes for a split answer (``--orchestrator``).
ORCHESTRATORS = ("dynamo", "llm-d", "none")

#: capsim knob → vLLM flag (vllm/engine/arg_utils.py at 99d7eb5d6a51).
VLLM_FLAGS = {
    "tensor_parallel_size": "--tensor-parallel-size",
    "pipeline_parallel_size": "--pipeline-parallel-size",
    "data_parallel_size": "--data-parallel-size",
    "enable_expert_parallel": "--enable-expert-parallel",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_model_len": "--max-model-len",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "block_size": "--block-size",
    "enable_chunked_prefill": "--enable-chunked-prefill",
    "enable_prefix_caching": "--enable-prefix-caching",
    "kv_cache_dtype": "--kv-cache-dtype",
    "kv_transfer_config": "--kv-transfer-config",
}
#: capsim knob → SGLang flag (python/sglang/srt/args/*_args.py at 4bc0b6e6ff91).
SGLANG_FLAGS = {
    "model": "--model-path",
    "tensor_parallel_size": "--tp-size",
    "pipeline_parallel_size": "--pp-size",
    "data_parallel_size": "--dp-size",
    "expert_parallel_size": "--ep-size",
    "enable_dp_attention": "--enable-dp-attention",
    "max_num_seqs": "--max-running-requests",
    "max_num_batched_tokens": "--chunked-prefill-size",
    "max_model_len": "--context-length",
    "mem_fraction_static": "--mem-fraction-static",
    "block_size": "--page-size",
    "disable_prefix_caching": "--disable-radix-cache",
    "disaggregation_mode": "--disaggregation-mode",
}
#: capsim knob → trtllm-serve option (tensorrt_llm/commands/serve.py at 4c05a74891e4).
TRTLLM_FLAGS = {
    "tensor_parallel_size": "--tp_size",
    "pipeline_parallel_size": "--pp_size",
    "expert_parallel_size": "--ep_size",
    "max_num_seqs": "--max_batch_size",
    "max_num_batched_tokens": "--max_num_tokens",
    "max_model_len": "--max_seq_len",
    "free_gpu_memory_fraction": "--kv_cache_free_gpu_memory_fraction",
    "enable_chunked_prefill": "--enable_chunked_prefill",
    "server_role": "--server_role",
}

#: KV connector of a split vLLM pair without an orchestrator: NIXL, as Dynamo's own vLLM
#: worker configures it (components/src/dynamo/vllm/args.py create_kv_transfer_config).
_NIXL = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
_HF = re.compile(r"huggingface\.co/([^/]+/[^/]+)")


def model_id(run: RunConfig) -> str:
    """The checkpoint to serve: the Hugging Face repo the model profile cites
    (``meta-llama/Llama-3.1-70B``), else capsim's model name."""
    m = _HF.search(getattr(run.model, "source", "") or "")
    return m.group(1) if m else run.model.name


def engine_argv(pool: Pool, model: str, role: str = "colocated") -> list[str] | None:
    """The engine's command line for one replica of ``pool`` (``role`` prefill / decode
    adds the engine's disaggregation switch where it has one), or None for an engine capsim
    writes no command for (TGI)."""
    family = pool.preset.engine
    if family == "vllm":
        return ["vllm", "serve", model, *_vllm_flags(pool, role)]
    if family == "sglang":
        return ["python", "-m", "sglang.launch_server", *_sglang_flags(pool, model, role)]
    if family == "tensorrt-llm":
        return ["trtllm-serve", model, *_trtllm_flags(pool, role)]
    return None


def _pairs(table: dict[str, str], values: dict[str, Any]) -> list[str]:
    """``--flag value`` for each knob with a value (None: left to the engine's default;
    True: the bare flag; False: dropped)."""
    out: list[str] = []
    for knob, value in values.items():
        if value is None or value is False:
            continue
        out += [table[knob]] if value is True else [table[knob], str(value)]
    return out


def _vllm_flags(pool: Pool, role: str) -> list[str]:
    e = pool.engine
    dpa = e.enable_dp_attention
    out = _pairs(VLLM_FLAGS, {
        "tensor_parallel_size": 1 if dpa else e.tensor_parallel_size,
        "data_parallel_size": e.tensor_parallel_size if dpa else None,
        "pipeline_parallel_size": e.pipeline_parallel_size if e.pipeline_parallel_size > 1
        else None,
        "enable_expert_parallel": e.enable_expert_parallel or dpa,
        "max_num_seqs": e.max_num_seqs, "max_num_batched_tokens": e.max_num_batched_tokens,
        "max_model_len": e.max_model_len, "gpu_memory_utilization": e.gpu_memory_utilization,
        "block_size": e.block_size,
        "kv_cache_dtype": None if e.kv_cache_dtype in ("auto", "bf16") else e.kv_cache_dtype,
        "kv_transfer_config": _NIXL if role != "colocated" else None})
    for knob in ("enable_chunked_prefill", "enable_prefix_caching"):   # BooleanOptional
        flag = VLLM_FLAGS[knob]
        out.append(flag if getattr(e, knob) else flag.replace("--", "--no-", 1))
    return out


def _sglang_flags(pool: Pool, model: str, role: str) -> list[str]:
    e = pool.engine
    return _pairs(SGLANG_FLAGS, {
        "model": model, "tensor_parallel_size": e.tensor_parallel_size,
        "pipeline_parallel_size": e.pipeline_parallel_size if e.pipeline_parallel_size > 1
        else None,
        "enable_dp_attention": e.enable_dp_attention,
        "data_parallel_size": e.tensor_parallel_size if e.enable_dp_attention else None,
        "expert_parallel_size": e.tensor_parallel_size if e.enable_expert_parallel else None,
        "max_num_seqs": e.max_num_seqs,
        "max_num_batched_tokens": e.max_num_batched_tokens if e.enable_chunked_prefill else -1,
        "max_model_len": e.max_model_len, "mem_fraction_static": e.mem_fraction_static,
        "block_size": e.block_size, "disable_prefix_caching": not e.enable_prefix_caching,
        "disaggregation_mode": role if role != "colocated" else None})


def _trtllm_flags(pool: Pool, role: str) -> list[str]:
    e = pool.engine
    return _pairs(TRTLLM_FLAGS, {
        "tensor_parallel_size": e.tensor_parallel_size,
        "pipeline_parallel_size": e.pipeline_parallel_size,
        "expert_parallel_size": e.tensor_parallel_size if e.enable_expert_parallel else None,
        "max_num_seqs": e.max_num_seqs, "max_num_batched_tokens": e.max_num_batched_tokens,
        "max_model_len": e.max_model_len,
        "free_gpu_memory_fraction": e.free_gpu_memory_fraction,
        "enable_chunked_prefill": e.enable_chunked_prefill,
        "server_role": {"prefill": "CONTEXT", "decode": "GENERATION"}.get(role)})


def _command(argv: list[str]) -> str:
    """One flag (with its value) a line, shell-quoted, continued with backslashes."""
    first = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
    lines = [" ".join(shlex.quote(a) for a in argv[:first])]
    for i in range(first, len(argv)):
        if argv[i].startswith("--"):
            lines.append(shlex.quote(argv[i]))
        else:
            lines[-1] += " " + shlex.quote(argv[i])
    return " \\\n    ".join(lines)


def launch_script(run: RunConfig, header: list[str], counts: dict[str, int]) -> str:
    """A shell script: the ``header`` lines as comments, then per pool (``counts``: role →
    replicas) how many replicas to start and one replica's command."""
    model = model_id(run)
    out = ["#!/usr/bin/env bash", *[f"# {h}" for h in header], ""]
    for pool in run.pools:
        argv = engine_argv(pool, model, pool.role)
        n = counts[pool.role]
        what = "" if pool.role == "colocated" else f"{pool.role} pool: "
        out.append(f"# {what}{n} replica(s) of this command, each on its own "
                   f"{pool.engine.gpus_per_replica} × {pool.hardware.name} "
                   f"({pool.preset.label})")
        out.append(_command(argv) if argv else
                   f"# capsim writes no launch line for {pool.preset.engine}")
        out.append("")
    return "\n".join(out)


def dynamo_manifest(run: RunConfig, name: str, counts: dict[str, int]) -> str | None:
    """A ``DynamoGraphDeployment`` for a split vLLM answer: a frontend, and prefill and
    decode workers with their replica counts, GPUs and vLLM flags (None when a pool is not
    vLLM: capsim writes Dynamo manifests for vLLM workers only)."""
    if any(p.preset.engine != "vllm" for p in run.pools):
        return None
    model = model_id(run)
    services: dict[str, Any] = {"Frontend": {"dynamoNamespace": name,
                                             "componentType": "frontend", "replicas": 1}}
    for pool in run.pools:
        flags = _vllm_flags(pool, "colocated")     # the worker sets the KV connector itself
        worker = {"dynamoNamespace": name, "componentType": "worker",
                  "subComponentType": pool.role, "replicas": counts[pool.role],
                  "resources": {"limits": {"gpu": str(pool.engine.gpus_per_replica)}},
                  "extraPodSpec": {"mainContainer": {
                      "command": ["python3", "-m", "dynamo.vllm"],
                      "args": ["--model", model, *flags,
                               *(["--is-prefill-worker"] if pool.role == "prefill" else [])]}}}
        services["VllmPrefillWorker" if pool.role == "prefill" else "VllmDecodeWorker"] = worker
    doc = {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
           "metadata": {"name": name}, "spec": {"services": services}}
    return yaml.safe_dump(doc, sort_keys=False, width=100)


#: llm-d's P/D guide (llm-d/llm-d 5554114958fc, module docstring): the labels its
#: InferencePool selects and what its sidecar and vLLM listen on.
LLMD_LABELS = {"llm-d.ai/inference-serving": "true", "llm-d.ai/guide": "pd-disaggregation"}
LLMD_SIDECAR_PORT, LLMD_DECODE_VLLM_PORT, LLMD_VLLM_PORT, LLMD_NIXL_PORT = 8000, 8200, 8000, 5600
#: The sidecar image is left to the user, as the guide leaves it (kustomize edit set image).
LLMD_SIDECAR_IMAGE = "REPLACE_ROUTING_SIDECAR_IMAGE"


def _llmd_role(pool: Pool, model: str, replicas: int) -> dict[str, Any]:
    """One role of llm-d's DisaggregatedSet: ``replicas`` single-pod groups of ``vllm serve``
    with the pool's flags, NIXL in the role's direction, and (decode) the routing sidecar."""
    decode = pool.role == "decode"
    gpus = str(pool.engine.gpus_per_replica)
    connector = json.dumps({"kv_connector": "NixlConnector",
                            "kv_role": "kv_consumer" if decode else "kv_producer",
                            "kv_buffer_device": "cuda",
                            "kv_connector_extra_config": {"backends": ["UCX"]}},
                           separators=(",", ":"))
    port = LLMD_DECODE_VLLM_PORT if decode else LLMD_VLLM_PORT
    server = {"name": "modelserver", "image": f"docker.io/vllm/vllm-openai:v{pool.preset.version}",
              "command": ["vllm", "serve"],
              "args": [model, *_vllm_flags(pool, "colocated"), "--kv-transfer-config", connector,
                       *([f"--port={port}"] if decode else [])],
              "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
                          "name": "llm-d-hf-token", "key": "HF_TOKEN"}}},
                      {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST",
                       "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
              "ports": [{"name": "modelserver", "containerPort": port, "protocol": "TCP"},
                        {"name": "nixl", "containerPort": LLMD_NIXL_PORT, "protocol": "TCP"}],
              "resources": {"limits": {"nvidia.com/gpu": gpus},
                            "requests": {"nvidia.com/gpu": gpus}}}
    spec: dict[str, Any] = {"containers": [server]}
    if decode:
        spec = {"initContainers": [{
            "name": "routing-proxy", "image": LLMD_SIDECAR_IMAGE,
            "args": [f"--port={LLMD_SIDECAR_PORT}", "--kv-connector=nixlv2",
                     "--secure-proxy=false"],
            "ports": [{"name": "sidecar", "containerPort": LLMD_SIDECAR_PORT, "protocol": "TCP"}],
            "restartPolicy": "Always"}], **spec}
    return {"name": pool.role, "spec": {"replicas": replicas, "leaderWorkerTemplate": {
        "size": 1, "workerTemplate": {
            "metadata": {"labels": {**LLMD_LABELS, "llm-d.ai/role": pool.role}},
            "spec": spec}}}}


def llmd_manifest(run: RunConfig, name: str, counts: dict[str, int]) -> str | None:
    """An llm-d ``DisaggregatedSet`` for a split vLLM answer: its prefill and decode roles
    with their replica counts, GPUs and vLLM flags (None when a pool is not vLLM: llm-d's
    guide serves vLLM and SGLang; capsim writes vLLM only). The scheduler in front (the
    guide's gateway and inference scheduler with its P/D profile) is installed by the guide,
    not written here."""
    if any(p.preset.engine != "vllm" for p in run.pools):
        return None
    model = model_id(run)
    doc = {"apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
           "metadata": {"name": name, "labels": dict(LLMD_LABELS)},
           "spec": {"slices": 1, "roles": [_llmd_role(p, model, counts[p.role])
                                           for p in run.pools]}}
    return (f"# the routing sidecar's image is {LLMD_SIDECAR_IMAGE}: set it as llm-d's guide "
            "does (kustomize edit set image, or sed); install the guide's gateway and "
            "inference scheduler (guides/pd-disaggregation) in front\n"
            + yaml.safe_dump(doc, sort_keys=False, width=100))


#: Orchestrator → (manifest writer, what the launch script's header calls it).
_MANIFESTS = {"dynamo": (dynamo_manifest, "Dynamo manifest"),
              "llm-d": (llmd_manifest, "llm-d DisaggregatedSet")}


def launch_files(result, options, orchestrator: str = "dynamo") -> dict[str, str]:
    """``launch/rank-<n>.sh`` for every answer that met the SLOs (its engine command per
    pool), and ``launch/rank-<n>-<orchestrator>.yaml`` for a split one (``dynamo``: a
    DynamoGraphDeployment, ``llm-d``: a DisaggregatedSet; ``none``: no manifest).
    ``options``: the search's :class:`~capsim.studies.fleet.FleetOption`\\ s (their resolved
    runs), matched to ``result.rows`` by label."""
    from capsim.studies.fleet import fleet_at

    runs = {o.label: o.run for o in options if o.run is not None}
    out: dict[str, str] = {}
    for row in (r for r in result.rows if r.status == "met"):
        split = row.prefill_replicas is not None
        run = fleet_at(runs[row.label], (row.prefill_replicas, row.decode_replicas) if split
                       else row.num_replicas)
        counts = {p.role: p.num_replicas for p in run.pools}
        header = [f"capsim size, rank {row.rank}: {row.label}",
                  f"{row.split or f'{row.num_replicas} replica(s)'} = {row.num_gpus} GPUs, "
                  f"${row.cost_per_hour_usd:,.2f}/h, ${row.cost_per_million_output_tokens_usd:,.3g}"
                  f"/M output tokens at {row.rate_per_s:g} req/s (simulated)"]
        writer, what = _MANIFESTS.get(orchestrator, (None, "--orchestrator dynamo or llm-d "
                                                     "writes one"))
        if split:
            where = f"the {what} next to this file" if writer else what
            header.append("the prefill -> decode KV hand-off needs a router in front "
                          f"({where}); capsim simulated {run.transfer.link.name}")
        out[f"launch/rank-{row.rank}.sh"] = launch_script(run, header, counts)
        manifest = writer(run, f"capsim-rank-{row.rank}", counts) if split and writer else None
        if manifest is not None:
            out[f"launch/rank-{row.rank}-{orchestrator}.yaml"] = "".join(
                f"# {h}\n" for h in header) + manifest
    return out

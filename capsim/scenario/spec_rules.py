"""``engine.speculative`` resolved for one co-located pool, with the rules of what it is
modelled with (vLLM V1's continuous batching or SGLang's scheduler over paged KV; no
pipeline parallelism, multi-step scheduling or replica failures) and the k + 1 tokens a
verifying sequence takes from the step's budget.

Public API:
    speculative_decoding(spec, v, engine, cluster, model, path, where) -> SpecDecoding | None
"""

from __future__ import annotations

import logging
from pathlib import Path

from capsim.common.errors import ScenarioError
from capsim.profiles.acceptance import acceptance_row
from capsim.profiles.models import ModelShape
from capsim.profiles.policies import policy_capabilities
from capsim.scenario.kv_sizing import kv_bytes_per_token
from capsim.scenario.profile_loading import load_model_at, named
from capsim.scenario.schema import DTYPE_BYTES, ClusterConfig, EngineConfig, Scenario, VariantSpec
from capsim.scenario.speculative import SpecDecoding, resolve_speculative

log = logging.getLogger(__name__)


def speculative_decoding(spec: Scenario, v: VariantSpec, engine: EngineConfig,
                         cluster: ClusterConfig, model: ModelShape, path: Path,
                         where: str) -> SpecDecoding | None:
    """``engine.speculative`` resolved, or None. Modelled on vLLM V1's continuous batching
    and SGLang's scheduler over paged KV in a co-located replica: other policies and
    layouts, pipeline parallelism, a disaggregated pool and replica failures are refused
    (one line)."""
    cfg = engine.speculative
    if cfg is None:
        return None
    at = f"{where}.engine.speculative" if where and "speculative" in v.engine \
        else "engine.speculative"
    refusals = (
        (not policy_capabilities(engine.scheduler).speculative or engine.kv_allocator != "paged",
         f"is modelled on vLLM V1's continuous batching and SGLang's scheduler over paged "
         f"KV; this engine runs scheduler {engine.scheduler} with kv_allocator "
         f"{engine.kv_allocator}"),
        (cfg.speculative_num_steps is not None and engine.scheduler != "sglang",
         f"is given by SGLang's knobs (speculative_num_steps ...) on an engine that runs "
         f"scheduler {engine.scheduler}; its name for the drafts is num_speculative_tokens"),
        (engine.num_scheduler_steps > 1, "does not combine with num_scheduler_steps > 1"),
        (engine.pipeline_parallel_size > 1, "is not modelled with pipeline_parallel_size > 1"),
        (cluster.failures is not None,
         "is not modelled with cluster.failures (a cut attempt's streamed chunks)"),
    )
    for refused, why in refusals:
        if refused:
            raise ScenarioError(f"speculative decoding {why}; remove engine.speculative "
                                "or change that", file=str(path), path=at)
    # A verifying sequence is scheduled k + 1 tokens (vLLM V1 scheduler.py): they must fit
    # one step's token budget and the context window.
    room = min(engine.max_num_batched_tokens, engine.max_model_len) - 1
    if cfg.num_speculative_tokens > room:
        raise ScenarioError(
            f"num_speculative_tokens {cfg.num_speculative_tokens} does not fit: k + 1 tokens "
            f"per sequence must fit max_num_batched_tokens ({engine.max_num_batched_tokens}) "
            f"and max_model_len ({engine.max_model_len}); valid: 1 to {room}",
            file=str(path), path=f"{at}.num_speculative_tokens")
    try:
        resolved = resolve_speculative(
            cfg, model, spec.workload.class_names, spec.seed,
            lambda name: named(lambda n: load_model_at(n, path), name, path, f"{at}.model"),
            lambda shape: kv_bytes_per_token(shape, engine), DTYPE_BYTES[engine.dtype],
            engine.tensor_parallel_size)
    except ValueError as exc:
        field, message = exc.args
        raise ScenarioError(message, file=str(path), path=f"{at}.{field}") from None
    _warn_other_model(cfg.acceptance, model, path, at)     # after any refusal: one line
    return resolved


def _warn_other_model(name: str | None, model: ModelShape, path: Path, at: str) -> None:
    """Warn (once per command: the CLI drops repeated lines) when the shipped acceptance row
    ``name`` was measured on another model than ``model``: the row's declared ``models``
    decide, not the names' likeness."""
    if name is None:
        return
    row = acceptance_row(name)
    if not row.serves(model.name):
        log.warning("%s: %s.acceptance: row %s of capsim/profiles/data/speculative/"
                    "acceptance.yaml was measured on %s (its models: %s), not on this "
                    "scenario's model '%s'; another model's drafts are accepted at another "
                    "rate: give acceptance_rate_by_position measured on this model",
                    path, at, row.name, row.target_model, ", ".join(row.models), model.name)

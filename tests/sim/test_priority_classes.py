"""Priority classes in whole runs: vLLM's priority scheduling serves the interactive class
first on an overloaded replica, and the gateway sheds the sheddable class; every table
counts them per class."""

from __future__ import annotations

import pytest

from capsim.common.errors import ScenarioError
from capsim.metrics.summary import summarize
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import build

LEN = {"prompt_tokens": {"dist": "fixed", "value": 1000},
       "output_tokens": {"dist": "fixed", "value": 100}}


def _doc(engine: dict, batch: dict) -> dict:
    return {"name": "p", "seed": 1, "model": "llama-3.1-8b", "hardware": "h100-sxm",
            "engine": {"max_model_len": 8192, **engine},
            "workload": {"duration_s": 10, "arrival": {"process": "poisson", "rate_per_s": 40},
                         "classes": [{"name": "interactive", "weight": 1, **LEN},
                                     {"name": "batch", "weight": 1, **LEN, **batch}]}}


def _rows(tmp_path, write_scenario, engine, batch):
    loaded = load(write_scenario(tmp_path, _doc(engine, batch)))
    run = loaded.runs[0]
    res = simulate(run, build(run.workload, run.seed, tmp_path))
    return {r.cls: r for r in summarize(res, loaded.spec.slo)}


def test_priority_scheduling_serves_the_interactive_class_first(tmp_path, write_scenario):
    """40 requests/s of 1,000 + 100 tokens overload one H100 for 10 s: the interactive
    class's TTFT p99 falls from 1.21 s (fcfs) to 0.64 s when the batch class has priority 1;
    the batch class waits longer instead."""
    fcfs = _rows(tmp_path, write_scenario, {}, {})
    prio = _rows(tmp_path, write_scenario, {"scheduling_policy": "priority"}, {"priority": 1})
    assert prio["interactive"].ttft_p99_ms < 0.6 * fcfs["interactive"].ttft_p99_ms
    assert prio["batch"].ttft_p99_ms > fcfs["batch"].ttft_p99_ms
    assert prio["all"].num_finished == fcfs["all"].num_finished


def test_the_gateway_sheds_the_sheddable_class_only(tmp_path, write_scenario):
    rows = _rows(tmp_path, write_scenario, {}, {"criticality": "sheddable"})
    assert rows["interactive"].rejected_shed == 0
    assert rows["batch"].rejected_shed > 0
    assert rows["all"].rejected_shed == rows["batch"].rejected_shed == rows["batch"].num_rejected


@pytest.mark.parametrize("engine, batch, path, words", [
    ({}, {"priority": 1}, "workload.classes.1.priority", "set engine.scheduling_policy: "
                                                         "priority"),
    ({"scheduling_policy": "priority", "preset": "sglang"}, {}, "engine.scheduling_policy",
     "has no priority scheduling (vLLM V1's; valid with: vllm-0.11, vllm-0.21, vllm-0.8, "
     "vllm-0.9, vllm-v1; else fcfs)"),
    # A class priority on SGLang was told to set scheduling_policy: priority, which the
    # preset then refuses: the message names the presets that have it instead.
    ({"preset": "sglang"}, {"priority": 2}, "workload.classes.1.priority",
     "engine preset 'sglang-0.5.10' has no priority scheduling (valid with: vllm-0.11, vllm-0.21, "
     "vllm-0.8, vllm-0.9, vllm-v1); give priority 0"),
])
def test_a_priority_the_engine_cannot_honour_is_refused(tmp_path, write_scenario, engine,
                                                       batch, path, words):
    with pytest.raises(ScenarioError) as err:
        load(write_scenario(tmp_path, _doc(engine, batch)))
    assert err.value.path == path and words in str(err.value)

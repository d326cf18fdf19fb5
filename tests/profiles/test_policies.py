"""The policy table (capsim.profiles.policies): one row per ``engine.scheduler`` value, and
the engine's policies built from it."""

from __future__ import annotations

import typing

import pytest

from capsim.engine.recorder import ItlRecorder
from capsim.engine.scheduler import POLICIES, make_kv, make_scheduler
from capsim.profiles.engines import SchedulerPreset
from capsim.profiles.policies import POLICY_NAMES, POLICY_TABLE, knob_policies
from capsim.scenario.schema import EngineConfig


def test_every_row_names_a_module_that_builds_its_policy():
    assert tuple(POLICIES) == POLICY_NAMES
    for name, row in POLICY_TABLE.items():
        assert row.name == name and callable(POLICIES[name])


def test_the_schemas_accept_exactly_the_table():
    assert typing.get_args(EngineConfig.model_fields["scheduler"].annotation) == POLICY_NAMES
    assert set(typing.get_args(SchedulerPreset.model_fields["policy"].annotation)) \
        == set(POLICY_NAMES)


def test_a_knob_belongs_to_one_policy():
    owners = knob_policies()
    assert owners == {"capacity_scheduler_policy": "trtllm",
                      "batch_wait_timeout_iters": "trtllm",
                      "batch_wait_max_tokens_ratio": "trtllm",
                      "schedule_conservativeness": "sglang",
                      "scheduler_recv_interval": "sglang", "max_waiting_tokens": "tgi",
                      "waiting_served_ratio": "tgi", "long_prefill_token_threshold": "continuous"}
    assert all(hasattr(EngineConfig(), knob) for knob in owners)


KNOBS = {"sglang": dict(schedule_conservativeness=1.0, init_new_token_ratio=0.7,
                        min_new_token_ratio_factor=0.14, new_token_ratio_decay_steps=600,
                        retract_decode_steps=20, clip_max_new_tokens=4096),
         "tgi": dict(max_waiting_tokens=20, waiting_served_ratio=1.2)}


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_each_built_scheduler_declares_its_row(name):
    """The class's ``capabilities`` is the row; pipelining, the prefix cache and the roles
    it takes are what the row says."""
    row = POLICY_TABLE[name]
    chunked = not row.no_chunked_prefill
    eng = EngineConfig(scheduler=name, enable_chunked_prefill=chunked, max_num_batched_tokens=64,
                       max_model_len=64, enable_prefix_caching=True)
    alloc = make_kv(eng, 100)
    sched = make_scheduler(eng, alloc, 0, 1, ItlRecorder(), knobs=KNOBS.get(name))
    assert type(sched).capabilities is row
    assert sched.can_pipeline() == row.pipelining
    assert alloc.enable_caching == row.prefix_cache
    for role in ("prefill", "decode"):
        if role in row.roles:
            assert make_scheduler(eng, alloc, 0, 1, ItlRecorder(), role=role,
                                  knobs=KNOBS.get(name)).role == role
        else:
            with pytest.raises(ValueError):
                make_scheduler(eng, alloc, 0, 1, ItlRecorder(), role=role, knobs=KNOBS.get(name))


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_chunked_prefill_takes_effect_where_the_row_says(name):
    """``EngineConfig.chunked`` reads the row: vLLM's, SGLang's and TensorRT-LLM's policies
    split prompts; static batching and TGI 2.1 prefill them whole."""
    eng = EngineConfig(scheduler=name, enable_chunked_prefill=True)
    assert eng.chunked is (name in ("continuous", "sglang", "trtllm"))
    assert EngineConfig(scheduler=name, enable_chunked_prefill=False).chunked is False


def test_swap_is_refused_by_the_policies_that_reserve_whole_requests():
    assert {n for n, row in POLICY_TABLE.items() if row.no_swap} == {"trtllm", "tgi"}

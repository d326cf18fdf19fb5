"""Bad input, swept: invalid edits of the shipped scenarios (``scenarios/*.yaml``) across
engine, workload (arrival, schedules, classes), cluster (pools, routes, autoscaler,
failures), hardware overrides, speculative decoding, disaggregation, sweep and sizing, and
bad options of every command. Each must give one line naming the file, the field's YAML
path and what would be valid; exit code 2; no traceback; nothing written (the tables of
tests/cli/test_cli.py, ``BAD`` and the rest, edit a small scenario of their own)."""

from __future__ import annotations

import pytest
import yaml

from tests.cli.test_bad_input_late import set_dotted

#: (shipped scenario, dotted YAML path, YAML value or DEL to delete it, the error after
#: "error: FILE: "). A dotted key of ``sweep:`` is given whole (``sweep: {a.b: [..]}``).
SHIPPED_BAD = [
    # A scenario-wide cluster section refused in one variant was named as that variant's
    # (variants.0.cluster.…), a path the file does not have.
    ('rag_mix.yaml', 'cluster.autoscaling',
     '{signal: running, target: 4, max_replicas: 2, provisioning: {profile: vllm-v2}}',
     "cluster.autoscaling.provisioning.profile: unknown startup profile 'vllm-v2'; valid: "
     "vllm-v1"),
    ('rag_mix.yaml', 'cluster.failures', '{at: [{replica: 0, at_s: 10, repair_s: 10}]}',
     'cluster.failures: replica failures are modelled for the continuous scheduler (vLLM), '
     'not static (in variant static)'),
    ('rag_mix.yaml', 'engine', '[1, 2]',
     'engine: expected a mapping, e.g. {preset: vllm-v1, max_num_seqs: 256, '
     'max_model_len: 8192} (got a list [1, 2])'),
    ('rag_mix.yaml', 'engine', '5',
     'engine: expected a mapping, e.g. {preset: vllm-v1, max_num_seqs: 256, '
     'max_model_len: 8192} (got 5)'),
    ('rag_mix.yaml', 'engine.enable_chunked_prefill', '"maybe"',
     "engine.enable_chunked_prefill: expected true or false (got 'maybe')"),
    # Booleans are YAML's true / false only: pydantic's lax 'yes', 'false', 1 and 0 are
    # refused (they were echoed as given into scenario.resolved.yaml).
    ('rag_mix.yaml', 'engine.async_scheduling', "'yes'",
     "engine.async_scheduling: expected true or false (got 'yes')"),
    ('rag_mix.yaml', 'engine.async_scheduling', "'false'",
     "engine.async_scheduling: expected true or false, unquoted (got 'false')"),
    ('rag_mix.yaml', 'engine.enable_prefix_caching', '1',
     'engine.enable_prefix_caching: expected true or false (got 1)'),
    ('rag_mix.yaml', 'variants.4.disaggregation.layerwise_overlap', '0',
     'variants.4.disaggregation.layerwise_overlap: expected true or false (got 0)'),
    # An engine knob beside a pool's (or a variant's) engine: is told where it goes.
    ('hetero_fleet.yaml', 'cluster.pools.0.pipeline_parallel_size', '2',
     "cluster.pools.0.pipeline_parallel_size: unknown key 'pipeline_parallel_size' here: "
     'an engine knob goes under engine: (cluster.pools.0.engine.pipeline_parallel_size)'),
    ('disagg_ratio.yaml', 'variants.1.disaggregation.prefill.max_num_seqs', '64',
     "variants.1.disaggregation.prefill.max_num_seqs: unknown key 'max_num_seqs' here: an "
     'engine knob goes under engine: (variants.1.disaggregation.prefill.engine.max_num_seqs)'),
    ('rag_mix.yaml', 'variants.1.max_num_seqs', '64',
     "variants.1.max_num_seqs: unknown key 'max_num_seqs' here: an engine knob goes under "
     'engine: (variants.1.engine.max_num_seqs)'),
    # A parallel size below 1 says what it counts (not pydantic's "greater than 0").
    ('hetero_fleet.yaml', 'cluster.pools.0.engine', '{pipeline_parallel_size: 0}',
     'cluster.pools.0.engine.pipeline_parallel_size: pipeline_parallel_size must be >= 1 '
     '(the stages the layers are split over, of tensor_parallel_size GPUs each; 1: no '
     'pipeline parallelism), got 0'),
    ('hetero_fleet.yaml', 'cluster.pools.0.tensor_parallel_size', '0',
     'cluster.pools.0.tensor_parallel_size: tensor_parallel_size must be >= 1 (the GPUs '
     'each layer is split over; 1: no tensor parallelism), got 0'),
    ('disagg_ratio.yaml', 'variants.1.disaggregation.decode.tensor_parallel_size', '-1',
     'variants.1.disaggregation.decode.tensor_parallel_size: tensor_parallel_size must be '
     '>= 1 (the GPUs each layer is split over; 1: no tensor parallelism), got -1'),
    ('rag_mix.yaml', 'engine.pipeline_parallel_size', '"2"',
     "engine.pipeline_parallel_size: expected an integer (got '2')"),
    ('hetero_fleet.yaml', 'cluster.pools.0.engine', "{enable_expert_parallel: 'no'}",
     "cluster.pools.0.engine.enable_expert_parallel: expected true or false (got 'no')"),
    ('rag_mix.yaml', 'engine.max_num_seqs', '"lots"',
     "engine.max_num_seqs: expected an integer (got 'lots')"),
    ('rag_mix.yaml', 'engine.block_size', '7',
     "engine.block_size: block_size must be a power of two (vLLM's paged-attention "
     'kernels use 8, 16, 32, ...), got 7'),
    ('rag_mix.yaml', 'engine.preemption_mode', 'swapp',
     "engine.preemption_mode: Input should be 'recompute' or 'swap' (got 'swapp')"),
    ('rag_mix.yaml', 'engine.scheduler', 'fifo',
     "engine.scheduler: Input should be 'static', 'continuous', 'trtllm', 'sglang' or "
     "'tgi' (got 'fifo')"),
    ('rag_mix.yaml', 'engine.kv_allocator', 'paged2',
     "engine.kv_allocator: Input should be 'paged', 'contiguous_max_model_len' or "
     "'contiguous_max_tokens' (got 'paged2')"),
    ('rag_mix.yaml', 'engine.dtype', 'fp12',
     "engine.dtype: Input should be 'bf16', 'fp16' or 'fp8' (got 'fp12')"),
    ('rag_mix.yaml', 'engine.max_model_len', '0',
     'engine.max_model_len: must be > 0 (got 0)'),
    ('rag_mix.yaml', 'engine.max_model_len', '10000000',
     "engine.max_model_len: max_model_len 10000000 exceeds the model's "
     'max_position_embeddings 131072; valid: <= 131072'),
    ('rag_mix.yaml', 'engine.tensor_parallel_size', '[2]',
     'engine.tensor_parallel_size: expected an integer (got a list [2])'),
    ('rag_mix.yaml', 'engine.kv_cache_dtype', 'int2',
     "engine.kv_cache_dtype: Input should be 'auto', 'bf16', 'fp16' or 'fp8' (got 'int2')"),
    ('rag_mix.yaml', 'engine.preset', '{name: vllm}',
     "engine.preset: expected a string (got a mapping {'name': 'vllm'})"),
    ('rag_mix.yaml', 'workload.arrival', 'poisson',
     'workload.arrival: expected a mapping, e.g. {process: poisson, rate_per_s: 5} (got '
     "'poisson')"),
    ('rag_mix.yaml', 'workload.arrival.process', 'poison',
     "workload.arrival.process: Input should be 'poisson', 'gamma', 'constant' or "
     "'concurrency' (got 'poison')"),
    ('rag_mix.yaml', 'workload.arrival', '{process: gamma, rate_per_s: 3}',
     'workload.arrival.cv: cv is required for process: gamma (coefficient of variation, > '
     '0)'),
    ('rag_mix.yaml', 'workload.arrival', '{process: gamma, rate_per_s: 3, cv: -1}',
     'workload.arrival.cv: must be > 0 (got -1)'),
    ('spec_decode.yaml', 'workload.arrival.users', '0',
     'workload.arrival.users: must be > 0 (got 0)'),
    ('spec_decode.yaml', 'workload.arrival', '{process: concurrency}',
     'workload.arrival.users: users is required for process: concurrency (requests in '
     'flight, >= 1)'),
    ('rag_mix.yaml', 'workload.arrival', 'DEL',
     'workload: missing arrival: give arrival + classes (synthetic requests) or trace '
     '(replay a CSV)'),
    ('rag_mix.yaml', 'workload.num_requests', '-5',
     'workload.num_requests: must be > 0 (got -5)'),
    ('rag_mix.yaml', 'workload.duration_s', '"1h"',
     "workload.duration_s: expected a number in seconds (got '1h')"),
    ('day_in_the_life.yaml', 'workload.schedule.kind', 'weekly',
     "workload.schedule: unknown kind 'weekly'; valid: piecewise, diurnal"),
    ('day_in_the_life.yaml', 'workload.schedule', 'diurnal',
     'workload.schedule: expected a mapping, e.g. {kind: diurnal, peak: 1.0, trough: '
     "0.25, peak_hour: 20} (got 'diurnal')"),
    ('day_in_the_life.yaml', 'workload.schedule.peak_hour', '25',
     'workload.schedule.peak_hour: must be < 24 (got 25)'),
    ('day_in_the_life.yaml', 'workload.schedule.trough', '2.0',
     'workload.schedule.trough: trough (2) must be <= peak (1)'),
    ('day_in_the_life.yaml', 'workload.classes.1.schedule.factors', '[]',
     'workload.classes.1.schedule.factors: expected at least 1 item (got a list [])'),
    ('day_in_the_life.yaml', 'workload.classes.1.schedule.step_s', '0',
     'workload.classes.1.schedule.step_s: must be > 0 (got 0)'),
    ('day_in_the_life.yaml', 'workload.classes.1.schedule.factors.3', '-1',
     'workload.classes.1.schedule.factors.3: must be >= 0 (got -1)'),
    ('rag_mix.yaml', 'workload.classes', '{}',
     'workload.classes: expected a list, e.g. [{name: chat, weight: 1, prompt_tokens: '
     '{dist: fixed, value: 200}, output_tokens: {dist: fixed, value: 20}}, ...] (got'),
    ('rag_mix.yaml', 'workload.classes', '[]',
     'workload.classes: expected at least 1 item, e.g. [{name: chat, weight: 1, '
     'prompt_tokens: {dist: fixed, value: 200}, output_tokens: {dist: fixed, value: 20}},'),
    ('rag_mix.yaml', 'workload.classes.0.weight', '-1',
     'workload.classes.0.weight: must be > 0 (got -1)'),
    ('rag_mix.yaml', 'workload.classes.0.prompt_tokens.dist', 'gauss',
     "workload.classes.0.prompt_tokens: unknown dist 'gauss'; valid: fixed, uniform, "
     'normal, lognormal, empirical'),
    ('rag_mix.yaml', 'workload.classes.0.prompt_tokens', '600',
     'workload.classes.0.prompt_tokens: expected a mapping, e.g. {dist: lognormal, mean: '
     '600, sigma: 0.8, min: 16, max: 4096} (got 600)'),
    ('rag_mix.yaml', 'workload.classes.0.prompt_tokens', '{dist: uniform, min: 100, max: 10}',
     'workload.classes.0.prompt_tokens.min: min must be ≤ max (got min=100, max=10)'),
    ('rag_mix.yaml', 'workload.classes.0.output_tokens', '{dist: lognormal, mean: 250}',
     'workload.classes.0.output_tokens.sigma: required field is missing; e.g. {dist: '
     'lognormal, mean: 600, sigma: 0.8, min: 16, max: 4096}'),
    ('rag_mix.yaml', 'workload.classes.1.name', 'chat',
     'workload: class names must be unique; repeated: chat'),
    ('rag_mix.yaml', 'workload.classes.0.slo', '{ttft: 100}',
     "workload.classes.0.slo.ttft: unknown key 'ttft' (did you mean 'ttft_ms'?); valid "
     'keys: e2el_ms, tpot_ms, ttft_ms'),
    ('parallel_sampling.yaml', 'workload.classes.0.n', '0',
     'workload.classes.0.n: must be > 0 (got 0)'),
    ('prefix_sharing.yaml', 'workload.classes.0.shared_prefix.fraction', '1.5',
     'workload.classes.0.shared_prefix.fraction: must be <= 1 '
     '(got 1.5)'),
    ('prefix_sharing.yaml', 'workload.classes.0.shared_prefix', '300',
     'workload.classes.0.shared_prefix: expected a mapping, e.g. {tokens: 300, fraction: '
     '1.0} (got 300)'),
    ('hetero_fleet.yaml', 'cluster.pools', '{h100: 2}',
     'cluster.pools: expected a list, e.g. [{name: h100, hardware: h100-sxm, '
     "num_replicas: 2}, ...] (got a mapping {'h100': 2})"),
    ('hetero_fleet.yaml', 'cluster.pools.0', 'h100',
     'cluster.pools.0: expected a mapping, e.g. {name: h100, hardware: h100-sxm, '
     "num_replicas: 2} (got 'h100')"),
    ('hetero_fleet.yaml', 'cluster.pools.0.hardware', 'h1000',
     "cluster.pools.0.hardware: unknown hardware 'h1000'; valid: a100-40gb, a100-80gb, "
     'a10g, b200, h100-pcie, h100-sxm, h20, h200-sxm, l4, l40s, mi300x, mi325x,'),
    ('hetero_fleet.yaml', 'cluster.pools.0.num_replicas', '0',
     'cluster.pools.0.num_replicas: must be > 0 (got 0)'),
    ('hetero_fleet.yaml', 'cluster.pools.2.engine', '8192',
     'cluster.pools.2.engine: expected a mapping, e.g. {max_model_len: 8192, '
     'max_num_seqs: 64} (got 8192)'),
    ('hetero_fleet.yaml', 'cluster.router', 'round_robbin',
     "cluster.router: Input should be 'round_robin', 'least_outstanding_tokens', 'cost', "
     "'prefix_aware', 'kv_scorer' or 'session_affinity' (got 'round_robbin')"),
    # A cache-aware router over pools named cluster, not the router the docs point at.
    ('hetero_fleet.yaml', 'cluster.router', 'prefix_aware',
     'cluster.router: router prefix_aware picks a replica within one pool; with cluster.pools '
     'give round_robin, least_outstanding_tokens or cost'),
    # kv_scorer's weights all 0: every replica scored 0, replica 0 took every request.
    ('multi_turn_fleet.yaml', 'variants.4.cluster.router_options',
     '{scorer_weights: {queue: 0, kv_cache_utilization: 0, prefix_cache: 0}}',
     'variants.4.cluster.router_options.scorer_weights: every weight is 0, so every replica '
     'would score 0 and the first would take every request; give at least one weight > 0'),
    ('hetero_fleet.yaml', 'variants.1.cluster.route', '{class: rag, pool: h200}',
     'variants.1.cluster.route: expected a list, e.g. [{class: rag, pool: h200}, ...] '
     "(got a mapping {'class': 'rag', 'pool': 'h200'})"),
    ('hetero_fleet.yaml', 'variants.1.cluster.route.0.class', 'legal',
     "variants.1.cluster.route.0.class: no workload class named 'legal'; valid: chat, "
     'rag, code'),
    ('hetero_fleet.yaml', 'variants.2.cluster.route.0.min_prompt_tokens', '-1',
     'variants.2.cluster.route.0.min_prompt_tokens: must be > 0 (got '
     '-1)'),
    ('hetero_fleet.yaml', 'variants.1.cluster.route.0', '{pool: h200}',
     'variants.1.cluster.route.0: a route rule needs class: NAME and/or '
     'min_prompt_tokens: N next to pool'),
    ('day_in_the_life.yaml', 'variants.1.cluster.autoscaling.signal', 'cpu',
     "variants.1.cluster.autoscaling.signal: Input should be 'queue', 'running', 'kv_use' "
     "or 'schedule' (got 'cpu')"),
    ('day_in_the_life.yaml', 'variants.1.cluster.autoscaling.max_replicas', '0',
     'variants.1.cluster.autoscaling.max_replicas: must be >= 1 '
     '(got 0)'),
    ('day_in_the_life.yaml', 'variants.1.cluster.autoscaling', 
     '{signal: running, target: 12, min_replicas: 5, max_replicas: 4}',
     'variants.1.cluster.autoscaling.min_replicas: min_replicas (5) must be <= '
     'max_replicas (4)'),
    ('day_in_the_life.yaml', 'variants.1.cluster.autoscaling', 'true',
     'variants.1.cluster.autoscaling: expected a mapping, e.g. {signal: running, target: '
     '12, min_replicas: 1, max_replicas: 4} (got true)'),
    ('day_in_the_life.yaml', 'variants.2.cluster.failures.in_flight', 'drop_all',
     "variants.2.cluster.failures.in_flight: Input should be 'retry' or 'fail' (got "
     "'drop_all')"),
    ('day_in_the_life.yaml', 'variants.2.cluster.failures.at.0.replica', '9',
     'variants.2.cluster.failures.at.0.replica: replica 9 does not exist: replicas are '
     '0..3'),
    ('day_in_the_life.yaml', 'variants.2.cluster.failures.at.0.at_s', '-1',
     'variants.2.cluster.failures.at.0.at_s: must be >= 0 '
     '(got -1)'),
    ('day_in_the_life.yaml', 'variants.2.cluster.failures.at', '{replica: 0}',
     'variants.2.cluster.failures.at: expected a list, e.g. [{replica: 0, at_s: 72000, '
     "repair_s: 1800}, ...] (got a mapping {'replica': 0})"),
    ('rag_mix.yaml', 'cluster.num_replicas', '0',
     'cluster.num_replicas: must be > 0 (got 0)'),
    ('rag_mix.yaml', 'hardware_overrides', '[memory_total_gib]',
     'hardware_overrides: expected a mapping, e.g. {price_per_gpu_hour_usd: 2.5} (got a list '
     "['memory_total_gib'])"),
    ('rag_mix.yaml', 'hardware_overrides.hbm_bandwidth_bytes_per_s', '"fast"',
     'hardware_overrides.hbm_bandwidth_bytes_per_s: expected a number in bytes per second '
     "(got 'fast')"),
    ('rag_mix.yaml', 'hardware_overrides.peak_flops_per_s', '{fp9: 1e15}',
     "hardware_overrides.peak_flops_per_s.fp9: Input should be 'bf16', 'fp16', 'fp8', "
     "'int8' or 'fp4' (got 'fp9')"),
    ('spec_decode.yaml', 'variants.1.engine.speculative', 'eagle',
     'variants.1.engine.speculative: expected a mapping, e.g. {method: eagle, '
     "num_speculative_tokens: 3, acceptance_rate: 0.7} (got 'eagle')"),
    ('spec_decode.yaml', 'variants.1.engine.speculative.acceptance_rate_by_class', '[0.8]',
     'variants.1.engine.speculative.acceptance_rate_by_class: expected a mapping, e.g. '
     '{code: 0.8} (got a list [0.8])'),
    # the by-class map ({code: 0.8}) leaves chat out: the missing default is named
    ('spec_decode.yaml', 'variants.1.engine.speculative.acceptance_rate', 'DEL',
     'variants.1.engine.speculative.acceptance_rate: class chat not in '
     'acceptance_rate_by_class and no default given: add acceptance_rate'),
    ('spec_decode.yaml', 'variants.1.engine.speculative',
     '{method: eagle3, num_speculative_tokens: 3, acceptance: eagle9}',
     "variants.1.engine.speculative.acceptance: acceptance 'eagle9' is not a shipped "
     'acceptance table; valid: eagle3-gpt-oss-20b-mtbench, eagle3-llama31-8b-mtbench,'),
    ('spec_decode.yaml', 'variants.1.engine.speculative',
     '{method: eagle3, num_speculative_tokens: 3, acceptance_rate_by_position: [0.7, 0.8, 0.3]}',
     "variants.1.engine.speculative: acceptance_rate_by_position[1] 0.8 is above position 0's "
     '0.7;'),
    ('spec_decode.yaml', 'variants.1.engine.speculative',
     '{method: eagle3, num_speculative_tokens: 4, acceptance: eagle3-llama31-8b-mtbench}',
     'variants.1.engine.speculative.acceptance: acceptance eagle3-llama31-8b-mtbench was '
     'measured at 3 drafts; num_speculative_tokens 4 needs as many; valid: 1 to 3'),
    ('disagg_ratio.yaml', 'variants.1.disaggregation.link', 'nvlink-9',
     "variants.1.disaggregation.link: unknown link 'nvlink-9'; valid: infiniband-hdr, "
     'infiniband-ndr, nvlink-3, nvlink-4, pcie-gen4-x16, pcie-gen5-x16, roce-200g (or'),
    ('disagg_ratio.yaml', 'variants.1.disaggregation.router', 'random',
     "variants.1.disaggregation.router: Input should be 'least_kv' or 'round_robin' (got "
     "'random')"),
    ('disagg_ratio.yaml', 'variants.1.disaggregation.prefill', '1',
     'variants.1.disaggregation.prefill: expected a mapping, e.g. {num_replicas: 1, '
     'engine: {max_num_batched_tokens: 8192}} (got 1)'),
    ('disagg_ratio.yaml', 'variants.1.disaggregation.decode.num_replicas', '0',
     'variants.1.disaggregation.decode.num_replicas: must be > 0 (got '
     '0)'),
    ('disagg_ratio.yaml', 'variants.1.disaggregation.decode', 'DEL',
     'variants.1.disaggregation.decode: required field is missing; e.g. {prefill: '
     '{num_replicas: 1}, decode: {num_replicas: 3}, link: nvlink-4}'),
    ('rag_mix_chunk_sweep.yaml', 'sweep', '[1, 2]',
     'sweep: expected a mapping, e.g. {workload.arrival.rate_per_s: [2, 4, 8]} (got a '
     'list [1, 2])'),
    ('rag_mix_chunk_sweep.yaml', 'sweep', '{workload.arrival.rate_per_s: 3.5}',
     'sweep.workload.arrival.rate_per_s: give a list of values to sweep, e.g. [3.5, ...] '
     '(got 3.5)'),
    ('rag_mix_chunk_sweep.yaml', 'sweep', '{workload.arrival.rate_pers: [1, 2]}',
     "sweep.workload.arrival.rate_pers: unknown key 'rate_pers' (did you mean "
     "'rate_per_s'?); valid keys: cv, process, rate_per_s, think_time_s, users (sweep "
     'point'),
    ('rag_mix_chunk_sweep.yaml', 'sweep', '{workload.arrival.rate_per_s: []}',
     'sweep.workload.arrival.rate_per_s: empty list: give at least one value to sweep'),
    ('rag_mix_chunk_sweep.yaml', 'sweep', '{workload.arrival.rate_per_s: [3.5, -1]}',
     'sweep.workload.arrival.rate_per_s: must be > 0 (got -1) (sweep '
     'point workload.arrival.rate_per_s=-1)'),
    ('rag_mix_chunk_sweep.yaml', 'sweep', '{variants.0.engine.max_num_batched_tokens: [0, 512]}',
     'sweep.variants.0.engine.max_num_batched_tokens: must be > 0 (got '
     '0) (sweep point variants.0.engine.max_num_batched_tokens=0)'),
    ('rag_mix_chunk_sweep.yaml', 'sweep', '{}',
     'sweep: empty sweep: give at least one dotted field and its values, e.g. '
     'workload.arrival.rate_per_s: [2, 4, 8]'),
    ('rag_mix_chunk_sweep.yaml', 'sweep', '{name: [a, b]}',
     "sweep: 'name' cannot be swept; every field can except sweep, sizing, name, "
     'description, seed'),
    ('rag_mix_chunk_sweep.yaml', 'sweep', '{hardware: [h100-sxm, h900]}',
     "sweep.hardware: unknown hardware 'h900'; valid: a100-40gb, a100-80gb, a10g, b200, "
     'h100-pcie, h100-sxm, h20, h200-sxm, l4, l40s, mi300x, mi325x, rtx-4090 (or a'),
    ('size_chat_h100_vs_a100.yaml', 'sizing.rate_per_s', '-1',
     'sizing.rate_per_s: must be > 0 (got -1)'),
    ('size_chat_h100_vs_a100.yaml', 'sizing.hardware', '[a100-80gb, h900]',
     "sizing.hardware.1: unknown hardware 'h900'; valid: a100-40gb, a100-80gb, a10g, "
     'b200, h100-pcie, h100-sxm, h20, h200-sxm, l4, l40s, mi300x, mi325x, rtx-4090 (or'),
    ('size_chat_h100_vs_a100.yaml', 'sizing.tensor_parallel_size', '[0]',
     'sizing.tensor_parallel_size.0: must be > 0 (got 0)'),
    ('size_chat_h100_vs_a100.yaml', 'sizing.max_gpus', 'many',
     "sizing.max_gpus: expected an integer (got 'many')"),
    ('rag_mix.yaml', 'variants', '{a: 1}',
     'variants: expected a list, e.g. [{name: chunked-512, engine: '
     "{max_num_batched_tokens: 512}}, ...] (got a mapping {'a': 1})"),
    ('rag_mix.yaml', 'variants.0', 'chunked',
     'variants.0: expected a mapping, e.g. {name: chunked-512, engine: '
     "{max_num_batched_tokens: 512}} (got 'chunked')"),
    ('rag_mix.yaml', 'slo', '100',
     'slo: expected a mapping, e.g. {ttft_ms: 1500, tpot_ms: 60, targets: {ttft_p99_ms: '
     '3000}} (got 100)'),
    ('rag_mix.yaml', 'slo.ttft_ms', '-3',
     'slo.ttft_ms: must be > 0 (got -3)'),
    ('rag_mix.yaml', 'variants.0.set', '{engine.max_num_seqss: 3}',
     "variants.0.set: engine.max_num_seqss: unknown key 'max_num_seqss' (did you mean "
     "'max_num_seqs'?); valid keys: async_scheduling, batch_wait_max_tokens_ratio, "
     "batch_wait_timeout_iters, block_size, capacity_scheduler_policy,"),
    ('rag_mix.yaml', 'kv_allocators', '3',
     "kv_allocators: unknown key 'kv_allocators'; valid keys: capsim_version, cluster, "
     'description, engine, hardware, hardware_overrides, model, name, seed, sizing,'),
    ('rag_mix.yaml', 'workload.classes.0.model', 'llama-9b',
     "workload.classes.0.model: unknown model 'llama-9b'; valid: deepseek-v3, "
     'gpt-oss-120b, gpt-oss-20b, llama-2-70b, llama-2-7b, llama-3.1-405b, llama-3.1-70b,'),
    ('rag_mix.yaml', 'variants.0.hardware', 'h900',
     "variants.0.hardware: unknown hardware 'h900'; valid: a100-40gb, a100-80gb, a10g, "
     'b200, h100-pcie, h100-sxm, h20, h200-sxm, l4, l40s, mi300x, mi325x, rtx-4090'),
    ('rag_mix.yaml', 'variants.0.model', 'llama-9b',
     "variants.0.model: unknown model 'llama-9b'; valid: deepseek-v3, gpt-oss-120b, "
     'gpt-oss-20b, llama-2-70b, llama-2-7b, llama-3.1-405b, llama-3.1-70b,'),
    ('rag_mix.yaml', 'slo.targets', '{ttft_p42_ms: 100}',
     "slo.targets: unknown SLO metric 'ttft_p42_ms'; valid: "
     'cost_per_million_output_tokens_usd, e2el_mean_ms, e2el_p50_ms, e2el_p90_ms, '
     'e2el_p99_ms,'),
    ('rag_mix.yaml', 'workload', '{trace: {path: nope.csv}}',
     'workload.trace.path: trace file not found: '),
    ('rag_mix.yaml', 'workload', '{trace: {path: rag_mix.yaml, format: azzure}}',
     "workload.trace.format: Input should be 'azure', 'columns' or 'mooncake' (got 'azzure')"),
    ('rag_mix.yaml', 'workload.classes.0.bursts', '{kind: on_off, on_s: 60}',
     'workload.classes.0.bursts.off_s: required field is missing; e.g. {kind: on_off, '
     'on_s: 60, off_s: 600, factor: 3}'),
    ('rag_mix.yaml', 'workload.classes.0.conversation', '3',
     'workload.classes.0.conversation: expected a mapping with keys from: kind, '
     'think_time_s, turns (got 3)'),
    ('hetero_fleet.yaml', 'cluster.pools.2.model', 'llama-9b',
     "cluster.pools.2.model: unknown model 'llama-9b'; valid: deepseek-v3, gpt-oss-120b, "
     'gpt-oss-20b, llama-2-70b, llama-2-7b, llama-3.1-405b, llama-3.1-70b,'),
    ('hetero_fleet.yaml', 'cluster.pools.0.hardware_overrides', '{memory_total_gib: -1}',
     'cluster.pools.0.hardware_overrides.memory_total_gib: must be > 0 '
     '(got -1)'),
    ('hetero_fleet.yaml', 'cluster.pools.0.autoscaling', '{signal: queue}',
     'cluster.pools.0.autoscaling.max_replicas: required field is missing; e.g. '
     '{signal: running, target: 12, min_replicas: 1, max_replicas: 4}'),
    ('hetero_fleet.yaml', 'cluster.pools.0.engine', '{max_num_seqz: 3}',
     "cluster.pools.0.engine.max_num_seqz: unknown key 'max_num_seqz' (did you mean "
     "'max_num_seqs'?); valid keys: async_scheduling, batch_wait_max_tokens_ratio, "
     "batch_wait_timeout_iters, block_size, capacity_scheduler_policy,"),
    ('day_in_the_life.yaml', 'variants.1.cluster.autoscaling.provisioning', '{delay_s: -5}',
     'variants.1.cluster.autoscaling.provisioning.delay_s: must be >= 0 '
     '(got -5)'),
    ('disagg_ratio.yaml', 'variants.1.disaggregation.prefill.hardware', 'h900',
     "variants.1.disaggregation.prefill.hardware: unknown hardware 'h900'; valid: "
     'a100-40gb, a100-80gb, a10g, b200, h100-pcie, h100-sxm, h20, h200-sxm, l4, l40s,'),
    # A disaggregated pool's error names the field the user wrote: the pool's
    # tensor_parallel_size, its engine's, the variant's engine or the scenario's.
    ('disagg_ratio.yaml', 'variants.1.disaggregation.prefill.tensor_parallel_size', '3',
     'variants.1.disaggregation.prefill.tensor_parallel_size: tensor_parallel_size 3 must '
     'divide num_attention_heads 32 of llama-3.1-8b'),
    ('disagg_ratio.yaml', 'variants.1.disaggregation.prefill.engine.tensor_parallel_size', '3',
     'variants.1.disaggregation.prefill.engine.tensor_parallel_size: tensor_parallel_size '
     '3 must divide num_attention_heads 32 of llama-3.1-8b'),
    ('disagg_ratio.yaml', 'variants.1.engine', '{tensor_parallel_size: 3}',
     'variants.1.engine.tensor_parallel_size: tensor_parallel_size 3 must divide '
     'num_attention_heads 32 of llama-3.1-8b'),
    ('disagg_ratio.yaml', 'engine.pipeline_parallel_size', '2',
     'engine.pipeline_parallel_size: pipeline parallelism is not modelled in a '
     'disaggregated pool (the KV handoff assumes one stage per replica); valid: '
     'pipeline_parallel_size 1'),
    ('disagg_ratio.yaml', 'variants.1.disaggregation.prefill.engine', '{max_num_batched_tokenz: 3}',
     'variants.1.disaggregation.prefill.engine.max_num_batched_tokenz: unknown key '
     "'max_num_batched_tokenz' (did you mean 'max_num_batched_tokens'?); valid keys:"),
    ('spec_decode.yaml', 'variants.1.engine.speculative.model', 'llama-9b',
     'variants.1.engine.speculative.model: model names a draft model, used by method '
     'draft_model only; method eagle drafts with the model'),
    ('spec_decode.yaml', 'variants.1.engine.speculative.method', 'draft',
     "variants.1.engine.speculative.method: Input should be 'eagle', 'eagle3', 'mtp', "
     "'draft_model' or 'ngram' (got 'draft')"),
    ('rag_mix.yaml', 'hardware_overrides', '{scale_out_link: nvlink-9}',
     "hardware_overrides.scale_out_link: unknown link 'nvlink-9'; valid: infiniband-hdr, "
     'infiniband-ndr, nvlink-3, nvlink-4, pcie-gen4-x16, pcie-gen5-x16, roce-200g,'),
    ('rag_mix.yaml', 'name', '"bad name/"',
     "name: expected letters, digits, '.', '_' and '-', from a letter or digit (it names "
     "the report folder reports/<name>), e.g. rag_mix (got 'bad name/')"),
    ('rag_mix.yaml', 'seed', '1.5',
     'seed: expected an integer (got 1.5)'),
]

#: (capsim arguments, {S}: the scenarios folder, {W}: an empty folder of the test; the
#: error line's start, or a part of it after the scenario's path).
CLI_BAD = [
    ('compare {W}/nope.json {S}/rag_mix.yaml --variant nope -o {W}/o22',
     "error: rag_mix.yaml: --variant 'nope': no such variant; valid: static, continuous, "
     'chunked-2048, chunked-512, disagg-1P1D-nvlink, disagg-1P1D-ib'),
    ('sweep {S}/rag_mix.yaml -o {W}/o23',
     'error: rag_mix.yaml: sweep: no sweep: section; add one, e.g. sweep: '
     '{workload.arrival.rate_per_s: [2, 4, 8]}'),
    ('sweep {S}/rag_mix_chunk_sweep.yaml --seeds 0 -o {W}/o24',
     'error: --seeds must be in 1..1,000 (independent traces per configuration), got 0'),
    ('size {S}/size_chat_h100_vs_a100.yaml --executor threads -o {W}/o25',
     "error: Invalid value for '--executor': 'threads' is not one of 'process', 'serial', "
     "'dask'."),
    ('validate {S}/rag_mix.yaml --set workload.arrival.rate_per_s=fast',
     'error: --set workload.arrival.rate_per_s: expected a number per second (got '
     "'fast')"),
    ('run {S}/rag_mix.yaml --set variants.0.engine=3 -o {W}/o26',
     'error: --set variants.0.engine: expected a mapping, e.g. {max_num_seqs: '
     '128} (got 3)'),
    ('calibrate --hardware h100-sxm --csv {S}/rag_mix.yaml --model llama-9b -o {W}/o27',
     "error: --model: unknown model 'llama-9b'; valid presets: deepseek-v3, gpt-oss-120b, "
     'gpt-oss-20b, llama-2-70b, llama-2-7b, llama-3.1-405b, llama-3.1-70b,'),
    ('roofline --model llama-3.1-8b --hardware h100-sxm --prefill-tokens 512 --tp 0',
     "error: Invalid value for '--tp': 0 is not in the range x>=1."),
    ('run {S}/rag_mix.yaml --seed -1 -o {W}/o1',
     "error: Invalid value for '--seed': -1 is not in the range x>=0."),
    ('run {S}/rag_mix.yaml --set engine.max_num_seqs=0 -o {W}/o2',
     'error: --set engine.max_num_seqs: must be > 0 (got 0)'),
    ('run {S}/missing.yaml -o {W}/o3',
     'error: missing.yaml: cannot read scenario: No such file or directory'),
    ('run {S}/rag_mix.yaml --bogus -o {W}/o4',
     "error: No such option '--bogus'. (Did you mean one of: '--out', '--verbose'?)"),
    ('run {S}/rag_mix.yaml -o {S}/rag_mix.yaml',
     "error: Invalid value for '-o' / '--out': Directory '"),
    ('size {S}/size_chat_h100_vs_a100.yaml --rate -5 -o {W}/o5',
     'error: --rate must be a finite number > 0 requests/s, got -5'),
    ('size {S}/size_chat_h100_vs_a100.yaml --rate abc -o {W}/o6',
     "error: Invalid value for '--rate': 'abc' is not a valid float."),
    ('size {S}/size_chat_h100_vs_a100.yaml --gpus 0 -o {W}/o7',
     'error: --gpus must be >= 1, got 0'),
    ('size {S}/size_chat_h100_vs_a100.yaml --max-gpus -1 -o {W}/o8',
     'error: --max-gpus must be >= 1, got -1'),
    ('size {S}/size_chat_h100_vs_a100.yaml --headroom -1 -o {W}/o9',
     'error: size_chat_h100_vs_a100.yaml: --headroom must be >= 0 replicas, got -1'),
    ('size {S}/size_chat_h100_vs_a100.yaml --seeds 0 -o {W}/o10',
     'error: --seeds must be in 1..1,000 (independent traces per configuration), got 0'),
    ('size {S}/size_chat_h100_vs_a100.yaml --workers 0 -o {W}/o11',
     'error: --workers must be >= 1, got 0'),
    ('size {S}/size_chat_h100_vs_a100.yaml --trust-edge worst -o {W}/o12',
     "error: Invalid value for '--trust-edge': 'worst' is not one of 'none', 'median', "
     "'max'."),
    ('size {S}/size_chat_h100_vs_a100.yaml --rate 5 --gpus 4 -o {W}/o13',
     'error: give --rate (fewest GPUs for a rate) or --gpus (highest rate for N GPUs), '
     'not both'),
    ('validate {S}/rag_mix.yaml --set engine.max_num_seqs',
     "error: --set expects dotted.key=value, got 'engine.max_num_seqs'"),
    ('validate {S}/rag_mix.yaml --set variants.x.name=y',
     'error: --set variants.x.name: list index must be 0..5 (at variants.x)'),
    # A --set value's mistake names the option and its key, not the scenario file; a
    # field inside the value follows the key; a rule it breaks elsewhere says it was applied.
    ('validate {S}/hetero_fleet.yaml --set cluster.pools.0.engine={"max_num_seqs":0}',
     'error: --set cluster.pools.0.engine: cluster.pools.0.engine.max_num_seqs: must be '
     '> 0 (got 0)'),
    ('validate {S}/rag_mix.yaml --set hardware=h900',
     "error: --set hardware: unknown hardware 'h900'; valid: a100-40gb, a100-80gb, a10g, "),
    ('validate {S}/rag_mix.yaml --set engine.max_num_seqs=20000',
     'error: rag_mix.yaml: variants.1.engine: max_num_batched_tokens (16384) must be >= '
     'max_num_seqs (20000) (with --set engine.max_num_seqs)'),
    ('sweep {S}/rag_mix_chunk_sweep.yaml --set engine.max_num_seqs=lots -o {W}/o40',
     "error: --set engine.max_num_seqs: expected an integer (got 'lots')"),
    ('size {S}/size_chat_h100_vs_a100.yaml --set sizing.max_gpus=x -o {W}/o41',
     "error: --set sizing.max_gpus: expected an integer (got 'x')"),
    ('validate {S}/rag_mix.yaml --set engine.max_num_seqs=[',
     'error: --set engine.max_num_seqs: value is not valid YAML (expected '
     "the node content, but found '<stream end>')"),
    ('validate {S}',
     "error: Invalid value for 'SCENARIO': File '"),
    ('roofline --model llama-3.1-70b --hardware h100-sxm --prefill-tokens 512 --tp 4 --ep',
     'error: --ep: expert parallelism needs a mixture-of-experts model; llama-3.1-70b is '
     'dense'),
    ('roofline --model llama-3.1-70b --hardware h100-sxm --prefill-tokens -1',
     "error: Invalid value for '--prefill-tokens': -1 is not in the range x>=0."),
    ('roofline --model llama-3.1-70b --hardware h100-sxm --decode-batch 4',
     'error: --decode-batch 4 needs --context C: the tokens each decoding sequence '
     'attends over (>= 1)'),
    ('roofline --model llama-3.1-70b --hardware h100-sxm --prefill-tokens 512 --routing-skew -1',
     "error: Invalid value for '--routing-skew': -1.0 is not in the range x>=0."),
    ('compare {W}/nope.json {S}/rag_mix.yaml -o {W}/o14',
     'error: nope.json: cannot read file: No such file or directory'),
    ('compare {S}/rag_mix.yaml {S}/rag_mix.yaml -o {W}/o15',
     'error: rag_mix.yaml: a capsim scenario, not a benchmark result: the measured run'),
    ('compare {W} {S}/rag_mix.yaml -o {W}/o16',
     "error: Invalid value for 'RESULT': File '"),
    ('calibrate --hardware h900 -o {W}/o17',
     "error: --hardware: unknown hardware 'h900'; valid: a100-40gb, a100-80gb, a10g, "
     'b200, h100-pcie, h100-sxm, h20, h200-sxm, l4, l40s, mi300x, mi325x, rtx-4090'),
    ('calibrate --hardware h100-sxm -o {W}/o18',
     'error: nothing to calibrate from: give --vidur DIR, --csv FILE and/or --from RESULT'),
    ('calibrate --hardware h100-sxm --csv {W}/nope.csv -o {W}/o19',
     'error: --csv needs --model (the shape the operators were measured on)'),
    ('calibrate --hardware h100-sxm --vidur {W}/nope -o {W}/o20',
     'error: --vidur {W}/nope: folder not found'),
    ('calibrate --hardware h100-sxm --from {S}/rag_mix.yaml -o {W}/o21',
     'error: --from needs --scenario (the engine the server ran)'),
]


def _edited(doc: dict, dotted: str, value: str) -> dict:
    set_dotted(doc, dotted, value if value == "DEL" else yaml.safe_load(value))
    return doc


@pytest.mark.parametrize("scenario,field,value,expected", SHIPPED_BAD)
def test_a_bad_edit_of_a_shipped_scenario_is_one_line(tmp_path, run_cli, scenarios_dir,
                                                      scenario, field, value, expected):
    doc = _edited(yaml.safe_load((scenarios_dir / scenario).read_text()), field, value)
    path = tmp_path / scenario
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, out, err = run_cli(["validate", str(path)])
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {path}: {expected}")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [scenario]     # nothing written


@pytest.mark.parametrize("args,expected", CLI_BAD)
def test_a_bad_option_is_one_line_and_writes_nothing(tmp_path, run_cli, scenarios_dir, args,
                                                     expected):
    work = tmp_path / "w"
    work.mkdir()
    argv = args.replace("{S}", str(scenarios_dir)).replace("{W}", str(work)).split()
    code, _, err = run_cli(argv)
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err and err.startswith("error: ")
    expected = expected.replace("{W}", str(work))
    start = expected.removeprefix("error: ")
    assert (err.startswith(expected) or f"/{start}" in err), err
    assert list(work.iterdir()) == []                                   # nothing written

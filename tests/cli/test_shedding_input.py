"""Bad input to the load-shedding knobs (engine.max_waiting_requests,
engine.max_inflight_requests, cluster.router_max_queued_requests,
cluster.router_rate_limit): one line naming the file, the field's YAML path and what would
be valid; exit code 2; no traceback; nothing written."""

from __future__ import annotations

import pytest
import yaml

#: (shipped scenario, dotted YAML path, YAML value, the error after "error: FILE: ").
BAD = [
    ('kv_allocators.yaml', 'engine.max_waiting_requests', '0',
     'engine.max_waiting_requests: must be > 0 (got 0)'),
    ('kv_allocators.yaml', 'engine.max_waiting_requests', '2.5',
     'engine.max_waiting_requests: expected an integer (got 2.5)'),
    ('kv_allocators.yaml', 'engine.max_waiting_requests', '"many"',
     "engine.max_waiting_requests: expected an integer (got 'many')"),
    ('kv_allocators.yaml', 'variants.0.engine.max_inflight_requests', 'true',
     'variants.0.engine.max_inflight_requests: expected an integer (got true)'),
    ('kv_allocators.yaml', 'engine.max_inflight_requests', '-4',
     'engine.max_inflight_requests: must be > 0 (got -4)'),
    ('kv_allocators.yaml', 'engine.max_concurrent_requests', '8',
     "engine.max_concurrent_requests: unknown key 'max_concurrent_requests' (did you mean "
     "'max_inflight_requests'?)"),
    ('kv_allocators.yaml', 'cluster.router_max_queued_requests', '0',
     'cluster.router_max_queued_requests: must be > 0 (got 0)'),
    ('kv_allocators.yaml', 'cluster.router_rate_limit', '{rate_per_s: 0, burst: 5}',
     'cluster.router_rate_limit.rate_per_s: must be > 0 (got 0)'),
    ('kv_allocators.yaml', 'cluster.router_rate_limit', '{rate_per_s: .inf, burst: 5}',
     'cluster.router_rate_limit.rate_per_s: must be a finite number (got inf)'),
    ('kv_allocators.yaml', 'cluster.router_rate_limit', '{rate_per_s: 5}',
     'cluster.router_rate_limit.burst: required field is missing; e.g. {rate_per_s: 20, '
     'burst: 40}'),
    ('kv_allocators.yaml', 'cluster.router_rate_limit', '{rate_per_s: 5, burst: 2.5}',
     'cluster.router_rate_limit.burst: expected an integer (got 2.5)'),
    ('kv_allocators.yaml', 'cluster.router_rate_limit', '{rate: 5, burst: 2}',
     "cluster.router_rate_limit.rate: unknown key 'rate'; valid keys: burst, rate_per_s"),
    ('kv_allocators.yaml', 'cluster.router_rate_limit', '5',
     'cluster.router_rate_limit: expected a mapping, e.g. {rate_per_s: 20, burst: 40} '
     '(got 5)'),
    ('kv_allocators.yaml', 'cluster.router_rate_limit', '{rate_per_s: true, burst: 2}',
     'cluster.router_rate_limit.rate_per_s: expected a number, not a boolean (got true)'),
    ('hetero_fleet.yaml', 'cluster.pools.0.engine', '{max_waiting_requests: 0}',
     'cluster.pools.0.engine.max_waiting_requests: must be > 0 (got 0)'),
    # A replica's limit in a prefill/decode split is refused, not ignored.
    ('rag_mix.yaml', 'variants.4.engine.max_waiting_requests', '8',
     "variants.4.engine.max_waiting_requests: a replica's request limit "
     "(max_waiting_requests) is not modelled in a disaggregated pool; limit the requests at "
     "the router instead (cluster.router_max_queued_requests, cluster.router_rate_limit)"),
    ('disagg_ratio.yaml', 'variants.1.disaggregation.prefill.engine',
     '{max_inflight_requests: 8}',
     "variants.1.disaggregation.prefill.engine.max_inflight_requests: a replica's request "
     "limit (max_inflight_requests) is not modelled in a disaggregated pool"),
]


def _edited(doc: dict, dotted: str, value: str) -> dict:
    parts = dotted.split(".")
    node = doc
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
    node[parts[-1]] = yaml.safe_load(value)
    return doc


@pytest.mark.parametrize("scenario,field,value,expected", BAD)
def test_a_bad_shedding_knob_is_one_line(tmp_path, run_cli, scenarios_dir, scenario, field,
                                         value, expected):
    doc = _edited(yaml.safe_load((scenarios_dir / scenario).read_text()), field, value)
    path = tmp_path / scenario
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    for command in ("validate", "run"):
        code, out, err = run_cli([command, str(path), *(["-o", str(tmp_path / "r")]
                                                        if command == "run" else [])])
        assert (code, out) == (2, "")
        assert err.startswith(f"error: {path}: {expected}"), err
        assert err.count("\n") == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [scenario]     # nothing written

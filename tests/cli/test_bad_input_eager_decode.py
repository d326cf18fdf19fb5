"""Bad input to the ungraphed-decode floor of a custom preset file
(``host_overhead.eager_decode_op_s``, with ``eager_decode_above_graph_bs``): exit code 2, one
line ``error: FILE: YAML.PATH: …`` naming the preset file and the field, no traceback, nothing
written; ``capsim validate`` and ``capsim run`` print the same line (the harness of
test_bad_input_trtllm_sglang05.py)."""

from __future__ import annotations

import pytest

from tests.cli.test_bad_input_late import guarded  # noqa: F401 - a fixture
from tests.cli.test_bad_input_trtllm_sglang05 import (
    test_a_bad_value_of_the_new_features_is_refused_alike_by_validate_and_run as _refused)

O, E = "host_overhead.eager_decode_op_s", "host_overhead.eager_decode_above_graph_bs"
CASES = [
    ("op-negative", "cus", {}, {"SOURCE": "vllm-0.11", O: -1e-5}, "preset", O,
     "must be >= 0"),
    ("op-string", "cus", {}, {"SOURCE": "vllm-0.11", O: "fast"}, "preset", O,
     "expected a number"),
    ("op-null", "cus", {}, {"SOURCE": "vllm-0.11", O: None}, "preset", O, "expected a number"),
    # a per-operator figure with the rule off would price nothing, silently
    ("op-without-rule", "cus", {}, {"SOURCE": "vllm-0.11", E: False}, "preset",
     "host_overhead", "eager_decode_op_s prices nothing without eager_decode_above_graph_bs"),
    ("op-typo", "cus", {}, {"SOURCE": "vllm-0.11", "host_overhead.eager_decode_ops": 1e-5},
     "preset", "host_overhead.eager_decode_ops", "eager_decode_op_s"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_bad_decode_floor_is_refused_alike_by_validate_and_run(
        case, tmp_path, guarded, capsys, repo_root):  # noqa: F811 - the fixture
    _refused(case, tmp_path, guarded, capsys, repo_root)

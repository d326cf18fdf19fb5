"""The hint an integer field's error gives for a whole number written as a float."""

from __future__ import annotations

import pytest

from capsim.common.schema import integer_hint


@pytest.mark.parametrize(("value", "hint"), [
    (16.0, "; an integer is written without a decimal point: 16"),
    (1.92e11, "; an integer is written without a decimal point: 192000000000 or 192e9"),
    # 1e300 printed its 301 digits into the one-line error (a bad-input sweep, issue 31).
    (1e300, "; too large for any integer field"),
    (-1e19, "; too large for any integer field"),
    (16.5, ""),
])
def test_a_whole_float_is_told_how_to_be_an_integer(value, hint):
    assert integer_hint({"type": "int_type", "input": value}) == hint

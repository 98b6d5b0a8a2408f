"""The bounded readers: hostile numbers and JSON give None or a ValueError, in time linear in their size."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infradoctor.bounded import cut, load_json, read_float, read_int


def test_numbers_that_are_not_measurements_are_not_available() -> None:
    assert read_int("1" * 400) is None and read_int(10**400) == 10**400  # text is length-checked; ints are ints
    assert read_int(" 42 ") == 42 and read_int(b"-7") == -7 and read_int(3.0) == 3
    assert read_int(3.5) is None and read_int(True) is None and read_int("0x10") is None and read_int(None) is None
    assert read_int("5", low=6) is None and read_int("5", high=4) is None
    assert read_float("1e308") == 1e308 and read_float("1e999") is None and read_float("inf") is None
    assert read_float("nan") is None and read_float("1.2.3") is None and read_float(".5") == 0.5
    assert read_float(10**400) is None and read_float(float("inf")) is None
    assert read_float("-1", low=0) is None and read_float("2.5", high=2) is None


def test_cut_says_it_cut() -> None:
    assert cut("abc", 5) == ("abc", False)
    text, was_cut = cut("x" * 100, 10)
    assert was_cut and len(text) == 10 and text.endswith("\u2026")


def test_json_too_deep_or_too_long_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="too deeply"):
        load_json("[" * 50_000 + "]" * 50_000)
    with pytest.raises(ValueError, match="over the limit"):
        load_json("[" + "1," * 100 + "1]", max_chars=50)
    assert load_json(b'{"a": [1, {"b": "[[["}]}') == {"a": [1, {"b": "[[["}]}


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.one_of(st.text(max_size=80), st.binary(max_size=80), st.integers(), st.floats(), st.none(), st.booleans()))
def test_readers_never_raise(value: object) -> None:
    number = read_float(value)
    assert number is None or number == number  # finite or not available
    read_int(value)

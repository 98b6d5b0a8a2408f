"""The Server-Timing header: W3C syntax out, tolerant parsing in."""

from __future__ import annotations

import pytest

from infradoctor.serve.server_timing import format_server_timing, metric_name, parse_server_timing


def test_format_lists_stages_then_total() -> None:
    value = format_server_timing({"preprocess": 1.234, "inference": 40.0}, total_ms=45.678)
    assert value == "preprocess;dur=1.23, inference;dur=40.00, total;dur=45.68"


def test_names_become_tokens() -> None:
    assert metric_name("cpu->gpu copy") == "cpu-_gpu_copy"
    assert metric_name("") == "_"
    assert format_server_timing({"a b": 1.0}) == "a_b;dur=1.00"


def test_round_trip() -> None:
    stages = {"receive": 0.5, "cpu-_gpu": 1.25, "inference": 12.0}
    parsed = parse_server_timing(format_server_timing(stages, total_ms=20.0))
    assert parsed == {**stages, "total": 20.0}


@pytest.mark.parametrize(
    "values,expected",
    [
        ('db;dur=53, app;dur=47.2', {"db": 53.0, "app": 47.2}),
        ('cache;desc="Cache Read, hit";dur=23.2', {"cache": 23.2}),
        ("miss, db;dur=1", {"miss": 0.0, "db": 1.0}),
        ('db;dur="2.5"', {"db": 2.5}),
        ("a;dur=1, a;dur=2", {"a": 3.0}),
        ("bad name;dur=1, ok;dur=2", {"ok": 2.0}),
        ("x;dur=abc", {"x": 0.0}),
        (["a;dur=1", "b;dur=2"], {"a": 1.0, "b": 2.0}),
        ("", {}),
    ],
)
def test_parse(values: str | list[str], expected: dict[str, float]) -> None:
    assert parse_server_timing(values) == expected

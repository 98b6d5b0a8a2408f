"""The Server-Timing header the middleware writes: W3C syntax, read back by the load client's parser."""

from __future__ import annotations

from infradoctor.load.servertiming import parse_server_timing
from infradoctor.serve.server_timing import format_server_timing, metric_name


def test_format_lists_stages_then_total() -> None:
    value = format_server_timing({"preprocess": 1.234, "inference": 40.0}, total_ms=45.678)
    assert value == "preprocess;dur=1.23, inference;dur=40.00, total;dur=45.68"


def test_names_become_tokens() -> None:
    assert metric_name("cpu->gpu copy") == "cpu-_gpu_copy"
    assert metric_name("") == "_"
    assert format_server_timing({"a b": 1.0}) == "a_b;dur=1.00"


def test_round_trip_through_the_load_parser() -> None:
    stages = {"receive": 0.5, "cpu-_gpu": 1.25, "inference": 12.0}
    assert parse_server_timing(format_server_timing(stages, total_ms=20.0)) == {**stages, "total": 20.0}
    assert parse_server_timing(format_server_timing({"odd name;x": 3.0})) == {"odd_name_x": 3.0}

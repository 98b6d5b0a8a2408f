"""The shipped JSON Schema describes every command's typed metrics, and stays generated from the dataclasses."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import pytest

from infradoctor.metrics import METRICS_CLASSES, Metrics, MetricsError, json_schema, metrics_class
from infradoctor.result import schema_document

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_schema_is_generated_from_the_metrics_classes() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_schema.py"), "--check"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    jsonschema.Draft202012Validator.check_schema(schema_document())


@pytest.mark.parametrize("command", sorted(METRICS_CLASSES))
def test_each_command_has_a_named_metrics_definition(command: str) -> None:
    cls = metrics_class(command)
    assert cls is not None and issubclass(cls, Metrics)
    assert f"{command}Metrics" in schema_document()["$defs"]


@dataclass(frozen=True)
class Inner(Metrics):
    """A nested part."""

    value: float
    """A number."""
    note: str | None = None
    """Optional text."""


@dataclass(frozen=True)
class Outer(Metrics):
    """A command's metrics."""

    inner: Inner
    """Nested."""
    points: tuple[Inner, ...] = ()
    """A list."""
    by_name: dict[str, int] = field(default_factory=dict)
    """A map."""
    pair: tuple[int, int] | None = None
    """A fixed pair."""


def test_round_trip_and_schema_agree() -> None:
    value = Outer(Inner(1.5), (Inner(2.0, "x"),), {"a": 1}, (3, 4))
    data = value.to_dict()
    assert data == {"inner": {"value": 1.5, "note": None}, "points": [{"value": 2.0, "note": "x"}],
                    "by_name": {"a": 1}, "pair": [3, 4]}
    assert Outer.from_dict(data) == value
    defs: dict[str, object] = {}
    schema = {**json_schema(Outer, defs), "$defs": defs}
    jsonschema.validate(data, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**data, "surprise": 1}, schema)


def test_bad_stored_metrics_say_where() -> None:
    with pytest.raises(MetricsError, match=r"Outer\.inner\.value: expected a number"):
        Outer.from_dict({"inner": {"value": "fast"}})
    with pytest.raises(MetricsError, match="missing 'inner'"):
        Outer.from_dict({})
    assert Inner(float("nan")).to_dict()["value"] is None  # JSON has no NaN: not available

"""Shared fixtures: an isolated run store, the CLI in-process, and the result schema validator."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from infradoctor.result import Result, schema_document


@dataclass
class CliRun:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture(autouse=True)
def isolated_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test stores runs in its own directory, never in the checkout."""
    store = tmp_path / "store"
    monkeypatch.setenv("INFRADOCTOR_HOME", str(store))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "110")
    return store


@pytest.fixture
def cli() -> Callable[..., CliRun]:
    """Run ``infradoctor ARGS`` in-process and capture its output."""
    from infradoctor.cli import main

    def run(*args: str) -> CliRun:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main(list(args))
        return CliRun(code, out.getvalue(), err.getvalue())

    return run


_VALIDATOR = jsonschema.Draft202012Validator(schema_document())


def validate_result(data: dict[str, Any] | Result) -> None:
    """Fail the test when a result does not match the shipped JSON Schema or uses an unregistered code."""
    from infradoctor.findings import catalog

    registry = catalog()

    payload = data.to_dict() if isinstance(data, Result) else data
    errors = sorted(_VALIDATOR.iter_errors(payload), key=lambda e: list(e.path))
    assert not errors, "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:5])
    for finding in payload["findings"]:
        assert finding["code"] in registry, f"unregistered code {finding['code']}"
        assert registry[finding["code"]].name == finding["name"], finding


@pytest.fixture
def result_validator() -> Callable[[dict[str, Any] | Result], None]:
    return validate_result


@pytest.fixture
def python() -> str:
    return sys.executable


@pytest.fixture
def fixtures_dir() -> Iterator[Path]:
    yield Path(__file__).parent / "fixtures"

"""The result of one command run: the JSON contract shared by every command.

``metrics`` is command-specific (documented per command); ``findings`` are ranked verdicts; ``errors`` are the
problems met on the way (a probe that was not available, lines that could not be parsed): a result with errors is a
partial result, never a lost one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from importlib import resources
from typing import Any

from infradoctor import __version__
from infradoctor.bounded import json_printable, load_json
from infradoctor.findings import Finding, Severity, rank_findings

SCHEMA_ID = "infradoctor.result/1"


@dataclass(frozen=True)
class ErrorNote:
    """A problem met while measuring; the result is partial but kept."""

    source: str
    """What failed, e.g. ``gpu.nvml``, ``kernel-log``, ``parser:nginx``."""
    message: str
    """Human-readable reason."""
    count: int = 1
    """How many times it happened (e.g. skipped lines)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"source": self.source, "message": self.message, "count": self.count}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ErrorNote:
        """Inverse of :meth:`to_dict`."""
        return cls(str(data["source"]), str(data["message"]), int(data.get("count", 1)))


@dataclass(frozen=True)
class Result:
    """What one command found, in the shape every command writes with ``--json``."""

    command: str
    """The command that produced it: ``node``, ``profile``, ``load``, ``route``, ``logs``, ``scan``."""
    started_at: str
    """UTC ISO-8601 start time, e.g. ``2026-11-29T10:00:00Z``."""
    duration_s: float
    """Wall time of the measurement in seconds."""
    target: Mapping[str, Any] = field(default_factory=dict)
    """What was measured: argv, URL, files, host (secrets redacted before storing)."""
    metrics: Mapping[str, Any] = field(default_factory=dict)
    """Command-specific measurements."""
    findings: tuple[Finding, ...] = ()
    """Verdicts, most important first."""
    errors: tuple[ErrorNote, ...] = ()
    """Problems met; non-empty means the result is partial."""
    environment: Mapping[str, Any] = field(default_factory=dict)
    """Machine and library versions the run was made on (for the report's Method)."""
    label: str | None = None
    """User's label, e.g. ``baseline`` or ``after``."""
    note: str | None = None
    """User's note, e.g. what was changed before this run."""
    run_id: str | None = None
    """Id in the run store, once stored."""
    exit_status: int | None = None
    """The workload's exit code where the command ran one."""
    version: str = __version__
    """infradoctor version that wrote it."""
    schema: str = SCHEMA_ID
    """Schema identifier; bumped on incompatible change."""

    @property
    def partial(self) -> bool:
        """True when some evidence could not be gathered."""
        return bool(self.errors)

    def ranked(self) -> list[Finding]:
        """Findings, most important first."""
        return rank_findings(self.findings)

    def worst_severity(self) -> Severity | None:
        """The most severe finding's severity, or None without findings."""
        ranked = self.ranked()
        return ranked[0].severity if ranked else None

    def with_(self, **changes: Any) -> Result:
        """A copy with some fields replaced."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON form, per the result contract (key order as in DESIGN.md)."""
        out: dict[str, Any] = {
            "schema": self.schema,
            "command": self.command,
            "version": self.version,
            "started_at": self.started_at,
            "duration_s": round(float(self.duration_s), 6),
            "target": _jsonable(self.target),
            "metrics": _jsonable(self.metrics),
            "findings": [f.to_dict() for f in self.ranked()],
            "errors": [e.to_dict() for e in self.errors],
            "environment": _jsonable(self.environment),
        }
        for key in ("run_id", "label", "note", "exit_status"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        out["findings"] = _jsonable(out["findings"])
        return out

    def to_json(self, *, indent: int | None = 2) -> str:
        """Serialised JSON (strict: NaN and infinity become null; no raw control character, see json_printable)."""
        return json_printable(json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Result:
        """Inverse of :meth:`to_dict`; raises ValueError on another schema or a damaged document."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a result is a JSON object, not {type(data).__name__}")
        schema = data.get("schema")
        if schema != SCHEMA_ID:
            raise ValueError(f"unsupported result schema {schema!r}; this version reads {SCHEMA_ID!r}")
        try:
            return cls._from_checked(data)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"damaged result: {type(exc).__name__}: {exc}") from None

    @classmethod
    def _from_checked(cls, data: Mapping[str, Any]) -> Result:
        return cls(
            command=str(data["command"]),
            started_at=str(data["started_at"]),
            duration_s=float(data["duration_s"]),
            target=dict(data.get("target") or {}),
            metrics=dict(data.get("metrics") or {}),
            findings=tuple(Finding.from_dict(f) for f in data.get("findings") or ()),
            errors=tuple(ErrorNote.from_dict(e) for e in data.get("errors") or ()),
            environment=dict(data.get("environment") or {}),
            label=data.get("label"),
            note=data.get("note"),
            run_id=data.get("run_id"),
            exit_status=data.get("exit_status"),
            version=str(data.get("version", __version__)),
            schema=SCHEMA_ID,
        )

    @classmethod
    def from_json(cls, text: str) -> Result:
        """Parse serialised JSON; raises ValueError for anything that is not a result."""
        return cls.from_dict(load_json(text))


def utc_now_iso() -> str:
    """Current UTC time as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_result(
    command: str,
    *,
    started_at: str,
    duration_s: float,
    target: Mapping[str, Any] | None = None,
    metrics: Mapping[str, Any] | None = None,
    findings: Iterable[Finding] = (),
    errors: Iterable[ErrorNote] = (),
    environment: Mapping[str, Any] | None = None,
    exit_status: int | None = None,
) -> Result:
    """Build a Result with findings ranked."""
    return Result(
        command=command,
        started_at=started_at,
        duration_s=duration_s,
        target=dict(target or {}),
        metrics=dict(metrics or {}),
        findings=tuple(rank_findings(findings)),
        errors=tuple(errors),
        environment=dict(environment or {}),
        exit_status=exit_status,
    )


def describe_target(target: Mapping[str, Any]) -> str:
    """One line for a target: its description, the URL, the command line, the files, or the host."""
    if target.get("description"):
        return str(target["description"])
    for key in ("url", "router"):
        if target.get(key):
            return str(target[key])
    argv = target.get("argv")
    if isinstance(argv, list) and argv:
        return " ".join(str(a) for a in argv)
    for key in ("paths", "files"):
        items = target.get(key)
        if isinstance(items, list) and items:
            more = f" (+{len(items) - 1})" if len(items) > 1 else ""
            return f"{items[0]}{more}"
    if target.get("host"):
        return str(target["host"])
    return json.dumps(dict(target), sort_keys=True)[:200] if target else ""


def schema_document() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a result, shipped in the package."""
    text = resources.files("infradoctor").joinpath("schema/result.schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _jsonable(value: Any) -> Any:
    """Plain JSON types: tuples to lists, dataclass-likes via to_dict, non-finite floats to None."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, Severity):
        return value.value
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return _jsonable(to_dict())
    return str(value)

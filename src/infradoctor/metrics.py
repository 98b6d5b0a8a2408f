"""Typed metrics: each command's ``Result.metrics`` is a frozen dataclass, read and written through its type hints.

A command declares its metrics as nested frozen dataclasses deriving from :class:`Metrics`, with a docstring line
per field, and builds them instead of dicts::

    @dataclass(frozen=True)
    class ScanHeadline(Metrics):
        findings: int
        \"\"\"Findings reported.\"\"\"
        lines_per_s: float | None = None
        \"\"\"Scan speed (None when the scan took no measurable time).\"\"\"

    @dataclass(frozen=True)
    class ScanMetrics(Metrics):
        headline: ScanHeadline
        by_code: dict[str, int] = field(default_factory=dict)

:meth:`Metrics.to_dict` gives the JSON form stored in the result; :meth:`Metrics.from_dict` reads it back (a
stored run, a result file), so presenters take typed objects instead of digging through dicts.
:func:`json_schema` describes a metrics class for the shipped JSON Schema (one ``$defs`` entry per command, e.g.
``scanMetrics``). Values that are not available are ``None`` (a field typed ``X | None``), never a crash.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, Union

M = TypeVar("M", bound="Metrics")

JSON_KEY = "json_key"
"""Field metadata: the field's key in the JSON form where that key cannot be a Python name (``class``), e.g.
``cls: str = field(metadata={JSON_KEY: "class"})``."""


def _key(f: dataclasses.Field[Any]) -> str:
    """A field's key in the JSON form."""
    return str(f.metadata.get(JSON_KEY, f.name))


class MetricsError(ValueError):
    """Stored metrics do not have the documented shape (the message says where)."""


class Metrics:
    """Base of every typed metrics dataclass (subclasses are ``@dataclass(frozen=True)``).

    A command's top-level class is registered in :data:`METRICS_CLASSES`; field names are free (``command`` too).
    """

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: fields by name, nested metrics as dicts, tuples as lists; non-finite floats as None."""
        return typing.cast(dict[str, Any], _encode(self))

    @classmethod
    def from_dict(cls: type[M], data: Mapping[str, Any]) -> M:
        """Read the JSON form back; raises :class:`MetricsError` naming the first field that does not fit."""
        return typing.cast(M, _decode(cls, data, cls.__name__))


def _is_record(tp: Any) -> bool:
    """A metrics class, or a plain dataclass used inside metrics (e.g. a core type such as ``XidEvent``)."""
    return isinstance(tp, type) and (issubclass(tp, Metrics) or dataclasses.is_dataclass(tp))


def _encode(value: Any) -> Any:
    if isinstance(value, Metrics) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        return {_key(f): _encode(getattr(value, f.name)) for f in dataclasses.fields(typing.cast(Any, value))}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The class's resolved type hints (cached: metrics classes are defined once)."""
    hints = _HINTS.get(cls)
    if hints is None:
        # each class's hints resolve in its own module (a subclass's module need not import the base's names)
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def _is_optional(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType) and type(None) in typing.get_args(tp)


def _decode(tp: Any, value: Any, where: str) -> Any:  # noqa: C901 - one branch per kind of type hint
    origin = typing.get_origin(tp)
    if tp is Any or tp is object:
        return value
    if _is_record(tp):
        if not isinstance(value, Mapping):
            raise MetricsError(f"{where}: expected an object, got {type(value).__name__}")
        hints = _hints(tp)
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(tp):  # type: ignore[arg-type]
            key = _key(f)
            if key in value:
                kwargs[f.name] = _decode(hints[f.name], value[key], f"{where}.{key}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                if _is_optional(hints[f.name]):
                    kwargs[f.name] = None
                else:
                    raise MetricsError(f"{where}: missing {key!r}")
        return tp(**kwargs)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise MetricsError(f"{where}: null where a value is required")
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _decode(arg, value, where)
            except MetricsError as exc:
                errors.append(str(exc))
        raise MetricsError(errors[0] if len(errors) == 1 else f"{where}: {value!r} fits none of {tp}")
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise MetricsError(f"{where}: {value!r} is not one of {typing.get_args(tp)}")
        return value
    if origin in (list, tuple, Sequence) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise MetricsError(f"{where}: expected a list, got {type(value).__name__}")
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise MetricsError(f"{where}: expected {len(args)} items, got {len(value)}")
            return tuple(_decode(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
        item = args[0] if args else Any
        items = [_decode(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if origin is list or tp is list else tuple(items)
    if origin in (dict, Mapping) or tp in (dict,):
        if not isinstance(value, Mapping):
            raise MetricsError(f"{where}: expected an object, got {type(value).__name__}")
        args = typing.get_args(tp)
        item = args[1] if len(args) == 2 else Any
        return {str(k): _decode(item, v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise MetricsError(f"{where}: {value!r} is not a {tp.__name__}") from None
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MetricsError(f"{where}: expected a number, got {type(value).__name__}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise MetricsError(f"{where}: expected an integer, got {type(value).__name__}")
        return value
    if tp in (str, bool):
        if not isinstance(value, tp):
            raise MetricsError(f"{where}: expected {tp.__name__}, got {type(value).__name__}")
        return value
    raise MetricsError(f"{where}: no reader for type {tp!r}")


def json_schema(tp: Any, defs: dict[str, Any] | None = None) -> dict[str, Any]:  # noqa: C901 - one branch per kind
    """JSON Schema of a type hint; nested metrics classes go into ``defs`` (by class name) and are referenced."""
    defs = {} if defs is None else defs
    origin = typing.get_origin(tp)
    if tp is Any or tp is object:
        return {}
    if _is_record(tp):
        name = tp.__name__[0].lower() + tp.__name__[1:]
        if name not in defs:
            defs[name] = {}  # placeholder: recursive types stop here
            hints = _hints(tp)
            fields = dataclasses.fields(typing.cast(Any, tp))
            schema: dict[str, Any] = {"type": "object"}
            doc = (tp.__doc__ or "").strip().split("\n")[0]
            if doc and not doc.startswith(tp.__name__ + "("):
                schema["description"] = doc
            schema["properties"] = {_key(f): json_schema(hints[f.name], defs) for f in fields}
            required = [_key(f) for f in fields
                        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                        and not _is_optional(hints[f.name])]
            if required:
                schema["required"] = required
            schema["additionalProperties"] = False
            defs[name] = schema
        return {"$ref": f"#/$defs/{name}"}
    if origin in (Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        options = [json_schema(a, defs) for a in members]
        if type(None) in typing.get_args(tp):
            options.append({"type": "null"})
        simple = [o.get("type") for o in options]
        if all(isinstance(t, str) and len(o) == 1 for t, o in zip(simple, options, strict=True)):
            return {"type": simple}
        return {"anyOf": options}
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(tp))}
    if origin in (list, tuple, Sequence) or tp in (list, tuple):
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            return {"type": "array", "prefixItems": [json_schema(a, defs) for a in args], "minItems": len(args),
                    "maxItems": len(args)}
        return {"type": "array", "items": json_schema(args[0], defs) if args else {}}
    if origin in (dict, Mapping) or tp is dict:
        args = typing.get_args(tp)
        item = json_schema(args[1], defs) if len(args) == 2 else {}
        return {"type": "object", "additionalProperties": item} if item else {"type": "object"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    simple_types = {float: "number", int: "integer", str: "string", bool: "boolean", type(None): "null"}
    if tp in simple_types:
        return {"type": simple_types[tp]}
    raise TypeError(f"no JSON Schema for type {tp!r}")


METRICS_CLASSES: Mapping[str, str] = {
    "compare": "infradoctor.compare.analysis:CompareMetrics",
    "node": "infradoctor.node.metrics:NodeMetrics",
    "fleet": "infradoctor.fleet.metrics:FleetMetrics",
    "logs": "infradoctor.logs.metrics:LogsMetrics",
    "route": "infradoctor.route.metrics:RouteMetrics",
    "load": "infradoctor.load.metrics:LoadMetrics",
    "profile": "infradoctor.profile.metrics:ProfileMetrics",
    "scan": "infradoctor.scan.metrics:ScanMetrics",
}
"""Each command's typed metrics class, as ``module:Class`` (imported on use; see :func:`metrics_class`)."""


def metrics_class(command: str) -> type[Metrics] | None:
    """The typed metrics class of a command, or None where its metrics are not typed yet."""
    ref = METRICS_CLASSES.get(command)
    if ref is None:
        return None
    module, _, name = ref.partition(":")
    cls: type[Metrics] = getattr(importlib.import_module(module), name)
    return cls


def schema_defs() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``$defs`` entries for every command's metrics, and the ``allOf`` clauses that apply them by command."""
    defs: dict[str, Any] = {}
    clauses = []
    for command in sorted(METRICS_CLASSES):
        cls = metrics_class(command)
        assert cls is not None
        ref = json_schema(cls, defs)
        clauses.append({"if": {"properties": {"command": {"const": command}}, "required": ["command"]},
                        "then": {"properties": {"metrics": ref}}})
    return dict(sorted(defs.items())), clauses

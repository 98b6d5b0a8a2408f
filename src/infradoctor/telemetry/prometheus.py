"""Prometheus text exposition, read in linear time with bounds: every router's and model server's ``/metrics``.

Lines are split first and each is read by hand (no regex over raw text); label values may hold any escaped text.
Label order, missing ``# HELP``/``# TYPE``, Java's trailing comma in label sets, ``_sum`` before buckets and
families split across the output all occur in real expositions (tests/corpus/metrics/NAMES.md) and are accepted.
Values that are not finite numbers (``NaN`` for unset limits, ``+Inf``) are skipped and counted, never raised.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

MAX_LINE_CHARS = 16_384
"""A longer exposition line is skipped (counted in ``skipped``)."""

MAX_SAMPLES = 50_000
"""Samples read from one exposition (of the metrics asked for); past that the reading stops and says so."""

MAX_LABELS = 32
"""Labels per sample; a sample with more is skipped."""


class Sample(NamedTuple):
    """One sample line: ``name{labels} value``."""

    name: str
    """Metric name as exposed (``vllm:num_requests_waiting``, ``envoy_cluster_upstream_rq_retry``)."""
    labels: Mapping[str, str]
    """Its labels."""
    value: float
    """Its value (finite)."""


@dataclass
class Exposition:
    """A parsed exposition: samples by name, declared types, and how many lines were skipped."""

    samples: dict[str, list[Sample]] = field(default_factory=dict)
    """Samples per metric name, in the order they came."""
    types: dict[str, str] = field(default_factory=dict)
    """``# TYPE`` per family name (``counter``, ``gauge``, ``histogram``, ``summary``, ``untyped``)."""
    skipped: int = 0
    """Lines that were not samples, comments or blank: bad syntax, too long."""
    not_finite: int = 0
    """Samples whose value is ``NaN`` or infinite (HAProxy's exporter writes NaN for unset limits): left out."""
    cut: bool = False
    """True when :data:`MAX_SAMPLES` was reached and the rest was not read."""

    def __len__(self) -> int:
        return sum(len(v) for v in self.samples.values())

    def get(self, name: str) -> list[Sample]:
        """Samples of one name (empty when absent)."""
        return self.samples.get(name, [])

    def first(self, *names: str) -> str | None:
        """The first of ``names`` that the exposition has."""
        return next((n for n in names if n in self.samples), None)

    def total(self, *names: str, where: Mapping[str, str] | None = None) -> float | None:
        """Sum over the samples of the first name present (optionally only those whose labels match ``where``)."""
        name = self.first(*names)
        if name is None:
            return None
        values = [s.value for s in self.samples[name]
                  if not where or all(s.labels.get(k) == v for k, v in where.items())]
        return sum(values) if values else None

    def maximum(self, *names: str) -> float | None:
        """Largest sample of the first name present."""
        name = self.first(*names)
        return max((s.value for s in self.samples[name]), default=None) if name else None

    def type_of(self, name: str) -> str | None:
        """Declared type of a sample's family (``foo_total`` and ``foo_bucket`` find ``foo`` too)."""
        if name in self.types:
            return self.types[name]
        for suffix in ("_total", "_bucket", "_sum", "_count", "_created"):
            if name.endswith(suffix) and name[: -len(suffix)] in self.types:
                return self.types[name[: -len(suffix)]]
        return None

    def names(self) -> Iterator[str]:
        """Metric names present."""
        return iter(self.samples)


def _labels(text: str) -> dict[str, str] | None:
    r"""``a="x",b="y\"z"`` (optionally a trailing comma) as a dict; None on bad syntax."""
    out: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " ,":
            i += 1
        if i >= n:
            break
        eq = text.find("=", i)
        if eq < 0:
            return None
        key = text[i:eq].strip()
        quote = eq + 1
        while quote < n and text[quote] == " ":
            quote += 1
        if quote >= n or text[quote] != '"':
            return None
        close = text.find('"', quote + 1)
        while close > 0 and _escaped(text, close):
            close = text.find('"', close + 1)
        if close < 0 or not key or len(out) >= MAX_LABELS:
            return None
        value = text[quote + 1 : close]
        if "\\" in value:
            value = value.replace("\\\\", "\x00").replace('\\"', '"').replace("\\n", "\n").replace("\x00", "\\")
        out[key] = value
        i = close + 1
    return out


def _escaped(text: str, index: int) -> bool:
    """True when the character at ``index`` follows an odd number of backslashes."""
    count = 0
    while index - count - 1 >= 0 and text[index - count - 1] == "\\":
        count += 1
    return count % 2 == 1


def _value(text: str) -> float | None:
    if len(text) > 64:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _sample(line: str) -> Sample | None:
    brace = line.find("{")
    space = line.find(" ")
    if brace >= 0 and (space < 0 or brace < space):
        close = line.rfind("}")
        if close < brace:
            return None
        name, labels, rest = line[:brace], _labels(line[brace + 1 : close]), line[close + 1 :]
        if labels is None:
            return None
    else:
        name, _, rest = line.partition(" ")
        labels = {}
    parts = rest.split()
    if not name or not parts or len(parts) > 2:
        return None
    value = _value(parts[0])
    if value is None:
        return None
    return Sample(name.strip(), labels, value)


def _kept_lines(text: str, prefixes: tuple[str, ...]) -> list[str]:
    r"""The lines that start with one of ``prefixes`` (or are their ``# TYPE`` lines), found by the regex engine.

    The pattern is literal alternatives at a line start followed by ``[^\n]*``: no backtracking, linear in the
    text, and run in C, so the lines nobody asked for cost almost nothing.
    """
    alternatives = "|".join(re.escape(p) for p in prefixes)
    pattern = re.compile(rf"^[ \t]*(?:# TYPE )?(?:{alternatives})[^\n]*", re.MULTILINE)
    return pattern.findall(text)


def parse(
    text: str | bytes | Iterable[str], *, prefixes: tuple[str, ...] | None = None, buckets: bool = True
) -> Exposition:
    """Read an exposition (text, bytes or lines); never raises, whatever the input.

    ``prefixes`` reads only the metrics whose names start with one of them: a router's endpoint may expose
    hundreds of thousands of samples of which a few dozen matter, and the others are skipped at C speed.
    ``buckets=False`` skips histogram buckets (``_bucket{``) for readers that need only ``_sum`` and ``_count``.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if prefixes is not None and isinstance(text, str):
        lines: Iterable[str] = _kept_lines(text, prefixes)
    else:
        lines = text.splitlines() if isinstance(text, str) else text
    out = Exposition()
    count = 0
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if len(line) > MAX_LINE_CHARS:
            out.skipped += 1
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                out.types[parts[2]] = parts[3].strip().lower()
            continue
        if not buckets and "_bucket{" in line:
            continue
        if count >= MAX_SAMPLES:
            out.cut = True
            break
        sample = _sample(line)
        if sample is None:
            last = line.rsplit(None, 2)
            if len(last) >= 2 and any(w.lower().lstrip("+-") in ("nan", "inf") for w in last[-2:]):
                out.not_finite += 1
            else:
                out.skipped += 1
            continue
        out.samples.setdefault(sample.name, []).append(sample)
        count += 1
    return out


def looks_like(text: str) -> bool:
    """True when the start of ``text`` reads as a Prometheus exposition (comments or ``name value`` lines)."""
    seen = 0
    for raw in text[:8192].splitlines()[:40]:
        line = raw.strip()
        if not line:
            continue
        if line.startswith("# TYPE ") or line.startswith("# HELP "):
            return True
        if line.startswith("#"):
            continue
        if not _SAMPLE_START.match(line) or len(line.split()) < 2:
            return False
        seen += 1
    return seen > 0


_SAMPLE_START = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:.]*[{ \t]")

"""The fast access-log engine: polars splits lines on ``"``, extracts the raw fields, and groups them.

Measured on this class of machine (shared/reference/log-parsing-measured.md): splitting on ``"`` with a field-count
guard, a regex only on short unquoted segments, and group-by runs at 2-3x the best pure-Python loop. Here polars does
only that: every query groups *raw field strings* and counts them; the groups (distinct values, not lines) are then
decoded by the same :class:`RequestDecoder` the Python engine uses line by line, so both engines agree by
construction.

The file is handed to polars in chunks of :data:`CHUNK_BYTES` whole lines: polars holds memory in proportion to its
input, so this keeps peak RSS flat whatever the file size. Per chunk, one scan feeds three group-bys (request
counts, timeline with failing upstreams, totals); example lines need a second scan only of chunks where a new
failing group first appears.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from infradoctor.logs.formats.access import NGINX_FAILING_STATUSES, RequestDecoder, to_int
from infradoctor.logs.formats.layout import (
    ROLE_ATTEMPTS,
    ROLE_FLAGS,
    ROLE_REQUEST_TIME,
    ROLE_STATUS,
    ROLE_TIME,
    ROLE_UPSTREAM,
    ROLE_UPSTREAM_STATUS,
    ROLE_UPSTREAM_TIME,
    TIME_ISO,
    AccessLayout,
    Var,
    tokens_regex,
)
from infradoctor.logs.source import NOTE_TRUNCATED, SKIP_MISMATCH, SKIP_TOO_LONG, LogSource, open_binary
from infradoctor.logs.stats import MAX_EXAMPLES, LogStats

CHUNK_BYTES = 8 << 20
"""Bytes of whole lines handed to polars at a time."""
COMPACT_EVERY = 16
"""Re-aggregate the per-chunk group tables every this many chunks (bounds memory on long files)."""
MAX_LINE_CHUNKS = 4
"""A "line" longer than this many chunks (no newline at all) is dropped as ``line_too_long``."""
MAX_EXAMPLE_GROUPS = 2_000
"""Stop looking for example lines after this many (status, upstream, flags) groups."""

_ROLES = (ROLE_TIME, ROLE_STATUS, ROLE_REQUEST_TIME, ROLE_UPSTREAM, ROLE_UPSTREAM_STATUS, ROLE_UPSTREAM_TIME,
          ROLE_FLAGS, ROLE_ATTEMPTS)
# Group keys (raw strings, columns named after roles) of the queries that see every line.
_COUNT_KEYS = (ROLE_STATUS, ROLE_REQUEST_TIME, ROLE_UPSTREAM, ROLE_UPSTREAM_STATUS, ROLE_UPSTREAM_TIME,
               ROLE_ATTEMPTS, ROLE_FLAGS)
_TIMELINE_KEYS = ("tkey", ROLE_STATUS, "fail_addr", ROLE_FLAGS)
_KEYS = {"counts": _COUNT_KEYS, "timeline": _TIMELINE_KEYS}


def polars_available() -> bool:
    """True when polars can be imported."""
    try:
        import polars  # noqa: F401
    except ImportError:
        return False
    return True


def parse_access_polars(source: LogSource, layout: AccessLayout, stats: LogStats) -> bool:
    """Parse one access-log file into ``stats``; False (nothing counted) when polars is not installed."""
    try:
        import polars as pl
    except ImportError:
        return False
    decoder = RequestDecoder(layout)
    plan = _Plan(pl, layout)
    lines_before = stats.lines
    parts: dict[str, list[Any]] = {name: [] for name in _KEYS}
    blank = 0
    try:
        for index, chunk in enumerate(_chunks(source, stats)):
            stats.lines += chunk.count(b"\n")
            blank += chunk.count(b"\n\n") + chunk.startswith(b"\n")
            frames = pl.collect_all(plan.queries(chunk), engine="streaming")
            for name, frame in zip(_KEYS, frames, strict=True):
                parts[name].append(frame)
            if (index + 1) % COMPACT_EVERY == 0:
                parts = {name: [_sum(pl, pieces, _KEYS[name])] for name, pieces in parts.items()}
            plan.collect_examples(chunk, frames[1], decoder, stats)
    except (pl.exceptions.PolarsError, OSError, EOFError, ValueError, RuntimeError) as exc:
        stats.skip("read_error", 1, f"{source.name}: stopped reading ({type(exc).__name__}: {exc}); "
                   "lines before the error are counted")
    tables = {name: _sum(pl, pieces, _KEYS[name]) if pieces else None for name, pieces in parts.items()}
    parsed = _merge(decoder, tables, stats)
    stats.parsed += parsed
    mismatched = stats.lines - lines_before - blank - parsed
    if mismatched > 0:
        stats.skip(SKIP_MISMATCH, mismatched)
    return True


def _chunks(source: LogSource, stats: LogStats) -> Iterator[bytes]:
    """Chunks of whole lines, decompressed; counts bytes; a last line without newline is noted."""
    with open_binary(source) as fh:
        carry = b""
        while True:
            data = fh.read(CHUNK_BYTES)
            if not data:
                break
            stats.bytes += len(data)
            cut = data.rfind(b"\n") + 1
            if cut == 0:  # no newline in a whole chunk: part of one huge line
                carry += data
                if len(carry) > MAX_LINE_CHUNKS * CHUNK_BYTES:
                    stats.lines += 1
                    stats.skip(SKIP_TOO_LONG)
                    carry = b""
                continue
            chunk = carry + data[:cut] if carry else data[:cut]
            carry = data[cut:]
            yield chunk
        if carry:
            stats.note(NOTE_TRUNCATED)
            yield carry + b"\n"  # counted as a line like the Python engine does


class _Plan:
    """The polars expressions for one layout, applied to each chunk."""

    def __init__(self, pl: Any, layout: AccessLayout) -> None:
        self.pl = pl
        segments = layout.segments()
        n = len(segments)
        self.columns = [f"c{i}" for i in range(n + 1)]
        # The guard: the last non-empty column present and the extra one absent (a stray quote shifts columns).
        last = n - 1 if segments[-1] else n - 2
        ok = pl.col(f"c{max(last, 0)}").is_not_null() & pl.col(f"c{n}").is_null()
        fields: dict[str, Any] = {}
        for index, segment in enumerate(segments):
            roles = [t.role for t in segment if isinstance(t, Var) and t.role and t.role not in fields]
            if not roles:
                continue
            column = pl.col(f"c{index}")
            if len(segment) == 1:
                fields[roles[0]] = column
                continue
            pattern = "^" + tokens_regex(segment, frozenset(roles)) + "$"
            if len(roles) == 1:
                fields[roles[0]] = column.str.extract(pattern, 1)
            else:
                groups = column.str.extract_groups(pattern)
                for role in roles:
                    fields[role] = groups.struct.field(role)
            ok = ok & fields[roles[0]].is_not_null()  # the segment matched, as the full-line regex must
        self.ok = ok
        self.select = {role: fields.get(role, pl.lit(None, pl.String)) for role in _ROLES}
        if ROLE_TIME in fields and layout.time_kind == TIME_ISO:
            self.tkey = fields[ROLE_TIME].str.replace(r"\.\d+", "")  # per second, not per millisecond
        else:
            self.tkey = self.select[ROLE_TIME]
        status, flags = pl.col(ROLE_STATUS), pl.col(ROLE_FLAGS)
        if layout.router == "envoy":
            self.may_fail = (flags.is_not_null() & (flags != "-")) | (status == "0")
        else:
            self.may_fail = status.is_in(list(NGINX_FAILING_STATUSES))
        self.line = pl.concat_str([pl.col(c).fill_null("") for c in self.columns[:n]], separator='"')
        self.example_keys: set[tuple[str | None, str | None, str | None]] = set()

    def scan(self, chunk: bytes) -> Any:
        """The chunk split on ``"`` into string columns (one extra column for the guard)."""
        return self.pl.scan_csv(
            chunk,
            separator='"',
            quote_char=None,
            has_header=False,
            schema=dict.fromkeys(self.columns, self.pl.String),
            truncate_ragged_lines=True,
            encoding="utf8-lossy",
            missing_columns="insert",
            raise_if_empty=False,
        )

    def queries(self, chunk: bytes) -> list[Any]:
        """Request counts and timeline of one chunk (one scan shared by both)."""
        pl = self.pl
        parsed = self.scan(chunk).select(ok=self.ok, tkey=self.tkey, **self.select).filter(pl.col("ok"))
        fail_addr = pl.when(self.may_fail).then(pl.col(ROLE_UPSTREAM)).otherwise(None)
        return [
            parsed.group_by(*_COUNT_KEYS).agg(n=pl.len()),
            parsed.with_columns(fail_addr=fail_addr).group_by(*_TIMELINE_KEYS).agg(n=pl.len()),
        ]

    def collect_examples(self, chunk: bytes, timeline: Any, decoder: RequestDecoder, stats: LogStats) -> None:
        """Example lines for failing groups first seen in this chunk (a second scan only of such chunks)."""
        pl = self.pl
        wanted: set[tuple[str | None, str | None, str | None]] = set()
        for _tkey, status, addr, flags, _n in timeline.iter_rows():
            key = (status, addr, flags)
            if key in self.example_keys or len(self.example_keys) + len(wanted) >= MAX_EXAMPLE_GROUPS:
                continue
            if decoder.may_fail(status, flags) and decoder.signature(to_int(status), addr, flags)[0] is not None:
                wanted.add(key)
        if not wanted:
            return
        self.example_keys |= wanted
        frame = self.scan(chunk).select(ok=self.ok, line=self.line, **self.select)
        found = (
            frame.filter(pl.col("ok") & self.may_fail)
            .group_by(ROLE_STATUS, ROLE_UPSTREAM, ROLE_FLAGS, maintain_order=True)
            .agg(lines=pl.col("line").head(MAX_EXAMPLES))
            .collect()
        )
        for status, addr, flags, lines in found.iter_rows():
            if (status, addr, flags) in wanted:
                for line in lines:
                    decoder.add_example(stats, status, addr, flags, line)


def _sum(pl: Any, pieces: list[Any], keys: tuple[str, ...]) -> Any:
    """Per-chunk group tables summed into one."""
    frame = pieces[0] if len(pieces) == 1 else pl.concat(pieces, how="vertical_relaxed")
    return frame.group_by(*keys).agg(pl.col("n").sum())


def _rows(frame: Any) -> Any:
    return frame.iter_rows() if frame is not None else ()


def _merge(decoder: RequestDecoder, tables: dict[str, Any], stats: LogStats) -> int:
    """Decode the group tables into ``stats``; returns the number of parsed lines."""
    parsed = 0
    for status, request, addr, ustatus, utime, attempts, flags, n in _rows(tables["counts"]):
        parsed += n
        decoder.add_counts(stats, status, request, addr, ustatus, utime, attempts, n)
        if decoder.may_fail(status, flags):
            decoder.add_durations(stats, status, addr, flags, request, n)
    for tkey, status, fail_addr, flags, n in _rows(tables["timeline"]):
        decoder.add_timeline(stats, tkey, status, fail_addr, flags, n)
        if decoder.may_fail(status, flags):
            decoder.add_events(stats, tkey, status, fail_addr, flags, n)
    return parsed

"""The fast access-log engine: polars splits lines on ``"``, extracts the raw fields, and groups them.

Measured on this class of machine (shared/reference/log-parsing-measured.md): splitting on ``"`` with a field-count
guard, a regex only on short unquoted segments, and group-by runs at 2-3x the best pure-Python loop. Here polars does
only that: every query groups *raw field strings* and counts them; the groups (distinct values, not lines) are then
decoded by the same :class:`RequestDecoder` the Python engine uses on its own groups, so both engines agree by
construction (a test checks it on every recorded fixture). Non-failing lines are grouped per minute, failing ones
per second (incidents need it).

A file whose lines all come in one plain-prefix envelope (kubectl ``--prefix``, stern, compose, syslog, CRI, a
timestamp) keeps this engine: the envelope is one more regular expression on the first column. Lines the layout does
not read (another format in a mixed file, a CRI partial record, a bad line) go back to the Python line router, in
file order per chunk, so nothing is lost.

The file is handed to polars in chunks of :data:`CHUNK_BYTES` whole lines: polars holds memory in proportion to its
input, so this keeps peak RSS flat whatever the file size. Per chunk, one scan feeds every query (requests,
upstream attempts, router time, timeline with failing upstreams, totals, the lines it could not read, and example
lines in the first chunks); a later chunk is scanned again only when a new kind of failure first appears in it.
"""

from __future__ import annotations

import lzma
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
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
    TIME_EPOCH,
    TIME_ISO,
    TIME_LOCAL,
    AccessLayout,
    Var,
    tokens_regex,
)
from infradoctor.logs.signatures import ENVOY_LOCAL_REPLY_FLAGS
from infradoctor.logs.source import (
    MAX_LINE_BYTES,
    NOTE_INVALID_UTF8,
    NOTE_TRUNCATED,
    SKIP_BINARY,
    SKIP_TOO_LONG,
    CutLine,
    LogSource,
    open_binary,
)
from infradoctor.logs.stats import MAX_EXAMPLES, LogStats

CHUNK_BYTES = 8 << 20
"""Bytes of whole lines handed to polars at a time."""
COMPACT_EVERY = 16
"""Re-aggregate the per-chunk group tables every this many chunks (bounds memory on long files)."""
MAX_LINE_CHUNKS = 4
"""A "line" longer than this many chunks (no newline at all) is dropped as ``line_too_long``."""

_ROLES = (ROLE_TIME, ROLE_STATUS, ROLE_REQUEST_TIME, ROLE_UPSTREAM, ROLE_UPSTREAM_STATUS, ROLE_UPSTREAM_TIME,
          ROLE_FLAGS, ROLE_ATTEMPTS)
# Group keys (raw strings, columns named after roles) of the queries that see every line. Few keys per query keep
# the number of distinct groups (and so the Python decoding) small.
_REQUEST_KEYS = (ROLE_STATUS, ROLE_REQUEST_TIME, "served")
# fail_request (the request time of failing requests, for timeout inference) rides with the upstream groups: no
# time in the key, so the groups stay bounded by distinct durations, not by failing lines.
_UPSTREAM_KEYS = (ROLE_STATUS, ROLE_UPSTREAM, ROLE_UPSTREAM_STATUS, ROLE_UPSTREAM_TIME, ROLE_ATTEMPTS, ROLE_FLAGS,
                  "fail_request")
_OVERHEAD_KEYS = ("overhead_ms",)
_TIMELINE_KEYS = ("tkey", ROLE_STATUS, "fail_addr", ROLE_FLAGS)
_KEYS = {"requests": _REQUEST_KEYS, "upstreams": _UPSTREAM_KEYS, "overhead": _OVERHEAD_KEYS,
         "timeline": _TIMELINE_KEYS}
_INDEX = {name: index for index, name in enumerate([*_KEYS, "totals", "unread", "examples"])}


def polars_available() -> bool:
    """True when polars can be imported."""
    try:
        import polars  # noqa: F401
    except ImportError:
        return False
    return True


def parse_access_polars(
    source: LogSource,
    layout: AccessLayout,
    stats: LogStats,
    envelope: str = "",
    unread: Callable[[str], None] | None = None,
    formats: Counter[str] | None = None,
) -> bool:
    """Parse one access-log file into ``stats``; False (nothing counted) when polars is not installed.

    ``envelope`` is a regular expression for the plain-prefix envelope of every line (``""``: none). Lines the
    layout does not read are passed, decoded, to ``unread`` (the Python line router) in file order per chunk;
    ``formats`` counts the lines the layout read under the layout's router name.
    """
    try:
        import polars as pl
    except ImportError:
        return False
    decoder = RequestDecoder(layout)
    plan = _Plan(pl, layout, envelope)
    parts: dict[str, list[Any]] = {name: [] for name in _KEYS}
    rows = 0
    try:
        for index, chunk in enumerate(_chunks(source, stats)):
            frames = plan.frames(chunk)
            for name in _KEYS:
                parts[name].append(frames[_INDEX[name]])
            rows += int(frames[_INDEX["totals"]].row(0)[0] or 0)
            if (index + 1) % COMPACT_EVERY == 0:
                parts = {name: [_sum(pl, pieces, _KEYS[name])] for name, pieces in parts.items()}
            plan.take_examples(chunk, frames[_INDEX["examples"]], decoder, stats)
            missed = frames[_INDEX["unread"]]["row"].to_list()
            if missed and unread is not None:
                _feed_unread(chunk, missed, unread, stats)
    except (pl.exceptions.PolarsError, OSError, EOFError, ValueError, RuntimeError, zlib.error,
            lzma.LZMAError) as exc:
        stats.skip("read_error", 1, f"{source.name}: stopped reading ({type(exc).__name__}: {exc}); "
                   "lines before the error are counted")
    tables = {name: _sum(pl, pieces, _KEYS[name]) if pieces else None for name, pieces in parts.items()}
    parsed = _merge(decoder, tables, stats)
    stats.lines += rows
    stats.parsed += parsed
    if formats is not None and parsed:
        formats[layout.router] += parsed
    return True


def _feed_unread(chunk: bytes, rows: list[int], unread: Callable[[str], None], stats: LogStats) -> None:
    """The chunk's lines at ``rows`` to the line router, read as the Python engine reads them.

    Binary lines are skipped, long ones cut, bad UTF-8 replaced (each counted).
    """
    lines = chunk.split(b"\n")
    for row in rows:
        if not 0 <= row < len(lines):
            continue
        raw = lines[row]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if not raw:
            continue
        if b"\x00" in raw:
            stats.skip(SKIP_BINARY)
            continue
        if len(raw) > MAX_LINE_BYTES:
            stats.skip(SKIP_TOO_LONG)
            unread(CutLine(raw[:MAX_LINE_BYTES].decode("utf-8", errors="replace")))
            continue
        try:
            unread(raw.decode("utf-8"))
        except UnicodeDecodeError:
            stats.note(NOTE_INVALID_UTF8)
            unread(raw.decode("utf-8", errors="replace"))


def _chunks(source: LogSource, stats: LogStats) -> Iterator[bytes]:
    """Chunks of whole lines, decompressed; counts bytes; a last line without newline is noted.

    The file is read into one reused buffer (fresh 8 MB buffers cost page faults); each chunk is one copy.
    """
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    carry = b""
    with open_binary(source) as fh:
        while True:
            size = fh.readinto(view)
            if not size:
                break
            stats.bytes += size
            cut = buffer.rfind(b"\n", 0, size) + 1
            if cut == 0:  # no newline in a whole chunk: part of one huge line
                carry += view[:size]
                if len(carry) > MAX_LINE_CHUNKS * CHUNK_BYTES:
                    stats.lines += 1
                    stats.skip(SKIP_TOO_LONG)
                    carry = b""
                continue
            chunk = carry + view[:cut] if carry else bytes(view[:cut])
            carry = bytes(view[cut:size])
            yield chunk
        if carry:
            stats.note(NOTE_TRUNCATED)
            yield carry + b"\n"  # counted as a line like the Python engine does


class _Plan:
    """The polars expressions for one layout, applied to each chunk."""

    def __init__(self, pl: Any, layout: AccessLayout, envelope: str = "") -> None:
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
            head = envelope if index == 0 else ""
            if not roles:
                if head:  # the envelope must match even when the first column holds no field
                    pattern = "^" + head + tokens_regex(segment, frozenset()) + "$"
                    ok = ok & pl.col("c0").fill_null("").str.contains(pattern)
                continue
            column = pl.col(f"c{index}")
            if len(segment) == 1 and not head:
                fields[roles[0]] = column
                continue
            pattern = "^" + head + tokens_regex(segment, frozenset(roles)) + "$"
            if len(roles) == 1:
                fields[roles[0]] = column.str.extract(pattern, 1)
            else:
                groups = column.str.extract_groups(pattern)
                for role in roles:
                    fields[role] = groups.struct.field(role)
            ok = ok & fields[roles[0]].is_not_null()  # the segment matched, as the full-line regex must
        self.ok = ok
        self.select = {role: fields.get(role, pl.lit(None, pl.String)) for role in _ROLES}
        status, flags, addr = pl.col(ROLE_STATUS), pl.col(ROLE_FLAGS), pl.col(ROLE_UPSTREAM)
        if layout.router == "envoy":
            self.may_fail = (flags.is_not_null() & (flags != "-")) | status.is_in(["0", "429"])
            local = "|".join(sorted(ENVOY_LOCAL_REPLY_FLAGS))
            self.served = (addr.is_not_null() & (addr != "-")
                           & ~flags.fill_null("-").str.contains(f"(?:^|,)(?:{local})(?:,|$)"))
        else:
            self.may_fail = status.is_in(list(NGINX_FAILING_STATUSES))
            if ROLE_UPSTREAM in fields:  # an address tried, not only a group's name (names have no ':')
                self.served = addr.is_not_null() & (addr != "-") & addr.str.contains(":")
            elif ROLE_UPSTREAM_TIME in fields:
                last_time = pl.col(ROLE_UPSTREAM_TIME).str.split(", ").list.last().str.split(" : ").list.last()
                value = last_time.cast(pl.Float64, strict=False)
                self.served = value.is_not_null() & (value >= 0) & (value * layout.upstream_scale <= 1e10)
            else:
                self.served = pl.lit(False)
        # Timeline key: the second of failing requests (incidents need it), the minute of the others (so the
        # number of groups follows the minutes in the file, not its lines).
        self.tkey = pl.when(self.may_fail).then(self._second_key(layout)).otherwise(self._minute_key(layout))
        self.overhead = self._overhead(layout, fields)
        self.example_keys: set[tuple[tuple[str, ...], str]] = set()

    def _second_key(self, layout: AccessLayout) -> Any:
        """The time field cut to the second (UTC ISO times lose their fraction)."""
        pl = self.pl
        text = pl.col(ROLE_TIME)
        if layout.time_kind == TIME_ISO:
            return pl.when(text.str.ends_with("Z")).then(text.str.slice(0, 19) + pl.lit("Z")).otherwise(text)
        return text

    def _minute_key(self, layout: AccessLayout) -> Any:
        """The time field with its seconds set to 00, in the same format (parse_time reads both)."""
        pl = self.pl
        text = pl.col(ROLE_TIME)
        if layout.time_kind == TIME_LOCAL:  # 29/Nov/2026:10:00:SS +0000
            return pl.concat_str([text.str.slice(0, 18), pl.lit("00"), text.str.slice(20)])
        if layout.time_kind == TIME_ISO:  # 2026-11-29T10:00:SS[.fff](Z|+hh:mm)
            tail = pl.when(text.str.ends_with("Z")).then(pl.lit("Z")).otherwise(text.str.slice(19))
            return pl.concat_str([text.str.slice(0, 17), pl.lit("00"), tail])
        if layout.time_kind == TIME_EPOCH:
            return ((text.cast(pl.Float64, strict=False) // 60) * 60).cast(pl.Int64, strict=False).cast(pl.String)
        return text

    def _overhead(self, layout: AccessLayout, fields: dict[str, Any]) -> Any:
        """Request ms minus upstream ms for single-attempt requests, as RequestDecoder.overhead_ms computes it."""
        pl = self.pl

        def ms(role: str, scale: float) -> Any:
            value = pl.col(role).cast(pl.Float64, strict=False)
            exact = (value * scale).round(0, mode="half_to_even").cast(pl.Int64, strict=False)
            return pl.when((value >= 0) & (exact <= 10**10)).then(exact).otherwise(None)

        if ROLE_REQUEST_TIME not in fields or ROLE_UPSTREAM_TIME not in fields:
            return pl.lit(None, pl.Int64)

        def single(role: str) -> Any:  # no ", " or " : " (nginx's separators between tries)
            return ~pl.col(role).str.contains(", | : ")

        addr = pl.col(ROLE_UPSTREAM)
        one = addr.is_not_null() & (addr != "-") if ROLE_UPSTREAM in fields else pl.lit(True)
        if layout.router == "nginx":
            one = one & single(ROLE_UPSTREAM_TIME)
            if ROLE_UPSTREAM in fields:
                one = one & single(ROLE_UPSTREAM)
            if ROLE_UPSTREAM_STATUS in fields:
                one = one & single(ROLE_UPSTREAM_STATUS)
        difference = ms(ROLE_REQUEST_TIME, layout.request_scale) - ms(ROLE_UPSTREAM_TIME, layout.upstream_scale)
        return pl.when(one).then(difference.clip(lower_bound=0)).otherwise(None)

    def scan(self, chunk: bytes) -> Any:
        """The chunk split on ``"`` into string columns (one extra column for the guard), with the line index."""
        return self.pl.scan_csv(
            chunk,
            separator='"',
            quote_char=None,
            has_header=False,
            schema=dict.fromkeys(self.columns, self.pl.String),
            truncate_ragged_lines=True,
            encoding="utf8-lossy",
            missing_columns="insert",
            extra_columns="ignore",
            raise_if_empty=False,
            row_index_name="row",
        )

    def frames(self, chunk: bytes) -> list[Any]:
        """Request, upstream, router-time, timeline, totals, unread lines and example rows of one chunk.

        The chunk is scanned and its fields extracted once (one materialised frame); the group-bys then run on it.
        Examples are row numbers (the first few per failing status, upstream and flags): the lines themselves are
        cut from the chunk only for kinds not seen before.
        """
        pl = self.pl
        fail_addr = pl.when(self.may_fail).then(pl.col(ROLE_UPSTREAM)).otherwise(None)
        fail_request = pl.when(self.may_fail).then(pl.col(ROLE_REQUEST_TIME)).otherwise(None)
        base = self.scan(chunk).select("row", ok=self.ok, **self.select).with_columns(
            tkey=self.tkey, served=self.served, overhead_ms=self.overhead, fail_addr=fail_addr,
            fail_request=fail_request).collect()
        parsed = base.filter(pl.col("ok")).lazy()
        queries = [
            parsed.group_by(*_REQUEST_KEYS).agg(n=pl.len()),
            parsed.group_by(*_UPSTREAM_KEYS).agg(n=pl.len()),
            parsed.select("overhead_ms").drop_nulls().group_by(*_OVERHEAD_KEYS).agg(n=pl.len()),
            parsed.group_by(*_TIMELINE_KEYS).agg(n=pl.len()),
            base.lazy().select(rows=pl.len()),
            base.lazy().filter(~pl.col("ok")).select("row"),
            parsed.filter(self.may_fail).group_by(ROLE_STATUS, ROLE_UPSTREAM, ROLE_FLAGS, maintain_order=True)
            .agg(rows=pl.col("row").head(MAX_EXAMPLES)),
        ]
        return list(pl.collect_all(queries))

    def take_examples(self, chunk: bytes, found: Any, decoder: RequestDecoder, stats: LogStats) -> None:
        """Keep example lines of (kind, upstream) groups not seen before, cut from the chunk by row number."""
        lines: list[bytes] | None = None
        for status, addr, flags, rows in found.iter_rows():
            key = decoder.signatures(to_int(status), addr, flags)
            if not key[0] or key in self.example_keys:
                continue
            self.example_keys.add(key)
            if lines is None:
                lines = chunk.split(b"\n")
            for row in rows:
                if 0 <= row < len(lines):
                    line = lines[row].rstrip(b"\r").decode("utf-8", errors="replace")
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
    for status, request, served, n in _rows(tables["requests"]):
        parsed += n
        decoder.add_request_time(stats, status, request, bool(served), n)
    for status, addr, ustatus, utime, attempts, flags, fail_request, n in _rows(tables["upstreams"]):
        decoder.add_upstreams(stats, status, addr, ustatus, utime, attempts, n)
        if fail_request is not None:
            decoder.add_durations(stats, status, addr, flags, fail_request, n)
    for overhead_ms, n in _rows(tables["overhead"]):
        stats.overhead_hist[overhead_ms] += n
    for tkey, status, fail_addr, flags, n in _rows(tables["timeline"]):
        decoder.add_outcome(stats, tkey, status, fail_addr, flags, n)
    return parsed

"""The fast access-log engine: polars splits lines on ``"``, reads the raw fields, and groups them.

Measured on this class of machine (shared/reference/log-parsing-measured.md): splitting on ``"`` with a field-count
guard, cheap string operations on the short unquoted columns, and group-by run at 2-3x the best pure-Python loop.
Polars does only that: every query groups *raw field strings* and counts them; the groups (distinct values, not
lines) are decoded by the same :class:`RequestDecoder` the Python engine uses on its own groups, and what a group
key is made of is decided by the decoder too (whether an upstream served a request: once per distinct value, in
Python; timeline keys and router time by expressions that match the decoder's, with a check per distinct number).
The engines agree line for line, not only on the recorded fixtures: tests/logs/test_engine_equivalence.py runs both
on mutated lines in envelopes, with CRLF, NUL bytes, bad UTF-8, lines over 64 KiB and reads that cut lines.

Every column is checked as the full-line regular expression checks it (a line is read by polars only when the Python
engine's layout would read it, else it goes to the Python line router): literal columns by equality, the others by
a regex search (a DFA: cheap) or, when each field ends at a character it cannot hold, by one capture that also reads
the fields; fields elsewhere are cut by splits on spaces (nginx multi-values ``a, b : c`` on lines with one try too).
A sentinel at the end of every line tells a line whose last column is empty from one that lacks it.

A file whose lines all come in one plain-prefix envelope (kubectl ``--prefix``, stern, compose, syslog, CRI, a
timestamp) keeps this engine: the envelope is stripped from the first column by one regex replace. Lines the layout
does not read (another format in a mixed file, a CRI partial record, a bad line) go back to the Python line router,
in file order per chunk, so nothing is lost; so do the lines the Python engine reads otherwise (binary, over 64 KiB,
not UTF-8) and the line cut between two reads.

The file is handed to polars in reads of :data:`CHUNK_BYTES`: polars holds memory in proportion to its input, so
peak RSS stays flat whatever the file size. Per chunk, one scan feeds every query (requests, upstream attempts,
router time, timeline with failing upstreams, the lines it could not read, and example lines in the first chunks).
"""

from __future__ import annotations

import codecs
import lzma
import math
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from infradoctor.logs.formats.access import NGINX_FAILING_STATUSES, RequestDecoder, to_int
from infradoctor.logs.formats.layout import (
    MULTI_SPLIT,
    MULTI_VALUE,
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
    Token,
    Var,
    tokens_regex,
)
from infradoctor.logs.source import MAX_LINE_BYTES, NOTE_TRUNCATED, LogSource, decode_line, open_binary
from infradoctor.logs.stats import MAX_EPOCH, MAX_EXAMPLES, MAX_MS, UNKNOWN, LogStats, to_ms

CHUNK_BYTES = 16 << 20
"""Bytes read and handed to polars at a time (16 MB: less per-chunk work than 8 MB, flat memory still)."""
COMPACT_EVERY = 16
"""Re-aggregate the per-chunk group tables every this many chunks (bounds memory on long files)."""
SERVED_CACHE = 100_000
"""Distinct values remembered with whether they mean an upstream served the request (cleared beyond)."""

_ROLES = (ROLE_TIME, ROLE_STATUS, ROLE_REQUEST_TIME, ROLE_UPSTREAM, ROLE_UPSTREAM_STATUS, ROLE_UPSTREAM_TIME,
          ROLE_FLAGS, ROLE_ATTEMPTS)
# Group keys (raw strings, columns named after roles) of the queries that see every line. Few keys per query keep
# the number of distinct groups (and so the Python decoding) small.
_REQUEST_KEYS = (ROLE_STATUS, ROLE_REQUEST_TIME, "served")
_UPSTREAM_KEYS = (ROLE_STATUS, ROLE_UPSTREAM, ROLE_UPSTREAM_STATUS, ROLE_UPSTREAM_TIME, ROLE_ATTEMPTS)
# Request times of failing requests (timeout inference): groups bounded by distinct durations, not failing lines.
_DURATION_KEYS = (ROLE_STATUS, ROLE_UPSTREAM, ROLE_FLAGS, ROLE_REQUEST_TIME)
_OVERHEAD_KEYS = ("overhead_ms",)
# Router time of lines whose numbers polars does not read as the Python engine does (rare: decoded in Python).
_ODD_OVERHEAD_KEYS = (ROLE_REQUEST_TIME, ROLE_UPSTREAM, ROLE_UPSTREAM_STATUS, ROLE_UPSTREAM_TIME)
_TIMELINE_KEYS = ("tkey", ROLE_STATUS, "fail_addr", ROLE_FLAGS)
_KEYS = {"requests": _REQUEST_KEYS, "upstreams": _UPSTREAM_KEYS, "durations": _DURATION_KEYS,
         "overhead": _OVERHEAD_KEYS,
         "odd_overhead": _ODD_OVERHEAD_KEYS, "timeline": _TIMELINE_KEYS}


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
    _prime_allocator()
    decoder = RequestDecoder(layout)
    plan = _Plan(pl, layout, envelope, decoder)
    parts: dict[str, list[Any]] = {name: [] for name in _KEYS}
    rows = 0
    try:
        for index, chunk in enumerate(_chunks(source, stats, unread)):
            read = plan.read(chunk)
            for name in _KEYS:
                parts[name].append(read.tables[name])
            rows += read.rows
            if (index + 1) % COMPACT_EVERY == 0:
                parts = {name: [_sum(pl, pieces, _KEYS[name])] for name, pieces in parts.items()}
            plan.take_examples(chunk.data, read.examples, stats)
            if read.unread:
                lines = chunk.data.split(b"\n")
                _feed([_raw_line(lines[row]) for row in read.unread], unread, stats)
                del lines
            del chunk, read
    except (pl.exceptions.PolarsError, OSError, EOFError, ValueError, RuntimeError, zlib.error,
            lzma.LZMAError) as exc:
        stats.skip("read_error", 1, f"{source.name}: stopped reading ({type(exc).__name__}: {exc}); "
                   "lines before the error are counted")
    tables = {name: _sum(pl, pieces, _KEYS[name]) if pieces else None for name, pieces in parts.items()}
    parsed = _merge(decoder, tables, stats)
    stats.lines += rows  # the lines polars read (the others are counted as they go to the line router)
    stats.parsed += parsed
    if formats is not None and parsed:
        formats[layout.router] += parsed
    return True


_PRIMED: list[bool] = []


def _prime_allocator() -> None:
    """Let the C allocator keep the chunks' memory between reads (once per process).

    Every read and its sentinel copy are fresh blocks of :data:`CHUNK_BYTES`; glibc maps such blocks afresh each
    time until a freed mapped block raises its threshold above their size, and page faults cost ~3 us per 4 KiB
    here (measured: 8k faults per 16 MB chunk, a fifth of its time). Freeing one mapped block just under glibc's
    32 MB ceiling sets that threshold (and the heap's trim threshold to twice it) at once. ``bytes(n)`` of mapped
    memory is not touched, so this costs no fault; other allocators ignore it.
    """
    if not _PRIMED:
        _PRIMED.append(True)
        block = bytes(31 << 20)
        del block


def _feed(lines: list[bytes], unread: Callable[[str], None] | None, stats: LogStats) -> None:
    """Lines to the Python line router (counted, decoded as the Python engine does: see :func:`decode_line`)."""
    for raw in lines:
        line = decode_line(raw, stats)
        if line is not None and unread is not None:
            unread(line)


@dataclass
class _Chunk:
    """Whole lines of the file for polars, with the sentinel (:func:`_with_sentinel`)."""

    data: bytes
    """The bytes as read, with the sentinel; its first line is the end of a line cut by the previous read when
    ``skip_first``, its last one cut by this read when ``cut_last`` (both are read in Python, whole)."""
    skip_first: bool
    cut_last: bool
    python_rows: list[int]
    """Lines the Python engine reads otherwise than polars would (:func:`_python_rows`): left to it."""
    utf8: bool
    """Every line is UTF-8: polars reads it strictly (faster than with replacement characters)."""


_WINDOW = MAX_LINE_BYTES // 2


def _python_rows(data: bytes) -> tuple[list[int], bool]:
    r"""Line numbers (in ``data.split(b"\n")``) of the lines the Python engine reads otherwise than polars would.

    Those are binary lines (a NUL byte: skipped), lines over :data:`MAX_LINE_BYTES` (cut) and lines that are not
    UTF-8 (noted, read with replacement characters). A few C-speed scans of the chunk (~3 ms per 16 MB): a longer
    line covers a whole aligned window of half that length without a newline; ASCII is UTF-8. Also whether every
    line is UTF-8.
    """
    starts: set[int] = set()
    pos = data.find(b"\x00")
    while pos >= 0:
        starts.add(data.rfind(b"\n", 0, pos) + 1)
        end = data.find(b"\n", pos)
        pos = data.find(b"\x00", end) if end >= 0 else -1
    for offset in range(0, len(data), _WINDOW):
        if data.find(b"\n", offset, offset + _WINDOW) < 0:
            start = data.rfind(b"\n", 0, offset) + 1
            end = data.find(b"\n", offset)
            if (end if end >= 0 else len(data)) - start > MAX_LINE_BYTES:
                starts.add(start)
    utf8 = True
    if not data.isascii():
        try:  # in pieces: one large string is as many fresh pages
            check = codecs.getincrementaldecoder("utf-8")()
            view = memoryview(data)
            for offset in range(0, len(data), 1 << 20):
                check.decode(view[offset: offset + (1 << 20)])
            check.decode(b"", final=True)
        except UnicodeDecodeError:
            utf8 = False
            offset = 0
            for line in data.split(b"\n"):
                if not line.isascii():
                    try:
                        line.decode("utf-8")
                    except UnicodeDecodeError:
                        starts.add(offset)
                offset += len(line) + 1
    return sorted(data.count(b"\n", 0, start) for start in starts), utf8


def _chunks(source: LogSource, stats: LogStats, unread: Callable[[str], None] | None) -> Iterator[_Chunk]:
    """The file, decompressed, in reads of :data:`CHUNK_BYTES`; counts bytes.

    Each read goes to polars as it is (no copy but the sentinel's): the line cut between two reads is put together
    and handed to the Python line router (with a line that has no newline in a whole read), as are the lines at the
    end without a newline (noted as truncated, as the Python engine notes it). A line is kept up to
    :data:`MAX_LINE_BYTES` + 1 bytes (longer ones are cut by :func:`decode_line` anyway).
    """
    carry = b""  # the start of the line the last read cut (at most MAX_LINE_BYTES + 1 bytes of it)
    with open_binary(source) as fh:
        while True:
            data = fh.read(CHUNK_BYTES)
            if not data:
                break
            stats.bytes += len(data)
            first = data.find(b"\n")
            if first < 0:  # no newline in a whole read: part of one long line
                carry += data[: MAX_LINE_BYTES + 1 - len(carry)] if len(carry) <= MAX_LINE_BYTES else b""
                continue
            last = data.rfind(b"\n") + 1
            if carry:
                _feed([carry + data[: min(first, MAX_LINE_BYTES + 1)]], unread, stats)
            chunk = _Chunk(_with_sentinel(data), bool(carry), last < len(data), *_python_rows(data))
            carry = data[last: last + MAX_LINE_BYTES + 1]
            del data  # a large block alive is a fresh one (page faults) at the next read
            yield chunk
            del chunk
    if carry:
        if len(carry) <= MAX_LINE_BYTES:
            stats.note(NOTE_TRUNCATED)
        _feed([carry], unread, stats)


LINE_END = "\x01"
"""Appended to every line of a chunk: the last column then always holds something, so a line that lacks its last
quote (one column less) is told from one whose last column is empty."""
LINE_END_BYTES = LINE_END.encode()
_ANY_TEXT = ('[^"]*', '[^"]*?')
"""Variable patterns that match any column's text (a column never holds a quote)."""
_NO_SPACE = '[^ "]*'
_MAX_PLAIN_NUMBER = 30
"""Numbers up to this many characters, without an exponent, are read by polars as :func:`to_ms` reads them."""


def _with_sentinel(chunk: bytes) -> bytes:
    r"""The chunk with :data:`LINE_END` at the end of every line (before ``\r\n``: polars drops that ``\r``)."""
    out = chunk.replace(b"\n", LINE_END_BYTES + b"\n")
    if out.find(b"\r") >= 0:
        out = out.replace(b"\r" + LINE_END_BYTES + b"\n", LINE_END_BYTES + b"\r\n")
    return out


def _raw_line(line: bytes) -> bytes:
    """A line of a chunk (:func:`_with_sentinel`) as the file has it, without its newline."""
    if line.endswith(LINE_END_BYTES):
        return line[:-1]
    if line.endswith(LINE_END_BYTES + b"\r"):
        return line[:-2] + b"\r"
    return line


def _merged(tokens: list[Token]) -> list[Token]:
    """The tokens with adjacent literals joined."""
    out: list[Token] = []
    for token in tokens:
        if isinstance(token, str) and out and isinstance(out[-1], str):
            out[-1] += token
        elif token != "":
            out.append(token)
    return out


def _check(pl: Any, text: Any, segment: list[Token]) -> Any:
    """Whether a column holds its segment, as the full-line regex requires; None when any text does.

    A column holds no quote, so a ``[^"]*`` variable at either end matches whatever is there: it is left out and
    the search is unanchored on that side (it stops at the first match instead of reading to the end).
    """
    if not segment:
        return text.is_null()
    body = list(segment)
    head = tail = True
    if isinstance(body[0], Var) and body[0].pattern in _ANY_TEXT:
        body, head = body[1:], False
    if body and isinstance(body[-1], Var) and body[-1].pattern in _ANY_TEXT:
        body, tail = body[:-1], False
    if not body:
        return None
    if len(body) == 1 and isinstance(body[0], str):
        literal = body[0]
        if head and tail:
            return text == literal
        if head:
            return text.str.starts_with(literal)
        if tail:
            return text.str.ends_with(literal)
        return text.str.contains(literal, literal=True)
    return text.str.contains(("^" if head else "") + tokens_regex(body, frozenset()) + ("$" if tail else ""))


def _space_free(token: Token, multi_simple: bool) -> bool:
    return isinstance(token, Var) and (token.pattern == _NO_SPACE or (multi_simple and token.pattern == MULTI_VALUE))


def _place(segment: list[Token], k: int, multi_simple: bool) -> tuple[int, str, str, bool] | None:
    """Where the variable at ``k`` of a checked column is, when spaces fix it; else None.

    (n, before, after, rest): it starts in the n-th space-separated piece (n: the spaces in the literals before it),
    after the literal text ``before`` of that piece; it is the piece less ``after`` (it has no space and the
    literal after it has one: ``after`` is that literal up to its space), or with ``rest`` the rest of the column
    less ``after`` (only literals follow it). That holds when every variable before it has no space and a space
    separates the last one from it.
    """
    if sum(isinstance(t, Var) for t in segment) == 1:  # the column less its literals
        return 0, "".join(t for t in segment[:k] if isinstance(t, str)), "".join(
            t for t in segment[k + 1:] if isinstance(t, str)), True
    spaces, run, after_var = 0, "", False
    for token in segment[:k]:
        if isinstance(token, Var):
            if not _space_free(token, multi_simple):
                return None
            run, after_var = "", True
        else:
            spaces += token.count(" ")
            run += token
    if after_var and " " not in run:
        return None  # the variable before it is in the same piece
    before = run[run.rfind(" ") + 1:]
    follow = segment[k + 1] if k + 1 < len(segment) else ""
    if isinstance(follow, Var):
        return None  # two variables with nothing between them
    last = not any(isinstance(t, Var) for t in segment[k + 1:])
    if last and spaces == 0:
        return spaces, before, follow, True  # the column less literals: no split
    if _space_free(segment[k], multi_simple) and " " in follow:
        return spaces, before, follow[: follow.index(" ")], False
    return (spaces, before, follow, True) if last else None


def _strict_fields(layout: AccessLayout) -> dict[str, tuple[str, int]]:
    """Role -> (pattern, width) of the fields whose writer gives them one width.

    Those are nginx's 3-digit ``$status`` and its ``$time_local``, and Envoy's default ``START_TIME`` (milliseconds,
    UTC). Polars checks these fields with the stricter pattern and cuts them by position; a line that does not match it
    (a field the layout's looser pattern reads) goes to the Python line router, which reads it as before.
    """
    strict: dict[str, tuple[str, int]] = {}
    if layout.router == "nginx":
        strict[ROLE_STATUS] = (r"\d{3}", 3)
    if layout.time_kind == TIME_LOCAL:  # 29/Nov/2026:10:00:00 +0000
        strict[ROLE_TIME] = (r"\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}", 26)
    elif layout.time_kind == TIME_ISO and layout.router == "envoy":  # 2026-11-29T10:00:00.000Z
        strict[ROLE_TIME] = (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", 24)
    return strict


def _fixed(text: Any, segment: list[Token], roles: list[str], strict: dict[str, tuple[str, int]]) -> dict[str, Any]:
    """A slice for each role of a checked column that has one width (``strict``) and literals only before or after."""
    fields: dict[str, Any] = {}
    for role in roles:
        if role not in strict:
            continue
        k = next(i for i, t in enumerate(segment) if isinstance(t, Var) and t.role == role)
        width = strict[role][1]
        before, after = segment[:k], segment[k + 1:]
        if all(isinstance(t, str) for t in before):
            fields[role] = text.str.slice(sum(len(t) for t in before if isinstance(t, str)), width)
        elif all(isinstance(t, str) for t in after):
            tail = text.str.tail(width + sum(len(t) for t in after if isinstance(t, str)))
            fields[role] = tail.str.head(width)
    return fields


class _Columns:
    """Named intermediate columns (splits, captures) of one way to read the fields.

    Each is computed once per chunk, before the fields that use it: polars does not reliably share repeated
    subexpressions.
    """

    def __init__(self, pl: Any) -> None:
        self.pl = pl
        self.splits: dict[str, Any] = {}

    def split(self, text: Any, text_name: str, pieces: int) -> Any:
        name = f"{text_name}_{pieces}"
        self.splits[name] = text.str.splitn(" ", pieces)
        return self.pl.col(name)


def _excluded(pattern: str) -> str | None:
    """The characters a ``[^...]*`` variable pattern never matches (None for other patterns)."""
    found = re.fullmatch(r"\[\^((?:\\.|[^\]\\])*)\]\*", pattern)
    return re.sub(r"\\(.)", r"\1", found.group(1)) if found else None


def _one_pass(segment: list[Token]) -> bool:
    """True when each variable of the segment ends at a character it cannot hold, or at the column's end.

    The literal after each variable starts with a character the variable excludes: a regex then checks the column
    and captures its fields in one pass (Rust's one-pass engine), cheaper than a check and a split (measured: nginx
    and Envoy's default columns). Multi-values (``, `` and `` : `` inside) and lazy patterns are not one-pass.
    """
    for index, token in enumerate(segment):
        if not isinstance(token, Var):
            continue
        follow = segment[index + 1] if index + 1 < len(segment) else None
        if follow is None:
            continue
        excluded = _excluded(token.pattern)
        if isinstance(follow, Var) or excluded is None or not follow or follow[0] not in excluded:
            return False
    return True


def _capture(columns: _Columns, text: Any, text_name: str, segment: list[Token],
             roles: list[str]) -> tuple[dict[str, Any], Any]:
    """The roles' fields captured by the segment's regex (a named column), and the check that it matched."""
    pl = columns.pl
    pattern = "^" + tokens_regex(segment, frozenset(roles)) + "$"
    name = f"{text_name}_re"
    if len(roles) == 1:
        columns.splits[name] = text.str.extract(pattern, 1)
        return {roles[0]: pl.col(name)}, pl.col(name).is_not_null()
    columns.splits[name] = text.str.extract_groups(pattern)
    fields = {role: pl.col(name).struct.field(role) for role in roles}
    return fields, fields[roles[0]].is_not_null()


def _cut(columns: _Columns, text: Any, text_name: str, segment: list[Token], roles: list[str],
         multi_simple: bool) -> tuple[dict[str, Any], list[str]]:
    """Expressions for the roles' fields in a checked column, and the roles left to a capture group.

    A field whose place spaces fix (:func:`_place`) is a piece of a split on spaces less literal text: no regex.
    ``multi_simple`` reads nginx multi-values as one value (right on lines without ``", "`` and ``" : "``).
    """
    fields: dict[str, Any] = {}
    left: list[str] = []
    places: dict[str, tuple[int, str, str, bool]] = {}
    for role in roles:
        k = next(i for i, t in enumerate(segment) if isinstance(t, Var) and t.role == role)
        if len(segment) == 1:
            fields[role] = text
            continue
        place = _place(segment, k, multi_simple)
        if place is None:
            left.append(role)
        else:
            places[role] = place
    pieces = max((spaces + 2 for spaces, _, _, rest in places.values() if not rest), default=0)
    split = columns.split(text, text_name, pieces) if pieces else None
    for role, (spaces, before, after, rest) in places.items():
        if rest:  # the rest of the column from the piece on
            value = text if spaces == 0 else columns.split(text, text_name, spaces + 1).struct.field(
                f"field_{spaces}")
        else:
            assert split is not None
            value = split.struct.field(f"field_{spaces}")
        if before:
            value = value.str.strip_prefix(before)
        if after:
            value = value.str.strip_suffix(after)
        fields[role] = value
    if left:
        pattern = "^" + tokens_regex(segment, frozenset(left)) + "$"
        if len(left) == 1:
            fields[left[0]] = text.str.extract(pattern, 1)
        else:
            groups = text.str.extract_groups(pattern)
            for role in left:
                fields[role] = groups.struct.field(role)
    return fields, left


@dataclass
class _Read:
    """What one chunk gave."""

    rows: int
    """Lines the layout read."""
    tables: dict[str, Any]
    """Group tables (raw keys and a count ``n``), by query name (:data:`_KEYS`)."""
    unread: list[int]
    """Rows (line numbers in the chunk) of the lines the layout does not read, in order."""
    examples: Any
    """(status, upstream, flags, rows): the first rows of each failing group."""


class _Plan:
    """The polars expressions for one layout, applied to each chunk.

    Every column (segment) is checked with its segment's regular expression as ``str.contains`` (a DFA, no capture
    groups: captures are the costly part of a regex); fields are cut out by splits on spaces and literal strips
    where the layout fixes their place (:func:`_place`), so a capture group is left only where spaces do not delimit
    a field (nginx multi-values such as ``ua=a, b us=502, 200``: on lines with one try the split is used too).
    What the engines must agree on is decided by :class:`RequestDecoder` (whether an upstream served a request: per
    distinct value, in Python; timeline keys and router time in expressions that match its own, numbers polars does
    not read exactly as Python going back to it).
    """

    def __init__(self, pl: Any, layout: AccessLayout, envelope: str, decoder: RequestDecoder) -> None:
        self.pl = pl
        self.layout = layout
        self.decoder = decoder
        segments = layout.segments()
        segments[-1] = [*segments[-1], LINE_END]  # every line ends with the sentinel (see _with_sentinel)
        segments = [_merged(segment) for segment in segments]
        n = len(segments)
        self.columns = [f"c{i}" for i in range(n + 1)]
        # The line has exactly the layout's quotes: its last column is there (it holds at least the sentinel) and
        # no column after it.
        ok = pl.col(f"c{n - 1}").is_not_null() & pl.col(f"c{n}").is_null()
        fast, exact = _Columns(pl), _Columns(pl)
        strict = _strict_fields(layout)
        simple_roles: set[str] = set()
        fast_fields: dict[str, Any] = {}
        exact_fields: dict[str, Any] = {}
        simple: Any = None
        texts: dict[str, Any] = {}
        for index, segment in enumerate(segments):
            roles = [t.role for t in segment if isinstance(t, Var) and t.role and t.role not in fast_fields]
            column = pl.col(f"c{index}")
            name = f"c{index}"
            if index == 0 and envelope:
                whole = column.fill_null("")
                texts["t0"] = whole.str.replace(f"^(?:{envelope})", "")
                name = "t0"
                ok = ok & (pl.col(name).str.len_bytes() < whole.str.len_bytes())  # it was there (never empty)
            elif re.fullmatch(tokens_regex(segment), "") and (roles or _check(pl, column, segment) is not None):
                texts[f"t{index}"] = column.fill_null("")  # an empty column is null
                name = f"t{index}"
            text = pl.col(name)
            segment = [Var(t.name, t.role, strict[t.role][0]) if isinstance(t, Var) and t.role in roles
                       and t.role in strict else t for t in segment]
            fields = _fixed(text, segment, roles, strict)
            rest = [role for role in roles if role not in fields]
            several = sum(isinstance(t, Var) for t in segment) > 1
            if rest and several and _one_pass(segment):  # one regex pass: check and capture
                groups, check = _capture(fast, text, name, segment, rest)
                _capture(exact, text, name, segment, rest)
                ok = ok & check
                fields.update(groups)
                fast_fields.update(fields)
                exact_fields.update(fields)
                continue
            check = _check(pl, text, segment)
            if check is not None:
                ok = ok & check
            fast_fields.update(fields)
            exact_fields.update(fields)
            if not rest:
                continue
            cut, captured = _cut(exact, text, name, segment, rest, multi_simple=False)
            exact_fields.update(cut)
            multi = bool(captured) and any(isinstance(t, Var) and t.pattern == MULTI_VALUE for t in segment)
            quick, fewer = _cut(fast, text, name, segment, rest, multi_simple=multi)
            if len(fewer) < len(captured):  # on lines without nginx's separators a multi-value is one value
                one = ~text.str.contains(MULTI_SPLIT.pattern)
                simple = one if simple is None else simple & one
                simple_roles.update(rest)
            fast_fields.update(quick)
        self.texts = texts
        self.ok = ok.fill_null(False)
        self.simple = simple.fill_null(True) if simple is not None else None
        """Lines the fast columns read (None: all); the exact ones read every line."""
        self.simple_roles = frozenset(simple_roles)
        """Roles that are one value on the lines :attr:`simple` selects (column ``_plain`` says it on each line)."""
        none = pl.lit(None, pl.String)
        self.fast = (fast, {role: fast_fields.get(role, none) for role in _ROLES})
        self.exact = (exact, {role: exact_fields.get(role, none) for role in _ROLES})
        exprs = (self.ok, *texts.values(), *fast.splits.values(), *fast_fields.values(), *exact.splits.values(),
                 *exact_fields.values(), *([self.simple] if self.simple is not None else []))
        self.needed = sorted({root for expr in exprs for root in expr.meta.root_names() if root in self.columns},
                             key=lambda name: int(name[1:]))
        """The scanned columns the plan reads."""
        status, flags = pl.col(ROLE_STATUS), pl.col(ROLE_FLAGS)
        if decoder.is_envoy:
            self.may_fail = (flags.is_not_null() & (flags != "-")) | status.is_in(["0", "429"])
        else:
            self.may_fail = status.is_in(list(NGINX_FAILING_STATUSES))
        self.served_role = decoder.served_role
        self._served: dict[str | None, bool] = {}
        self._agrees: dict[tuple[str, str], bool] = {}
        self.has_router_time = ROLE_REQUEST_TIME in layout.roles and decoder.has_utime
        # group keys of the upstream query: the roles the layout has (the others are null, added after grouping)
        self.upstream_keys = [key for key in _UPSTREAM_KEYS if key not in _ROLES or key in layout.roles]
        self.example_keys: set[tuple[tuple[str, ...], str]] = set()

    def scan(self, chunk: bytes, skip_first: bool = False, utf8: bool = False) -> Any:
        """The chunk split on ``"`` into string columns (one extra column for the guard), with the line index."""
        return self.pl.scan_csv(
            chunk,
            skip_rows=int(skip_first),
            row_index_offset=int(skip_first),
            encoding="utf8" if utf8 else "utf8-lossy",
            separator='"',
            quote_char=None,
            has_header=False,
            schema=dict.fromkeys(self.columns, self.pl.String),
            truncate_ragged_lines=True,
            missing_columns="insert",
            extra_columns="ignore",
            raise_if_empty=False,
            row_index_name="row",
        )

    def fields(self, chunk: _Chunk) -> Any:
        """The chunk's ``row``, ``ok`` (the layout reads the line) and raw role fields, as one frame.

        A cut last line is left out. The frame is in file order unless :attr:`simple` split the lines in two parts.
        """
        pl = self.pl
        lines = self.scan(chunk.data, chunk.skip_first, chunk.utf8).select("row", *self.needed)
        if self.texts:
            lines = lines.with_columns(**self.texts)
        frame = lines.collect()
        if chunk.cut_last:
            frame = frame.head(frame.height - 1)

        def fields(frame: Any, plan: tuple[_Columns, dict[str, Any]], plain: Any = None) -> Any:
            columns, roles = plan
            if columns.splits:
                frame = frame.with_columns(**columns.splits)
            frame = frame.select("row", ok=self.ok, **roles)
            return frame if plain is None else frame.with_columns(_plain=plain)

        if self.simple is None:
            return fields(frame.lazy(), self.fast).collect()
        # most lines have one upstream try (their multi-values are single values): cut them by spaces
        simple = frame.select(self.simple).to_series()
        several = pl.lit(False)
        for role in self.simple_roles:
            several = several | pl.col(role).str.contains(MULTI_SPLIT.pattern).fill_null(False)
        return pl.concat([fields(frame.filter(simple).lazy(), self.fast, pl.lit(True)),
                          fields(frame.filter(~simple).lazy(), self.exact, ~several)]).collect()

    def read(self, chunk: _Chunk) -> _Read:
        """One chunk's group tables, unread rows and example rows."""
        pl = self.pl
        base = self.fields(chunk)
        if chunk.python_rows:
            base = base.with_columns(ok=pl.col("ok") & ~pl.col("row").is_in(chunk.python_rows))
        ordered = self.simple is None
        if base.get_column("ok").all():  # most chunks: no line to set aside (no copy)
            good, unread = base, []
        else:
            good = base.filter(pl.col("ok"))
            rows = base.filter(~pl.col("ok")).get_column("row")
            unread = (rows if ordered else rows.sort()).to_list()
        fail = pl.col("_fail")
        parsed = good.lazy().with_columns(served=self._served_expr(good), _fail=self.may_fail).with_columns(
            fail_addr=pl.when(fail).then(pl.col(ROLE_UPSTREAM)))
        for stage in self._router_stages():
            parsed = parsed.with_columns(**stage)
        parsed = parsed.collect().lazy()  # once, for every query below
        failing = parsed.filter(fail)
        queries = {
            "requests": parsed.group_by(*_REQUEST_KEYS).agg(n=pl.len()),
            "upstreams": parsed.group_by(*self.upstream_keys).agg(n=pl.len()),
            "durations": failing.group_by(*_DURATION_KEYS).agg(n=pl.len()),
            "overhead": self._overhead_groups(parsed),
            "timeline": self._timeline(parsed),
            "examples": (failing if ordered else failing.sort("row")).group_by(
                ROLE_STATUS, ROLE_UPSTREAM, ROLE_FLAGS, maintain_order=True).agg(rows=pl.col("row").head(MAX_EXAMPLES)),
        }
        frames = dict(zip(queries, pl.collect_all(list(queries.values())), strict=True))
        examples = frames.pop("examples")
        upstreams = frames["upstreams"]
        frames["upstreams"] = upstreams.with_columns(
            **{key: pl.lit(None, pl.String) for key in _UPSTREAM_KEYS if key not in upstreams.columns}
        ).select(*_UPSTREAM_KEYS, "n")
        frames["odd_overhead"] = self._odd_overhead(parsed, frames)
        return _Read(good.height, frames, unread, examples)

    def _served_expr(self, good: Any) -> Any:
        """Whether an upstream served each request, decided by :meth:`RequestDecoder.served_by` per distinct value."""
        pl = self.pl
        role = self.served_role
        if role is None:
            return pl.lit(False)
        values = good.get_column(role).unique().to_list()
        served = self._served
        if len(served) > SERVED_CACHE:
            served.clear()
        for value in values:
            if value not in served:
                served[value] = self.decoder.served_by(value)
        keys = [v for v in values if v is not None]
        expr = pl.col(role).replace_strict(keys, [served[v] for v in keys], default=False,
                                           return_dtype=pl.Boolean) if keys else pl.lit(False)
        expr = expr.fill_null(served.get(None, False)) if None in values else expr
        if self.decoder.is_envoy:
            addr = pl.col(ROLE_UPSTREAM)
            expr = addr.is_not_null() & (addr != "-") & expr
        return expr

    def _router_stages(self) -> list[dict[str, Any]]:
        """Columns for router time, in stages (each column computed once), ending with ``overhead_ms``.

        That is request ms less upstream ms of single-attempt requests, as :meth:`RequestDecoder.overhead_ms`
        computes it, from numbers polars reads as Python does (:meth:`_odd_overhead` sees to the others).
        """
        pl = self.pl
        decoder = self.decoder
        if not self.has_router_time:
            return [{"overhead_ms": pl.lit(None, pl.Int64)}]
        addr = pl.col(ROLE_UPSTREAM)
        one = addr.is_not_null() & (addr != "-") if decoder.has_upstream else pl.lit(True)
        if not decoder.is_envoy:  # nginx: one try (no separators in the multi-value fields)
            for role in (ROLE_UPSTREAM, ROLE_UPSTREAM_STATUS):  # several upstream times: not a number to polars
                if role in self.simple_roles:
                    one = one & pl.col("_plain")
                elif role in self.layout.roles:
                    one = one & ~pl.col(role).str.contains(MULTI_SPLIT.pattern).fill_null(False)
        scaled = {"_r": pl.col(ROLE_REQUEST_TIME).cast(pl.Float64, strict=False) * self.layout.request_scale,
                  "_u": pl.col(ROLE_UPSTREAM_TIME).cast(pl.Float64, strict=False) * self.layout.upstream_scale,
                  "_one": one}
        rounded = {"_rr": pl.col("_r").round(0, mode="half_to_even"),
                   "_ur": pl.col("_u").round(0, mode="half_to_even")}
        known = (pl.col("_one") & (pl.col("_r") >= 0) & (pl.col("_u") >= 0) & (pl.col("_rr") <= MAX_MS)
                 & (pl.col("_ur") <= MAX_MS))
        overhead = pl.when(known).then((pl.col("_rr") - pl.col("_ur")).clip(lower_bound=0).cast(pl.Int64))
        return [scaled, rounded, {"overhead_ms": overhead}]

    def _overhead_groups(self, parsed: Any, odd: tuple[list[str], list[str]] = ([], [])) -> Any:
        """Router-time groups, without the lines that have one of the ``odd`` (request, upstream) times."""
        pl = self.pl
        keep = pl.col("overhead_ms").is_not_null()
        if odd[0]:
            keep = keep & ~pl.col(ROLE_REQUEST_TIME).is_in(odd[0])
        if odd[1]:
            keep = keep & ~pl.col(ROLE_UPSTREAM_TIME).is_in(odd[1])
        return parsed.filter(keep).group_by(*_OVERHEAD_KEYS).agg(n=pl.len())

    def _odd_overhead(self, parsed: Any, frames: dict[str, Any]) -> Any:
        """Groups of the lines with a time that polars reads otherwise than :func:`to_ms`, decoded in Python.

        Say ``" 0.5"`` or ``1e0001``: the chunk's router-time groups are then redone without those lines. Each
        distinct value is checked once, from the chunk's group tables; usually there is none.
        """
        pl = self.pl
        empty = pl.DataFrame(schema={**dict.fromkeys(_ODD_OVERHEAD_KEYS, pl.String), "n": pl.UInt32})
        if not self.has_router_time:
            return empty
        odd: tuple[list[str], list[str]] = ([], [])
        for found, (role, column, scale) in zip(odd, (
                ("request", ROLE_REQUEST_TIME, self.layout.request_scale),
                ("upstream", ROLE_UPSTREAM_TIME, self.layout.upstream_scale)), strict=True):
            values = [v for v in frames["requests" if role == "request" else "upstreams"].get_column(column).unique()
                      .to_list() if v is not None]
            found += self._times_read_otherwise(role, values, scale)
        if not odd[0] and not odd[1]:
            return empty
        frames["overhead"] = self._overhead_groups(parsed, odd).collect()
        lines = parsed.filter(pl.col(ROLE_REQUEST_TIME).is_in(odd[0]) | pl.col(ROLE_UPSTREAM_TIME).is_in(odd[1]))
        return lines.with_columns(
            **{key: pl.lit(None, pl.String) for key in _ODD_OVERHEAD_KEYS if key not in self.layout.roles}
        ).group_by(*_ODD_OVERHEAD_KEYS).agg(n=pl.len()).collect()

    def _times_read_otherwise(self, role: str, values: list[str], scale: float) -> list[str]:
        """The values (times of ``role``) whose ms polars reads otherwise than :func:`to_ms`."""
        known = self._agrees
        new = [v for v in values if (role, v) not in known]
        if new:
            if len(known) > SERVED_CACHE:
                known.clear()
            floats = self.pl.Series(new, dtype=self.pl.String).cast(self.pl.Float64, strict=False).to_list()
            for value, number in zip(new, floats, strict=True):
                polars_ms: int | None = None
                if number is not None and math.isfinite(number) and number * scale >= 0:
                    rounded = round(number * scale)
                    polars_ms = rounded if rounded <= MAX_MS else None
                python_ms = to_ms(value, scale)
                known[(role, value)] = polars_ms == (None if python_ms == UNKNOWN else python_ms)
        return [v for v in values if not known[(role, v)]]

    def _timeline(self, parsed: Any) -> Any:
        """Timeline groups, by the raw time first (the lines of a second together), then by key.

        The key is the second of failing requests (incidents need it) and the minute of the others (so the groups
        follow the minutes, not the lines), as :meth:`RequestDecoder.second_key` and ``minute_key`` make them.
        """
        pl = self.pl
        kind = self.layout.time_kind
        time = pl.col(ROLE_TIME)
        keys = (ROLE_STATUS, "fail_addr", ROLE_FLAGS)
        if kind == TIME_ISO:  # 2026-11-29T10:00:SS[.fff](Z|+hh:mm): the fraction of UTC times goes
            z = time.str.ends_with("Z")
            first = parsed.group_by(*keys, t19=time.str.head(19), z=z, other=pl.when(~z).then(time))
            t19, z, other = pl.col("t19"), pl.col("z"), pl.col("other")
            second = pl.when(z).then(t19 + pl.lit("Z")).otherwise(other)
            minute = pl.when(z).then(t19.str.head(17) + pl.lit("00Z")).otherwise(
                pl.concat_str([other.str.head(17), pl.lit("00"), other.str.slice(19)]))
        else:
            first = parsed.group_by(time, *keys)
            second = time
            if kind == TIME_LOCAL:  # 29/Nov/2026:10:00:SS +0000
                minute = pl.concat_str([time.str.head(18), pl.lit("00"), time.str.slice(20)])
            elif kind == TIME_EPOCH:
                minute = self._epoch_minute(time)
            else:
                minute = time
        grouped = first.agg(n=pl.len())
        return grouped.with_columns(tkey=pl.when(self.may_fail).then(second).otherwise(minute)).group_by(
            *_TIMELINE_KEYS).agg(pl.col("n").sum())

    def _epoch_minute(self, time: Any) -> Any:
        """An epoch time's minute (seconds or milliseconds, as ``parse_time`` reads them).

        A number polars may read otherwise than Python keeps its raw text: Python reads it (the same minute).
        """
        pl = self.pl
        value = time.cast(pl.Float64, strict=False)
        plain = value.is_not_null() & (time.str.len_bytes() <= _MAX_PLAIN_NUMBER) & ~time.str.contains("[eE]")
        known = plain & (value >= 0) & (value <= float(MAX_EPOCH) * 1000)
        second = pl.when(value > MAX_EPOCH).then(value / 1000).otherwise(value).floor()
        minute = ((second // 60) * 60).cast(pl.Int64).cast(pl.String)
        return pl.when(known).then(minute).when(plain).then(pl.lit(None, pl.String)).otherwise(time)

    def take_examples(self, chunk: bytes, found: Any, stats: LogStats) -> None:
        """Keep example lines of (kind, upstream) groups not seen before, cut from the chunk by row number."""
        decoder = self.decoder
        lines: list[bytes] | None = None
        for status, addr, flags, rows in found.iter_rows():
            key = decoder.signatures(to_int(status), addr, flags)
            if not key[0] or key in self.example_keys:
                continue
            self.example_keys.add(key)
            if lines is None:
                lines = chunk.split(b"\n")
            for row in sorted(rows):
                if 0 <= row < len(lines):
                    line = _raw_line(lines[row]).removesuffix(b"\r").decode("utf-8", errors="replace")
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
    for status, addr, ustatus, utime, attempts, n in _rows(tables["upstreams"]):
        decoder.add_upstreams(stats, status, addr, ustatus, utime, attempts, n)
    for status, addr, flags, request, n in _rows(tables["durations"]):
        decoder.add_durations(stats, status, addr, flags, request, n)
    for overhead_ms, n in _rows(tables["overhead"]):
        stats.overhead_hist[overhead_ms] += n
    for request, addr, ustatus, utime, n in _rows(tables["odd_overhead"]):
        overhead = decoder.overhead_ms(request, addr, ustatus, utime)
        if overhead is not None:
            stats.overhead_hist[overhead] += n
    for tkey, status, fail_addr, flags, n in _rows(tables["timeline"]):
        decoder.add_outcome(stats, tkey, status, fail_addr, flags, n)
    return parsed

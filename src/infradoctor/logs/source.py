"""Reading log files safely: gzip by magic bytes, bounded line length, binary and non-UTF-8 lines counted.

Log text is untrusted. Lines are read in chunks of :data:`CHUNK_BYTES`; a line longer than :data:`MAX_LINE_BYTES`
is cut there without ever being held whole in memory: it is counted as skipped (``line_too_long``, it cannot be
parsed as a record) and its first :data:`MAX_LINE_BYTES` are still searched for failure signatures (a
:class:`CutLine`); lines with NUL bytes are skipped as binary; bytes that are not UTF-8 are replaced (and counted)
so the line can still be parsed.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from infradoctor.logs.stats import LogStats

CHUNK_BYTES = 1 << 20
"""Bytes read per chunk."""
MAX_LINE_BYTES = 64 * 1024
"""Longer lines are skipped (``line_too_long``); real access-log lines are well under 8 KiB."""
SAMPLE_BYTES = 64 * 1024
"""Bytes read from the start of a file to sniff its format."""
GZIP_MAGIC = b"\x1f\x8b"
XZ_MAGIC = b"\xfd7zXZ\x00"
BZIP2_MAGIC = b"BZh"

SKIP_BINARY = "binary"
SKIP_TOO_LONG = "line_too_long"
SKIP_MISMATCH = "format_mismatch"
NOTE_INVALID_UTF8 = "invalid_utf8"
NOTE_TRUNCATED = "truncated_last_line"


class CutLine(str):
    """The first :data:`MAX_LINE_BYTES` of a longer line (searched as text, never parsed as a record)."""

    __slots__ = ()


@dataclass(frozen=True)
class LogSource:
    """One input file as the parsers see it."""

    path: Path
    """Path as given."""
    name: str
    """Display name (the path as the user typed it)."""
    gzipped: bool
    """True when the content is gzip-compressed (detected by magic bytes, not by suffix)."""
    size_bytes: int
    """Size on disk."""
    content_bytes: int = 0
    """Uncompressed size: the size on disk, or gzip's ISIZE trailer (modulo 4 GiB, a hint) for .gz files."""
    compression: str = ""
    """``gzip``, ``xz``, ``bzip2`` or ``""`` (detected by magic bytes)."""


class SourceError(Exception):
    """The file cannot be read at all (missing, a directory, no permission); ``reason`` is a short key."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def open_source(path: Path, name: str | None = None) -> LogSource:
    """Check that ``path`` is a readable regular file and detect gzip.

    Raises:
        SourceError: not found, a directory, not a regular file, or unreadable.
    """
    display = name or str(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise SourceError("not_found", f"{display}: no such file") from None
    except OSError as exc:
        raise SourceError("unreadable", f"{display}: {exc.strerror or exc}") from None
    if path.is_dir():
        raise SourceError("directory", f"{display}: is a directory")
    if not path.is_file():
        raise SourceError("not_a_file", f"{display}: not a regular file")
    try:
        with path.open("rb") as fh:
            magic = fh.read(6)
            content = st.st_size
            if magic.startswith(GZIP_MAGIC) and st.st_size >= 18:
                fh.seek(-4, 2)
                content = int.from_bytes(fh.read(4), "little")
    except OSError as exc:
        raise SourceError("unreadable", f"{display}: {exc.strerror or exc}") from None
    compression = ("gzip" if magic.startswith(GZIP_MAGIC) else "xz" if magic.startswith(XZ_MAGIC)
                   else "bzip2" if magic.startswith(BZIP2_MAGIC) and magic[3:4].isdigit() else "")
    if compression in ("xz", "bzip2"):
        content = st.st_size * 8  # no size in the header; logs compress about this well
    return LogSource(path=path, name=display, gzipped=compression == "gzip", size_bytes=st.st_size,
                     content_bytes=content, compression=compression)


def open_binary(source: LogSource) -> io.BufferedIOBase:
    """The file's (decompressed) bytes as a stream."""
    if source.compression == "xz":
        return lzma.LZMAFile(source.path, "rb")
    if source.compression == "bzip2":
        return bz2.BZ2File(source.path, "rb")
    raw = source.path.open("rb")
    if source.gzipped:
        return gzip.GzipFile(fileobj=raw, mode="rb")
    return raw


def read_sample(source: LogSource, limit: int = SAMPLE_BYTES, max_lines: int = 40) -> list[str]:
    """The first complete lines of the file (decoded leniently), for format sniffing."""
    try:
        with open_binary(source) as fh:
            data = fh.read(limit)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error, lzma.LZMAError):
        return []
    lines = data.split(b"\n")
    if len(data) == limit and len(lines) > 1:
        lines = lines[:-1]  # the last one is cut by the limit
    out: list[str] = []
    for raw in lines:
        if not raw.strip() or b"\x00" in raw:
            continue
        out.append(raw.decode("utf-8", errors="replace").rstrip("\r"))
        if len(out) >= max_lines:
            break
    return out


def iter_lines(source: LogSource, stats: LogStats) -> Iterator[str]:
    """Every usable line of the file, decoded, without its newline; the rest is counted in ``stats``.

    Counts ``lines`` and ``bytes`` for every line seen; skips (and counts by reason) binary lines and lines over
    :data:`MAX_LINE_BYTES` (whose head comes as a :class:`CutLine`); notes non-UTF-8 lines (parsed with replacement
    characters) and a last line without a newline.
    """
    try:
        fh = open_binary(source)
    except OSError as exc:
        stats.skip("unreadable", 1, f"{source.name}: {exc}")
        return
    with fh:
        carry = b""
        discarding = False  # inside a too-long line, dropping bytes until its newline
        while True:
            try:
                chunk = fh.read(CHUNK_BYTES)
            except (OSError, EOFError, gzip.BadGzipFile, zlib.error, lzma.LZMAError) as exc:
                stats.skip("read_error", 1, f"{source.name}: {exc}")
                chunk = b""
            if not chunk:
                break
            stats.bytes += len(chunk)
            parts = chunk.split(b"\n")
            parts[0] = carry + parts[0]
            carry = parts.pop()
            for raw in parts:
                if discarding:
                    discarding = False
                    continue
                line = decode_line(raw, stats)
                if line is not None:
                    yield line
            if len(carry) > MAX_LINE_BYTES:
                if not discarding:
                    stats.lines += 1
                    stats.skip(SKIP_TOO_LONG)
                    if b"\x00" not in carry[:MAX_LINE_BYTES]:
                        yield CutLine(carry[:MAX_LINE_BYTES].decode("utf-8", errors="replace"))
                discarding = True
                carry = b""
        if carry and not discarding:
            stats.note(NOTE_TRUNCATED)
            line = decode_line(carry, stats)
            if line is not None:
                yield line


def decode_line(raw: bytes, stats: LogStats) -> str | None:
    r"""One line (without its newline) as the parsers read it, counted in ``stats``; None for a binary line.

    Over :data:`MAX_LINE_BYTES`: skipped as ``line_too_long``, its head read as a :class:`CutLine`; a NUL byte:
    skipped as ``binary``; not UTF-8: noted, read with replacement characters. One ``\r`` before the newline is
    dropped.
    """
    stats.lines += 1
    if len(raw) > MAX_LINE_BYTES:
        stats.skip(SKIP_TOO_LONG)
        if b"\x00" in raw[:MAX_LINE_BYTES]:
            return None
        return CutLine(raw[:MAX_LINE_BYTES].decode("utf-8", errors="replace"))
    if b"\x00" in raw:
        stats.skip(SKIP_BINARY)
        return None
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.note(NOTE_INVALID_UTF8)
        return raw.decode("utf-8", errors="replace")

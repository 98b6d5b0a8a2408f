"""A pure-Python incremental HTTP/1.1 response parser with httptools' callback interface (used without httptools).

It calls ``on_header(name, value)``, ``on_headers_complete()``, ``on_body(data)`` and ``on_message_complete()``
on the callback object (each only when defined), frames bodies by Content-Length, chunked encoding or connection
close (``feed_eof``), and handles back-to-back responses on a keep-alive connection.
"""

from __future__ import annotations

import re
from typing import Any


class HttpParserError(Exception):
    """The bytes are not a valid HTTP/1.1 response."""


_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILER, _UNTIL_CLOSE = range(7)
_MAX_HEAD = 1 << 16
"""Longest response head accepted (status line and headers)."""
_MAX_LINE = 1 << 12
"""Longest chunk-size or trailer line accepted."""
_STATUS = re.compile(rb"[0-9]{3}")
_DIGITS = re.compile(rb"[0-9]{1,18}")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}")


class PyResponseParser:
    """Incremental response parser; see the module docstring."""

    def __init__(self, callbacks: Any) -> None:
        self._cb = callbacks
        self._on_header = getattr(callbacks, "on_header", None)
        self._on_headers_complete = getattr(callbacks, "on_headers_complete", None)
        self._on_body = getattr(callbacks, "on_body", None)
        self._on_message_complete = getattr(callbacks, "on_message_complete", None)
        self._buffer = bytearray()
        """Unparsed bytes (a bytearray: appends and cuts from the front cost only what they move)."""
        self._state = _HEAD
        self._remaining = 0
        self._status = 0
        self._keep_alive = True
        self._scanned = 0
        """How much of the buffer is known to hold no line end (each byte is searched once)."""
        self.no_body = False
        """Set by the caller for responses to HEAD requests."""

    def get_status_code(self) -> int:
        """Status code of the current (or last) response."""
        return self._status

    def should_keep_alive(self) -> bool:
        """False when the server asked to close the connection after this response."""
        return self._keep_alive

    def feed_data(self, data: bytes) -> None:
        """Consume bytes; raises HttpParserError on malformed input."""
        self._buffer += data
        while self._buffer:
            if not self._step():
                break

    def feed_eof(self) -> bool:
        """The connection closed: completes a close-delimited body. Returns True when a message completed."""
        if self._state == _UNTIL_CLOSE:
            self._complete()
            return True
        return False

    def _find(self, needle: bytes, limit: int, what: str) -> int:
        """Where ``needle`` starts in the buffer, or -1; searches only bytes not searched before (linear time)."""
        end = self._buffer.find(needle, max(0, self._scanned - len(needle) + 1))
        if end < 0:
            self._scanned = len(self._buffer)
            if len(self._buffer) > limit:
                raise HttpParserError(f"{what} longer than {limit} bytes")
            return -1
        self._scanned = 0
        if end > limit:
            raise HttpParserError(f"{what} longer than {limit} bytes")
        return end

    def _take(self, needle: bytes, limit: int, what: str) -> bytes | None:
        """The bytes before ``needle``, taken off the buffer with it; None until ``needle`` has arrived."""
        end = self._find(needle, limit, what)
        if end < 0:
            return None
        taken = bytes(self._buffer[:end])
        del self._buffer[: end + len(needle)]
        return taken

    def _pass_body(self) -> None:
        """Hand the buffered bytes of the current body (or chunk) on, up to what remains of it."""
        chunk = bytes(self._buffer[: self._remaining])
        del self._buffer[: len(chunk)]
        self._remaining -= len(chunk)
        if chunk and self._on_body is not None:
            self._on_body(chunk)

    def _step(self) -> bool:
        state = self._state
        if state == _HEAD:
            head = self._take(b"\r\n\r\n", _MAX_HEAD, "response head")
            if head is None:
                return False
            self._parse_head(head)
            return True
        if state == _LENGTH:
            if self._remaining == 0:
                self._complete()
                return bool(self._buffer)
            self._pass_body()
            if self._remaining == 0:
                self._complete()
            return bool(self._buffer)
        if state == _UNTIL_CLOSE:
            chunk = bytes(self._buffer)
            self._buffer.clear()
            if self._on_body is not None:
                self._on_body(chunk)
            return False
        if state == _CHUNK_SIZE:
            line = self._take(b"\r\n", _MAX_LINE, "chunk-size line")
            if line is None:
                return False
            digits = line.split(b";", 1)[0].strip(b" \t")
            if not _HEX.fullmatch(digits):
                raise HttpParserError(f"bad chunk size {line[:20]!r}")
            size = int(digits, 16)
            if size == 0:
                self._state = _TRAILER
            else:
                self._remaining = size
                self._state = _CHUNK_DATA
            return True
        if state == _CHUNK_DATA:
            self._pass_body()
            if self._remaining == 0:
                self._state = _CHUNK_CRLF
            return bool(self._buffer)
        if state == _CHUNK_CRLF:
            if len(self._buffer) < 2:
                return False
            if self._buffer[:2] != b"\r\n":
                raise HttpParserError("missing CRLF after chunk")
            del self._buffer[:2]
            self._state = _CHUNK_SIZE
            return True
        # _TRAILER: skip trailer lines up to the empty line
        line = self._take(b"\r\n", _MAX_LINE, "trailer line")
        if line is None:
            return False
        if not line:
            self._complete()
        return True

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        status_line = lines[0].split(b" ", 2)
        if len(status_line) < 2 or status_line[0] not in (b"HTTP/1.1", b"HTTP/1.0"):
            raise HttpParserError(f"bad status line {lines[0][:40]!r}")
        if not _STATUS.fullmatch(status_line[1]):
            raise HttpParserError(f"bad status code {status_line[1][:10]!r}")
        self._status = int(status_line[1])
        http10 = status_line[0] == b"HTTP/1.0"
        self._keep_alive = not http10
        length: int | None = None
        chunked = False
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise HttpParserError(f"bad header line {line[:40]!r}")
            name = name.strip()
            value = value.strip()
            lower = name.lower()
            if lower == b"content-length":
                if not _DIGITS.fullmatch(value) or (length is not None and length != int(value)):
                    raise HttpParserError("bad Content-Length")
                length = int(value)
            elif lower == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif lower == b"connection":
                token = value.lower()
                if b"close" in token:
                    self._keep_alive = False
                elif b"keep-alive" in token:
                    self._keep_alive = True
            if self._on_header is not None:
                self._on_header(name, value)
        if self._on_headers_complete is not None:
            self._on_headers_complete()
        if self.no_body or self._status in (204, 304) or 100 <= self._status < 200:
            self._complete()
        elif chunked:
            self._state = _CHUNK_SIZE
        elif length is not None:
            self._remaining = length
            self._state = _LENGTH
            if length == 0:
                self._complete()
        else:
            self._keep_alive = False
            self._state = _UNTIL_CLOSE

    def _complete(self) -> None:
        self._state = _HEAD
        self._remaining = 0
        if self._on_message_complete is not None:
            self._on_message_complete()

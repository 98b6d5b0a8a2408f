r"""Server-sent events: a linear, bounded incremental parser that counts events, and OpenAI-compatible tokens.

Every byte is looked at once (line ends found in each chunk only, never by re-scanning what came before), and what
a peer can make it hold is capped: a line longer than :data:`MAX_LINE_BYTES` or an event whose data exceeds
:data:`MAX_EVENT_BYTES` is an :class:`SSEError` (the connection reports a protocol error and is dropped), so a
stream that never ends its line costs at most the cap, not quadratic time and unbounded memory. Line ends are
``\n``, ``\r\n`` or a lone ``\r``, as the specification says.
"""

from __future__ import annotations

import json

from infradoctor.bounded import read_int
from infradoctor.load.pyparser import HttpParserError

MAX_LINE_BYTES = 1 << 20
"""Longest SSE line accepted (1 MiB)."""
MAX_EVENT_BYTES = 4 << 20
"""Most data one event may carry (4 MiB)."""
MAX_TOKENS = 1 << 40
"""Largest ``usage.completion_tokens`` taken as a count (a bigger number is not one)."""

class SSEError(HttpParserError):
    """The stream broke the parser's bounds (a line or an event too long)."""


class SSEParser:
    """Splits a byte stream into events; ``feed`` returns how many *token-bearing* events the bytes completed.

    For generic SSE every event with non-empty data counts. With ``openai=True`` an event counts when it carries
    text (``choices[].text`` or ``choices[].delta.content``); ``[DONE]`` and role-only chunks do not, and a final
    ``usage.completion_tokens`` (an integer from 0 to :data:`MAX_TOKENS`) is kept as the authoritative count.
    """

    __slots__ = ("openai", "_partial", "_partial_len", "_after_cr", "_data", "_data_len", "usage_tokens", "events",
                 "done")

    def __init__(self, *, openai: bool = False) -> None:
        self.openai = openai
        self._partial: list[bytes] = []
        """Pieces of the line not yet ended."""
        self._partial_len = 0
        self._after_cr = False
        """The last chunk ended in ``\\r``: a ``\\n`` starting the next one belongs to that line end."""
        self._data: list[bytes] = []
        """Data lines of the event being read."""
        self._data_len = 0
        self.usage_tokens: int | None = None
        """``usage.completion_tokens`` from the stream, when the server sent it."""
        self.events = 0
        """All events seen, token-bearing or not."""
        self.done = False
        """True once ``data: [DONE]`` arrived."""

    def feed(self, chunk: bytes) -> int:
        """Consume bytes; return the number of token-bearing events they completed. Raises :class:`SSEError`."""
        if self._after_cr:
            self._after_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]  # the second half of a CRLF cut between two reads
        if not chunk:
            return 0
        lines = chunk.splitlines()  # in C; for bytes, on exactly SSE's line ends: CRLF, LF and CR
        last = chunk[-1]
        self._after_cr = last == 13
        tail = lines.pop() if last not in (10, 13) else None
        if len(chunk) > MAX_LINE_BYTES and lines and max(map(len, lines)) > MAX_LINE_BYTES:
            self._check_line(MAX_LINE_BYTES + 1)
        if self._partial and lines:
            self._check_line(self._partial_len + len(lines[0]))
            self._partial.append(lines[0])
            lines[0] = b"".join(self._partial)
            self._partial = []
            self._partial_len = 0
        tokens = 0
        for line in lines:
            if line:
                if line.startswith(b"data"):
                    self._field(line)
            elif self._data:
                data = b"\n".join(self._data)
                self._data = []
                self._data_len = 0
                tokens += self._dispatch(data)
        if tail is not None:
            self._check_line(self._partial_len + len(tail))
            self._partial.append(tail)
            self._partial_len += len(tail)
        return tokens

    @staticmethod
    def _check_line(length: int) -> None:
        if length > MAX_LINE_BYTES:
            raise SSEError(f"server-sent event line longer than {MAX_LINE_BYTES} bytes")

    def _field(self, line: bytes) -> None:
        """A line starting with ``data``: the data field, or another field whose name starts so."""
        if len(line) == 4:
            value = b""
        elif line[4:5] == b":":
            value = line[5:]
            if value[:1] == b" ":
                value = value[1:]
        else:
            return
        self._data_len += len(value) + 1
        if self._data_len > MAX_EVENT_BYTES:
            raise SSEError(f"server-sent event data longer than {MAX_EVENT_BYTES} bytes")
        self._data.append(value)

    def _dispatch(self, data: bytes) -> int:
        self.events += 1
        stripped = data.strip()
        if stripped == b"[DONE]":
            self.done = True
            return 0
        if not self.openai:
            return 1 if stripped else 0
        if stripped[:1] != b"{":
            return 0  # not a JSON object: no completion chunk (and no exception to raise and catch)
        try:
            payload = json.loads(data)  # (bounded: an event holds at most MAX_EVENT_BYTES)
        except (ValueError, RecursionError):
            return 0
        if not isinstance(payload, dict):
            return 0
        usage = payload.get("usage")
        if isinstance(usage, dict):
            tokens = read_int(usage.get("completion_tokens"), low=0, high=MAX_TOKENS)
            if tokens is not None:
                self.usage_tokens = tokens
        choices = payload.get("choices")
        if not isinstance(choices, list):
            return 0
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            text = choice.get("text")
            delta = choice.get("delta")
            if isinstance(delta, dict):
                text = delta.get("content") or text
            if isinstance(text, str) and text:
                return 1
        return 0

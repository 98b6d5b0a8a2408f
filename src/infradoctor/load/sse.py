r"""Server-sent events: a linear, bounded incremental parser that counts events, and OpenAI-compatible tokens.

Every byte is looked at once (line ends found in each chunk only, never by re-scanning what came before), and what
a peer can make it hold is capped: a line longer than :data:`MAX_LINE_BYTES` or an event whose data exceeds
:data:`MAX_EVENT_BYTES` is an :class:`SSEError` (the connection reports a protocol error and is dropped), so a
stream that never ends its line costs at most the cap, not quadratic time and unbounded memory. Line ends are
``\n``, ``\r\n`` or a lone ``\r``, as the specification says.
"""

from __future__ import annotations

import re

from infradoctor.bounded import load_json, read_int
from infradoctor.load.pyparser import HttpParserError

MAX_LINE_BYTES = 1 << 20
"""Longest SSE line accepted (1 MiB)."""
MAX_EVENT_BYTES = 4 << 20
"""Most data one event may carry (4 MiB)."""
MAX_TOKENS = 1 << 40
"""Largest ``usage.completion_tokens`` taken as a count (a bigger number is not one)."""

_LINE_END = re.compile(rb"\r\n|\r|\n")


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
        start = 0
        if self._after_cr:
            self._after_cr = False
            if chunk[:1] == b"\n":
                start = 1
        tokens = 0
        for match in _LINE_END.finditer(chunk, start):
            piece = chunk[start : match.start()]
            if self._partial:
                self._check_line(self._partial_len + len(piece))
                self._partial.append(piece)
                piece = b"".join(self._partial)
                self._partial = []
                self._partial_len = 0
            elif len(piece) > MAX_LINE_BYTES:
                self._check_line(len(piece))
            tokens += self._line(piece)
            start = match.end()
        if chunk.endswith(b"\r"):
            self._after_cr = True
        rest = len(chunk) - start
        if rest:
            self._check_line(self._partial_len + rest)
            self._partial.append(chunk[start:])
            self._partial_len += rest
        return tokens

    @staticmethod
    def _check_line(length: int) -> None:
        if length > MAX_LINE_BYTES:
            raise SSEError(f"server-sent event line longer than {MAX_LINE_BYTES} bytes")

    def _line(self, line: bytes) -> int:
        if not line:
            if not self._data:
                return 0
            data = b"\n".join(self._data)
            self._data = []
            self._data_len = 0
            return self._dispatch(data)
        if line.startswith(b"data"):
            if len(line) == 4:
                value = b""
            elif line[4:5] == b":":
                value = line[5:]
                if value[:1] == b" ":
                    value = value[1:]
            else:
                return 0  # another field whose name starts with "data"
            self._data_len += len(value) + 1
            if self._data_len > MAX_EVENT_BYTES:
                raise SSEError(f"server-sent event data longer than {MAX_EVENT_BYTES} bytes")
            self._data.append(value)
        return 0  # comments (":..."), event, id, retry and unknown fields carry no tokens

    def _dispatch(self, data: bytes) -> int:
        self.events += 1
        stripped = data.strip()
        if stripped == b"[DONE]":
            self.done = True
            return 0
        if not self.openai:
            return 1 if stripped else 0
        try:
            payload = load_json(data, max_chars=MAX_EVENT_BYTES)
        except ValueError:
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

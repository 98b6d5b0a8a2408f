"""Server-sent events: an incremental parser that timestamps events, and OpenAI-compatible token counting."""

from __future__ import annotations

import json


class SSEParser:
    """Splits a byte stream into events; ``feed`` returns how many *token-bearing* events the bytes completed.

    For generic SSE every event with a non-empty ``data`` field counts. With ``openai=True`` an event counts when it
    carries text (``choices[].text`` or ``choices[].delta.content``); ``[DONE]`` and role-only chunks do not, and a
    final ``usage.completion_tokens`` is kept as the authoritative token count.
    """

    __slots__ = ("openai", "_buffer", "_data", "usage_tokens", "events", "done")

    def __init__(self, *, openai: bool = False) -> None:
        self.openai = openai
        self._buffer = b""
        self._data: list[bytes] = []
        self.usage_tokens: int | None = None
        """``usage.completion_tokens`` from the stream, when the server sent it."""
        self.events = 0
        """All events seen, token-bearing or not."""
        self.done = False
        """True once ``data: [DONE]`` arrived."""

    def feed(self, chunk: bytes) -> int:
        """Consume bytes; return the number of token-bearing events they completed."""
        buffer = self._buffer + chunk
        tokens = 0
        start = 0
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            line = buffer[start:end]
            start = end + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    tokens += self._dispatch(b"\n".join(self._data))
                    self._data = []
                continue
            if line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
        self._buffer = buffer[start:]
        return tokens

    def _dispatch(self, data: bytes) -> int:
        self.events += 1
        if data.strip() == b"[DONE]":
            self.done = True
            return 0
        if not self.openai:
            return 1 if data.strip() else 0
        try:
            payload = json.loads(data)
        except ValueError:
            return 0
        if not isinstance(payload, dict):
            return 0
        usage = payload.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.usage_tokens = usage["completion_tokens"]
        count = 0
        for choice in payload.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            text = choice.get("text")
            delta = choice.get("delta")
            if isinstance(delta, dict):
                text = delta.get("content") or text
            if isinstance(text, str) and text:
                count = 1
        return count

"""Calling an ASGI app directly, without a network, as a server would."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def http_scope(path: str = "/", *, method: str = "GET", headers: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


async def call(app: Any, path: str = "/", *, method: str = "GET", headers: Sequence[tuple[str, str]] = (),
               body: bytes = b"") -> list[dict[str, Any]]:
    """Run one request through ``app``; returns the messages it sent."""
    sent: list[dict[str, Any]] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(http_scope(path, method=method, headers=headers), receive, send)
    return sent


def response_headers(messages: list[dict[str, Any]]) -> dict[str, str]:
    start = next(m for m in messages if m["type"] == "http.response.start")
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in start["headers"]}


def response_body(messages: list[dict[str, Any]]) -> bytes:
    return b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")

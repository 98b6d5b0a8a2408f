"""What to send: the request spec (method, URL, headers, one body or a rotation of bodies) and its wire bytes."""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from infradoctor import __version__
from infradoctor.errors import UsageError

DEFAULT_USER_AGENT = f"infradoctor/{__version__}"


@dataclass(frozen=True)
class Target:
    """Where requests go, parsed from the URL."""

    scheme: str
    """``http`` or ``https``."""
    host: str
    """Host name or address to connect to."""
    port: int
    """TCP port."""
    path: str
    """Request target: path plus query string."""
    host_header: str
    """Value of the Host header."""

    @classmethod
    def parse(cls, url: str) -> Target:
        """Parse ``http(s)://host[:port]/path?query``; raises UsageError on anything else."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"not an http(s) URL: {url!r}")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise UsageError(f"bad port in URL {url!r}: {exc}") from None
        path = parts.path or "/"
        if parts.query:
            path = f"{path}?{parts.query}"
        default_port = 443 if parts.scheme == "https" else 80
        host = parts.hostname
        host_text = f"[{host}]" if ":" in host else host
        host_header = host_text if port == default_port else f"{host_text}:{port}"
        return cls(parts.scheme, host, port, path, host_header)

    @property
    def url(self) -> str:
        """The URL again, normalised."""
        return f"{self.scheme}://{self.host_header}{self.path}"


@dataclass(frozen=True)
class RequestSpec:
    """One kind of request to repeat under load.

    ``bodies`` rotates: request i sends ``bodies[i % len(bodies)]``. ``stream`` makes the engine time each
    server-sent event (TTFT, inter-token latency) instead of only the whole response.
    """

    url: str
    """Target URL (http or https)."""
    method: str = "GET"
    """HTTP method."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra request headers (Host, User-Agent and Content-Length are filled in unless given)."""
    bodies: Sequence[bytes] = ()
    """Request bodies, sent in rotation; empty for no body."""
    stream: bool = False
    """Parse the response as server-sent events and time each event."""
    openai: bool = False
    """Events are OpenAI-compatible completion chunks: count tokens from their text deltas and usage."""
    capture_headers: Sequence[str] = ("server-timing", "x-envoy-upstream-service-time")
    """Response headers (lower case) to read per response; empty to skip header parsing (fastest)."""
    insecure: bool = False
    """For https: skip certificate verification."""

    @property
    def target(self) -> Target:
        """The parsed URL."""
        return Target.parse(self.url)

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for an https target (certificates unchecked with ``insecure``), None for http."""
        if self.target.scheme != "https":
            return None
        context = ssl.create_default_context()
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    def wire_requests(self) -> list[bytes]:
        """The complete HTTP/1.1 request bytes, one per body (at least one)."""
        target = self.target
        lower = {k.lower(): v for k, v in self.headers.items()}
        head = [f"{self.method.upper()} {target.path} HTTP/1.1", f"Host: {lower.get('host', target.host_header)}"]
        if "user-agent" not in lower:
            head.append(f"User-Agent: {DEFAULT_USER_AGENT}")
        if "accept" not in lower:
            head.append("Accept: text/event-stream" if self.stream else "Accept: */*")
        for key, value in self.headers.items():
            if key.lower() in ("host", "content-length"):
                continue
            if "\r" in key or "\n" in key or "\r" in value or "\n" in value:
                raise UsageError(f"header {key!r} contains a line break")
            head.append(f"{key}: {value}")
        head_bytes = "\r\n".join(head).encode("latin-1", errors="replace")
        bodies: list[bytes | None] = list(self.bodies) or [None]
        out: list[bytes] = []
        for body in bodies:
            if body is None:
                if self.method.upper() in ("POST", "PUT", "PATCH"):
                    out.append(head_bytes + b"\r\nContent-Length: 0\r\n\r\n")
                else:
                    out.append(head_bytes + b"\r\n\r\n")
            else:
                out.append(head_bytes + f"\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        return out


def openai_default_body(path: str, model: str, max_tokens: int = 64) -> bytes:
    """A small streaming request body for ``/v1/chat/completions`` or ``/v1/completions``."""
    payload: dict[str, object]
    if path.rstrip("/").endswith("chat/completions"):
        payload = {"model": model, "messages": [{"role": "user", "content": "Say hello."}]}
    else:
        payload = {"model": model, "prompt": "Say hello."}
    payload.update({"max_tokens": max_tokens, "stream": True})
    return json.dumps(payload).encode()


def force_stream(body: bytes) -> bytes:
    """A JSON body with ``"stream": true`` set (bodies that are not JSON objects are returned unchanged)."""
    try:
        payload = json.loads(body)
    except ValueError:
        return body
    if not isinstance(payload, dict):
        return body
    payload["stream"] = True
    return json.dumps(payload).encode()

"""The error taxonomy: one class name per way a request can fail, the same for every point and every command.

Transport classes come from what the socket did; HTTP classes from the status code. A failed request of any class
is kept in the point's error latency (read timeouts at exactly the timeout), apart from the latency of the
successful responses.
"""

from __future__ import annotations

import errno

CONNECT_REFUSED = "connect_refused"
"""Nothing listens on the port (ECONNREFUSED)."""
CONNECT_TIMEOUT = "connect_timeout"
"""The TCP (or TLS) handshake did not finish within the timeout (full accept queue, dropped SYNs)."""
CONNECT_ERROR = "connect_error"
"""Any other failure to connect (unreachable, name resolution, TLS)."""
READ_TIMEOUT = "read_timeout"
"""The request was sent but the response did not complete within the timeout."""
RESET = "reset"
"""The server reset or closed the connection before any of the response arrived."""
STREAM_ABORTED = "stream_aborted"
"""The response started (headers or some events arrived) and the connection ended before it completed."""
PROTOCOL_ERROR = "protocol_error"
"""The response was not HTTP/1.1 that completes: unparseable, a status outside 100-599, an upgrade nobody asked
for, only interim (1xx) responses, or a stream beyond the parser's bounds (a server-sent-event line or event too
long)."""
HTTP_429 = "http_429"
"""429 Too Many Requests: the server rejected the request (backpressure)."""
HTTP_4XX = "http_4xx"
"""Any other 4xx: usually the request itself is wrong."""

REJECTION_CLASSES = (HTTP_429, "http_503")
"""Classes by which a server signals it sheds load (backpressure), as opposed to failing."""


def final_status(status: int) -> bool:
    """A status that ends an exchange: 200-599 (1xx are interim; anything outside 100-599 is not HTTP)."""
    return 200 <= status <= 599


def status_class(status: int) -> str | None:
    """Error class of a final HTTP status, or None for a success (200-399). Each 5xx keeps its own class."""
    if not final_status(status):
        return PROTOCOL_ERROR
    if status < 400:
        return None
    if status == 429:
        return HTTP_429
    if status >= 500:
        return f"http_{status}"
    return HTTP_4XX


def connect_error_class(exc: BaseException) -> str:
    """Error class of an exception raised while connecting."""
    if isinstance(exc, ConnectionRefusedError):
        return CONNECT_REFUSED
    if isinstance(exc, TimeoutError):
        return CONNECT_TIMEOUT
    if isinstance(exc, OSError) and exc.errno == errno.ECONNREFUSED:
        return CONNECT_REFUSED
    if isinstance(exc, OSError) and exc.errno == errno.ETIMEDOUT:
        return CONNECT_TIMEOUT
    return CONNECT_ERROR

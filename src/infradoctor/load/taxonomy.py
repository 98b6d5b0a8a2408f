"""The error taxonomy: one class name per way a request can fail, the same for every point and every command.

Transport classes come from what the socket did; HTTP classes from the status code. Timed-out requests are also
kept in the latency statistics at their timeout (never dropped), so a tail made of timeouts still shows.
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
"""The response was not valid HTTP/1.1."""
HTTP_429 = "http_429"
"""429 Too Many Requests: the server rejected the request (backpressure)."""
HTTP_4XX = "http_4xx"
"""Any other 4xx: usually the request itself is wrong."""

REJECTION_CLASSES = (HTTP_429, "http_503")
"""Classes by which a server signals it sheds load (backpressure), as opposed to failing."""


def status_class(status: int) -> str | None:
    """Error class of an HTTP status, or None for a success (1xx-3xx). Each 5xx keeps its own class."""
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

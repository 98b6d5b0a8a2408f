"""The prober's sender: one keep-alive connection of the load engine (:mod:`infradoctor.load.client`) per worker.

The load engine's connection classes parse responses (httptools when installed) and report completion to a
driver; here the driver resolves one future per request so the interleaved prober can ``await`` each exchange.
Error classes are the load engine's taxonomy (:mod:`infradoctor.load.taxonomy`), so route and load results name
failures the same way. The connection persists across slots; a reused connection that the server closed while
idle is reopened once before the request counts as failed (as browsers and proxies do).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Sequence

from infradoctor.load import taxonomy
from infradoctor.load.client import Connection, HeaderConnection, connection_class
from infradoctor.load.spec import RequestSpec
from infradoctor.route.prober import Exchange

DEFAULT_CONNECT_TIMEOUT_S = 5.0
"""Connect timeout (capped by the request timeout): a backend that cannot accept in 5 s is as good as down."""

_STALE_CLASSES = frozenset({taxonomy.RESET})
"""Failures on a reused idle connection that mean the server had closed it: reconnect and send again once."""


class EngineSender:
    """Sends one fixed request over a persistent load-engine connection and awaits each outcome."""

    def __init__(
        self,
        spec: RequestSpec,
        *,
        timeout_s: float = 30.0,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        capture: Sequence[str] = (),
    ) -> None:
        self.target = spec.target
        self.wire = spec.wire_requests()[0]
        self.timeout_s = timeout_s
        self.connect_timeout_s = min(timeout_s, connect_timeout_s)
        self.conn_class = connection_class(
            capture=frozenset(h.lower().encode("latin-1") for h in capture),
            stream=False,
            openai=False,
            pure_python=False,
        )
        self.ssl_context = spec.ssl_context()
        self.conn: Connection | None = None
        self.future: asyncio.Future[str | None] | None = None
        self.opened = 0
        """TCP connections opened so far."""
        self.sent = 0

    # load.client.Driver
    def on_response(self, conn: Connection) -> None:
        """A response completed."""
        if self.future is not None and not self.future.done():
            self.future.set_result(None)

    def on_failure(self, conn: Connection, error_class: str) -> None:
        """The request failed in transport."""
        conn.reusable = False
        if self.future is not None and not self.future.done():
            self.future.set_result(error_class)

    def on_closed(self, conn: Connection) -> None:
        """The connection is gone."""
        if conn is self.conn:
            self.conn = None

    async def _connect(self, deadline: float) -> str | None:
        loop = asyncio.get_running_loop()
        try:
            _, proto = await asyncio.wait_for(
                loop.create_connection(
                    lambda: self.conn_class(self),
                    self.target.host,
                    self.target.port,
                    ssl=self.ssl_context,
                    server_hostname=self.target.host if self.ssl_context is not None else None,
                ),
                timeout=max(0.001, deadline - time.perf_counter()),
            )
        except asyncio.TimeoutError:
            return taxonomy.CONNECT_TIMEOUT
        except (OSError, ssl.SSLError) as exc:
            return taxonomy.connect_error_class(exc)
        self.conn = proto
        self.opened += 1
        return None

    async def send(self) -> Exchange:
        """Send the request once; every failure becomes an error class, never an exception."""
        start = time.perf_counter()
        deadline = start + self.timeout_s
        for attempt in range(2):
            fresh = False
            if self.conn is None or self.conn.closed or not self.conn.reusable:
                if self.conn is not None:
                    self.conn.close()
                    self.conn = None
                failure = await self._connect(min(deadline, time.perf_counter() + self.connect_timeout_s))
                if failure is not None:
                    return Exchange(None, failure, _ms(start))
                fresh = True
            conn = self.conn
            assert conn is not None
            self.future = asyncio.get_running_loop().create_future()
            self.sent += 1
            conn.send(self.wire, start, self.sent)
            try:
                error = await asyncio.wait_for(asyncio.shield(self.future), max(0.001, deadline - time.perf_counter()))
            except asyncio.TimeoutError:
                conn.abort()
                self.conn = None
                return Exchange(None, taxonomy.READ_TIMEOUT, _ms(start))
            if error is not None:
                if attempt == 0 and not fresh and error in _STALE_CLASSES:
                    continue
                return Exchange(None, error, _ms(start))
            headers = dict(conn.headers) if isinstance(conn, HeaderConnection) else {}
            if not conn.reusable:
                conn.close()
                self.conn = None
            return Exchange(conn.status, taxonomy.status_class(conn.status), _ms(start), headers)
        return Exchange(None, taxonomy.RESET, _ms(start))  # pragma: no cover - the loop always returns

    async def close(self) -> None:
        """Close the connection."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0

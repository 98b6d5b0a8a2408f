"""One client for the Prometheus HTTP API (and Thanos, Mimir, VictoriaMetrics behind the same API).

Every query goes through :meth:`PrometheusClient.query` or :meth:`PrometheusClient.query_range`, which never
raise for what the server or the network does: a refused connection, a timeout, an HTTP error, a Prometheus error
body, a response over the size bound, or JSON that is not the documented shape each become a :class:`QueryFailure`
in the answer, so that the caller can say which evidence is absent instead of calling it healthy. The client counts
queries and bytes fetched. Credentials (bearer token, basic auth) are held only in memory for the request headers:
they are never part of a URL, an error message or a result.
"""

from __future__ import annotations

import base64
import math
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infradoctor.bounded import cut, load_json
from infradoctor.redact import redact_text, redact_url

MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""A response larger than this is refused (the query is too wide for one answer; the caller narrows it)."""
MAX_SERIES = 200_000
"""Series read from one answer at most; more is reported as a cut answer."""
TOKEN_ENV = "INFRADOCTOR_PROMETHEUS_TOKEN"
"""Environment variable holding a bearer token."""
USER_ENV = "INFRADOCTOR_PROMETHEUS_USER"
"""Environment variable holding the basic-auth user."""
PASSWORD_ENV = "INFRADOCTOR_PROMETHEUS_PASSWORD"
"""Environment variable holding the basic-auth password."""


class CredentialsError(ValueError):
    """Credentials given but unreadable (the message names the file or variable, never the secret)."""


@dataclass(frozen=True)
class Credentials:
    """How to authenticate to Prometheus; repr never shows the secret."""

    kind: str = "none"
    """``none``, ``bearer`` or ``basic``."""
    source: str = ""
    """Where they came from (a variable or file name), for the run's target description."""
    _secret: str = field(default="", repr=False)

    def header(self) -> str | None:
        """The ``Authorization`` header value, or None."""
        if self.kind == "bearer":
            return f"Bearer {self._secret}"
        if self.kind == "basic":
            return "Basic " + base64.b64encode(self._secret.encode("utf-8")).decode("ascii")
        return None

    @classmethod
    def load(
        cls,
        *,
        bearer_token_file: str | None = None,
        basic_auth_file: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Credentials:
        """From a token file, a ``user:password`` file, or the environment (files win); none when nothing is set."""
        env = os.environ if environ is None else environ
        if bearer_token_file:
            return cls("bearer", f"file {bearer_token_file}", _read_secret(bearer_token_file))
        if basic_auth_file:
            secret = _read_secret(basic_auth_file)
            if ":" not in secret:
                raise CredentialsError(f"{basic_auth_file}: expected one line 'user:password'")
            return cls("basic", f"file {basic_auth_file}", secret)
        token = env.get(TOKEN_ENV, "").strip()
        if token:
            return cls("bearer", f"${TOKEN_ENV}", token)
        user = env.get(USER_ENV, "").strip()
        if user:
            return cls("basic", f"${USER_ENV}/${PASSWORD_ENV}", f"{user}:{env.get(PASSWORD_ENV, '')}")
        return cls()


def _read_secret(path: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialsError(f"cannot read credentials file {path}: {type(exc).__name__}") from None
    secret = text.strip()
    if not secret or "\n" in secret or len(secret) > 16384:
        raise CredentialsError(f"credentials file {path}: expected one non-empty line")
    return secret


@dataclass(frozen=True)
class Series:
    """One series of an answer: its labels and its points (a vector has one point)."""

    labels: Mapping[str, str]
    """Label names to values (``__name__`` included when the server kept it)."""
    points: tuple[tuple[float, float], ...]
    """(unix time, value) pairs, oldest first; non-finite values are left out."""

    @property
    def last(self) -> float | None:
        """The newest value, or None."""
        return self.points[-1][1] if self.points else None


@dataclass(frozen=True)
class QueryFailure:
    """Why a query gave no (complete) answer."""

    kind: str
    """``unreachable``, ``timeout``, ``http``, ``prometheus`` (an error body), ``too-large``, ``bad-response``."""
    message: str
    """Human-readable reason (redacted)."""


@dataclass(frozen=True)
class Answer:
    """What one query returned."""

    query: str
    """The PromQL sent."""
    series: tuple[Series, ...] = ()
    """The series (empty on failure or when nothing matched)."""
    failure: QueryFailure | None = None
    """Why the answer is missing, or None."""
    warnings: tuple[str, ...] = ()
    """Warnings the server attached (partial data from a store, a remote read that failed, ...)."""
    truncated: bool = False
    """More than :data:`MAX_SERIES` series came back; the rest was dropped."""
    seconds: float = 0.0
    """Time the query took, network included."""

    @property
    def ok(self) -> bool:
        """True when the server answered (possibly with no series)."""
        return self.failure is None


@dataclass
class QueryStats:
    """What the client sent and fetched."""

    queries: int = 0
    """Queries sent."""
    failed: int = 0
    """Queries that got no answer."""
    bytes_fetched: int = 0
    """Response bytes read."""
    series: int = 0
    """Series read."""
    seconds: float = 0.0
    """Time spent in queries."""


class PrometheusClient:
    """Instant and range queries against ``/api/v1/query`` and ``/api/v1/query_range`` (POST, form-encoded)."""

    def __init__(
        self,
        url: str,
        *,
        credentials: Credentials | None = None,
        timeout_s: float = 30.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"not an http(s) URL: {redact_url(url)!r}")
        if parts.username or parts.password:
            raise ValueError("put credentials in the environment or a file, not in the URL")
        self.base = url.rstrip("/")
        """The server's base URL (no credentials)."""
        self.credentials = credentials or Credentials()
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self.stats = QueryStats()
        """Counters over every query sent."""
        self._lock = threading.Lock()

    def query(self, expr: str, at: float) -> Answer:
        """An instant query evaluated at unix time ``at``."""
        return self._send("/api/v1/query", {"query": expr, "time": _ts(at)}, expr)

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> Answer:
        """A range query from ``start`` to ``end`` every ``step_s`` seconds."""
        params = {"query": expr, "start": _ts(start), "end": _ts(end), "step": f"{step_s:g}"}
        return self._send("/api/v1/query_range", params, expr)

    def metric_names(self, match: str, start: float, end: float) -> tuple[frozenset[str] | None, QueryFailure | None]:
        """The metric names with series matching ``match`` between ``start`` and ``end`` (label values API)."""
        params = urllib.parse.urlencode({"match[]": match, "start": _ts(start), "end": _ts(end)})
        self._count_query()
        body, failure = self._fetch(f"/api/v1/label/__name__/values?{params}", None)
        if failure is not None or body is None:
            self._count_failure()
            return None, failure
        data, bad = _envelope(body)
        if bad is not None or not isinstance(data, list):
            self._count_failure()
            return None, bad or QueryFailure("bad-response", "label values are not a list")
        return frozenset(str(n) for n in data[:100_000] if isinstance(n, str)), None

    def build_info(self) -> tuple[dict[str, str] | None, QueryFailure | None]:
        """``/api/v1/status/buildinfo`` (version), or why it could not be read (some proxies do not serve it)."""
        body, failure = self._fetch("/api/v1/status/buildinfo", None)
        if failure is not None or body is None:
            return None, failure
        data, bad = _envelope(body)
        if bad is not None:
            return None, bad
        if not isinstance(data, Mapping):
            return None, QueryFailure("bad-response", "buildinfo data is not an object")
        return {str(k): str(v) for k, v in data.items() if isinstance(v, (str, int, float))}, None

    def _fetch(self, path: str, params: Mapping[str, str] | None) -> tuple[bytes | None, QueryFailure | None]:
        data = urllib.parse.urlencode(params).encode("ascii") if params is not None else None
        request = urllib.request.Request(self.base + path, data=data, method="POST" if data is not None else "GET")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/x-www-form-urlencoded")
        auth = self.credentials.header()
        if auth is not None:
            request.add_header("Authorization", auth)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310 - user's server
                body = response.read(self.max_response_bytes + 1)
        except urllib.error.HTTPError as exc:
            raw = b""
            try:
                raw = exc.read(65536)
            except (OSError, ValueError):
                raw = b""
            # Prometheus answers 400/422/503 with its JSON error envelope: keep its words.
            _, bad = _envelope(raw) if raw else (None, None)
            message = bad.message if bad is not None else f"HTTP {exc.code} {exc.reason}"
            return None, QueryFailure("http" if bad is None else "prometheus", f"HTTP {exc.code}: {message}")
        except TimeoutError:
            return None, QueryFailure("timeout", f"no answer within {self.timeout_s:g} s")
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                return None, QueryFailure("timeout", f"no answer within {self.timeout_s:g} s")
            return None, QueryFailure("unreachable", redact_text(f"{self.base}: {exc.reason}"))
        except (OSError, ValueError) as exc:
            return None, QueryFailure("unreachable", redact_text(f"{self.base}: {type(exc).__name__}: {exc}"))
        with self._lock:
            self.stats.bytes_fetched += len(body)
        if len(body) > self.max_response_bytes:
            return None, QueryFailure("too-large", f"response over {self.max_response_bytes} bytes")
        return body, None

    def _count_query(self) -> None:
        with self._lock:
            self.stats.queries += 1

    def _count_failure(self) -> None:
        with self._lock:
            self.stats.failed += 1

    def _send(self, path: str, params: Mapping[str, str], expr: str) -> Answer:
        start = time.perf_counter()
        self._count_query()
        body, failure = self._fetch(path, params)
        answer = _answer(expr, body, failure)
        seconds = time.perf_counter() - start
        with self._lock:  # queries may run from several threads
            self.stats.seconds += seconds
            self.stats.series += len(answer.series)
            if answer.failure is not None:
                self.stats.failed += 1
        return Answer(answer.query, answer.series, answer.failure, answer.warnings, answer.truncated, seconds)


def _ts(value: float) -> str:
    return f"{value:.3f}"


def _envelope(body: bytes) -> tuple[Any, QueryFailure | None]:
    """The ``data`` of a Prometheus JSON envelope, or the failure it reports."""
    doc, failure = _document(body)
    return (doc.get("data") if doc is not None else None), failure


def _document(body: bytes) -> tuple[Mapping[str, Any] | None, QueryFailure | None]:
    """The whole JSON envelope when it says success, or the failure it reports."""
    try:
        doc = load_json(body, max_chars=MAX_RESPONSE_BYTES + 1)
    except (ValueError, UnicodeDecodeError) as exc:
        return None, QueryFailure("bad-response", f"not JSON: {cut(str(exc), 200)[0]}")
    if not isinstance(doc, Mapping):
        return None, QueryFailure("bad-response", "the answer is not a JSON object")
    if doc.get("status") != "success":
        kind = cut(str(doc.get("errorType") or "error"), 60)[0]
        text = cut(str(doc.get("error") or "no error message"), 500)[0]
        return None, QueryFailure("prometheus", redact_text(f"{kind}: {text}"))
    return doc, None


def _answer(expr: str, body: bytes | None, failure: QueryFailure | None) -> Answer:
    if failure is not None or body is None:
        return Answer(expr, failure=failure or QueryFailure("bad-response", "empty answer"))
    doc, bad = _document(body)
    if bad is not None or doc is None:
        return Answer(expr, failure=bad or QueryFailure("bad-response", "empty answer"))
    data = doc.get("data")
    raw_warnings = doc.get("warnings")
    warnings: tuple[str, ...] = ()
    if isinstance(raw_warnings, list):
        warnings = tuple(cut(redact_text(str(w)), 300)[0] for w in raw_warnings[:20])
    if not isinstance(data, Mapping):
        return Answer(expr, failure=QueryFailure("bad-response", "data is not an object"), warnings=warnings)
    kind = data.get("resultType")
    result = data.get("result")
    if kind == "scalar" and isinstance(result, list):
        point = _point(result)
        return Answer(expr, (Series({}, (point,) if point else ()),), warnings=warnings)
    if kind not in ("vector", "matrix") or not isinstance(result, list):
        return Answer(expr, failure=QueryFailure("bad-response", f"unexpected resultType {cut(str(kind), 40)[0]}"),
                      warnings=warnings)
    series: list[Series] = []
    truncated = len(result) > MAX_SERIES
    for item in result[:MAX_SERIES]:
        if not isinstance(item, Mapping):
            continue
        metric = item.get("metric")
        labels = ({str(k): v if isinstance(v, str) and len(v) <= 512 else cut(str(v), 512)[0]
                   for k, v in metric.items()} if isinstance(metric, Mapping) else {})
        if kind == "vector":
            point = _point(item.get("value"))
            points: tuple[tuple[float, float], ...] = (point,) if point else ()
        else:
            values = item.get("values")
            found = [p for p in (_point(v) for v in values) if p] if isinstance(values, list) else []
            points = tuple(found)
        series.append(Series(labels, points))
    return Answer(expr, tuple(series), warnings=warnings, truncated=truncated)


def _point(raw: Any) -> tuple[float, float] | None:
    """``[unix time, "value"]``; None unless both are finite numbers."""
    if not isinstance(raw, list) or len(raw) != 2:
        return None
    at, text = raw
    if not isinstance(at, (int, float)) or isinstance(at, bool) or not isinstance(text, str):
        return None
    # Prometheus formats values with Go's strconv; a length bound keeps float() linear and rejects junk
    # (read_float's pattern check per value was a third of the parse time on 8,000 GPUs).
    if len(text) > 40:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value) or not math.isfinite(at):
        return None
    return float(at), value

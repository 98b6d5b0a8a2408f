"""JSON lines: Envoy/nginx/HAProxy JSON access logs and structured application logs; also ``key=value`` lines.

An object is flattened (nested keys joined with ``.``, bounded in depth and count) and classified by its keys:
Envoy's JSON format (``response_code``, ``response_flags``, ``duration``/``duration_ms``, ``upstream_host``...),
nginx ``escape=json`` (``status`` with ``request_time`` or ``upstream_addr``) and HAProxy's (a
``termination_state``, with ``http_status``/``http.response.status_code``, ``haproxy_times.tw/tr/ta``,
``backend_name``, ``server_name``...) are requests; any other object is an application log line: its text values are
searched for signatures and its time key is read. JSON is read with :func:`infradoctor.bounded.load_json` (a
5,000-deep line is a bad line, not a crash) and numbers with :mod:`infradoctor.bounded`.

``key=value`` access lines (Envoy's and nginx's custom formats, logfmt) are read the same way
(:class:`KeyValueFormat`) when their keys name a status and flags or a duration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infradoctor.bounded import load_json, read_float, read_int
from infradoctor.logs.formats.access import RequestDecoder
from infradoctor.logs.formats.base import DatedLineFormat, LineContext, LineHandler
from infradoctor.logs.formats.haproxy import HaproxyRecord, add_record
from infradoctor.logs.formats.layout import (
    ROLE_ATTEMPTS,
    ROLE_FLAGS,
    ROLE_REQUEST_TIME,
    ROLE_STATUS,
    ROLE_TIME,
    ROLE_UPSTREAM,
    ROLE_UPSTREAM_STATUS,
    ROLE_UPSTREAM_TIME,
    TIME_EPOCH,
    TIME_ISO,
    TIME_LOCAL,
    compile_envoy,
    compile_nginx,
    parse_time,
)
from infradoctor.logs.formats.text import EXCEPTION_LINE, add_text_event
from infradoctor.logs.formats.timestamps import epoch_number, line_time
from infradoctor.logs.signatures import match_text_all
from infradoctor.logs.stats import NO_TIME, UNKNOWN, LogStats

MAX_JSON_CHARS = 256 * 1024
"""A JSON line longer than this is not parsed as JSON (it is searched as text)."""
MAX_KEYS = 400
"""Flattened keys kept per object."""
MAX_DEPTH = 6
"""Nesting followed when flattening."""
MAX_TEXT_CHARS = 16 * 1024
"""Text values searched for signatures are cut to this many characters each."""

TIME_KEYS = ("start_time", "time", "timestamp", "@timestamp", "ts", "time_iso8601", "time_local", "asctime", "date",
             "haproxy_timestamp", "haproxy_dt")
"""Keys tried, in order, for an object's time."""
TEXT_KEYS = ("message", "msg", "error", "err", "exception", "exc_info", "event", "log", "detail", "reason",
             "stack", "stack_trace", "traceback", "response_code_details", "upstream_transport_failure_reason",
             "textpayload")
"""Keys whose text is searched for signatures (all string values are searched when none is present)."""
_ENVOY_KEYS = {"response_code": ROLE_STATUS, "status": ROLE_STATUS, "response_flags": ROLE_FLAGS,
               "response_flag": ROLE_FLAGS, "duration": ROLE_REQUEST_TIME, "duration_ms": ROLE_REQUEST_TIME,
               "total_time_ms": ROLE_REQUEST_TIME, "upstream_host": ROLE_UPSTREAM, "upstream": ROLE_UPSTREAM,
               "x-envoy-upstream-service-time": ROLE_UPSTREAM_TIME, "upstream_service_time": ROLE_UPSTREAM_TIME,
               "upstream_request_attempt_count": ROLE_ATTEMPTS}
_NGINX_KEYS = {"status": ROLE_STATUS, "request_time": ROLE_REQUEST_TIME, "upstream_addr": ROLE_UPSTREAM,
               "upstream_status": ROLE_UPSTREAM_STATUS, "upstream_response_time": ROLE_UPSTREAM_TIME}
_ENVOY_FORMAT = "%START_TIME% %RESPONSE_CODE% %RESPONSE_FLAGS% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% " \
    "%UPSTREAM_HOST% %UPSTREAM_REQUEST_ATTEMPT_COUNT%"
_NGINX_FORMAT = "$time_iso8601 $status $request_time $upstream_addr $upstream_status $upstream_response_time"
_HAPROXY_STATUS = ("http_status", "status", "status_code", "http.response.status_code", "http.status_code")
_HAPROXY_BACKEND = ("backend_name", "backend.name", "backend")
_HAPROXY_SERVER = ("server_name", "target_server.name", "server.name", "upstream_addr", "server")


def flatten(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Nested objects' keys joined with ``.``, lower-cased (bounded in depth and count)."""
    out: dict[str, Any] = {}
    stack: list[tuple[str, Mapping[str, Any], int]] = [("", obj, 0)]
    while stack and len(out) < MAX_KEYS:
        prefix, node, depth = stack.pop()
        for key, value in node.items():
            name = f"{prefix}{str(key).lower()[:64]}"
            if isinstance(value, Mapping):
                if depth < MAX_DEPTH:
                    stack.append((name + ".", value, depth + 1))
            elif name not in out:
                out[name] = value
            if len(out) >= MAX_KEYS:
                break
    return out


def _text(value: Any) -> str | None:
    """A scalar as text for a role (numbers through :mod:`infradoctor.bounded`), None for null/containers."""
    if value is None or isinstance(value, (dict, list)):
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value) if read_int(value, low=-(10**15), high=10**15) is not None else None
    if isinstance(value, float):
        number = read_float(value)
        return None if number is None else repr(number)
    return str(value)[:512]


def _time_kind(value: str) -> str:
    if value.replace(".", "", 1).isdigit():
        return TIME_EPOCH
    if len(value) > 20 and value[2] == "/":
        return TIME_LOCAL
    return TIME_ISO


def _second_of(keys: Mapping[str, Any], year: int) -> int:
    for key in TIME_KEYS:
        value = keys.get(key)
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (int, float)):
            number = read_float(value)
            return epoch_number(number) if number is not None else NO_TIME
        if isinstance(value, str):
            text = value[:64]
            if len(text) >= 20 and text[2] == "/" and text[6] == "/":  # HAProxy/nginx local time
                return parse_time(TIME_LOCAL, text[:20] + " +0000")
            return line_time(text, year)
    return NO_TIME


class JsonReader:
    """Classifies JSON (or key=value) objects as requests or application lines and counts them."""

    def __init__(self, stats: LogStats, year: int) -> None:
        self.stats = stats
        self.year = year
        self._decoders: dict[tuple[str, str], RequestDecoder] = {}

    def _decoder(self, router: str, time_kind: str) -> RequestDecoder:
        key = (router, time_kind)
        if key not in self._decoders:
            layout = compile_envoy(_ENVOY_FORMAT) if router == "envoy" else compile_nginx(_NGINX_FORMAT)
            self._decoders[key] = RequestDecoder(layout.with_time_kind(time_kind))
        return self._decoders[key]

    def read(self, obj: Mapping[str, Any], line: str, context: LineContext) -> bool:
        """Count one object; False when it is a key=value object that is not a request (key=value only)."""
        keys = flatten(obj)
        if self._haproxy(keys, line, context) or self._access(keys, line, context):
            return True
        self._app(keys, line, context)
        return True

    def is_request(self, keys: Mapping[str, Any]) -> bool:
        """Whether the (flattened) keys make a request of a known router."""
        return bool(_router(keys)) or "termination_state" in keys or "connection.termination_state" in keys

    def _access(self, keys: Mapping[str, Any], line: str, context: LineContext) -> bool:
        router = _router(keys)
        if router is None:
            return False
        mapping = _ENVOY_KEYS if router == "envoy" else _NGINX_KEYS
        fields: dict[str, str | None] = {}
        for key, role in mapping.items():
            value = _text(keys.get(key))
            if value is not None and role not in fields:
                fields[role] = value
        time_value = next((_text(keys[k]) for k in TIME_KEYS if keys.get(k) is not None), None)
        fields[ROLE_TIME] = time_value
        decoder = self._decoder(router, _time_kind(time_value) if time_value else TIME_ISO)
        decoder.add_line(self.stats, fields.get, context.raw or line, context.second)
        return True

    def _haproxy(self, keys: Mapping[str, Any], line: str, context: LineContext) -> bool:
        state = keys.get("termination_state", keys.get("connection.termination_state"))
        if not isinstance(state, str) or not 2 <= len(state) <= 4:
            return False
        record = HaproxyRecord()
        record.state = state[:2]
        status = next((read_int(keys[k], low=-1, high=999) for k in _HAPROXY_STATUS if k in keys), None)
        record.status = status if status is not None and status >= 0 else None
        record.backend = next((str(keys[k])[:200] for k in _HAPROXY_BACKEND if isinstance(keys.get(k), str)
                               and keys[k]), "-")
        record.server = next((str(keys[k])[:200] for k in _HAPROXY_SERVER if isinstance(keys.get(k), str)
                              and keys[k]), "-")

        def timer(*names: str) -> int:
            for name in names:
                value = read_int(keys.get(name), low=-1, high=10**10)
                if value is not None:
                    return value if value >= 0 else UNKNOWN
            return UNKNOWN

        record.tw = timer("haproxy_times.tw", "tw", "queue_time")
        record.tr = timer("haproxy_times.tr", "upstream_response_time", "tr")
        record.ta = timer("haproxy_times.ta", "active_time", "request.duration_milliseconds", "ta")
        retries = keys.get("retries")
        record.retries = (read_int(str(retries).lstrip("+"), low=0, high=1000) or 0) if retries is not None else 0
        second = _second_of(keys, self.year)
        record.second = second if second != NO_TIME else context.second
        add_record(self.stats, record, context.raw or line)
        return True

    def _app(self, keys: Mapping[str, Any], line: str, context: LineContext) -> None:
        texts = [str(keys[k])[:MAX_TEXT_CHARS] for k in TEXT_KEYS if isinstance(keys.get(k), (str, int, float))]
        if not texts:
            texts = [v[:MAX_TEXT_CHARS] for v in keys.values() if isinstance(v, str)][:64]
        second = _second_of(keys, self.year)
        if second == NO_TIME:
            second = context.second
        subject = context.source
        for text in texts:
            if "Traceback (most recent call last)" in text:
                last = text.strip().splitlines()[-1].strip()
                found = EXCEPTION_LINE.match(last)
                if found:
                    subject = found.group(1)
                    self.stats.exceptions[subject] += 1
        signatures = tuple(dict.fromkeys(s for text in texts for s in match_text_all(text)))
        add_text_event(self.stats, signatures, subject, second, context.raw or line)


def _router(keys: Mapping[str, Any]) -> str | None:
    if "response_code" in keys or "response_flags" in keys or "response_flag" in keys:
        return "envoy"
    if "status" in keys and ("request_time" in keys or "upstream_addr" in keys):
        return "nginx"
    return None


class JsonLinesFormat(DatedLineFormat):
    """One JSON object per line."""

    name = "jsonl"
    needs = "{"

    def handler(self, stats: LogStats, context: LineContext) -> LineHandler:
        """Parse JSON (bounded); route access-log objects to the request decoders, others to signature search."""
        reader = JsonReader(stats, self.year)

        def handle(line: str, ctx: LineContext) -> bool:
            text = line.strip()
            if not text.startswith("{") or len(text) > MAX_JSON_CHARS:
                return False
            try:
                obj = load_json(text)
            except ValueError:
                return False
            if not isinstance(obj, dict):
                return False
            return reader.read(obj, line, ctx)

        return handle


def parse_key_values(line: str, limit: int = 200) -> dict[str, str]:
    """``key=value`` pairs of a line (values end at a space; ``key="quoted value"`` too), at most ``limit``.

    The line is split on spaces once (at most ``4 * limit`` fields), so the cost is linear whatever it holds.
    """
    out: dict[str, str] = {}
    fields = line.split(" ", 4 * limit)[: 4 * limit]
    index = 0
    while index < len(fields) and len(out) < limit:
        field = fields[index]
        index += 1
        key, equals, value = field.partition("=")
        if not equals or not key or len(key) > 64:
            continue
        if value.startswith('"') and not (len(value) > 1 and value.endswith('"')):
            parts = [value[1:]]  # a quoted value with spaces: up to the field that closes the quote
            while index < len(fields) and len(parts) < 64:
                parts.append(fields[index])
                index += 1
                if parts[-1].endswith('"'):
                    break
            value = " ".join(parts).rstrip('"')
        elif value.startswith('"'):
            value = value[1:-1]
        key = key.lower()
        if key not in out:
            out[key] = value[:512]
    return out


class KeyValueFormat(DatedLineFormat):
    """Access lines of ``key=value`` fields (an Envoy or nginx custom format, logfmt) whose keys name a request."""

    name = "keyvalue"
    needs = "="

    def handler(self, stats: LogStats, context: LineContext) -> LineHandler:
        """Read the pairs; a request when the keys say status and flags (Envoy) or status and request time (nginx)."""
        reader = JsonReader(stats, self.year)

        def handle(line: str, ctx: LineContext) -> bool:
            if line.count("=") < 4:
                return False
            pairs = parse_key_values(line)
            if not reader.is_request(pairs):
                return False
            head = line[: line.find(" ")] if line.startswith("[") else ""
            if head and "time" not in pairs:
                pairs["time"] = head.strip("[]")
            return reader.read(pairs, line, ctx)

        return handle

"""JSON lines: Envoy/nginx JSON access logs and structured application logs.

A line whose object has a status and a duration or upstream key is an access-log request (Envoy's JSON format keys
``response_code``, ``response_flags``, ``duration``, ``upstream_host``...; nginx ``escape=json`` keys ``status``,
``request_time``, ``upstream_addr``...). Any other object is an application log line: its text values are searched
for signatures and its time key is read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from infradoctor.logs.formats.access import RequestDecoder
from infradoctor.logs.formats.base import DatedLineFormat, LineHandler
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
)
from infradoctor.logs.formats.text import EXCEPTION_LINE, add_text_event
from infradoctor.logs.formats.timestamps import line_time
from infradoctor.logs.signatures import match_text
from infradoctor.logs.stats import NO_TIME, LogStats

TIME_KEYS = ("start_time", "time", "timestamp", "@timestamp", "ts", "time_iso8601", "time_local", "asctime", "date")
"""Keys tried, in order, for an object's time."""
TEXT_KEYS = ("message", "msg", "error", "err", "exception", "exc_info", "event", "log", "detail", "reason",
             "stack", "stack_trace", "traceback", "response_code_details", "upstream_transport_failure_reason")
"""Keys whose text is searched for signatures (all string values are searched when none is present)."""
_ENVOY_KEYS = {"response_code": ROLE_STATUS, "response_flags": ROLE_FLAGS, "duration": ROLE_REQUEST_TIME,
               "upstream_host": ROLE_UPSTREAM, "x-envoy-upstream-service-time": ROLE_UPSTREAM_TIME,
               "upstream_service_time": ROLE_UPSTREAM_TIME, "upstream_request_attempt_count": ROLE_ATTEMPTS}
_NGINX_KEYS = {"status": ROLE_STATUS, "request_time": ROLE_REQUEST_TIME, "upstream_addr": ROLE_UPSTREAM,
               "upstream_status": ROLE_UPSTREAM_STATUS, "upstream_response_time": ROLE_UPSTREAM_TIME}
_ENVOY_FORMAT = "%START_TIME% %RESPONSE_CODE% %RESPONSE_FLAGS% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% " \
    "%UPSTREAM_HOST% %UPSTREAM_REQUEST_ATTEMPT_COUNT%"
_NGINX_FORMAT = "$time_iso8601 $status $request_time $upstream_addr $upstream_status $upstream_response_time"


def _time_kind(value: str) -> str:
    if value.replace(".", "", 1).isdigit():
        return TIME_EPOCH
    if len(value) > 20 and value[2] == "/":
        return TIME_LOCAL
    return TIME_ISO


class JsonLinesFormat(DatedLineFormat):
    """One JSON object per line."""

    name = "jsonl"

    def __init__(self, year: int = 1970) -> None:
        super().__init__(year)
        self._decoders: dict[tuple[str, str], RequestDecoder] = {}

    def _decoder(self, router: str, time_kind: str) -> RequestDecoder:
        key = (router, time_kind)
        if key not in self._decoders:
            layout = compile_envoy(_ENVOY_FORMAT) if router == "envoy" else compile_nginx(_NGINX_FORMAT)
            self._decoders[key] = RequestDecoder(layout.with_time_kind(time_kind))
        return self._decoders[key]

    def handler(self, stats: LogStats, source_name: str) -> LineHandler:
        """Parse JSON; route access-log objects to the request decoder, others to signature search."""

        def handle(line: str) -> bool:
            text = line.strip()
            if not text.startswith("{"):
                return False
            try:
                obj = json.loads(text)
            except ValueError:
                return False
            if not isinstance(obj, dict):
                return False
            if self._access(stats, obj, line):
                return True
            self._app(stats, obj, line, source_name)
            return True

        return handle

    def _access(self, stats: LogStats, obj: Mapping[str, Any], line: str) -> bool:
        keys = {k.lower(): v for k, v in obj.items()}
        if "response_code" in keys:
            router, mapping = "envoy", _ENVOY_KEYS
        elif "status" in keys and ("request_time" in keys or "upstream_addr" in keys):
            router, mapping = "nginx", _NGINX_KEYS
        else:
            return False
        fields: dict[str, str | None] = {}
        for key, role in mapping.items():
            value = keys.get(key)
            if value is not None and role not in fields:
                fields[role] = str(value)
        time_value = next((str(keys[k]) for k in TIME_KEYS if keys.get(k) is not None), None)
        fields[ROLE_TIME] = time_value
        decoder = self._decoder(router, _time_kind(time_value) if time_value else TIME_ISO)
        decoder.add_line(stats, fields.get, line)
        return True

    def _app(self, stats: LogStats, obj: Mapping[str, Any], line: str, source_name: str) -> None:
        texts = [str(obj[k]) for k in TEXT_KEYS if isinstance(obj.get(k), (str, int, float))]
        if not texts:
            texts = [str(v) for v in obj.values() if isinstance(v, str)]
        joined = " ".join(texts)
        second = NO_TIME
        for key in TIME_KEYS:
            value = obj.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e11:
                second = int(value)
                break
            if isinstance(value, str):
                second = line_time(value, self.year)
                break
        subject = source_name
        for text in texts:
            if "Traceback (most recent call last)" in text:
                last = text.strip().splitlines()[-1].strip()
                found = EXCEPTION_LINE.match(last)
                if found:
                    subject = found.group(1)
                    stats.exceptions[subject] += 1
        add_text_event(stats, match_text(joined), subject, second, line)

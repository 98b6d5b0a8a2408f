import re

import pytest

from infradoctor.logs.formats.layout import (
    ENVOY_DEFAULT,
    NGINX_COMBINED,
    NGINX_INGRESS,
    NGINX_UPSTREAM_FULL,
    ROLE_STATUS,
    ROLE_TIME,
    ROLE_UPSTREAM,
    ROLE_UPSTREAM_STATUS,
    ROLE_UPSTREAM_TIME,
    TIME_EPOCH,
    TIME_ISO,
    TIME_LOCAL,
    FormatError,
    Var,
    compile_envoy,
    compile_nginx,
    parse_time,
)
from infradoctor.logs.stats import NO_TIME


def test_combined_compiles_to_segments_matching_a_quote_split() -> None:
    layout = compile_nginx(NGINX_COMBINED)
    line = '10.0.0.5 - - [29/Nov/2026:10:00:00 +0000] "GET /v1/models HTTP/1.1" 200 612 "-" "curl/8.5.0"'
    assert len(layout.segments()) == len(line.split('"'))
    found = layout.line_regex().match(line)
    assert found and found.group(ROLE_STATUS) == "200" and found.group(ROLE_TIME) == "29/Nov/2026:10:00:00 +0000"
    assert layout.time_kind == TIME_LOCAL and ROLE_UPSTREAM not in layout.roles


def test_multi_value_upstream_fields_survive_spaces() -> None:
    layout = compile_nginx(NGINX_INGRESS)
    line = ('10.0.0.5 - - [29/Nov/2026:10:00:18 +0000] "POST /v1/completions HTTP/1.1" 200 901 "-" "x" 734 1.210 '
            "[default-llm-8000] [] 10.244.1.7:8000, 10.244.2.9:8000 0, 901 0.004, 1.204 502, 200 9f2c0d8e1a")
    found = layout.line_regex().match(line)
    assert found is not None
    assert found.group(ROLE_UPSTREAM) == "10.244.1.7:8000, 10.244.2.9:8000"
    assert found.group(ROLE_UPSTREAM_TIME) == "0.004, 1.204"
    assert found.group(ROLE_UPSTREAM_STATUS) == "502, 200"


def test_custom_format_with_braces_and_iso_time() -> None:
    layout = compile_nginx('${remote_addr} [$time_iso8601] "$request" $status $request_time "$upstream_addr"')
    assert [t.name for t in layout.tokens if isinstance(t, Var)] == [
        "remote_addr", "time_iso8601", "request", "status", "request_time", "upstream_addr"]
    assert layout.time_kind == TIME_ISO and layout.request_scale == 1000.0
    line = '1.2.3.4 [2026-11-29T10:00:00+01:00] "GET / HTTP/1.1" 200 0.012 "10.0.0.1:80"'
    assert layout.line_regex().match(line)


def test_envoy_default_roles_and_units() -> None:
    layout = compile_envoy(ENVOY_DEFAULT)
    assert layout.router == "envoy" and layout.request_scale == 1.0 and layout.upstream_scale == 1.0
    assert {"flags", "status", "request_time", "upstream_time", "upstream", "time"} <= layout.roles


@pytest.mark.parametrize("bad", ["no variables here", '$status "$request'])
def test_bad_formats_are_refused(bad: str) -> None:
    with pytest.raises(FormatError):
        compile_nginx(bad)


def test_parse_time_kinds() -> None:
    assert parse_time(TIME_LOCAL, "29/Nov/2026:10:00:00 +0000") == 1795946400
    assert parse_time(TIME_LOCAL, "29/Nov/2026:11:00:00 +0100") == 1795946400
    assert parse_time(TIME_ISO, "2026-11-29T10:00:00.123Z") == 1795946400
    assert parse_time(TIME_ISO, "2026-11-29T05:00:00-05:00") == 1795946400
    assert parse_time(TIME_EPOCH, "1795946400.999") == 1795946400
    for junk in ("", "garbage", "29/Foo/2026:10:00:00 +0000", "2026-13-29T10:00:00Z"):
        assert parse_time(TIME_LOCAL, junk) == NO_TIME and parse_time(TIME_ISO, junk) == NO_TIME


def test_upstream_full_preset_names_every_role() -> None:
    layout = compile_nginx(NGINX_UPSTREAM_FULL)
    pattern = layout.line_regex().pattern
    for role in (ROLE_UPSTREAM, ROLE_UPSTREAM_STATUS, ROLE_UPSTREAM_TIME, ROLE_STATUS):
        assert re.search(rf"\(\?P<{role}>", pattern)

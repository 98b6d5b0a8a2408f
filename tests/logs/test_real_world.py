"""What real log lines need (issue 16): every flag and termination state, the layouts people use, the right
percentile population, attribution, bursts, model-server and Kubernetes failures, and the kernel's GPU lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infradoctor.findings import Severity, run_rules
from infradoctor.logs.analyze import LogsOptions, run
from infradoctor.logs.evidence import LogsEvidence, UpstreamStats, build_evidence
from infradoctor.logs.formats.envoy_text import parse_envoy_text
from infradoctor.logs.formats.haproxy import parse_haproxy
from infradoctor.logs.formats.jsonl import parse_key_values
from infradoctor.logs.formats.layout import compile_envoy, parse_time
from infradoctor.logs.formats.router import choose, read_lines
from infradoctor.logs.incidents import LogsRuleOptions
from infradoctor.logs.signatures import (
    ENVOY_FLAGS,
    envoy_signatures,
    haproxy_signature,
    match_text_all,
    match_text_reference,
)
from infradoctor.logs.stats import UNKNOWN, LogStats
from infradoctor.route.rules import r002_backend_slow, r009_router_queueing

from .fuzz_targets import seed_lines

OPTS = LogsRuleOptions()


def read(lines: list[str], fmt: str = "auto", **kwargs: str) -> LogStats:
    stats = LogStats()
    read_lines(lines, choose(fmt, lines[:40], year=2026, **kwargs), stats, "t.log")
    return stats


def run_lines(tmp_path: Path, name: str, lines: list[str], **options: object) -> dict:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return run(LogsOptions(files=(str(path),), **options)).to_dict()  # type: ignore[arg-type]


def test_every_envoy_flag_is_known_and_lists_count_under_each() -> None:
    assert {"UH", "UF", "UO", "NR", "URX", "NC", "DT", "DC", "LH", "UT", "LR", "UR", "UC", "DI", "FI", "RL", "UAEX",
            "RLSE", "IH", "SI", "DPE", "UPE", "UMSDR", "OM", "DF", "DO", "UDO", "DR"} <= set(ENVOY_FLAGS)
    assert envoy_signatures("UF,URX", 503) == ("upstream_connect_error", "retry_limit_exceeded")
    assert envoy_signatures("UO,UF", 503) == ("upstream_overflow", "upstream_connect_error")
    assert envoy_signatures("NR", 404) == ("no_route",) and envoy_signatures("NC", 503) == ("no_cluster",)
    assert envoy_signatures("UpstreamRetryLimitExceeded,NoHealthyUpstream", 503) == (
        "retry_limit_exceeded", "no_healthy_upstream")


@pytest.mark.parametrize("state,server,status,expected", [
    ("sH", "srv", 504, "upstream_timeout"), ("sD", "srv", 200, "upstream_timeout"),
    ("SH", "srv", 502, "upstream_reset"), ("SD", "srv", 200, "upstream_reset"),
    ("sC", "srv", 503, "upstream_connect_error"), ("SC", "srv", 503, "upstream_connect_error"),
    ("sQ", "srv", 503, "upstream_overflow"), ("SC", "<NOSRV>", 503, "no_healthy_upstream"),
    ("LR", "<NOSRV>", 204, "local_response"), ("LR", "<NOSRV>", 200, "local_response"),
    ("PR", "<NOSRV>", 403, "proxy_denied"), ("RC", "srv", 503, "socket_exhaustion"),
    ("IH", "srv", 500, "router_internal_error"), ("KR", "srv", -1, "session_killed"),
    ("cD", "srv", 200, "client_disconnect"), ("CD", "srv", -1, "client_disconnect"),
    ("CC", "srv", -1, "client_disconnect"), ("DD", "srv", 200, "upstream_reset"), ("--", "srv", 200, None),
])
def test_every_haproxy_termination_state(state: str, server: str, status: int, expected: str | None) -> None:
    assert haproxy_signature(state, server, status if status >= 0 else None) == expected


def test_haproxy_lines_with_padding_fragments_and_tcp_mode() -> None:
    padded = parse_haproxy("8.6.7.10:55480 [27/Jun/2019:21:42:38.916] public_ssl~ be_http/srva 0/0/0/-1/63387    504 "
                           '194 - - sH-- 15/13/10/0/0 0/0 "PATCH /api/upload HTTP/1.1"')
    assert padded and (padded.status, padded.state, padded.ta, padded.tr) == (504, "sH", 63387, UNKNOWN)
    fragment = parse_haproxy('FO~ xxx/xxxxx 0/0/1/-1/30003 -1 0 - - CD-- 1/1/0/0/0 0/0  "POST /xxxx HTTP/1.1"')
    assert fragment and fragment.status is None and fragment.state == "CD" and fragment.backend == "xxx"
    tcp = parse_haproxy("10.42.0.1:12558 [03/Nov/2016:22:22:19.363] 900 900/<NOSRV> -1/-1/4 213 SC 0/0/0/0/0 0/0")
    assert tcp and tcp.server == "<NOSRV>" and tcp.state == "SC" and tcp.status is None


@pytest.mark.parametrize("line,status,flags,duration,upstream", [
    ('[2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 204 - 154 0 226 100 "10.0.35.28" "nsq2http" '
     '"cc21d9b0" "locations" "tcp://10.0.2.1:80"', "204", "-", "226", "tcp://10.0.2.1:80"),
    ('[2022-04-19T13:35:23.864Z] "POST / HTTP/1.1" 503 UF,URX "-" "TLS error: Secret is not supplied by SDS" 52 91 18 '
     '- "-" "curl/7.79.1" "622c1d7d" "cray-dhcp-kea-api:8000" "10.37.0.73:8000" outbound|8000||kea - 10.27.72.242:8000 '
     "10.37.0.73:58716 - default", "503", "UF,URX", "18", "10.37.0.73:8000"),
    ('"GET /v1/status HTTP/1.1" 503 UC upstream_reset_before_response_started{connection_termination} - "-" 0 95 0 - '
     '"10.90.16.220" "Apache-HttpClient/4.5.1 (Java/1.8.0_372)" "3a7cbcc1" "health.abc.com" "10.80.47.192:8181" '
     "outbound|80||health-api.production.svc.cluster.local", "503", "UC", "0", "10.80.47.192:8181"),
    ('[2024-07-20T07:05:54.173Z] "GET /gateway-timeout?delayMs=5000 HTTP/1.1" 504 UT response_timeout 0 24 4497 - "-" '
     '"curl/8.4.0" "6d67d674" "localhost:8000" "172.27.0.2:8080"', "504", "UT", "4497", "172.27.0.2:8080"),
])
def test_envoy_and_istio_text_layouts_by_shape(line: str, status: str, flags: str, duration: str,
                                                upstream: str) -> None:
    record = parse_envoy_text(line)
    assert record is not None
    assert (record.status, record.flags, record.duration, record.upstream) == (status, flags, duration, upstream)


def test_envoy_start_time_formats_and_key_value_layouts() -> None:
    fmt = ("[%START_TIME(%d/%m/%YT%H:%M:%S%z %s)%] method=%REQ(:METHOD)% response_flag=%RESPONSE_FLAGS% "
           "status=%RESPONSE_CODE% total_time_ms=%DURATION% upstream=%UPSTREAM_HOST%\\n")
    line = "[05/12/2019T16:14:53+0000 1575562493] method=POST response_flag=UT status=200 total_time_ms=15001 " \
           "upstream=127.0.0.1:7000"
    layout = compile_envoy(fmt)
    found = layout.line_regex().match(line)
    assert found is not None and found.group("flags") == "UT"
    assert layout.time_kind and parse_time(layout.time_kind, found.group("time")) == 1575562493
    stats = read([line], envoy_log_format=fmt)
    assert stats.line_formats == {"envoy": 1} and ("upstream_timeout", 15001) in stats.sig_durations
    auto = read([line])  # without the format string: read as key=value
    assert auto.line_formats == {"keyvalue": 1} and ("upstream_timeout", 15001) in auto.sig_durations
    assert parse_key_values('a=1 b="two words" c=3') == {"a": "1", "b": "two words", "c": "3"}


def test_request_percentiles_are_over_answered_requests_with_their_n(tmp_path: Path) -> None:
    answered = [f'[2026-11-29T10:00:{i:02d}.000Z] "POST /v1/chat HTTP/1.1" 200 - 10 20 {600 + i} {590 + i} "-" "-" '
                f'"id{i}" "llm" "10.0.0.{i % 3}:8000"' for i in range(30)]
    local = [f'[2026-11-29T10:01:{i:02d}.000Z] "POST /v1/chat HTTP/1.1" 503 UH 0 19 0 - "-" "-" "u{i}" "llm" "-"'
             for i in range(60)]
    result = run_lines(tmp_path, "envoy.log", answered + local)
    head = result["metrics"]["headline"]
    assert head["requests"] == 90 and head["request_latency_n"] == 30
    assert head["request_population"] == "requests answered by an upstream" and head["request_p50_ms"] >= 600
    assert result["metrics"]["router_split"]["request_n"] == 30


def test_the_slow_upstream_is_named() -> None:
    upstreams = tuple(UpstreamStats(f"10.0.0.{i}:80", 100, 0, 200.0, 4000.0 if i == 3 else 300.0, 100)
                      for i in range(1, 5))
    evidence = LogsEvidence(("x",), 400, 400, 0, 250.0, 3000.0, 240.0, 3000.0, 400, 2.0, 5.0, upstreams, {}, (), 0, {},
                            {}, {200: 300, 3000: 100}, (), {}, {}, success_n=400)
    [finding] = r002_backend_slow.check_logs(evidence, OPTS)
    assert finding.title.startswith("10.0.0.3:80 is the slow upstream") and "n=100" in finding.title
    assert finding.evidence["slow_upstreams"][0]["upstream"] == "10.0.0.3:80"


def test_a_queueing_burst_mid_file_is_router_queueing() -> None:
    means = [3.0] * 5 + [800.0, 2500.0, 1900.0, 600.0, 300.0] + [3.0] * 5
    minutes = tuple((m, 40, mean, int(mean * 2)) for m, mean in enumerate(means))
    evidence = LogsEvidence(("x",), 600, 600, 0, 10.0, 20.0, 5.0, 10.0, 0, None, None, (), {}, (), 0, {}, {}, {}, minutes,
                            {}, {})
    [finding] = r009_router_queueing.check(evidence, OPTS)
    assert finding.evidence["growing"] is False and finding.evidence["burst"]["mean_queue_ms"] > 1000
    assert "burst of 5 minutes" in finding.title


def test_the_same_failure_in_an_access_and_an_error_log_is_one_failure(tmp_path: Path) -> None:
    access = tmp_path / "access.log"
    error = tmp_path / "error.log"
    access.write_text('10.244.5.1 - - [20/Sep/2021:15:25:23 +0000] "GET /check HTTP/1.1" 504 160 "-" "curl/7.58.0" 93 '
                      "15.004 [svc-80] [] 10.244.6.15:8080 0 15.004 504 5a40\n")
    error.write_text("2021/09/20 15:25:23 [error] 31#31: *60043 upstream timed out (110: Operation timed out) while "
                     'reading response header from upstream, client: 10.244.5.1, server: x, request: "GET /check '
                     'HTTP/1.1", upstream: "http://10.244.6.15:8080/check", host: "x"\n')
    result = run(LogsOptions(files=(str(access), str(error)))).to_dict()
    [incident] = [i for i in result["metrics"]["incidents"] if i["kind"] == "upstream_timeout"]
    assert incident["count"] == 2 and incident["failures"] == 1 and len(incident["files"]) == 2
    [r008] = [f for f in result["findings"] if f["code"] == "R008"]
    assert r008["title"].startswith("1 request timed out")


def test_an_nginx_upstream_group_name_is_not_a_backend(tmp_path: Path) -> None:
    head = '10.0.0.5 - - [29/Nov/2026:10:00:{s:02d} +0000] "POST /v1/x HTTP/1.1" {st} 167 "-" "curl/8.5.0"'
    lines = [head.format(s=i, st=200) + f' rt=0.100 urt="0.098" ua="10.1.0.{i % 2}:8000" us="200"' for i in range(40)]
    lines += [head.format(s=i, st=502) + ' rt=0.000 urt="0.000" ua="backends" us="502"' for i in range(40, 60)]
    result = run_lines(tmp_path, "nginx.log", lines)
    assert {u["upstream"] for u in result["metrics"]["upstreams"]} == {"10.1.0.0:8000", "10.1.0.1:8000"}
    assert not any("backends fails" in f["title"] for f in result["findings"])
    assert any(f["code"] == "R006" for f in result["findings"])


def test_model_server_and_kubernetes_failures_are_findings(tmp_path: Path) -> None:
    result = run_lines(tmp_path, "pod.log", [
        "ERROR 06-15 13:57:57 [async_llm.py:420] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered "
        "an issue.",
        "65s Warning BackOff pod/vllm-0 Back-off restarting failed container vllm",
        "  Reason:       OOMKilled",
        "Readiness probe failed: Get http://10.0.0.1:8000/health: context deadline exceeded",
    ])
    found = {f["code"]: f for f in result["findings"]}
    assert found["S014"]["severity"] == "critical" and "engine dead" in found["S014"]["title"]
    assert found["N014"]["severity"] == "high" and "OOMKilled" in found["N014"]["title"]  # as from fleet
    only_probes = run_lines(tmp_path, "probe.log", ['"Probe failed" probeType="Liveness" pod="a/b"'])
    assert [(f["code"], f["severity"]) for f in only_probes["findings"]] == [("N014", "low")]
    triton = run_lines(tmp_path, "triton.log", ["| mymodel | 1 | UNAVAILABLE: Internal: unable to create TensorRT engine |"])
    assert [(f["code"], f["severity"]) for f in triton["findings"]] == [("S014", "high")]


def test_traceback_source_lines_are_code_not_failures() -> None:
    stats = read(["Traceback (most recent call last):", '  File "/x/async_llm_engine.py", line 696, in start',
                  "    raise AsyncEngineDeadError(",
                  "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already."])
    assert sum(n for (sig, *_), n in stats.events.items() if sig == "model_server_dead") == 1
    assert stats.exceptions == {"vllm.engine.async_llm_engine.AsyncEngineDeadError": 1}


def test_kernel_gpu_lines_one_reader_for_node_and_logs() -> None:
    stats = read([
        "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149",
        "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000002 caused by previous Xid 149",
        "NVRM: Xid (PCI:0018:01:00): 145, pid=876767, name=ray::WorkerDict, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0)",
        "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000)",
        "NVRM: Xid (PCI:0018:01:00): 154, GPU recovery action changed from 0x4 (Drain and Reset) to 0x2 (Node Reboot "
        "Required)",
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
        "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
        "               NVRM: fallen off the bus and is not responding to commands.",
        "NVRM: Xid (PCI:...): 137, RLW_RXPIPE interrupt hit on link 11 on GPU0: PRIV Error",
    ], "kernel")
    assert stats.line_formats == {"kernel": 9}
    findings = {f.evidence["xid"]: f for f in run_rules(build_evidence(stats, ("k",)), OPTS) if f.code == "N001"}
    assert 45 not in findings  # reported with the cause it names
    assert findings[149].evidence["followed_by"] == {"45": 2} and findings[149].severity is Severity.HIGH
    assert findings[145].evidence["action"] == "watch" and findings[154].severity is Severity.CRITICAL
    assert findings[79].evidence["without_xid_line"] == 1 and findings[79].severity is Severity.CRITICAL
    assert findings[79].evidence["devices"] == ["PCI:0000:b3:00"] and findings[137].evidence["devices"] == ["unknown"]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(picks=st.lists(st.integers(0, 1999), min_size=1, max_size=3), junk=st.text(max_size=40))
def test_fast_signature_matching_agrees_with_trying_every_pattern(picks: list[int], junk: str) -> None:
    lines = seed_lines()
    line = junk.join(lines[i % len(lines)] for i in picks)
    assert match_text_all(line) == match_text_reference(line)


def test_hostile_numbers_and_depth_are_not_crashes(tmp_path: Path) -> None:
    lines = [json.dumps({"start_time": 99999999999999999999, "response_code": 503, "response_flags": "UF",
                         "duration": 10**400, "upstream_host": "10.0.0.1:80"}),
             json.dumps({"start_time": "9999-12-31T23:59:59.999Z", "response_code": 503, "response_flags": "UF",
                         "duration": "1e999", "upstream_host": "10.0.0.1:80"}),
             '{"a":' * 5000 + "1" + "}" * 5000]
    result = run_lines(tmp_path, "hostile.jsonl", lines)
    assert result["metrics"]["headline"]["requests"] == 2 and result["metrics"]["files"][0]["lines"] == 3
    assert not result["metrics"]["timeline"]["points"]  # neither time is a log time
    assert [f["code"] for f in result["findings"]] == ["R007"]


def test_a_32_kb_line_of_colons_is_read_at_once(cli, tmp_path: Path) -> None:
    path = tmp_path / "b.log"
    path.write_text("1:" * 16000 + "\n")
    run_cli = cli("logs", str(path), "--json", str(tmp_path / "b.json"), "--no-store", "-q")
    assert run_cli.exit_code == 0
    assert json.loads((tmp_path / "b.json").read_text())["metrics"]["files"][0]["parsed"] == 1

import pytest

from infradoctor.findings import catalog
from infradoctor.logs.signatures import (
    BY_ID,
    SIGNATURES,
    envoy_signature,
    haproxy_signature,
    match_text,
    nginx_signature,
)
from infradoctor.xid import parse_xid_line, xid_info

RECORDED = [
    ("no_healthy_upstream", "no healthy upstream"),
    ("no_healthy_upstream", '2026/11/29 10:02:30 [error] 31#31: *1052 no live upstreams while connecting to upstream, '
                            'client: 10.0.0.5, upstream: "http://llm_backends/v1/chat/completions"'),
    ("upstream_connect_error", "upstream connect error or disconnect/reset before headers. reset reason: connection "
                               "failure, transport failure reason: delayed connect error: 111"),
    ("upstream_reset", "upstream connect error or disconnect/reset before headers. reset reason: connection "
                       "termination"),
    ("upstream_connect_error", '2026/11/29 10:00:03 [error] 31#31: *1021 connect() failed (111: Connection refused) '
                               'while connecting to upstream, client: 10.0.0.5'),
    ("upstream_reset", "2026/11/29 10:01:40 [error] 31#31: *1040 upstream prematurely closed connection while "
                       "reading response header from upstream"),
    ("upstream_timeout", "2026/11/29 10:01:10 [error] 31#31: *1033 upstream timed out (110: Connection timed out) "
                         "while reading response header from upstream"),
    ("upstream_timeout", "upstream request timeout"),
    ("deadline_exceeded", "rpc error: code = DeadlineExceeded desc = context deadline exceeded"),
    ("deadline_exceeded", "status = StatusCode.DEADLINE_EXCEEDED"),
    ("gpu_oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."),
    ("gpu_oom", "RuntimeError: CUDA error: out of memory"),
    ("gpu_xid", "[ 9482.112233] NVRM: Xid (PCI:0000:3b:00): 79, pid=2314, name=python, GPU has fallen off the bus."),
    ("socket_exhaustion", "connect() to 10.1.0.12:8000 failed (99: Cannot assign requested address) while "
                          "connecting to upstream"),
    ("upstream_connect_error", "dial tcp 10.1.0.12:8000: connect: connection refused"),
    ("host_oom_kill", "[ 9490.000412] Out of memory: Killed process 4421 (python3) total-vm:91234567kB, "
                      "anon-rss:61234567kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:123456kB oom_score_adj:0"),
    ("host_oom_kill", "[ 9490.000100] python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP)"),
    ("model_server_dead", "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already."),
    ("model_server_dead", "ERROR 11-29 10:05:01 [core.py:396] Engine core proc EngineCore_0 died unexpectedly"),
    ("kv_cache_preemption", "WARNING 11-29 10:04:00 scheduler.py:1089] Sequence group 57 is preempted by "
                            "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space."),
    ("gpu_collective_failure", "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
                               "timeout: WorkNCCL(SeqNum=1032, OpType=ALLREDUCE) ran for 600000 milliseconds"),
    ("gpu_fault", "RuntimeError: CUDA error: an illegal memory access was encountered"),
]


@pytest.mark.parametrize("expected,line", RECORDED)
def test_recorded_lines_match_their_signature(expected: str, line: str) -> None:
    assert match_text(line) == expected


@pytest.mark.parametrize("line", [
    "2026/11/29 10:00:00 [notice] 1#1: start worker process 31",
    '10.0.0.5 - - [29/Nov/2026:10:00:00 +0000] "GET /v1/models HTTP/1.1" 200 612 "-" "curl/8.5.0"',
    "INFO request done latency_ms=120",
    "stack overflow in recursion test",
])
def test_ordinary_lines_match_nothing(line: str) -> None:
    assert match_text(line) is None


def test_every_signature_maps_to_a_registered_code_and_has_text() -> None:
    for sig in SIGNATURES:
        assert sig.meaning and sig.fix
        assert sig.code is None or sig.code in catalog()
    assert BY_ID["upstream_timeout"].code == "R008"
    assert BY_ID["no_healthy_upstream"].code == "R006"


@pytest.mark.parametrize("flags,status,expected", [
    ("UH", 503, "no_healthy_upstream"), ("UF", 503, "upstream_connect_error"), ("UF,URX", 503,
     "upstream_connect_error"), ("UT", 504, "upstream_timeout"), ("UC", 503, "upstream_reset"),
    ("UO", 503, "upstream_overflow"), ("URX", 503, "retry_limit_exceeded"), ("DC", 0, "client_disconnect"),
    ("-", 0, "client_disconnect"), ("-", 200, None), ("LR", 403, "local_reset"), ("NR", 404, "no_route"),
    ("NC", 503, "no_cluster"), ("NoHealthyUpstream", 503, "no_healthy_upstream"), ("RL", 429, "rate_limited"),
])
def test_envoy_flags(flags: str, status: int, expected: str | None) -> None:
    assert envoy_signature(flags, status) == expected


@pytest.mark.parametrize("term,server,status,expected", [
    ("SC", "srv3", 503, "upstream_connect_error"), ("SH", "srv1", 502, "upstream_reset"),
    ("sH", "srv1", 504, "upstream_timeout"), ("sD", "srv1", 200, "upstream_timeout"),
    ("SC", "<NOSRV>", 503, "no_healthy_upstream"), ("sQ", "srv1", 503, "upstream_overflow"),
    ("CD", "srv1", 200, "client_disconnect"), ("--", "srv1", 200, None), ("", "srv1", 200, None),
])
def test_haproxy_termination_states(term: str, server: str, status: int, expected: str | None) -> None:
    assert haproxy_signature(term, server, status) == expected


@pytest.mark.parametrize("status,upstream,expected", [
    (504, "10.1.0.13:8000", "upstream_timeout"), (502, "10.1.0.12:8000", "upstream_connect_error"),
    (502, "llm_backends", "no_healthy_upstream"), (499, "10.1.0.11:8000", "client_disconnect"),
    (200, "10.1.0.11:8000", None), (None, "-", None), (503, "10.1.0.11:8000", None),
])
def test_nginx_status(status: int | None, upstream: str, expected: str | None) -> None:
    assert nginx_signature(status, upstream) == expected


def test_xid_table_and_parsing() -> None:
    found = parse_xid_line("NVRM: Xid (PCI:0000:86:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable")
    assert found and found.code == 48 and found.pci == "0000:86:00"
    assert xid_info(79).hardware and xid_info(79).action == "reboot" and "reboot" in xid_info(79).advice
    assert not xid_info(13).hardware
    assert "Xid 9999" in xid_info(9999).meaning

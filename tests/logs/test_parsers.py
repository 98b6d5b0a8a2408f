import gzip
import os
from pathlib import Path

import pytest

from infradoctor.logs.formats import choose_format
from infradoctor.logs.formats.layout import NGINX_UPSTREAM_FULL
from infradoctor.logs.source import open_source, read_sample
from infradoctor.logs.stats import NO_TIME, UNKNOWN, LogStats

from .conftest import parse_file


def needs_polars() -> None:
    pytest.importorskip("polars")


def event_counts(stats: LogStats) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for (sig, subject, _sec, _source, _channel), n in stats.events.items():
        out[(sig, subject)] = out.get((sig, subject), 0) + n
    return out


def test_nginx_upstream_format_with_retries(logs_dir: Path) -> None:
    stats, name = parse_file(logs_dir / "nginx_upstream.log")
    assert name == "nginx" and stats.lines == stats.parsed == stats.requests == 95
    assert not stats.skipped
    # 12 requests were retried from .12 (502) to .11; health checks have no upstream
    # "no live upstreams" logs the group's name (llm_backends) as $upstream_addr: no attempt, not an upstream
    assert stats.attempts_hist == {1: 78, 2: 12, 0: 5}
    assert not any(up == "llm_backends" for up, _, _ in stats.attempt_hist)
    assert stats.attempt_hist[("10.1.0.12:8000", 502, 1)] == 12
    assert sum(n for (up, _, _), n in stats.attempt_hist.items() if up == "10.1.0.11:8000") == 42
    assert event_counts(stats) == {("upstream_timeout", "10.1.0.13:8000"): 6,
                                   ("no_healthy_upstream", "llm_backends"): 3}
    assert stats.sig_durations[("upstream_timeout", 1001)] == 6
    # single attempts with both times: rt - urt is 2 ms, 1 ms for the timeouts, 0 for "no live upstreams"
    assert stats.overhead_hist == {2: 72, 1: 6, 0: 3}
    assert ("no_healthy_upstream", "llm_backends", str(logs_dir / "nginx_upstream.log")) in stats.examples


def test_nginx_combined_default_and_redaction_later(logs_dir: Path) -> None:
    stats, name = parse_file(logs_dir / "nginx_combined.log")
    assert name == "nginx" and stats.parsed == 12 and stats.requests == 12
    assert event_counts(stats) == {("bad_gateway", "-"): 2}  # combined does not say which upstream failed
    assert not stats.attempt_hist  # combined has no upstream fields


def test_nginx_ingress_format(logs_dir: Path) -> None:
    stats, _ = parse_file(logs_dir / "nginx_ingress.log")
    assert stats.parsed == 10
    assert stats.attempts_hist == {1: 9, 2: 1}
    assert stats.attempt_hist[("10.244.1.7:8000", 502, 4)] == 1


def test_user_log_format_overrides_presets(tmp_path: Path) -> None:
    fmt = '$remote_addr [$time_iso8601] "$request" $status $request_time "$upstream_addr" "$upstream_status"'
    path = tmp_path / "custom.log"
    path.write_text('1.2.3.4 [2026-11-29T10:00:00+00:00] "GET / HTTP/1.1" 504 1.002 "10.0.0.1:80" "504"\n'
                    '1.2.3.4 [2026-11-29T10:00:01+00:00] "GET / HTTP/1.1" 200 0.012 "10.0.0.1:80" "200"\n')
    stats, name = parse_file(path, nginx_log_format=fmt)
    assert name == "nginx" and stats.parsed == 2
    assert stats.events[("upstream_timeout", "10.0.0.1:80", 1795946400, str(path), "r")] == 1


def test_envoy_default(logs_dir: Path) -> None:
    stats, name = parse_file(logs_dir / "envoy_default.log")
    assert name == "envoy" and stats.parsed == 40
    assert event_counts(stats) == {
        ("upstream_connect_error", "10.1.0.13:8000"): 4,
        ("no_healthy_upstream", "-"): 3,
        ("upstream_timeout", "10.1.0.12:8000"): 2,
        ("client_disconnect", "10.1.0.11:8000"): 1,
    }
    assert stats.sig_durations[("upstream_timeout", 15001)] == 2
    assert sum(stats.overhead_hist.values()) == 30 and set(stats.overhead_hist) == {2}


def test_gzip_input_gives_the_same_statistics(logs_dir: Path) -> None:
    plain, _ = parse_file(logs_dir / "envoy_default.log")
    packed, _ = parse_file(logs_dir / "envoy_default.log.gz")
    assert event_counts(packed) == event_counts(plain) and packed.request_hist == plain.request_hist


@pytest.mark.parametrize("engine", ["python", "polars"])
@pytest.mark.parametrize("compress", ["xz", "bz2"])
def test_xz_and_bzip2_input(tmp_path: Path, logs_dir: Path, compress: str, engine: str) -> None:
    import bz2
    import lzma

    if engine == "polars":
        needs_polars()
    data = (logs_dir / "envoy_default.log").read_bytes()
    path = tmp_path / f"envoy.log.{compress}"
    path.write_bytes(lzma.compress(data) if compress == "xz" else bz2.compress(data))
    plain, _ = parse_file(logs_dir / "envoy_default.log")
    packed, name = parse_file(path, engine=engine)
    assert name == "envoy" and event_counts(packed) == event_counts(plain) and packed.parsed == 40


def test_envoy_json_access_log(logs_dir: Path) -> None:
    stats, name = parse_file(logs_dir / "envoy.jsonl")
    assert name == "jsonl" and stats.requests == 24
    assert stats.attempts_hist == {1: 18, 2: 6}
    assert event_counts(stats) == {("upstream_timeout", "10.1.0.21:9000"): 2}


def test_haproxy_httplog(logs_dir: Path) -> None:
    stats, name = parse_file(logs_dir / "haproxy.log")
    assert name == "haproxy" and stats.parsed == 45
    assert event_counts(stats) == {("upstream_connect_error", "be_llm/srv3"): 2, ("upstream_timeout", "be_llm/srv1"): 1,
                                   ("upstream_timeout", "be_llm/srv2"): 1, ("no_healthy_upstream", "be_llm"): 1}
    assert stats.attempts_hist[4] == 2  # SC after 3 retries
    means = [slot[1] / slot[0] for _, slot in sorted(stats.queue.items())]
    assert means[0] < 10 < 200 < means[-1]
    assert stats.attempt_hist[("be_llm/srv3", 503, UNKNOWN)] == 2


def test_nginx_error_log(logs_dir: Path) -> None:
    stats, name = parse_file(logs_dir / "nginx_error.log")
    assert name == "nginx-error" and stats.parsed == 10
    assert event_counts(stats) == {("upstream_connect_error", "10.1.0.12:8000"): 2,
                                   ("upstream_timeout", "10.1.0.13:8000"): 2,
                                   ("upstream_reset", "10.1.0.11:8000"): 1,
                                   ("no_healthy_upstream", "llm_backends"): 2}


def test_kernel_xids(logs_dir: Path) -> None:
    stats, name = parse_file(logs_dir / "kern.log")
    assert name == "kernel"
    assert stats.xids == {(13, "PCI:0000:86:00", 0): 2, (48, "PCI:0000:86:00", 0): 1, (79, "PCI:0000:3b:00", 0): 1}
    assert ("gpu_xid", "Xid 79 (PCI:0000:3b:00)", 1795946982, str(logs_dir / "kern.log"), "m") in stats.events


def test_dmesg_human_times(tmp_path: Path) -> None:
    path = tmp_path / "dmesg.txt"
    path.write_text("[Sun Nov 29 10:09:42 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=2314, name=python, GPU has "
                    "fallen off the bus.\n[Sun Nov 29 10:09:43 2026] nvidia 0000:3b:00.0: GPU lost\n")
    stats, name = parse_file(path)
    assert name == "kernel" and stats.xids == {(79, "PCI:0000:3b:00", 0): 1}
    assert ("gpu_xid", "Xid 79 (PCI:0000:3b:00)", 1795946982, str(path), "m") in stats.events


def test_python_tracebacks(logs_dir: Path) -> None:
    stats, name = parse_file(logs_dir / "traceback.log")
    assert name == "text"
    assert stats.exceptions == {"torch.OutOfMemoryError": 1, "KeyError": 1}
    assert event_counts(stats) == {("gpu_oom", "torch.OutOfMemoryError"): 1,
                                   ("deadline_exceeded", str(logs_dir / "traceback.log")): 1}
    # the OOM line has no timestamp of its own: it belongs to the traceback's stamped line
    assert ("gpu_oom", "torch.OutOfMemoryError", 1795946585, str(logs_dir / "traceback.log"), "m") in stats.events


def test_json_app_log(logs_dir: Path) -> None:
    stats, name = parse_file(logs_dir / "app.jsonl")
    assert name == "jsonl"
    assert not stats.skipped  # the truncated last object is not JSON: it is searched as free text
    assert stats.line_formats == {"jsonl": stats.parsed - 1, "text": 1}
    source = str(logs_dir / "app.jsonl")
    assert event_counts(stats) == {("deadline_exceeded", source): 1, ("gpu_oom", "torch.OutOfMemoryError"): 1,
                                   ("upstream_connect_error", source): 1}
    assert stats.exceptions == {"torch.OutOfMemoryError": 1}


@pytest.mark.parametrize("name", ["nginx_upstream.log", "envoy_default.log", "nginx_ingress.log",
                                  "nginx_combined.log", "envoy_default.log.gz", "istio.log"])
def test_polars_and_python_engines_agree(logs_dir: Path, name: str) -> None:
    needs_polars()
    slow, _ = parse_file(logs_dir / name, engine="python")
    fast, _ = parse_file(logs_dir / name, engine="polars")
    for field in ("lines", "parsed", "requests", "request_hist", "attempt_hist", "overhead_hist", "attempts_hist",
                  "timeline_lines", "timeline_kinds", "events", "sig_durations", "skipped", "envoy_flags",
                  "line_formats"):
        assert getattr(fast, field) == getattr(slow, field), field
    assert set(fast.examples) == set(slow.examples)
    assert fast.engines == {"polars": 1} and slow.engines == {"python": 1}


def _dirty_nginx(path: Path) -> None:
    good = (logs_dir_file := Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "nginx_upstream.log")
    lines = good.read_bytes().splitlines(keepends=True)
    blob = b"".join(lines[:40])
    blob += b"\x00\x01\x02binary junk\xff\xfe\n"              # binary
    blob += b"x" * (1 << 20) + b"\n"                           # a 1 MB line
    blob += b'"' * 5000 + b"\n"                                # a line of quotes
    blob += lines[40][:60] + b"\n"                             # truncated mid-line
    blob += lines[41].replace(b"python-requests", b"caf\xe9-client")  # not UTF-8
    blob += b"\n\n"
    blob += b"".join(lines[42:])
    blob += lines[0][:30]                                      # last line cut, no newline
    path.write_bytes(blob)
    assert logs_dir_file.exists()


@pytest.mark.parametrize("engine", ["python", "polars"])
def test_dirty_input_is_counted_never_fatal(tmp_path: Path, engine: str) -> None:
    if engine == "polars":
        needs_polars()
    path = tmp_path / "dirty.log"
    _dirty_nginx(path)
    stats, _ = parse_file(path, fmt="nginx", nginx_log_format=NGINX_UPSTREAM_FULL, engine=engine)
    assert stats.parsed == 94  # every good line (one was cut), including the non-UTF-8 one
    # binary, 1 MB, all-quotes, cut mid-line and cut at the end; the two blank lines are not skipped lines
    assert sum(stats.skipped.values()) == 5
    assert stats.notes["truncated_last_line"] == 1
    if engine == "python":
        assert stats.skipped["binary"] == 1 and stats.skipped["line_too_long"] == 1
        assert stats.notes["invalid_utf8"] == 1


def test_mixed_formats_in_one_file(tmp_path: Path, logs_dir: Path) -> None:
    """Each line goes to the format that reads it, whatever the first lines' format."""
    haproxy = (logs_dir / "haproxy.log").read_bytes()[:2000]
    haproxy = haproxy[: haproxy.rfind(b"\n") + 1]
    path = tmp_path / "mixed.log"
    path.write_bytes((logs_dir / "envoy_default.log").read_bytes() + haproxy)
    stats, name = parse_file(path)
    assert name == "envoy" and not stats.skipped
    assert stats.line_formats == {"envoy": 40, "haproxy": haproxy.count(b"\n")}


def test_sniffing_picks_each_format(logs_dir: Path) -> None:
    expected = {"nginx_upstream.log": "nginx", "nginx_combined.log": "nginx", "envoy_default.log": "envoy",
                "haproxy.log": "haproxy", "nginx_error.log": "nginx-error", "kern.log": "kernel",
                "app.jsonl": "jsonl", "envoy.jsonl": "jsonl", "traceback.log": "text"}
    for name, fmt in expected.items():
        lines = (logs_dir / name).read_text().splitlines()
        assert choose_format("auto", lines)[0].name == fmt, name
    assert choose_format("auto", [])[0].name == "text"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files without permission")
def test_unreadable_file(tmp_path: Path) -> None:  # pragma: no cover - CI runs as root here
    from infradoctor.logs.source import SourceError, open_source

    path = tmp_path / "secret.log"
    path.write_text("x\n")
    path.chmod(0)
    with pytest.raises(SourceError):
        open_source(path)


def test_corrupt_gzip_is_reported(tmp_path: Path, logs_dir: Path) -> None:
    data = gzip.compress((logs_dir / "envoy_default.log").read_bytes())
    path = tmp_path / "cut.log.gz"
    path.write_bytes(data[: len(data) // 2])
    stats, _ = parse_file(path, fmt="envoy")
    assert stats.skipped["read_error"] == 1


def test_lines_without_time_still_count(tmp_path: Path) -> None:
    path = tmp_path / "notime.log"
    path.write_text("upstream request timeout\n")
    stats, _ = parse_file(path, fmt="text")
    assert stats.events == {("upstream_timeout", str(path), NO_TIME, str(path), "m"): 1}
    assert not stats.timeline_lines


def test_istio_envoy_format(logs_dir: Path) -> None:
    stats, name = parse_file(logs_dir / "istio.log")
    assert name == "envoy" and stats.parsed == 4
    assert event_counts(stats) == {("upstream_connect_error", "10.44.2.9:8000"): 1, ("no_healthy_upstream", "-"): 1,
                                   ("upstream_timeout", "10.44.1.27:8000"): 1}
    assert stats.overhead_hist == {2: 1}


def test_user_envoy_format(tmp_path: Path) -> None:
    fmt = '%START_TIME% %RESPONSE_CODE% %RESPONSE_FLAGS% %DURATION% "%UPSTREAM_HOST%"'
    path = tmp_path / "envoy_custom.log"
    path.write_text('2026-11-29T10:00:00.000Z 504 UT 2000 "10.0.0.7:80"\n2026-11-29T10:00:01.000Z 200 - 12 "10.0.0.7:80"\n')
    source = open_source(path)
    chosen, share = choose_format("auto", read_sample(source), envoy_log_format=fmt)
    assert chosen.name == "envoy" and share == 1.0
    stats, _ = parse_file(path, envoy_log_format=fmt)
    assert event_counts(stats) == {("upstream_timeout", "10.0.0.7:80"): 1}


def test_unknown_nginx_format_is_derived_from_key_value_fields(tmp_path: Path) -> None:
    head = '10.0.0.5 - - [29/Nov/2026:10:00:0{s} +0000] "POST /v1/x HTTP/1.1" {st} 167 "-" "curl/8.5.0"'
    path = tmp_path / "custom.log"
    path.write_text(
        head.format(s=0, st=200) + ' rt=0.812 urt="0.810" ua="10.1.0.11:8000" us="200" cache=MISS\n'
        + head.format(s=1, st=504) + ' rt=1.001 urt="1.000" ua="10.1.0.13:8000" us="504" cache=MISS\n'
        + head.format(s=2, st=200) + ' rt=0.903 urt="0.001, 0.850" ua="10.1.0.12:8000, 10.1.0.11:8000" us="502, 200"'
        ' cache=-\n'
    )
    stats, name = parse_file(path)
    assert name == "nginx" and stats.parsed == 3
    assert event_counts(stats) == {("upstream_timeout", "10.1.0.13:8000"): 1}
    assert stats.attempts_hist == {1: 2, 2: 1} and stats.overhead_hist == {2: 1, 1: 1}


def test_unknown_tail_without_keys_still_gives_status_and_time(tmp_path: Path) -> None:
    path = tmp_path / "tail.log"
    path.write_text('10.0.0.5 - - [29/Nov/2026:10:00:00 +0000] "GET / HTTP/1.1" 502 157 "-" "curl/8.5.0" 0.004 '
                    '"backend-a" -\n')
    stats, name = parse_file(path)
    assert name == "nginx" and stats.parsed == 1
    assert event_counts(stats) == {("bad_gateway", "-"): 1}  # no $upstream_addr: nothing says which upstream


ENVELOPES = {
    "kubectl": lambda i, line: f"[pod/llm-{i % 3}/nginx] {line}",
    "cri": lambda i, line: f"2026-11-29T10:00:{i % 60:02d}.123456789Z stdout F {line}",
    "syslog": lambda i, line: f"<30>Nov 29 10:00:{i % 60:02d} edge-1 nginx[22]: {line}",
    "compose": lambda i, line: f"nginx-1  | {line}",
}


@pytest.mark.parametrize("envelope", sorted(ENVELOPES))
@pytest.mark.parametrize("name", ["nginx_upstream.log", "envoy_default.log"])
def test_polars_reads_enveloped_access_logs_as_python_does(tmp_path: Path, logs_dir: Path, name: str,
                                                           envelope: str) -> None:
    """The fast engine keeps its speed inside a plain-prefix envelope; both engines agree line for line."""
    needs_polars()
    wrap = ENVELOPES[envelope]
    lines = (logs_dir / name).read_text().splitlines()
    path = tmp_path / f"{envelope}.log"
    path.write_text("".join(wrap(i, line) + "\n" for i, line in enumerate(lines)) + "not an access line at all\n")
    bare, _ = parse_file(logs_dir / name, engine="python")
    slow, _ = parse_file(path, engine="python")
    fast, _ = parse_file(path, engine="polars")
    assert fast.engines == {"polars": 1}
    for field in ("lines", "parsed", "requests", "request_hist", "attempt_hist", "overhead_hist", "attempts_hist",
                  "timeline_kinds", "sig_durations", "skipped", "envoy_flags", "line_formats"):
        assert getattr(fast, field) == getattr(slow, field), field
    assert slow.requests == bare.requests and slow.request_hist == bare.request_hist
    assert event_counts(slow) == event_counts(bare) and slow.line_formats["text"] == 1

"""The polars engine and the Python engine give the same statistics on hostile access logs, line for line.

Real nginx (upstream_full, ingress, a custom key=value format) and Envoy lines, a few mutated (quotes, brackets,
nginx separators, flags, numbers polars and Python read differently), bare or in kubectl / CRI envelopes, with the
oddities files have: blank lines, CRLF, no final newline, lines over 64 KiB (an access line too), NUL bytes and bad
UTF-8 inside access lines; read in chunks small enough that lines are cut between reads. Seeded and bounded.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from infradoctor.logs.formats import ParseOptions, access_polars, choose, parse_source
from infradoctor.logs.source import open_source, read_sample
from infradoctor.logs.stats import LogStats

from .conftest import FIXTURES

FIELDS = ("lines", "parsed", "requests", "request_hist", "attempt_hist", "overhead_hist", "attempts_hist",
          "timeline_lines", "timeline_kinds", "events", "sig_durations", "skipped", "notes", "envoy_flags",
          "line_formats", "envelopes")
PIECES = (", ", " : ", "-", "]", "[", " ", "0", "9", ":", '"', ",", "x", "503", "UF", "UF,URX", "10.1.0.9:80",
          "backend", "0.5", "1e3", "1e0001", " 0.5", "-1", "", "Z", "+0100", "\t", "\u00e9", "\uff11", "  ")
"""What mutations insert: separators, quotes, flags, and numbers the engines could read differently."""
ENVELOPES: dict[str, Callable[[int, str], str]] = {
    "bare": lambda i, line: line,
    "kubectl": lambda i, line: f"[pod/llm-{i % 3}/nginx] {line}",
    "cri": lambda i, line: f"2026-11-29T10:00:{i % 60:02d}.123456789Z stdout F {line}",
}


def _custom_lines(rng: random.Random) -> list[str]:
    """nginx with a custom key=value format: multi-value fields (several tries) unquoted."""
    out = []
    for i in range(30):
        addr = rng.choice(["10.1.0.11:8000", "10.1.0.11:8000, 10.1.0.12:8000", "backends", "-",
                           "10.1.0.11:8000 : 10.1.0.12:8000"])
        tries = addr.count(", ") + addr.count(" : ") + 1
        single = addr in ("-", "backends")
        ustatus = "-" if single else ", ".join(rng.choice(["200", "502", "504"]) for _ in range(tries))
        utime = "-" if single else ", ".join(f"{rng.random():.3f}" for _ in range(tries))
        out.append(f'10.0.0.{i} - - [29/Nov/2026:10:00:{i:02d} +0000] "POST /v1 HTTP/1.1" '
                   f'{rng.choice([200, 499, 502, 503, 504])} 12 "-" "ua/1" ua={addr} us={ustatus} '
                   f"rt={rng.random():.3f} urt={utime} cache=HIT")
    return out


def _mutate(line: str, rng: random.Random) -> str:
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(line) + 1)
        piece = rng.choice(PIECES)
        choice = rng.random()
        if choice < 0.4:
            line = line[:at] + piece + line[at:]
        elif choice < 0.7:
            line = line[:at] + piece + line[min(len(line), at + rng.randint(1, 6)):]
        else:
            line = line[:at] + line[min(len(line), at + rng.randint(1, 4)):]
    return line


def _file(tmp_path: Path, rng: random.Random) -> Path:
    base = rng.choice([
        (FIXTURES / "nginx_upstream.log").read_text().splitlines(),
        (FIXTURES / "envoy_default.log").read_text().splitlines(),
        (FIXTURES / "nginx_ingress.log").read_text().splitlines(),
        _custom_lines(rng),
    ])
    lines = list(base)
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(len(lines))
        lines[at] = _mutate(lines[at], rng)
    if rng.random() < 0.2:
        lines.insert(rng.randrange(len(lines)), "x" * rng.choice([65535, 65536, 70000]))
    if rng.random() < 0.15:  # a good access line over 64 KiB
        lines.insert(rng.randrange(len(lines)), rng.choice(base).replace(" HTTP/1.1", "x" * 66000 + " HTTP/1.1", 1))
    if rng.random() < 0.2:
        lines.insert(rng.randrange(len(lines)), "")
    wrap = ENVELOPES[rng.choice(sorted(ENVELOPES))]
    text = "".join(wrap(i, line) + "\n" for i, line in enumerate(lines))
    if rng.random() < 0.3:
        text = text[:-1]
    if rng.random() < 0.2:
        text = text.replace("\n", "\r\n")
    data = text.encode()
    if rng.random() < 0.2:  # NUL or bad UTF-8 in an access line
        at = data.find(b"python-")
        if at >= 0:
            data = data[:at] + rng.choice([b"\x00", b"\xff", b"\xe9t\xe9", b"\xc3"]) + data[at:]
    path = tmp_path / "access.log"
    path.write_bytes(data)
    return path


def _parse(path: Path, engine: str) -> LogStats:
    source = open_source(path)
    stats = LogStats()
    parse_source(source, choose("auto", read_sample(source), year=2026), stats,
                 ParseOptions(engine=engine, polars_min_bytes=0))
    return stats


@pytest.mark.parametrize("seed", range(8))
def test_engines_agree_on_hostile_access_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    pytest.importorskip("polars")
    rng = random.Random(seed)
    for case in range(6):
        path = _file(tmp_path, rng)
        monkeypatch.setattr(access_polars, "CHUNK_BYTES", rng.choice([1 << 24, 70_000, 4096, 333]))
        fast, slow = _parse(path, "polars"), _parse(path, "python")
        if fast.engines != {"polars": 1}:
            continue  # the sample did not read as one access layout
        for field in FIELDS:
            assert getattr(fast, field) == getattr(slow, field), (seed, case, field)
        assert set(fast.examples) == set(slow.examples), (seed, case)

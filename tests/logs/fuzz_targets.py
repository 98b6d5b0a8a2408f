"""Every entry point of the logs command that reads untrusted text, as ``name -> function(text)``, and hostile inputs.

Shared by the fuzz tests (tests/logs/test_fuzz.py: seeded, bounded) and the long fuzz run
(benchmarks/bench_logs_fuzz.py: 100k cases per target, crashes, slowest case, peak memory). A target must never
raise (a format string that does not compile raises :class:`FormatError`, which is the documented usage error), and
its time must stay linear in the input.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from infradoctor.logs.envelope import EnvelopeReader
from infradoctor.logs.formats.envoy_text import parse_envoy_text
from infradoctor.logs.formats.haproxy import parse_haproxy
from infradoctor.logs.formats.jsonl import parse_key_values
from infradoctor.logs.formats.layout import (
    TIME_EPOCH,
    TIME_ISO,
    TIME_LOCAL,
    FormatError,
    compile_envoy,
    compile_nginx,
    derive_nginx_format,
    parse_time,
)
from infradoctor.logs.formats.router import FORMAT_NAMES, choose, read_lines
from infradoctor.logs.formats.text import message_of
from infradoctor.logs.formats.timestamps import line_time
from infradoctor.logs.signatures import match_text_all
from infradoctor.logs.stats import LogStats
from infradoctor.xid import KernelLineReader, event_info, normalise_pci, parse_xid_line

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "logs"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def _lines(text: str) -> list[str]:
    return text.split("\n")[:2000]


def _envelopes(text: str) -> None:
    reader = EnvelopeReader(2026)
    for line in _lines(text):
        reader.unwrap(line)
    reader.flush()


def _router(fmt: str) -> Callable[[str], None]:
    def read(text: str) -> None:
        lines = _lines(text)
        choice = choose(fmt, lines[:40], year=2026)
        read_lines(lines, choice, LogStats(), "fuzz")

    return read


def _kernel(text: str) -> None:
    reader = KernelLineReader()
    for line in _lines(text):
        event = reader.feed(line)
        if event is not None:
            event_info(event.code, event.message)


def _compile(text: str) -> None:
    for compile_format in (compile_envoy, compile_nginx):
        try:
            layout = compile_format(text)
        except FormatError:
            continue
        layout.line_regex().match(text)


def _times(text: str) -> None:
    line_time(text, 2026)
    for kind in (TIME_ISO, TIME_LOCAL, TIME_EPOCH, "strftime:%d/%m/%YT%H:%M:%S%z %s"):
        parse_time(kind, text)


TARGETS: dict[str, Callable[[str], object]] = {
    "envelopes": _envelopes,
    **{f"router:{fmt}": _router(fmt) for fmt in FORMAT_NAMES},
    "kernel_reader": _kernel,
    "parse_xid_line": parse_xid_line,
    "normalise_pci": normalise_pci,
    "signatures": match_text_all,
    "app_prefixes": message_of,
    "haproxy": parse_haproxy,
    "envoy_text": parse_envoy_text,
    "key_values": parse_key_values,
    "derive_nginx": derive_nginx_format,
    "format_strings": _compile,
    "timestamps": _times,
}
"""Every entry point, by name."""


def seed_lines() -> list[str]:
    """Real lines to mutate: the corpus and the fixtures (first 2,000)."""
    out: list[str] = []
    for path in sorted([*CORPUS.glob("*.log"), *FIXTURES.glob("*.log"), *FIXTURES.glob("*.jsonl")]):
        out += path.read_text(encoding="utf-8", errors="replace").splitlines()
    return out[:2000]


HOSTILE_UNITS = ("1:", "[", "]", '"', " ", "a=", "a=\"", "\\", "{\"a\":", "[pod/", "<1>", "0/", "-1/", ", ",
                 "NVRM: Xid (", "upstream", "x" * 7, "\t", "%", "%A(", "=\"", "::", ". ", "0", "Jan 1 ")
"""Short units repeated to build the inputs that make backtracking regular expressions quadratic."""


def hostile_inputs(size: int = 100_000) -> dict[str, str]:
    """Inputs of about ``size`` characters known to trip naive parsers (one line each, or many short lines)."""
    out = {f"repeat {unit!r}": (unit * (size // len(unit) + 1))[:size] for unit in HOSTILE_UNITS}
    out["xid with a long address"] = "NVRM: Xid (PCI:" + "0" * size + "): 79, pid=1, GPU has fallen off the bus."
    out["deep json"] = '{"a":' * (size // 6) + "1" + "}" * (size // 6)
    out["deep array"] = "[" * (size // 2) + "]" * (size // 2)
    out["envoy line with a long path"] = ('[2026-11-29T10:00:00.000Z] "GET /' + "a" * size
                                          + ' HTTP/1.1" 503 UF 0 91 0 - "-" "-" "-" "-" "10.0.0.1:80"')
    out["haproxy timers everywhere"] = " ".join(["0/0/0/0/0"] * (size // 10))
    out["nginx prefix then spaces"] = '1.2.3.4 - - [29/Nov/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 1 "-" "-"' + (
        " " * size) + "x"
    out["many short lines"] = "\n".join(["1:2:3 [x] \"y\" a=b"] * (size // 20))
    return out


def mutate(line: str, rng: random.Random, alphabet: str = '"[]{}:/ =,\\-.0123456789aZ%\x00\t\u00e9') -> str:
    """A real line with a few random edits (insert, delete, duplicate a slice, cut)."""
    text = line
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        at = rng.randint(0, len(text))
        if choice < 0.35:
            text = text[:at] + rng.choice(alphabet) * rng.randint(1, 8) + text[at:]
        elif choice < 0.6 and text:
            end = min(len(text), at + rng.randint(1, 20))
            text = text[:at] + text[end:]
        elif choice < 0.85 and text:
            end = min(len(text), at + rng.randint(1, 40))
            text = text[:at] + text[at:end] * rng.randint(2, 6) + text[end:]
        else:
            text = text[:at]
    return text

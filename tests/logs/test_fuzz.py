"""Random bytes never crash a parser, and every line is accounted for."""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infradoctor.logs.formats import choose_format
from infradoctor.logs.formats.base import ParseOptions
from infradoctor.logs.source import open_source, read_sample
from infradoctor.logs.stats import LogStats

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
GOOD = (FIXTURES / "nginx_upstream.log").read_bytes().splitlines()[:20]

junk_line = st.one_of(
    st.binary(max_size=300).map(lambda b: b.replace(b"\n", b" ")),
    st.sampled_from(GOOD).flatmap(lambda line: st.integers(0, len(line)).map(lambda n: line[:n])),
    st.sampled_from(GOOD),
    st.just(b'"' * 50),
    st.just(b""),
)


@pytest.mark.parametrize("fmt", ["auto", "nginx", "envoy", "haproxy", "nginx-error", "jsonl", "kernel", "text"])
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(junk_line, max_size=40), newline_at_end=st.booleans())
def test_random_lines_are_counted_not_fatal(tmp_path: Path, fmt: str, lines: list[bytes],
                                            newline_at_end: bool) -> None:
    path = tmp_path / "junk.log"
    data = b"\n".join(lines) + (b"\n" if newline_at_end and lines else b"")
    path.write_bytes(data)
    source = open_source(path)
    chosen, _ = choose_format(fmt, read_sample(source))
    raw_lines = data.split(b"\n")[: data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)]
    for engine in ("python", "polars"):
        stats = LogStats()
        chosen.parse(source, stats, ParseOptions(engine=engine, polars_min_bytes=0))
        assert stats.lines == len(raw_lines)
        if stats.engines["polars"]:  # polars: only empty lines are blank
            blank = sum(1 for line in raw_lines if not line)
        else:  # Python: whitespace-only lines are blank (binary ones are skipped as binary)
            blank = sum(1 for line in raw_lines if b"\x00" not in line and not line.decode("utf-8", "replace").strip())
        assert stats.parsed + sum(stats.skipped.values()) + blank == stats.lines, (engine, stats.skipped)

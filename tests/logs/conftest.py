from __future__ import annotations

from pathlib import Path

import pytest

from infradoctor.logs.formats import ParseOptions, choose, parse_source
from infradoctor.logs.source import open_source, read_sample
from infradoctor.logs.stats import LogStats

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def parse_file(path: Path, fmt: str = "auto", engine: str = "python", nginx_log_format: str | None = None,
               year: int = 2026, envoy_log_format: str | None = None) -> tuple[LogStats, str]:
    """Sniff and parse one file into fresh stats, as the command does; returns (stats, primary format name)."""
    source = open_source(path)
    choice = choose(fmt, read_sample(source), nginx_log_format=nginx_log_format, envoy_log_format=envoy_log_format,
                    year=year)
    stats = LogStats()
    parse_source(source, choice, stats, ParseOptions(engine=engine, polars_min_bytes=0))
    return stats, choice.primary.name


@pytest.fixture
def logs_dir() -> Path:
    return FIXTURES

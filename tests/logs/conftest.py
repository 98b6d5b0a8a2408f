from __future__ import annotations

from pathlib import Path

import pytest

from infradoctor.logs.formats import ParseOptions, choose_format
from infradoctor.logs.source import open_source, read_sample
from infradoctor.logs.stats import LogStats

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def parse_file(path: Path, fmt: str = "auto", engine: str = "python", nginx_log_format: str | None = None,
               year: int = 2026) -> tuple[LogStats, str]:
    """Sniff and parse one file into fresh stats; returns (stats, format name)."""
    source = open_source(path)
    chosen, _ = choose_format(fmt, read_sample(source), nginx_log_format=nginx_log_format, year=year)
    stats = LogStats()
    chosen.parse(source, stats, ParseOptions(engine=engine, polars_min_bytes=0))
    return stats, chosen.name


@pytest.fixture
def logs_dir() -> Path:
    return FIXTURES

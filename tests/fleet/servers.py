"""A real Prometheus (Debian's package) on loopback: over a backfilled TSDB, or scraping real exporters."""

from __future__ import annotations

import subprocess
import textwrap
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from infradoctor.procs import free_port, run_capture, stop_process, wait_for_http
from tests.fleet.history import Fleet, write_openmetrics
from tests.support.servers import require_binary


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen[bytes]
    data: Path
    log: Path


def backfill(fleet: Fleet, tmp_path: Path, *, timeout: float = 240.0) -> tuple[Path, int]:
    """The fleet's history written as OpenMetrics and turned into TSDB blocks by ``promtool``."""
    promtool = require_binary("promtool")
    source = tmp_path / "history.om"
    samples = write_openmetrics(fleet, source)
    data = tmp_path / "tsdb"
    data.mkdir(exist_ok=True)
    done = run_capture([promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
                       timeout=timeout)
    if not done.ok:
        raise RuntimeError(f"promtool create-blocks failed: {done.reason}\n{done.stderr[-2000:].decode(errors='replace')}")
    source.unlink()
    return data, samples


@contextmanager
def prometheus(tmp_path: Path, *, data: Path | None = None, scrape: Sequence[tuple[str, str, float]] = (),
               extra_args: Sequence[str] = (), timeout: float = 60.0) -> Iterator[Prometheus]:
    """Prometheus on a free loopback port; ``scrape`` lists (job, host:port, interval_s) targets."""
    binary = require_binary("prometheus")
    port = free_port()
    data = data or (tmp_path / "tsdb")
    data.mkdir(exist_ok=True)
    jobs = "".join(textwrap.dedent(f"""
      - job_name: {job}
        scrape_interval: {interval:g}s
        static_configs:
          - targets: ['{target}']
    """) for job, target, interval in scrape)
    config = tmp_path / f"prometheus_{port}.yml"
    config.write_text("global:\n  scrape_interval: 15s\nscrape_configs:" + (jobs or " []\n"), encoding="utf-8")
    log = tmp_path / f"prometheus_{port}.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={data}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=30d",
             "--web.enable-lifecycle", *extra_args],
            stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_for_http(f"{url}/-/ready", timeout=timeout, proc=proc):
            raise RuntimeError(f"prometheus did not start:\n{log.read_text(errors='replace')[-3000:]}")
        yield Prometheus(url, proc, data, log)
    finally:
        stop_process(proc, grace_s=10.0)

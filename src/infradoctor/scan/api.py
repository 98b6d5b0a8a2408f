"""The library entry of ``infradoctor scan``: options in, a result out (no printing, no argv, no exit)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infradoctor.result import Result
    from infradoctor.scan.engine import ScanOptions


def run(options: ScanOptions, paths: Sequence[str]) -> Result:
    """Scan ``paths`` and return the result (findings, file problems as errors, typed metrics).

    Raises:
        ConfigError: a pyproject.toml or the selection names an unknown code or key.
    """
    from infradoctor.result import utc_now_iso
    from infradoctor.scan.engine import scan_paths
    from infradoctor.scan.output import to_result

    started_at = utc_now_iso()
    return to_result(scan_paths(paths, options), started_at=started_at, paths=paths)

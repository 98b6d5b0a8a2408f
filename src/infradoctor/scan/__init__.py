"""``infradoctor scan``: static checks for AI-serving and PyTorch anti-patterns (codes C001-C014).

``run(options, paths) -> Result`` is the library entry. Per file: an index of its declarations
(:mod:`~infradoctor.scan.index`), one shared visitor pass (:mod:`~infradoctor.scan.visitor`) that keeps the place
(:mod:`~infradoctor.scan.context`) and resolves what names hold (:mod:`~infradoctor.scan.values`), and dispatch to
one rule module per code (:mod:`~infradoctor.scan.dispatch`, :mod:`~infradoctor.scan.rules`).

Result ``metrics`` layout:

- ``headline``: ``findings``, ``files_scanned``, ``lines_scanned``, ``file_problems`` (files that could not be
  scanned: parse errors, bad encoding, too large, unreadable, missing; each is also in ``errors`` as
  ``scan:<kind>``, and any but ``fix-failed`` makes the command exit 1, or 2 for a missing path), ``suppressed``
  (``# noqa``),
  ``fixes_applied``, ``lines_per_s``.
- ``by_code``: ``{code: count}`` of findings.
- ``by_file``: ``{path: count}`` for the 50 files with most findings.
- ``fixes``: ``[{file, line, code, description}]`` written by ``--fix``.
- ``selected``: codes that ran; ``config``: pyproject.toml files that configured the scan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infradoctor._lazy import lazy_exports

if TYPE_CHECKING:
    from infradoctor.scan.api import run
    from infradoctor.scan.engine import ScanOptions, ScanReport, Violation, scan_paths, scan_source

__getattr__ = lazy_exports(__name__, {
    "ScanOptions": "engine",
    "ScanReport": "engine",
    "Violation": "engine",
    "run": "api",
    "scan_paths": "engine",
    "scan_source": "engine",
})

__all__ = ["ScanOptions", "ScanReport", "Violation", "run", "scan_paths", "scan_source"]

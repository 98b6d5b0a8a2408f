"""``[tool.infradoctor.scan]`` in pyproject.toml: select, ignore, per-file-ignores, exclude.

The configuration is the nearest ``pyproject.toml`` that has a ``[tool.infradoctor.scan]`` table, found by walking
up from each scanned path (as ruff does); command-line ``--select`` replaces the configured selection and
``--ignore`` adds to the configured ignores. Codes may be prefixes (``C0``, ``C01``).
"""

from __future__ import annotations

import fnmatch
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infradoctor.findings import catalog

if sys.version_info >= (3, 11):
    import tomllib as _toml
else:  # pragma: no cover - Python 3.10
    try:
        import tomli as _toml  # type: ignore[import-not-found,no-redef]
    except ModuleNotFoundError:
        _toml = None

SCAN_CODES: tuple[str, ...] = tuple(sorted(code for code, rule in catalog().items() if rule.group == "C"))
"""Every code the scan can emit."""
PREVIEW_CODES: frozenset[str] = frozenset(code for code in SCAN_CODES if catalog()[code].preview)
"""Rules in preview: not precise enough on real code yet, so they run only when selected by their exact code."""
DEFAULT_CODES: tuple[str, ...] = tuple(code for code in SCAN_CODES if code not in PREVIEW_CODES)
"""The codes that run when nothing is selected."""

_KEYS = frozenset({"select", "ignore", "per-file-ignores", "exclude"})


class ConfigError(ValueError):
    """The configuration is invalid (unknown key, code or type)."""


def expand_codes(selectors: Iterable[str], *, source: str, preview: bool = False) -> frozenset[str]:
    """Scan codes matching code prefixes (``C0`` -> C001..C014); ``ALL`` means every default code.

    A preview rule is matched only by its exact code (``C012``), as ruff does with preview rules, unless
    ``preview`` (for ``--ignore``: a prefix ignores preview rules too).
    """
    out: set[str] = set()
    for raw in selectors:
        sel = raw.strip().upper()
        if not sel:
            continue
        if sel == "ALL":
            out.update(SCAN_CODES if preview else DEFAULT_CODES)
            continue
        if sel in PREVIEW_CODES:
            out.add(sel)
            continue
        matched = [c for c in SCAN_CODES if c.startswith(sel) and (preview or c not in PREVIEW_CODES)]
        if not matched and any(c.startswith(sel) for c in SCAN_CODES):
            continue  # only preview rules match the prefix: nothing more to run
        if not matched:
            raise ConfigError(f"{source}: {raw!r} matches no scan code (codes are {SCAN_CODES[0]}..{SCAN_CODES[-1]})")
        out.update(matched)
    return frozenset(out)


@dataclass(frozen=True)
class ScanConfig:
    """The effective configuration for files under one project root."""

    root: Path | None = None
    """Directory of the pyproject.toml it came from; None for defaults."""
    select: frozenset[str] = frozenset(DEFAULT_CODES)
    """Codes that run."""
    per_file_ignores: tuple[tuple[str, frozenset[str]], ...] = ()
    """(glob, codes) pairs; globs are relative to :attr:`root` (or match the file name)."""
    exclude: tuple[str, ...] = ()
    """Globs of files and directories not to scan."""
    source: str | None = None
    """Path of the pyproject.toml, when there was one."""
    ignored_by_file: dict[str, frozenset[str]] = field(default_factory=dict, compare=False, hash=False)
    """Cache of per-file ignore lookups."""

    def _relative(self, path: Path) -> str:
        if self.root is not None:
            try:
                return path.resolve().relative_to(self.root).as_posix()
            except (ValueError, OSError):
                pass
        return path.as_posix()

    def ignored_for(self, path: Path) -> frozenset[str]:
        """Codes ignored in one file by per-file-ignores."""
        if not self.per_file_ignores:
            return frozenset()
        rel = self._relative(path)
        cached = self.ignored_by_file.get(rel)
        if cached is not None:
            return cached
        out: set[str] = set()
        for pattern, codes in self.per_file_ignores:
            if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(path.name, pattern):
                out |= codes
        result = frozenset(out)
        self.ignored_by_file[rel] = result
        return result

    def excluded(self, path: Path) -> bool:
        """The path matches an ``exclude`` glob."""
        if not self.exclude:
            return False
        rel = self._relative(path)
        return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(path.name, p) for p in self.exclude)


def _codes(value: Any, key: str, source: str, *, preview: bool = False) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{source}: [tool.infradoctor.scan] {key} must be a list of codes")
    return expand_codes(value, source=f"{source} {key}", preview=preview)


def parse_table(table: Mapping[str, Any], *, root: Path | None, source: str) -> ScanConfig:
    """A :class:`ScanConfig` from the ``[tool.infradoctor.scan]`` table."""
    unknown = set(table) - _KEYS
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) in [tool.infradoctor.scan]: {', '.join(sorted(unknown))}")
    select = _codes(table["select"], "select", source) if "select" in table else frozenset(DEFAULT_CODES)
    ignore = _codes(table["ignore"], "ignore", source, preview=True) if "ignore" in table else frozenset()
    pfi_raw = table.get("per-file-ignores", {})
    if not isinstance(pfi_raw, Mapping):
        raise ConfigError(f"{source}: per-file-ignores must be a table of glob = [codes]")
    pfi = tuple((str(glob), _codes(codes, f"per-file-ignores {glob!r}", source, preview=True))
                for glob, codes in pfi_raw.items())
    exclude = table.get("exclude", [])
    if not isinstance(exclude, list) or not all(isinstance(e, str) for e in exclude):
        raise ConfigError(f"{source}: exclude must be a list of globs")
    return ScanConfig(root=root, select=select - ignore, per_file_ignores=pfi, exclude=tuple(exclude),
                      source=source)


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml with a ``[tool.infradoctor.scan]`` table at or above ``start``."""
    try:
        here = start.resolve()
    except (OSError, RuntimeError):
        return None
    if not here.is_dir():
        here = here.parent
    for directory in (here, *here.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            try:
                text = candidate.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if "infradoctor" in text:
                return candidate
    return None


def load_config(pyproject: Path) -> ScanConfig:
    """Read one pyproject.toml; a file without the table gives the defaults."""
    if _toml is None:
        raise ConfigError(f"{pyproject}: reading pyproject.toml on Python 3.10 needs the 'tomli' package")
    try:
        data = _toml.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{pyproject}: cannot read: {exc}") from exc
    table = data.get("tool", {}).get("infradoctor", {}).get("scan")
    if table is None:
        return ScanConfig()
    if not isinstance(table, Mapping):
        raise ConfigError(f"{pyproject}: [tool.infradoctor.scan] must be a table")
    return parse_table(table, root=pyproject.parent.resolve(), source=str(pyproject))


def with_cli(config: ScanConfig, select: Sequence[str] | None, ignore: Sequence[str] | None) -> ScanConfig:
    """Apply ``--select`` (replaces) and ``--ignore`` (adds)."""
    chosen = expand_codes(select, source="--select") if select else config.select
    dropped = expand_codes(ignore, source="--ignore", preview=True) if ignore else frozenset()
    return ScanConfig(root=config.root, select=chosen - dropped, per_file_ignores=config.per_file_ignores,
                      exclude=config.exclude, source=config.source)


def display_path(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when under it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel

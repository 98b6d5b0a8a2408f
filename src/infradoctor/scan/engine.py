"""Scanning files: discovery, reading, parsing, the shared visitor, suppression, configuration and safe fixes.

:func:`scan_paths` is the library entry point; :func:`scan_source` scans one string (tests, benchmarks).
Bad input never stops a scan: a file that cannot be read, decoded or parsed becomes a :class:`FileProblem` and the
scan continues with the next file.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import io
import os
import re
import stat
import sys
import tempfile
import time
import tokenize
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

from infradoctor.findings import catalog
from infradoctor.scan import launchers
from infradoctor.scan.config import (
    DEFAULT_CODES,
    SCAN_CODES,
    ScanConfig,
    display_path,
    find_pyproject,
    load_config,
    with_cli,
)
from infradoctor.scan.context import Hit
from infradoctor.scan.dispatch import RuleSet
from infradoctor.scan.knowledge import TEST_DIR_RE, TEST_FILE_RE
from infradoctor.scan.violations import FIX_ONLY_PROBLEMS, AppliedFix, FileProblem, Violation
from infradoctor.scan.visitor import visit_file

__all__ = ["FIX_ONLY_PROBLEMS", "AppliedFix", "FileProblem", "ScanOptions", "ScanReport", "Violation", "scan_paths",
           "scan_source"]

MAX_FILE_BYTES = 10 * 1024 * 1024
"""Files larger than this (10 MiB) are skipped with a problem note: generated code, not something to lint."""

MAX_LAUNCHER_BYTES = 1024 * 1024
"""Launcher files (Dockerfiles, shell, YAML) larger than this (1 MiB) are data, not launchers: skipped quietly."""

DEFAULT_EXCLUDED_DIRS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox", ".mypy_cache", ".ruff_cache",
     ".pytest_cache", "node_modules", ".infradoctor", ".eggs"}
)
"""Directory names skipped while walking a directory (not when named on the command line)."""

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,?\s*[A-Z]+[0-9]+)*))?", re.IGNORECASE)


@dataclass(frozen=True)
class ScanReport:
    """Everything one scan found."""

    violations: tuple[Violation, ...]
    """Findings left after suppression, configuration and fixes, in path/line order."""
    problems: tuple[FileProblem, ...]
    """Files that could not be scanned."""
    fixes: tuple[AppliedFix, ...]
    """Fixes written by ``--fix``."""
    files_scanned: int
    """Files checked: Python files parsed, and launcher files read for C013's command lines."""
    lines_scanned: int
    """Lines in the parsed files."""
    suppressed: int
    """Findings silenced by ``# noqa``."""
    duration_s: float
    """Wall time of the scan."""
    selected: tuple[str, ...]
    """Codes that ran (before per-file ignores)."""
    config_sources: tuple[str, ...] = ()
    """pyproject.toml files that configured the scan."""

    @property
    def unchecked(self) -> tuple[FileProblem, ...]:
        """Problems that left a file (or path) unchecked: everything but a fix that could not be written."""
        return tuple(p for p in self.problems if p.kind not in FIX_ONLY_PROBLEMS)

    @property
    def missing(self) -> tuple[FileProblem, ...]:
        """Paths named by the caller that do not exist."""
        return tuple(p for p in self.problems if p.kind == "not-found")


@dataclass
class ScanOptions:
    """How to scan."""

    select: Sequence[str] | None = None
    """``--select`` code prefixes (replace the configured selection)."""
    ignore: Sequence[str] | None = None
    """``--ignore`` code prefixes (added to the configured ignores)."""
    fix: bool = False
    """Apply safe fixes in place."""
    unsafe_fixes: bool = False
    """With ``fix``: also apply fixes that may change behaviour (C014 where the checkpoint may hold objects)."""
    include_tests: bool = False
    """Run the performance rules on test code too (``tests/``, ``test_*.py``); by default only C013 and C014 do."""
    use_config: bool = True
    """Read ``[tool.infradoctor.scan]`` from pyproject.toml."""
    max_file_bytes: int = MAX_FILE_BYTES
    """Skip larger files."""
    clock: Any = field(default=time.perf_counter)
    """Monotonic clock in seconds (injected in tests)."""


@lru_cache(maxsize=1)
def rule_modules() -> dict[str, ModuleType]:
    """The scan rule modules by code."""
    modules: dict[str, ModuleType] = {}
    for code, rule in catalog().items():
        if rule.module.startswith("infradoctor.scan.rules."):
            modules[code] = sys.modules[rule.module]
    return modules


@lru_cache(maxsize=64)
def rule_set(codes: frozenset[str]) -> RuleSet:
    """The indexed rules for a set of codes."""
    modules = rule_modules()
    return RuleSet.from_modules(modules[c] for c in sorted(codes) if c in modules)


# -- one file ------------------------------------------------------------------------------------------------
def decode_source(data: bytes) -> str:
    """Text of a Python file: UTF-8 (with or without BOM), else the PEP 263 coding cookie.

    Raises:
        UnicodeDecodeError: the bytes are not valid in the file's encoding.
        SyntaxError: the coding cookie names an unknown encoding.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        if encoding.replace("_", "-").lower() in ("utf-8", "utf-8-sig"):
            raise
        return data.decode(encoding)


def noqa_codes(line: str) -> frozenset[str] | None:
    """Codes a line's ``# noqa`` comment suppresses: empty set for a bare ``# noqa`` (all), None without one."""
    if "noqa" not in line.lower():
        return None
    match = _NOQA.search(line)
    if match is None:
        return None
    codes = match.group("codes")
    if not codes:
        return frozenset()
    return frozenset(c.upper() for c in re.findall(r"[A-Za-z]+[0-9]+", codes))


def _silences(line: str, code: str) -> bool:
    """The line's ``# noqa`` (bare, or naming ``code``) silences ``code``."""
    codes = noqa_codes(line)
    return codes is not None and (not codes or code in codes)


def _suppressed(hit: Hit, lines: Sequence[str]) -> bool:
    numbers = {hit.line, hit.end_line}
    return any(_silences(lines[number - 1], hit.code) for number in numbers if 1 <= number <= len(lines))


def _char_col(line: str, byte_col: int) -> int:
    """1-based character column from a 0-based UTF-8 byte offset."""
    if line.isascii():
        return byte_col + 1
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="replace")) + 1


def is_test_path(relative: str) -> bool:
    """A path (relative to the scanned folder's parent, or a file's name) is test code: ``tests/``, ``test_*.py``."""
    return TEST_FILE_RE.search(relative.replace("\\", "/")) is not None


def in_test_folder(relative: str) -> bool:
    """A path under a folder of test code (``tests/``, ``integration-tests/``)."""
    return TEST_DIR_RE.search(relative.replace("\\", "/")) is not None


def run_rules(tree: ast.Module, path: str, codes: frozenset[str], *, test: bool = False, test_folder: bool = False
              ) -> tuple[list[Hit], dict[str, Any]]:
    """The hits of the selected rules on a parsed module (one visitor pass) and the file's cross-file facts.

    In test code (``test``) only the rules that are not about performance run: a one-off forward or a loader in a
    unit test is not worth a finding.
    """
    if test:
        codes = codes & TEST_CODES
    elif test_folder:
        codes = codes - TEST_FOLDER_SKIPPED
    ctx = visit_file(tree, path, rule_set(codes), test=test, test_folder=test_folder)
    return [h for h in ctx.hits if h.code in codes], ctx.facts


TEST_CODES = frozenset({"C013", "C014"})
"""Rules that run on test code by default (security and deployment; the others are about performance)."""

TEST_FOLDER_SKIPPED = frozenset({"C006", "C007", "C009", "C010", "C011"})
"""Rules that do not run on the other files of a test folder (helpers, scripts a test starts, servers for
end-to-end tests): loops and data loading there run a test's few samples. Request handlers there are still checked
(C001, C003, C004)."""


@dataclass
class _FileOutcome:
    violations: list[Violation]
    hits: list[Hit]
    suppressed: int
    lines: int
    deferred: list[tuple[tuple[str, str], Violation]] = field(default_factory=list)
    """Violations that count only if another scanned file provides a fact (``Hit.requires``)."""
    facts: dict[str, Any] = field(default_factory=dict)
    """What this file provides to rules in other files."""


def _check_text(text: str, display: str, codes: frozenset[str], *, test: bool = False,
                test_folder: bool = False, unsafe_fixes: bool = False) -> _FileOutcome:
    """Parse and check one file's text (raises SyntaxError/ValueError/RecursionError on unparsable input)."""
    tree = ast.parse(text, filename=display)
    lines = text.splitlines()
    hits, facts = run_rules(tree, display, codes, test=test, test_folder=test_folder)
    kept: list[Hit] = []
    suppressed = 0
    for hit in hits:
        if _suppressed(hit, lines):
            suppressed += 1
        else:
            kept.append(hit)
    kept.sort(key=lambda h: (h.line, h.byte_col, h.code))
    unique: list[Hit] = []
    seen: set[tuple[str, int, int]] = set()
    for hit in kept:
        key = (hit.code, hit.line, hit.byte_col)
        if key not in seen:
            seen.add(key)
            unique.append(hit)
    violations = []
    deferred: list[tuple[tuple[str, str], Violation]] = []
    immediate: list[Hit] = []
    for hit in unique:
        line = lines[hit.line - 1] if 0 < hit.line <= len(lines) else ""
        end_line = lines[hit.end_line - 1] if 0 < hit.end_line <= len(lines) else ""
        applies = hit.edit is not None and (hit.edit.safe or unsafe_fixes)
        violation = Violation(
            code=hit.code, path=display, line=hit.line, column=_char_col(line, hit.byte_col),
            end_line=hit.end_line, end_column=_char_col(end_line, hit.end_byte_col), message=hit.message,
            evidence=hit.evidence, function=hit.function, line_text=line.strip(), fixable=applies,
            severity=hit.severity, unsafe_fix=hit.edit is not None and not hit.edit.safe,
        )
        if not applies:
            hit.edit = None
        if hit.requires is not None:
            deferred.append((hit.requires, violation))
        else:
            violations.append(violation)
            immediate.append(hit)
    return _FileOutcome(violations, immediate, suppressed, len(lines), deferred, facts)


def _check_launcher(text: str, display: str, codes: frozenset[str], file_kind: str) -> _FileOutcome:
    """A launcher file (Dockerfile, Procfile, shell, Compose, Kubernetes): the rules' ``check_launcher`` hooks.

    What they find counts only if the scan finds the fact it requires in another file (see
    :func:`resolve_cross_file`); a ``# noqa`` on the line, or on a comment line just above (a Dockerfile has no
    trailing comments), silences it.
    """
    lines = launchers.lines_of(text)
    outcome = _FileOutcome([], [], 0, len(lines))
    for code, hook in rule_set(codes).launcher_checks.items():
        for requires, violation in hook(text, display, file_kind, lines):
            line = lines[violation.line - 1] if 0 < violation.line <= len(lines) else ""
            above = lines[violation.line - 2].strip() if violation.line >= 2 else ""
            if _silences(line, code) or (above.startswith("#") and _silences(above, code)):
                outcome.suppressed += 1
            else:
                outcome.deferred.append((requires, violation))
    return outcome


Nearest = Callable[[Sequence[Path | str]], "tuple[str, dict[str, Any]] | None"]
"""Looks up the nearest scanned file at one of some relative paths, from a file's folder upward."""


def resolve_cross_file(outcomes: Sequence[tuple[str, _FileOutcome]]) -> dict[int, list[Violation]]:
    """The deferred violations whose required fact the named module provides, by index into ``outcomes``.

    The module is found the way Python would find it when started from the requiring file's folder or one above
    it: ``pkg.main`` is ``pkg/main.py`` (or ``pkg/main/__init__.py``) under that folder, else under its parent, and
    so on up; the nearest scanned file that is that module decides, whether or not it has the fact. A module that is
    not among the scanned files decides nothing. The rule's ``resolve_cross_file`` hook completes each violation
    (or drops it).
    """
    files: dict[Path, tuple[str, dict[str, Any]]] = {}  # by absolute path: display paths mix relative and absolute
    for display, outcome in outcomes:
        files.setdefault(_absolute(display), (display, outcome.facts))
    hooks = rule_set(frozenset(SCAN_CODES)).cross_file
    found: dict[int, list[Violation]] = {}
    for index, (display, outcome) in enumerate(outcomes):
        for (fact, module), violation in outcome.deferred:
            relative = Path(*module.split("."))
            entry = _nearest(display, [relative.parent / f"{relative.name}.py", relative / "__init__.py"], files)
            if entry is None or fact not in entry[1]:
                continue
            hook = hooks.get(violation.code)

            def nearest(relatives: Sequence[Path | str], _display: str = display) -> tuple[str, dict[str, Any]] | None:
                return _nearest(_display, relatives, files)

            resolved = hook(violation, display, entry, fact, nearest) if hook is not None else violation
            if resolved is not None:
                found.setdefault(index, []).append(resolved)
    return found


def _nearest(display: str, relatives: Sequence[Path | str], files: dict[Path, tuple[str, dict[str, Any]]]
             ) -> tuple[str, dict[str, Any]] | None:
    """The scanned file (display path, facts) at one of ``relatives``, looked for from ``display``'s folder upward.

    The nearest folder that has one decides; None when none has.
    """
    folder = _absolute(display).parent
    for base in (folder, *folder.parents):
        for relative in relatives:
            entry = files.get(_absolute(str(base / relative)))
            if entry is not None:
                return entry
    return None


def _absolute(display: str) -> Path:
    """A scanned file's absolute path, normalised (``..`` folded), without resolving links."""
    return Path(os.path.abspath(display))


def scan_source(text: str, path: str = "<string>", select: Iterable[str] | None = None, *,
                include_tests: bool = False) -> list[Violation]:
    """Check Python source text with the selected codes (the default ones unless given); raises SyntaxError.

    ``path`` decides whether it is test code (``tests/x.py``, ``test_x.py``) unless ``include_tests``.
    """
    codes = frozenset(select) if select is not None else frozenset(DEFAULT_CODES)
    return _check_text(text, path, codes, test=not include_tests and is_test_path(path),
                       test_folder=not include_tests and in_test_folder(path)).violations


def apply_edits(data: bytes, hits: Sequence[Hit]) -> bytes:
    """The file's bytes with the hits' edits inserted (positions are 1-based line, UTF-8 byte column)."""
    lines = data.splitlines(keepends=True)
    for hit in sorted((h for h in hits if h.edit), key=lambda h: (h.edit.line, h.edit.byte_col),  # type: ignore[union-attr]
                      reverse=True):
        edit = hit.edit
        assert edit is not None
        index = edit.line - 1
        if 0 <= index < len(lines):
            line = lines[index]
            lines[index] = line[: edit.byte_col] + edit.text.encode("utf-8") + line[edit.byte_col:]
    return b"".join(lines)


# -- discovery -------------------------------------------------------------------------------------------------
def iter_files(paths: Iterable[Path], problems: list[FileProblem], config_for: Any = None) -> Iterator[Path]:
    """Python and launcher files under the given paths, each once; missing paths and symlink loops become problems.

    Launcher files (Dockerfiles, Procfiles, shell scripts, YAML: Compose files, Kubernetes manifests) are read for
    C013's command lines.
    """
    seen_files: set[tuple[int, int]] = set()
    seen_dirs: set[tuple[int, int]] = set()
    for root in paths:
        try:
            st = os.stat(root)
        except OSError as exc:
            kind = "symlink-loop" if exc.errno == errno.ELOOP else (
                "not-found" if exc.errno in (errno.ENOENT, errno.ENOTDIR) else "unreadable")
            problems.append(FileProblem(display_path(root), kind, exc.strerror or str(exc)))
            continue
        if stat.S_ISDIR(st.st_mode):
            yield from _walk(root, problems, seen_files, seen_dirs, config_for)
        elif (st.st_dev, st.st_ino) not in seen_files:
            seen_files.add((st.st_dev, st.st_ino))
            yield root


def _walk(root: Path, problems: list[FileProblem], seen_files: set[tuple[int, int]],
          seen_dirs: set[tuple[int, int]], config_for: Any) -> Iterator[Path]:
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            st = os.stat(directory)
        except OSError as exc:
            kind = "symlink-loop" if exc.errno == errno.ELOOP else "unreadable"
            problems.append(FileProblem(display_path(directory), kind, exc.strerror or str(exc)))
            continue
        ident = (st.st_dev, st.st_ino)
        if ident in seen_dirs:
            if directory.is_symlink():
                problems.append(FileProblem(display_path(directory), "symlink-loop",
                                            "directory already visited through another path; skipped"))
            continue
        seen_dirs.add(ident)
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            problems.append(FileProblem(display_path(directory), "unreadable", exc.strerror or str(exc)))
            continue
        subdirs: list[Path] = []
        for entry in entries:
            path = Path(entry.path)
            config: ScanConfig | None = config_for(path) if config_for else None
            if config is not None and config.excluded(path):
                continue
            try:
                is_dir = entry.is_dir()
                is_file = not is_dir and entry.is_file()
            except OSError as exc:
                problems.append(FileProblem(display_path(path), "unreadable", exc.strerror or str(exc)))
                continue
            if is_dir:
                if entry.name not in DEFAULT_EXCLUDED_DIRS and not entry.name.endswith(".egg-info"):
                    subdirs.append(path)
            elif is_file and (entry.name.endswith(".py") or launchers.kind(entry.name)):
                try:
                    fst = entry.stat()
                except OSError as exc:
                    problems.append(FileProblem(display_path(path), "unreadable", exc.strerror or str(exc)))
                    continue
                if (fst.st_dev, fst.st_ino) not in seen_files:
                    seen_files.add((fst.st_dev, fst.st_ino))
                    yield path
            elif not is_file and entry.name.endswith(".py") and entry.is_symlink():
                problems.append(FileProblem(display_path(path), "unreadable", "broken or looping symbolic link"))
        stack.extend(reversed(subdirs))


# -- many files ----------------------------------------------------------------------------------------------
def scan_paths(paths: Sequence[str | Path], options: ScanOptions | None = None) -> ScanReport:
    """Scan files and directories.

    Raises:
        ConfigError: a pyproject.toml or ``--select``/``--ignore`` names an unknown code or key.
    """
    options = options or ScanOptions()
    start = options.clock()
    roots = [Path(p) for p in paths]
    configs: dict[Path, ScanConfig] = {}
    sources: list[str] = []

    def config_for_root(root: Path) -> ScanConfig:
        pyproject = find_pyproject(root) if options.use_config else None
        key = pyproject or Path("<defaults>")
        if key not in configs:
            base = load_config(pyproject) if pyproject else ScanConfig()
            configs[key] = with_cli(base, options.select, options.ignore)
            if base.source:
                sources.append(base.source)
        return configs[key]

    root_configs = {root: config_for_root(root) for root in roots}
    problems: list[FileProblem] = []
    violations: list[Violation] = []
    fixes: list[AppliedFix] = []
    files = lines_total = suppressed = 0
    outcomes: list[tuple[str, _FileOutcome]] = []
    for root in roots:
        config = root_configs[root]
        base = root.parent if root.is_dir() else None
        for path in iter_files([root], problems, config_for=lambda _p, c=config: c):
            relative = os.path.relpath(path, base) if base is not None else path.name
            test = not options.include_tests and is_test_path(relative)
            folder = not options.include_tests and in_test_folder(relative)
            outcome = _scan_file(path, config, options, problems, fixes, test=test, test_folder=folder)
            if outcome is None:
                continue
            files += 1
            lines_total += outcome.lines
            suppressed += outcome.suppressed
            outcomes.append((display_path(path), outcome))
    cross_file = resolve_cross_file(outcomes)
    for index, (_, outcome) in enumerate(outcomes):
        extra = cross_file.get(index)
        if extra:  # the file's cross-file findings go among its others, in line order
            violations.extend(sorted([*outcome.violations, *extra], key=lambda v: (v.line, v.column, v.code)))
        else:
            violations.extend(outcome.violations)
    selected = sorted(set().union(*(c.select for c in root_configs.values()))) if root_configs else []
    return ScanReport(
        violations=tuple(violations), problems=tuple(problems), fixes=tuple(fixes), files_scanned=files,
        lines_scanned=lines_total, suppressed=suppressed, duration_s=max(0.0, options.clock() - start),
        selected=tuple(selected), config_sources=tuple(sources),
    )


def _scan_file(path: Path, config: ScanConfig, options: ScanOptions, problems: list[FileProblem],
               fixes: list[AppliedFix], *, test: bool = False, test_folder: bool = False) -> _FileOutcome | None:
    display = display_path(path)
    codes = config.select - config.ignored_for(path)
    launcher = launchers.kind(path.name) if not path.name.endswith(".py") else None
    if launcher is not None and not rule_set(codes).launcher_checks:
        return None  # launcher files are read only for rules that look at command lines
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            problems.append(FileProblem(display, "unreadable", "not a regular file; skipped"))
            return None
        size = st.st_size
        if launcher is not None and size > min(options.max_file_bytes, MAX_LAUNCHER_BYTES):
            return None  # a YAML or shell file this large is data, not a launcher
        if size > options.max_file_bytes:
            problems.append(FileProblem(display, "too-large", f"{size} bytes is over the {options.max_file_bytes} "
                                        "byte limit; skipped"))
            return None
        data = path.read_bytes()
    except OSError as exc:
        kind = "symlink-loop" if exc.errno == errno.ELOOP else "unreadable"
        problems.append(FileProblem(display, kind, exc.strerror or str(exc)))
        return None
    if launcher is not None:
        text = data.decode("utf-8", errors="replace")
        if launcher == "manifest" and not launchers.is_manifest(text):
            return None  # YAML that starts no workload: not a file this scan checks
        try:
            return _check_launcher(text, display, codes, launcher)
        except RecursionError:
            problems.append(FileProblem(display, "too-complex", "commands nest too deeply to read; skipped"))
        except Exception as exc:  # noqa: BLE001 - a bug in reading one file must not lose the rest of the scan
            problems.append(FileProblem(display, "internal-error", f"the launcher reader failed on this file "
                                        f"({type(exc).__name__}: {exc}); please report it"))
        return None
    try:
        text = decode_source(data)
    except (UnicodeDecodeError, SyntaxError, LookupError) as exc:
        problems.append(FileProblem(display, "decode-error", f"cannot decode: {exc}"))
        return None
    try:
        outcome = _check_text(text, display, codes, test=test, test_folder=test_folder,
                              unsafe_fixes=options.unsafe_fixes)
    except SyntaxError as exc:
        problems.append(FileProblem(display, "parse-error", f"{type(exc).__name__}: {exc.msg}", exc.lineno,
                                    exc.offset))
        return None
    except RecursionError:
        problems.append(FileProblem(display, "too-complex", "expressions nest too deeply to check; skipped"))
        return None
    except (ValueError, MemoryError) as exc:
        problems.append(FileProblem(display, "parse-error", f"{type(exc).__name__}: {exc}"))
        return None
    except Exception as exc:  # noqa: BLE001 - a bug in one rule must not lose the rest of the scan
        problems.append(FileProblem(display, "internal-error", f"the checker failed on this file "
                                    f"({type(exc).__name__}: {exc}); please report it"))
        return None
    if options.fix and any(h.edit for h in outcome.hits):
        outcome = _fix_file(path, display, data, text, outcome, codes, problems, fixes, test=test,
                            test_folder=test_folder, unsafe_fixes=options.unsafe_fixes)
    return outcome


def _fix_file(path: Path, display: str, data: bytes, text: str, outcome: _FileOutcome, codes: frozenset[str],
              problems: list[FileProblem], fixes: list[AppliedFix], *, test: bool, test_folder: bool,
              unsafe_fixes: bool) -> _FileOutcome:
    """Write the fixes of one file and re-check it; a fix that breaks parsing is not written."""
    if data.startswith(b"\xef\xbb\xbf") or text.encode("utf-8") != data:
        problems.append(FileProblem(display, "fix-failed", "not fixed: only plain UTF-8 files are rewritten"))
        return outcome
    fixable = [h for h in outcome.hits if h.edit]
    new_data = apply_edits(data, fixable)
    new_text = new_data.decode("utf-8")
    try:
        ast.parse(new_text)
    except (SyntaxError, ValueError) as exc:  # pragma: no cover - would be a bug in a rule's edit
        problems.append(FileProblem(display, "fix-failed", f"fix would not parse ({exc}); file left unchanged"))
        return outcome
    try:
        write_atomic(path, new_data)
    except OSError as exc:
        problems.append(FileProblem(display, "fix-failed", f"cannot write: {exc.strerror or exc}"))
        return outcome
    fixes.extend(AppliedFix(display, h.line, h.code, h.edit.description) for h in fixable if h.edit)
    rechecked = _check_text(new_text, display, codes, test=test, test_folder=test_folder, unsafe_fixes=unsafe_fixes)
    rechecked.suppressed = outcome.suppressed
    return rechecked


def write_atomic(path: Path, data: bytes) -> None:
    """Replace the file's content in one step: a temporary file in the same directory, then ``os.replace``.

    A crash or a full disk leaves either the old or the new file, never a truncated one. The file's permission
    bits (and, where allowed, owner and group) are kept; a symbolic link is followed (its target is replaced, the link
    stays).

    Raises:
        OSError: the directory is not writable, the disk is full, ...
    """
    target = Path(os.path.realpath(path))
    st = target.stat()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            made = os.fstat(fh.fileno())
        if (made.st_uid, made.st_gid) != (st.st_uid, st.st_gid):
            with contextlib.suppress(OSError):  # only root (or a group member) may; the content matters more
                os.chown(tmp_name, st.st_uid, st.st_gid)
        os.chmod(tmp_name, stat.S_IMODE(st.st_mode))
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise

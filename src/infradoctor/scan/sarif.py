"""SARIF 2.1.0 output for code-scanning services (GitHub code scanning and others).

Rule ids are the stable codes (``C003``); each result carries ``partialFingerprints`` computed from the rule, the
file and the normalised source line (not the line number), so a finding keeps its identity when code above it
moves. Columns are Unicode code points (``columnKind``). Files that could not be checked are
``toolExecutionNotifications`` and make ``executionSuccessful`` false.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

from infradoctor import __version__
from infradoctor.findings import Severity, catalog
from infradoctor.scan.config import SCAN_CODES
from infradoctor.scan.engine import FIX_ONLY_PROBLEMS, ScanReport

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
FINGERPRINT_KEY = "infradoctor/v1"
"""Name of the partial fingerprint; bump the suffix if its recipe ever changes."""

_LEVELS = {
    Severity.CRITICAL: "error", Severity.HIGH: "error", Severity.MEDIUM: "warning", Severity.LOW: "note",
    Severity.INFO: "note",
}


def _level(code: str) -> str:
    return _LEVELS[catalog()[code].severity]


def _artifact(path: str, base: Path) -> dict[str, str]:
    """A relative URI under %SRCROOT% when the file is under ``base``, else an absolute file URI."""
    absolute = Path(path).resolve() if not os.path.isabs(path) else Path(path)
    try:
        rel = absolute.relative_to(base)
    except ValueError:
        return {"uri": absolute.as_uri()}
    return {"uri": quote(rel.as_posix()), "uriBaseId": "%SRCROOT%"}


def fingerprint(code: str, uri: str, line_text: str, occurrence: int) -> str:
    """Stable identity of a finding: rule, file and whitespace-normalised line, plus its occurrence index."""
    normal = " ".join(line_text.split())
    digest = hashlib.sha256(f"{code}\0{uri}\0{normal}".encode()).hexdigest()[:32]
    return f"{digest}:{occurrence}"


def _rule(code: str) -> dict[str, Any]:
    spec = catalog()[code]
    doc = spec.doc
    summary = doc.split("\n\n", 1)[0].split(": ", 1)[-1] if doc else spec.title
    return {
        "id": code,
        "name": "".join(part.capitalize() for part in spec.name.split("-")),
        "shortDescription": {"text": spec.title},
        "fullDescription": {"text": " ".join(summary.split())[:1].upper() + " ".join(summary.split())[1:]},
        "help": {"text": doc or spec.fix},
        "defaultConfiguration": {"level": _level(code)},
        "properties": {"tags": ["performance" if code != "C014" else "security", "pytorch"],
                       "slug": spec.name, "fix": spec.fix},
    }


def to_sarif(report: ScanReport, *, base_dir: Path | None = None) -> dict[str, Any]:
    """The report as a SARIF 2.1.0 log (a JSON-ready dict)."""
    base = (base_dir or Path.cwd()).resolve()
    rules = [_rule(code) for code in SCAN_CODES]
    index = {code: i for i, code in enumerate(SCAN_CODES)}
    occurrences: Counter[tuple[str, str, str]] = Counter()
    results = []
    for v in report.violations:
        artifact = _artifact(v.path, base)
        key = (v.code, artifact["uri"], " ".join(v.line_text.split()))
        occurrence = occurrences[key]
        occurrences[key] += 1
        region: dict[str, int] = {"startLine": v.line, "startColumn": v.column}
        if v.end_line >= v.line:
            region["endLine"] = v.end_line
            if v.end_line > v.line or v.end_column > v.column:
                region["endColumn"] = v.end_column
        results.append({
            "ruleId": v.code,
            "ruleIndex": index[v.code],
            "level": _LEVELS[v.severity] if v.severity is not None else _level(v.code),
            "message": {"text": v.message},
            "locations": [{"physicalLocation": {"artifactLocation": artifact, "region": region}}],
            "partialFingerprints": {FINGERPRINT_KEY: fingerprint(v.code, artifact["uri"], v.line_text, occurrence)},
            "properties": {"name": v.name, "fixable": v.fixable, "unsafeFix": v.unsafe_fix},
        })
    notifications = []
    for p in report.problems:
        level = "warning" if p.kind in FIX_ONLY_PROBLEMS else "error"
        note: dict[str, Any] = {"level": level, "message": {"text": f"{p.kind}: {p.message}"},
                                "descriptor": {"id": p.kind}}
        location: dict[str, Any] = {"artifactLocation": _artifact(p.path, base)}
        if p.line is not None and p.line >= 1:
            location["region"] = {"startLine": p.line, **({"startColumn": p.column} if p.column else {})}
        note["locations"] = [{"physicalLocation": location}]
        notifications.append(note)
    run: dict[str, Any] = {
        "tool": {"driver": {"name": "infradoctor", "version": __version__, "semanticVersion": __version__,
                            "rules": rules}},
        "originalUriBaseIds": {"%SRCROOT%": {"uri": base.as_uri() + "/"}},
        "columnKind": "unicodeCodePoints",
        "results": results,
        # Not successful when a path or file could not be checked: a clean result must mean "checked and clean".
        "invocations": [{"executionSuccessful": not report.unchecked, "toolExecutionNotifications": notifications}],
    }
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}

"""Findings, rules and the finding catalog.

A finding is a named, evidenced verdict about a workload. Each code is one :class:`Rule`, declared in its own module
beside its checks (``<domain>/rules/<code>_<name>.py``: ``RULE = Rule("P001", "data-starvation", ...)``), with its
default severity, title, fix, risk and a docstring in the fixed sections *What it detects / Why it matters / How it
is measured / Fix* (and *Evidence*, the keys its findings carry, for a code that several checks emit). The catalog
(:func:`catalog`) is built from those modules. A rule's checks are pure functions from one evidence type to
findings; :func:`run_rules` runs every check registered for the evidence it is given, whichever command gathered
it, so one code has one meaning everywhere and one evidence shape: every check of a code gives the keys of its
*Evidence* section, with the same name and unit, and ``source`` says where the evidence came from.

Codes and names are stable forever: tests, users' CI and suppressions depend on them. New findings get the next free
code in their group; none is ever renumbered.
"""

from __future__ import annotations

import enum
import functools
import importlib
import pkgutil
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar


class Severity(str, enum.Enum):
    """How much a finding matters, from ``critical`` down to ``info``."""

    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"

    @property
    def rank(self) -> int:
        """Larger is more severe: critical=4 ... info=0."""
        return _SEVERITY_RANK[self]

    @classmethod
    def parse(cls, text: str) -> Severity:
        """Severity from its name, case-insensitive; raises ValueError naming the valid values."""
        try:
            return cls(text.strip().lower())
        except ValueError:
            valid = ", ".join(s.value for s in cls)
            raise ValueError(f"unknown severity {text!r}; expected one of {valid}") from None


_SEVERITY_RANK = {
    Severity.CRITICAL: 4,
    Severity.HIGH: 3,
    Severity.MEDIUM: 2,
    Severity.LOW: 1,
    Severity.INFO: 0,
}


@dataclass(frozen=True)
class Location:
    """Where in the user's code or system a finding points."""

    file: str
    """Path of the file (as the user would open it), or a device/log name."""
    line: int | None = None
    """1-based line number, when known."""
    column: int | None = None
    """1-based column, when known."""
    function: str | None = None
    """Enclosing function or call site name, when known."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form; absent parts are left out."""
        out: dict[str, Any] = {"file": self.file}
        if self.line is not None:
            out["line"] = self.line
        if self.column is not None:
            out["column"] = self.column
        if self.function is not None:
            out["function"] = self.function
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Location:
        """Inverse of :meth:`to_dict`."""
        return cls(
            file=str(data["file"]),
            line=data.get("line"),
            column=data.get("column"),
            function=data.get("function"),
        )

    def __str__(self) -> str:
        if self.line is None:
            return self.file
        if self.column is None:
            return f"{self.file}:{self.line}"
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Finding:
    """One verdict with its evidence, as it appears in ``Result.findings``."""

    code: str
    """Stable code from the catalog, e.g. ``P001``."""
    name: str
    """Stable kebab-case name, e.g. ``data-starvation``."""
    severity: Severity
    """How much it matters."""
    title: str
    """One line with the numbers, e.g. "GPU waits for data 71% of each step"."""
    evidence: Mapping[str, Any] = field(default_factory=dict)
    """The measured numbers behind the verdict (JSON-serialisable)."""
    fix: str = ""
    """The concrete change to make."""
    risk: str = ""
    """What the fix costs or may break."""
    location: Location | None = None
    """Where it points, when known."""
    impact: float | None = None
    """Estimated share of run time (0-1) the finding explains, used to rank findings; None when unknown."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form, per the result contract."""
        out: dict[str, Any] = {
            "code": self.code,
            "name": self.name,
            "severity": self.severity.value,
            "title": self.title,
            "evidence": dict(self.evidence),
            "fix": self.fix,
        }
        if self.risk:
            out["risk"] = self.risk
        if self.location is not None:
            out["location"] = self.location.to_dict()
        if self.impact is not None:
            out["impact"] = self.impact
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        """Inverse of :meth:`to_dict`."""
        loc = data.get("location")
        return cls(
            code=str(data["code"]),
            name=str(data["name"]),
            severity=Severity(data["severity"]),
            title=str(data["title"]),
            evidence=dict(data.get("evidence") or {}),
            fix=str(data.get("fix") or ""),
            risk=str(data.get("risk") or ""),
            location=Location.from_dict(loc) if loc else None,
            impact=data.get("impact"),
        )


GROUPS: Mapping[str, str] = MappingProxyType(
    {
        "P": "workload (profile)",
        "S": "service under load (load, profile --load-url, middleware)",
        "R": "routing (route, logs)",
        "N": "node (node, logs)",
        "C": "code (scan)",
    }
)
"""Code groups, in catalog order, with where their evidence comes from."""

DOC_SECTIONS = ("What it detects", "Why it matters", "How it is measured", "Fix")
"""The sections every rule's docstring has, in this order."""

EVIDENCE_SECTION = "Evidence"
"""The docstring section, between *How it is measured* and *Fix*, that documents a rule's evidence keys.

Every code that several checks emit has one: its bullets (``- ``key``: meaning``) are the keys every check's
findings carry, with the same name and unit whichever command emits the code (:attr:`Rule.evidence`); paragraphs
after them name the keys only one source gives."""

EVIDENCE_SOURCES = ("probe", "load", "logs", "kernel-log", "router-stats", "prometheus")
"""Values of the ``source`` evidence key: where a finding's evidence came from. ``probe``: measured live by the
command (``route``'s interleaved requests and connects, ``node``'s host and GPU probes, or their recording);
``load``: a load test's points; ``logs``: log files (``infradoctor logs``); ``kernel-log``: the kernel log ``node``
reads; ``router-stats``: the router's statistics endpoint or a saved dump of it; ``prometheus``: series
``infradoctor fleet`` queried."""

_BULLET = re.compile(r"-\s+``([a-z0-9_]+)``:\s*(.*)")

_CODE = re.compile(r"[PSRNC]\d{3}")
_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")

E = TypeVar("E")
Opts = TypeVar("Opts")
CheckFunction = Callable[[Any, Any], "list[Finding]"]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Check:
    """One check of a rule: a pure function from one kind of evidence (and its options) to findings."""

    evidence: type
    """The evidence type it reads (e.g. ``LogsEvidence``); subclasses match too."""
    options: type | None
    """The options type it takes, or None; built with its defaults when :func:`run_rules` gets none of that type."""
    function: CheckFunction
    """``function(evidence, options) -> list[Finding]``."""


class Rule:
    """One finding code: its stable identity, its own words, and the checks that emit it.

    Declared once per code, in the rule's module, beside its checks::

        RULE = Rule("P001", "data-starvation", Severity.HIGH, "Compute waits for data",
                    fix="Raise DataLoader num_workers ...", risk="More workers use more host RAM ...",
                    commands=("profile",))

        @RULE.check(ProfileAnalysis, RuleOptions)
        def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
            ...
            return [RULE.finding("The loop waits for data 71% of each step", evidence)]

    The module's docstring is the rule's documentation; its upper-case constants are the thresholds the docs
    print with their values.
    """

    def __init__(
        self,
        code: str,
        name: str,
        severity: Severity,
        title: str,
        *,
        fix: str,
        risk: str,
        commands: tuple[str, ...],
        evidence: Mapping[str, str] | None = None,
        preview: bool = False,
        module: str | None = None,
    ) -> None:
        if not _CODE.fullmatch(code) or not _NAME.fullmatch(name):
            raise ValueError(f"bad rule code or name: {code!r} {name!r}")
        self.code = code
        """Stable code, e.g. ``P001``."""
        self.name = name
        """Stable kebab-case name."""
        self.severity = severity
        """Default severity; a check may raise or lower it with the evidence."""
        self.title = title
        """Short human title of what the code means."""
        self.fix = fix
        """Default fix text; a check may give a more specific one (naming the line, the value to set)."""
        self.risk = risk
        """Default risk/tradeoff of the fix."""
        self.commands = commands
        """Commands that can emit it."""
        self._evidence = MappingProxyType(dict(evidence)) if evidence is not None else None
        self.preview = preview
        """Off by default (not precise enough on real input yet); run when selected explicitly."""
        self.module = module if module is not None else sys._getframe(1).f_globals.get("__name__", "")
        """The module that declares it (its docstring is the documentation)."""
        self.checks: list[Check] = []
        """Its checks, one per evidence type."""

    @property
    def evidence(self) -> Mapping[str, str]:
        """The evidence keys every check's findings carry (key -> meaning), the same whichever command emits it.

        Given to the constructor, else the bullets of the docstring's *Evidence* section.
        """
        if self._evidence is None:
            self._evidence = MappingProxyType(_evidence_bullets(self._raw_doc()))
        return self._evidence

    @property
    def group(self) -> str:
        """``P`` workload, ``S`` service, ``R`` routing, ``N`` node, ``C`` code."""
        return self.code[0]

    def __repr__(self) -> str:
        return f"Rule({self.code} {self.name})"

    def check(self, evidence: type[E], options: type[Opts] | None = None) -> Callable[[F], F]:
        """Decorator: register ``function(evidence, options)`` as this rule's check for one evidence type."""

        def register(function: F) -> F:
            self.checks.append(Check(evidence, options, function))
            return function

        return register

    def checks_for(self, evidence: object) -> list[Check]:
        """The checks that read this evidence."""
        return [c for c in self.checks if isinstance(evidence, c.evidence)]

    def finding(
        self,
        title: str,
        evidence: Mapping[str, Any] | None = None,
        *,
        severity: Severity | None = None,
        fix: str | None = None,
        risk: str | None = None,
        location: Location | None = None,
        impact: float | None = None,
    ) -> Finding:
        """A finding of this code, with the rule's name, default severity, fix and risk filled in."""
        return Finding(
            code=self.code,
            name=self.name,
            severity=severity or self.severity,
            title=title,
            evidence=dict(evidence or {}),
            fix=fix if fix is not None else self.fix,
            risk=risk if risk is not None else self.risk,
            location=location,
            impact=impact,
        )

    def _raw_doc(self) -> str:
        module = sys.modules.get(self.module) or importlib.import_module(self.module)
        return (module.__doc__ or "").strip()

    @property
    def doc(self) -> str:
        """The rule's documentation: its module's docstring, with threshold names shown with their values."""
        module = sys.modules.get(self.module) or importlib.import_module(self.module)
        return render_doc(self._raw_doc(), vars(module))

    def sections(self) -> dict[str, str]:
        """The documentation's sections by heading; the first line as ``summary``.

        *What it detects* ... *Fix*, and *Evidence* where the rule has one.
        """
        return _sections(self.doc)


def _sections(doc: str) -> dict[str, str]:
    out: dict[str, str] = {}
    current = "summary"
    lines: list[str] = []
    for line in doc.splitlines():
        heading = line.strip().rstrip(":")
        if heading in (*DOC_SECTIONS, EVIDENCE_SECTION) and line.rstrip().endswith(":") and not line.startswith(" "):
            out[current] = "\n".join(lines).strip()
            current, lines = heading, []
        else:
            lines.append(line.strip())
    out[current] = "\n".join(lines).strip()
    return out


def _evidence_bullets(doc: str) -> dict[str, str]:
    """``key -> meaning`` of the bullets of a docstring's *Evidence* section (a bullet's meaning may wrap)."""
    out: dict[str, str] = {}
    key: str | None = None
    for line in _sections(doc).get(EVIDENCE_SECTION, "").splitlines():
        match = _BULLET.fullmatch(line)
        if match:
            key = match.group(1)
            out[key] = match.group(2)
        elif key is not None and line and not line.startswith("From ") and not line.startswith("Every "):
            out[key] += " " + line
        else:
            key = None
    return out


_ROLE = re.compile(r":(?:data|func|class|meth|attr|mod|obj):`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def _shown(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str, tuple, frozenset)):
        return None
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (tuple, frozenset)):
        items = sorted(value) if isinstance(value, frozenset) else list(value)
        if len(items) > 12 or not all(isinstance(v, (int, float, str)) for v in items):
            return None
        return ", ".join(str(v) for v in items)
    return str(value)


def render_doc(doc: str, constants: Mapping[str, Any]) -> str:
    """Docstring text for people, with the thresholds' values.

    reST roles and literals become plain text; a threshold constant named in it (``DATA_WAIT_FRACTION``) is shown
    with its value (``DATA_WAIT_FRACTION = 0.3``).
    """

    def literal(match: re.Match[str]) -> str:
        name = match.group(1).rsplit(".", 1)[-1]
        if name.isupper() and name in constants:
            shown = _shown(constants[name])
            if shown is not None:
                return f"{name} = {shown}"
        return f"`{match.group(1)}`"

    text = _ROLE.sub(lambda m: f"``{m.group(1)}``", doc)
    return _LITERAL.sub(literal, text)


# Packages whose ``rules`` subpackage holds one module per rule, each declaring ``RULE``.
RULE_PACKAGES = ("profile", "load", "serve", "route", "node", "fleet", "logs", "scan", "telemetry")


@functools.cache
def catalog() -> Mapping[str, Rule]:
    """Every rule, by code, in catalog order (P, S, R, N, C; then by number), built from the rule modules."""
    found: dict[str, Rule] = {}
    for pkg_name in RULE_PACKAGES:
        pkg = importlib.import_module(f"infradoctor.{pkg_name}.rules")
        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
            if info.name.startswith("_"):
                continue
            module = importlib.import_module(f"{pkg.__name__}.{info.name}")
            rule = getattr(module, "RULE", None)
            if not isinstance(rule, Rule):
                raise TypeError(f"{module.__name__} declares no RULE")
            if rule.code in found:
                raise ValueError(f"{rule.code} is declared twice: {found[rule.code].module} and {module.__name__}")
            found[rule.code] = rule
    order = list(GROUPS)
    return MappingProxyType(dict(sorted(found.items(), key=lambda kv: (order.index(kv[0][0]), kv[0]))))


class UnknownCodeError(KeyError):
    """A code or name that is not in the catalog."""


def rule(code_or_name: str) -> Rule:
    """The rule of a code (``P001``) or a name (``data-starvation``)."""
    key = code_or_name.strip()
    rules = catalog()
    found = rules.get(key.upper()) or next((r for r in rules.values() if r.name == key.lower()), None)
    if found is None:
        raise UnknownCodeError(f"unknown finding code or name {code_or_name!r}")
    return found


def make_finding(code: str, title: str, evidence: Mapping[str, Any] | None = None, **details: Any) -> Finding:
    """A finding of a catalogued code: ``rule(code).finding(title, evidence, **details)``.

    For code outside the rule modules (rules call ``RULE.finding``).

    Raises:
        UnknownCodeError: the code is not in the catalog (emitting an unknown code is a bug).
    """
    entry = catalog().get(code)
    if entry is None:
        raise UnknownCodeError(f"finding code {code!r} is not in the catalog")
    return entry.finding(title, evidence, **details)


def rank_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Most important first: by severity, then by explained share of run time, then by code."""
    return sorted(findings, key=lambda f: (-f.severity.rank, -(f.impact or 0.0), f.code))


def run_rules(
    evidence: object,
    options: object | None = None,
    *,
    select: Iterable[str] = (),
) -> list[Finding]:
    """Every check registered for this evidence's type, over it; the findings ranked.

    ``options`` goes to the checks that take its type; the others get their options type's defaults. Preview
    rules run only when their code is in ``select``.
    """
    selected = set(select)
    findings: list[Finding] = []
    for entry in catalog().values():
        if entry.preview and entry.code not in selected:
            continue
        for check in entry.checks_for(evidence):
            opts: Any = None
            if check.options is not None:
                opts = options if isinstance(options, check.options) else check.options()
            findings.extend(check.function(evidence, opts))
    return rank_findings(findings)

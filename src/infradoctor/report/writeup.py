"""The write-up: a 1-2 page report built from stored runs.

Sections: Summary, Method, Findings, Changes made, Risks / tradeoffs, Recommended next steps, with
``metric before -> metric after`` from the runs themselves.

Runs pair up by label: a label ending in ``baseline`` or ``before`` opens a pair, the next run of the same command
whose label ends in ``after``/``fixed``/``improved`` with the same prefix (``serve-baseline`` / ``serve-after``)
closes it. Unpaired runs still contribute findings and method.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infradoctor import __version__
from infradoctor.compare import compare_results, lower_is_better
from infradoctor.findings import Finding, catalog, rank_findings
from infradoctor.report.sections import format_evidence, format_value
from infradoctor.result import Result, describe_target, utc_now_iso

_BEFORE = re.compile(r"^(?P<scenario>.*?)[-_:/ ]?(baseline|before)$", re.IGNORECASE)
_AFTER = re.compile(r"^(?P<scenario>.*?)[-_:/ ]?(after|fixed|improved|fix)$", re.IGNORECASE)

COMMAND_ASSUMPTIONS = {
    "profile": "The workload ran as a child process under light instrumentation (patched PyTorch entry points, "
    "no per-op tracing); the instrumentation's overhead is measured by the profile benchmark, not in these runs.",
    "load": "Load came from this machine; latency percentiles are from HDR-style histograms, open-loop latencies "
    "are measured from the intended send time (coordinated omission corrected), and points where the load "
    "generator saturated are excluded from verdicts.",
    "route": "Routed and direct requests were interleaved in time at the same concurrency, so drift affects both.",
    "logs": "Log lines that could not be parsed are counted, not guessed at.",
    "node": "GPU facts come from NVML (or nvidia-smi XML); kernel-log Xid events from dmesg/journalctl.",
    "scan": "Static analysis: findings are patterns in code, not measurements.",
}


@dataclass(frozen=True)
class Pair:
    """A baseline run and the run after a change, with their comparison."""

    scenario: str
    """Label prefix shared by both runs (may be empty)."""
    before: Result
    """The baseline run."""
    after: Result
    """The run after the change."""
    comparison: Result
    """The ``compare`` result of the two."""

    @property
    def failure(self) -> str:
        """Why the after run is not a valid measurement (non-zero exit, partial evidence), or ``""``."""
        run = self.after
        if run.exit_status not in (None, 0):
            return f"the after run's workload exited with status {run.exit_status}"
        problems = sorted({e.source for e in run.errors if e.source not in ("store", "kernel-log")})
        if problems and not run.metrics.get("headline"):
            return "the after run measured nothing (" + ", ".join(problems) + ")"
        return ""

    def changes(self) -> list[Mapping[str, Any]]:
        """Comparison rows."""
        return [r for r in self.comparison.metrics.get("changes", []) if isinstance(r, Mapping)]

    def key_changes(self, limit: int = 3) -> list[Mapping[str, Any]]:
        """The most telling changes: significant distribution shifts first, then headline metrics, by size."""

        def score(row: Mapping[str, Any]) -> tuple[int, int, int, int, float]:
            pct = row.get("change_pct")
            size = abs(pct) if isinstance(pct, (int, float)) and math.isfinite(pct) else 0.0
            moved = 2 if row.get("improved") else 1 if row.get("regression") else 0
            throughput = int(lower_is_better(str(row.get("metric"))) is False)
            return (
                moved,
                2 if row.get("direction") == "better" else int(row.get("direction") == "worse" and size >= 5.0),
                throughput,
                int(row.get("source") == "distribution" and row.get("statistic") != "mean"),
                size,
            )

        rows = [
            r
            for r in self.changes()
            if r.get("before") is not None
            and r.get("after") is not None
            and r.get("comparable", True)
            and r.get("before") != r.get("after")
            and r.get("better") != "unknown"
        ]
        ranked = sorted(rows, key=score, reverse=True)
        picked: list[Mapping[str, Any]] = []
        seen: set[str] = set()
        for row in ranked:
            if row["metric"] in seen:
                continue
            if picked and score(row)[:2] == (0, 0):
                break  # neither significant nor a real move: not worth a line once something is shown
            picked.append(row)
            seen.add(str(row["metric"]))
            if len(picked) >= limit:
                break
        return picked


@dataclass(frozen=True)
class Writeup:
    """Everything the report says, as data; renderers lay it out."""

    title: str
    """Report title."""
    generated_at: str
    """UTC time the report was made."""
    runs: Sequence[Result]
    """All runs the report draws on, oldest first."""
    pairs: Sequence[Pair]
    """Before/after pairs."""
    summary: Sequence[str]
    """Summary bullets."""
    method: Sequence[str]
    """Method bullets."""
    findings: Sequence[tuple[Finding, Result]]
    """Baseline findings, ranked, with the run each came from."""
    changes: Sequence[str]
    """Changes made, from the after runs' labels and notes."""
    risks: Sequence[str]
    """Risks and tradeoffs of the fixes applied (and of those recommended)."""
    next_steps: Sequence[str]
    """Recommended next steps, ranked."""
    remaining: Sequence[tuple[Finding, Result]] = field(default_factory=tuple)
    """Findings still present after the changes (or in unpaired runs), ranked."""


def pair_runs(runs: Sequence[Result], *, resamples: int = 300) -> tuple[list[Pair], list[Result]]:
    """Pairs of (baseline, after) runs, and the runs that found no partner."""
    ordered = sorted(runs, key=lambda r: (r.started_at, r.run_id or ""))
    open_before: dict[tuple[str, str], Result] = {}
    pairs: list[Pair] = []
    unpaired: list[Result] = []
    for run in ordered:
        label = (run.label or "").strip()
        before = _BEFORE.match(label)
        after = _AFTER.match(label)
        if before:
            key = (before.group("scenario").lower(), run.command)
            if key in open_before:
                unpaired.append(open_before[key])
            open_before[key] = run
        elif after and (after.group("scenario").lower(), run.command) in open_before:
            key = (after.group("scenario").lower(), run.command)
            base = open_before.pop(key)
            pairs.append(Pair(key[0], base, run, compare_results(base, run, resamples=resamples)))
        else:
            unpaired.append(run)
    unpaired.extend(open_before.values())
    return pairs, sorted(unpaired, key=lambda r: r.started_at)


def describe_change(row: Mapping[str, Any]) -> str:
    """``latency_ms p99 850 -> 120 (-86%, significant)`` for one comparison row."""
    stat = row.get("statistic")
    name = f"{row['metric']}" + (f" {stat}" if stat and stat != "value" else "")
    pct = row.get("change_pct")
    pct_text = f"{pct:+.0f}%" if isinstance(pct, (int, float)) and math.isfinite(pct) else "n/a"
    if row.get("significant") is True:
        note = ", beyond noise (95% CI)"
    elif row.get("significant") is False:
        note = ", within noise"
    else:
        note = ""
    verdict = " REGRESSION" if row.get("regression") else ""
    return f"{name}: {format_value(row.get('before'))} -> {format_value(row.get('after'))} ({pct_text}{note}){verdict}"


def short_target(run: Result) -> str:
    """The target in a few words: ``python workloads/train.py 40`` rather than absolute paths."""
    argv = run.target.get("argv") if isinstance(run.target, Mapping) else None
    if isinstance(argv, list) and argv:
        words = []
        for i, arg in enumerate(str(a) for a in argv):
            name = arg.rsplit("/", 1)[-1]
            if i == 0 and name.startswith("python"):
                words.append("python")
            elif arg.startswith("/") and arg.count("/") > 2:
                words.append("/".join(arg.rsplit("/", 2)[-2:]))
            else:
                words.append(arg)
        text = " ".join(words)
    else:
        text = describe_target(run.target)
    return text if len(text) <= 90 else text[:89] + "…"


def _finding_line(finding: Finding, run: Result) -> str:
    where = f" at {finding.location}" if finding.location else ""
    scalars = {k: v for k, v in finding.evidence.items() if not isinstance(v, (Mapping, list, tuple))}
    evidence = format_evidence(scalars or finding.evidence, limit=5)
    ev = f" [{evidence}]" if evidence else ""
    return f"{finding.code} {finding.name} ({finding.severity.value}, {run.command}): {finding.title}{where}{ev}"


def _dedupe(items: Sequence[tuple[Finding, Result]]) -> list[tuple[Finding, Result]]:
    seen: set[tuple[str, str, str]] = set()
    out: list[tuple[Finding, Result]] = []
    for finding, run in items:
        key = (finding.code, str(finding.location or ""), describe_target(run.target))
        if key not in seen:
            seen.add(key)
            out.append((finding, run))
    return out


def _ranked_pairs(items: Sequence[tuple[Finding, Result]]) -> list[tuple[Finding, Result]]:
    order = {id(f): i for i, f in enumerate(rank_findings([f for f, _ in items]))}
    return sorted(items, key=lambda item: order[id(item[0])])


def build_writeup(
    runs: Sequence[Result], *, title: str | None = None, resamples: int = 300, skipped: Sequence[str] = ()
) -> Writeup:
    """The report's content from stored runs; ``skipped`` names runs that could not be read."""
    if not runs:
        raise ValueError("a report needs at least one run")
    ordered = sorted(runs, key=lambda r: (r.started_at, r.run_id or ""))
    pairs, unpaired = pair_runs(ordered, resamples=resamples)
    baselines = [p.before for p in pairs] + unpaired
    found = _dedupe(_ranked_pairs([(f, r) for r in baselines for f in r.findings]))
    remaining = _dedupe(
        _ranked_pairs(
            [(f, p.after) for p in pairs for f in p.after.findings] + [(f, r) for r in unpaired for f in r.findings]
        )
    )

    summary: list[str] = []
    targets = sorted({f"{r.command} {short_target(r)}" for r in ordered})
    summary.append(
        "Investigated: " + "; ".join(targets[:6]) + (f" (+{len(targets) - 6} more)" if len(targets) > 6 else "")
    )
    for pair in pairs:
        top = pair.before.ranked()[:2]
        scen = f"[{pair.scenario}] " if pair.scenario else ""
        if top:
            summary.append(f"{scen}Bottleneck: " + "; ".join(f"{f.code} {f.name}: {f.title}" for f in top))
        change = pair.after.note or f"re-measured as '{pair.after.label}'"
        if pair.failure:
            summary.append(f"{scen}Implemented: {change}; NOT confirmed: {pair.failure}")
            continue
        summary.append(f"{scen}Implemented and tested: {change}")
        keys = pair.key_changes(2)
        if keys:
            summary.append(f"{scen}Result: " + "; ".join(describe_change(r) for r in keys))
    if not pairs and found:
        summary.append("Bottleneck: " + "; ".join(f"{f.code} {f.name}: {f.title}" for f, _ in found[:3]))
    if remaining:
        summary.append("Remaining opportunities: " + "; ".join(f"{f.code} {f.name}" for f, _ in remaining[:4]))
    elif pairs and not any(p.failure for p in pairs):
        summary.append("Remaining opportunities: none above the detection thresholds in the after runs.")

    method = _method(ordered) + [f"Not used (unreadable): {s}" for s in skipped]

    changes: list[str] = []
    for pair in pairs:
        scen = f"[{pair.scenario}] " if pair.scenario else ""
        note = pair.after.note or "(no note recorded)"
        changes.append(
            f"{scen}{note} (baseline run {pair.before.run_id or 'unsaved'}, "
            f"after run {pair.after.run_id or 'unsaved'}, {pair.after.command})"
        )
        if pair.failure:
            changes.append(f"    not a valid measurement: {pair.failure}")
        changes += [f"    WARNING: {w}" for w in pair.comparison.metrics.get("warnings") or []]
        changes += [f"    {describe_change(row)}" for row in pair.key_changes(4)]
        resolved = pair.comparison.metrics.get("findings_resolved") or []
        new = pair.comparison.metrics.get("findings_new") or []
        if resolved:
            changes.append("    findings resolved: " + ", ".join(map(str, resolved)))
        if new:
            changes.append("    new findings: " + ", ".join(map(str, new)))
    if not changes:
        changes.append(
            "No change was measured yet: label a baseline run and an after run (--label baseline / "
            "--label after) to get before -> after numbers."
        )

    risks: list[str] = []
    seen_codes: set[str] = set()
    applied = [
        f for p in pairs for f in p.before.findings if f.code in (p.comparison.metrics.get("findings_resolved") or [])
    ]
    for finding in [*applied, *(f for f, _ in remaining)]:
        if finding.code in seen_codes:
            continue
        seen_codes.add(finding.code)
        risk = finding.risk or catalog()[finding.code].risk
        kind = "applied" if finding in applied else "recommended"
        risks.append(f"{finding.code} {finding.name} ({kind} fix): {risk}")
    for pair in pairs:
        regressions = [r for r in pair.changes() if r.get("regression")]
        for row in regressions[:3]:
            risks.append(f"Regression measured in [{pair.scenario or pair.after.command}]: {describe_change(row)}")

    next_steps: list[str] = []
    for finding, run in remaining[:6]:
        where = f" ({finding.location})" if finding.location else ""
        next_steps.append(f"{finding.code} {finding.name}{where} in {run.command}: {finding.fix}")
    if not next_steps:
        next_steps.append(
            "Keep the after runs as the new baseline; re-run `infradoctor compare` after each change "
            "and in CI to catch regressions."
        )

    return Writeup(
        title=title or "infradoctor report",
        generated_at=utc_now_iso(),
        runs=ordered,
        pairs=pairs,
        summary=summary,
        method=method,
        findings=[(f, r) for f, r in found[:10]],
        changes=changes,
        risks=risks,
        next_steps=next_steps,
        remaining=remaining,
    )


def _method(runs: Sequence[Result]) -> list[str]:
    env: Mapping[str, Any] = next((r.environment for r in runs if r.environment), {})
    lines: list[str] = []
    if env:
        memory = env.get("memory_total_bytes")
        mem = f", {memory / 2**30:.0f} GiB RAM" if isinstance(memory, (int, float)) else ""
        gpu = env.get("gpus") or env.get("gpu")
        gpu_text = f", GPU: {gpu}" if gpu else ", no GPU used"
        lines.append(
            f"Machine: {env.get('hostname', '?')} ({env.get('os', '?')}, "
            f"{env.get('cpu_model', env.get('machine', '?'))}, "
            f"{env.get('cpu_count', '?')} CPUs{mem}{gpu_text})."
        )
        libs = env.get("libraries") or {}
        if isinstance(libs, Mapping) and libs:
            lines.append(
                "Software: Python "
                + str(env.get("python", "?"))
                + ", "
                + ", ".join(f"{k} {v}" for k, v in sorted(libs.items()))
                + f", infradoctor {env.get('infradoctor', __version__)}."
            )
    for run in runs:
        label = f" [{run.label}]" if run.label else ""
        metrics = ", ".join(list(_headline(run))[:6])
        lines.append(
            f"Run {run.run_id or '-'}{label}: `infradoctor {run.command}` on {short_target(run)}, "
            f"{run.duration_s:.1f} s at {run.started_at}" + (f"; measured {metrics}" if metrics else "")
        )
    commands = sorted({r.command for r in runs})
    for command in commands:
        if command in COMMAND_ASSUMPTIONS:
            lines.append(f"Assumption ({command}): {COMMAND_ASSUMPTIONS[command]}")
    hosts = sorted({h for h in (_url_host(r) for r in runs) if h})
    if hosts:
        loopback = all(h in ("127.0.0.1", "localhost", "::1") or h.startswith("127.") for h in hosts)
        where = "over loopback (client and server on one machine)" if loopback else "to " + ", ".join(hosts)
        lines.append(f"Network: requests went {where}.")
    partial = [r for r in runs if r.errors]
    for run in partial:
        lines.append(
            f"Partial evidence in run {run.run_id}: " + "; ".join(f"{e.source}: {e.message}" for e in run.errors[:3])
        )
    return lines


def _url_host(run: Result) -> str | None:
    from urllib.parse import urlsplit

    target = run.target if isinstance(run.target, Mapping) else {}
    url = target.get("url") or target.get("router") or target.get("load_url")
    if not url:
        service = run.metrics.get("service") if isinstance(run.metrics, Mapping) else None
        url = service.get("load_url") if isinstance(service, Mapping) else None
    try:
        return urlsplit(str(url)).hostname if url else None
    except ValueError:
        return None


def _headline(run: Result) -> dict[str, Any]:
    head = run.metrics.get("headline") if isinstance(run.metrics, Mapping) else None
    return dict(head) if isinstance(head, Mapping) else {}


def finding_line(finding: Finding, run: Result) -> str:
    """One line for a finding in the report."""
    return _finding_line(finding, run)

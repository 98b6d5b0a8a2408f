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
from infradoctor.compare.analysis import MATERIAL_PCT, CompareMetrics, MetricChange, interrupted
from infradoctor.findings import Finding, catalog, rank_findings
from infradoctor.report.sections import format_evidence, format_value, stated_risk
from infradoctor.result import Result, describe_target, utc_now_iso

_BEFORE = re.compile(r"^(?P<scenario>.*?)[-_:/ ]?(baseline|before)$", re.IGNORECASE)
_AFTER = re.compile(r"^(?P<scenario>.*?)[-_:/ ]?(after|fixed|improved|fix)$", re.IGNORECASE)

COMMAND_ASSUMPTIONS = {
    "profile": "The workload ran as a child process under light instrumentation (patched PyTorch entry points, "
    "no per-op tracing); the instrumentation's overhead is measured by the profile benchmark, not in these runs.",
    "load": "Load came from this machine; latency percentiles are of successful responses (failures are counted "
    "and timed apart), from HDR-style histograms; open-loop latencies "
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
    def metrics(self) -> CompareMetrics:
        """The comparison, typed."""
        return CompareMetrics.from_dict(self.comparison.metrics)

    @property
    def failure(self) -> str:
        """Why the pair is no valid before -> after measurement (interrupted, failed, measured nothing), or ``""``."""
        for name, run in (("baseline", self.before), ("after", self.after)):
            if interrupted(run):
                return f"the {name} run was interrupted (Ctrl-C or SIGTERM) before it completed"
            if run.exit_status not in (None, 0):
                return f"the {name} run's workload exited with status {run.exit_status}"
        problems = sorted({e.source for e in self.after.errors if e.source not in ("store", "kernel-log")})
        if problems and not self.after.metrics.get("headline"):
            return "the after run measured nothing (" + ", ".join(problems) + ")"
        return ""

    def changes(self) -> list[MetricChange]:
        """Comparison rows."""
        return list(self.metrics.changes)

    def key_changes(self, limit: int = 3) -> list[MetricChange]:
        """The most telling changes: beyond-noise shifts first, then material moves, throughput before latency."""

        def score(row: MetricChange) -> tuple[int, int, int, int, float]:
            size = abs(row.change_pct) if row.change_pct is not None and math.isfinite(row.change_pct) else 0.0
            moved = 2 if row.improved else 1 if row.regression else 0
            throughput = int(lower_is_better(row.metric) is False)
            return (
                moved,
                2 if row.direction == "better" else int(row.direction == "worse" and size >= MATERIAL_PCT),
                throughput,
                int(row.source == "distribution" and row.statistic != "mean"),
                size,
            )

        rows = [r for r in self.changes() if r.comparable and r.before != r.after and r.better != "unknown"]
        picked: list[MetricChange] = []
        seen: set[str] = set()
        for row in sorted(rows, key=score, reverse=True):
            if row.metric in seen:
                continue
            if picked and score(row)[:2] == (0, 0):
                break  # neither beyond noise nor a real move: not worth a line once something is shown
            picked.append(row)
            seen.add(row.metric)
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
    """Risks and tradeoffs: of the fixes for findings that are gone, of those recommended, regressions measured."""
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


def describe_change(row: MetricChange) -> str:
    """``latency_ms p99: 850 -> 120 (-86%, beyond noise: 95% CI, n=800/790)`` for one comparison row."""
    name = row.metric + (f" {row.statistic}" if row.statistic != "value" else "")
    pct = f"{row.change_pct:+.0f}%" if row.change_pct is not None and math.isfinite(row.change_pct) else "n/a"
    n = f", n={row.n_before}/{row.n_after}" if row.n_before is not None else ""
    if row.significant is True:
        note = f", beyond noise: 95% CI{n}"
    elif row.significant is False:
        note = f", within noise{n}"
    elif row.verdict.startswith("too few samples"):
        note = f", {row.verdict}: not judged"
    elif not row.judged:
        note = ", not judged: a run was incomplete"
    else:
        note = ""
    verdict = " REGRESSION" if row.regression else ""
    return f"{name}: {format_value(row.before)} -> {format_value(row.after)} ({pct}{note}){verdict}"


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


def describe_system(run: Result) -> str:
    """What a run measured, in words: ``a model server (serve.py) under load at http://...``."""
    target = run.target if isinstance(run.target, Mapping) else {}
    metrics = run.metrics if isinstance(run.metrics, Mapping) else {}
    argv = [str(a) for a in target.get("argv") or []] if isinstance(target.get("argv"), list) else []
    script = next((a.rsplit("/", 1)[-1] for a in argv if a.endswith(".py")), None)
    if not script and "-m" in argv and argv.index("-m") + 1 < len(argv):
        script = argv[argv.index("-m") + 1]
    if run.command == "profile":
        service = metrics.get("service")
        if isinstance(service, Mapping) and service.get("load_url"):
            return f"a model server ({script or 'its command'}) under load at {service['load_url']}"
        return f"a Python workload ({script or short_target(run)})"
    if run.command == "load":
        return f"the HTTP endpoint {describe_target(target)} under load"
    if run.command == "route":
        backends = target.get("backends")
        count = f" and its {len(backends)} backends" if isinstance(backends, list) else ""
        return f"the router at {describe_target(target)}{count}"
    if run.command == "logs":
        listed = target.get("files")
        files = listed if isinstance(listed, list) else []
        return f"{len(files)} log file{'s' if len(files) != 1 else ''} ({describe_target(target)})"
    if run.command == "scan":
        return f"the code under {describe_target(target)}"
    if run.command == "node":
        recorded = target.get("smi_xml") or target.get("nvml_record")
        return f"recorded GPU evidence ({recorded})" if recorded else "this node's GPUs and host"
    if run.command == "fleet":
        return f"the fleet behind {describe_target(target)}"
    return f"{run.command} of {describe_target(target)}"


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


def _scenario(pair: Pair) -> str:
    return f"[{pair.scenario}] " if pair.scenario else ""


def _investigated(pairs: Sequence[Pair], unpaired: Sequence[Result]) -> str:
    """The Summary's first line: the systems looked at, in words (the baseline's note says what it is, if given)."""
    parts = []
    for pair in pairs:
        what = describe_system(pair.before)
        about = f"{pair.before.note}: " if pair.before.note else ""
        parts.append(f"{pair.scenario + ': ' if pair.scenario else ''}{about}{what}")
    parts += [(f"{run.label}: " if run.label else "") + describe_system(run) for run in unpaired]
    shown = parts[:6]
    more = f" (+{len(parts) - 6} more)" if len(parts) > 6 else ""
    return "Investigated " + "; ".join(shown) + more + "."


def _summary(pairs: Sequence[Pair], unpaired: Sequence[Result], found: Sequence[tuple[Finding, Result]],
             remaining: Sequence[tuple[Finding, Result]]) -> list[str]:
    summary = [_investigated(pairs, unpaired)]
    for pair in pairs:
        scen = _scenario(pair)
        top = pair.before.ranked()[:2]
        if top:
            summary.append(f"{scen}Bottleneck: " + "; ".join(f"{f.code} {f.name}: {f.title}" for f in top))
        change = pair.after.note or f"re-measured as '{pair.after.label}' (no note says what changed)"
        if pair.failure:
            summary.append(f"{scen}Tried: {change}; NOT confirmed: {pair.failure}, so nothing was compared")
            continue
        summary.append(f"{scen}Changed and measured again: {change}")
        keys = pair.key_changes(2)
        if keys:
            summary.append(f"{scen}Result: " + "; ".join(describe_change(r) for r in keys))
    if not pairs and found:
        summary.append("Bottleneck: " + "; ".join(f"{f.code} {f.name}: {f.title}" for f, _ in found[:3]))
    if remaining:
        summary.append("Remaining opportunities: " + "; ".join(f"{f.code} {f.name}" for f, _ in remaining[:4]))
    elif pairs and not any(p.failure for p in pairs):
        summary.append("Remaining opportunities: none above the detection thresholds in the after runs.")
    return summary


def _changes(pairs: Sequence[Pair]) -> list[str]:
    changes: list[str] = []
    for pair in pairs:
        note = pair.after.note or "(no note recorded: what was changed is not known)"
        changes.append(
            f"{_scenario(pair)}{note} (baseline run {pair.before.run_id or 'unsaved'}, "
            f"after run {pair.after.run_id or 'unsaved'}, {pair.after.command})"
        )
        metrics = pair.metrics
        if pair.failure:
            changes.append(f"    not compared: {pair.failure}")
            continue
        changes += [f"    WARNING: {w}" for w in metrics.warnings]
        changes += [f"    {describe_change(row)}" for row in pair.key_changes(4)]
        plain = [g.code for g in metrics.findings_gone if not g.reason]
        if plain:
            changes.append("    no longer found after the change: " + ", ".join(plain))
        changes += [f"    no longer found, but not because of a fix: {g.code}: {g.reason}"
                    for g in metrics.findings_gone if g.reason]
        if metrics.findings_new:
            changes.append("    new findings: " + ", ".join(metrics.findings_new))
    if not changes:
        changes.append(
            "No change was measured yet: label a baseline run and an after run (--label baseline / "
            "--label after, with --note saying what changed) to get before -> after numbers."
        )
    return changes


def _risks(pairs: Sequence[Pair], remaining: Sequence[tuple[Finding, Result]]) -> list[str]:
    risks: list[str] = []
    seen: set[str] = set()
    for pair in pairs:
        if pair.failure:
            continue
        gone = {g.code for g in pair.metrics.findings_gone if not g.reason}
        for finding in pair.before.ranked():
            if finding.code in gone and finding.code not in seen:
                seen.add(finding.code)
                risk = finding.risk or catalog()[finding.code].risk
                if not stated_risk(risk):
                    continue
                risks.append(f"{finding.code} {finding.name} is no longer found after {_scenario(pair)}the change; "
                             f"the usual tradeoff of its fix: {risk}")
    for finding, _run in remaining:
        risk = finding.risk or catalog()[finding.code].risk
        if finding.code not in seen and stated_risk(risk):
            seen.add(finding.code)
            risks.append(f"{finding.code} {finding.name} (recommended fix): {risk}")
    for pair in pairs:
        if not pair.failure:
            risks += [f"Regression measured in {_scenario(pair) or pair.after.command + ' '}: {describe_change(row)}"
                      for row in [r for r in pair.changes() if r.regression][:3]]
    return risks


def _next_steps(remaining: Sequence[tuple[Finding, Result]]) -> list[str]:
    steps = []
    for finding, run in remaining[:6]:
        where = f" ({finding.location})" if finding.location else ""
        steps.append(f"{finding.code} {finding.name}{where} in {run.command}: {finding.fix}")
    return steps or ["Keep the after runs as the new baseline; re-run `infradoctor compare` after each change "
                     "and in CI to catch regressions."]


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
    return Writeup(
        title=title or "infradoctor report",
        generated_at=utc_now_iso(),
        runs=ordered,
        pairs=pairs,
        summary=_summary(pairs, unpaired, found, remaining),
        method=_method(ordered) + [f"Not used (unreadable): {s}" for s in skipped],
        findings=[(f, r) for f, r in found[:10]],
        changes=_changes(pairs),
        risks=_risks(pairs, remaining),
        next_steps=_next_steps(remaining),
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
    if not url:
        return None
    try:
        return urlsplit(str(url)).hostname
    except ValueError:  # an unparsable URL still names its host (``http://[REDACTED]@host`` of older runs)
        netloc = str(url).partition("://")[2].split("/", 1)[0].rpartition("@")[2]
        host = netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc
        return host.strip("[]") or None


def _headline(run: Result) -> dict[str, Any]:
    head = run.metrics.get("headline") if isinstance(run.metrics, Mapping) else None
    return dict(head) if isinstance(head, Mapping) else {}


def finding_line(finding: Finding, run: Result) -> str:
    """One line for a finding in the report."""
    return _finding_line(finding, run)

"""Evidence -> Result: analysis, rules, metrics and error notes, and the whole run (start, wait, collect)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from infradoctor.findings import run_rules
from infradoctor.profile.analyze import analyze, build_metrics, shell_exit_code
from infradoctor.profile.evidence import ProfileEvidence
from infradoctor.profile.launcher import ProfiledProcess, ProfileOptions, start_profiled
from infradoctor.profile.rules import RuleOptions
from infradoctor.result import ErrorNote, Result, new_result, utc_now_iso


def start_error(evidence: ProfileEvidence) -> str | None:
    """Why the program could not start (``-m`` naming no module), or None."""
    return next((str(e.get("message")) for e in evidence.errors if e.get("source") == "start"), None)


def evidence_errors(evidence: ProfileEvidence) -> list[ErrorNote]:
    """What makes a profile partial: no instrumentation, no torch, a failed or interrupted workload."""
    notes: list[ErrorNote] = []
    status = evidence.exit_status
    started = start_error(evidence) is None
    if not started:
        pass  # the program never ran: its start error (below) says why
    elif not evidence.instrumented and not evidence.python_program:
        program = evidence.argv[0] if evidence.argv else "the command"
        notes.append(ErrorNote("profile.instrumentation", f"{program} is not a Python program: only Python is "
                               "instrumented (its process tree's CPU and memory were measured from outside)"))
    elif not evidence.instrumented:
        notes.append(ErrorNote("profile.instrumentation", "the workload ended before the profiler started in it"))
    elif not evidence.torch_imported:
        notes.append(ErrorNote("profile.torch", "the workload never imported torch: CPU-only profile (process "
                               "time, CPU and memory; no steps or model evidence)"))
    if evidence.stop_reason == "interrupted":
        notes.append(ErrorNote("profile.workload", "the workload was interrupted (SIGINT): result from the "
                               "evidence gathered so far"))
    elif status is not None and status < 0 and evidence.stop_reason == "exit":
        notes.append(ErrorNote("profile.workload", f"the workload was killed by signal {-status}: partial result"))
    elif status not in (None, 0) and evidence.stop_reason == "exit" and started:
        notes.append(ErrorNote("profile.workload", f"the workload exited with status {status}: partial result"))
    notes.extend(
        ErrorNote(f"profile.{err.get('source', 'instrumentation')}", str(err.get("message", "")),
                  int(err.get("count", 1)))
        for err in evidence.errors
    )
    return notes


def build_result(
    evidence: ProfileEvidence,
    *,
    started_at: str,
    rule_options: RuleOptions | None = None,
    extra_target: dict[str, Any] | None = None,
) -> Result:
    """The profile result for a run's evidence."""
    analysis = analyze(evidence)
    findings = run_rules(analysis, rule_options)
    return new_result(
        "profile",
        started_at=started_at,
        duration_s=evidence.duration_s,
        target={"argv": list(evidence.argv), **(extra_target or {})},
        metrics=build_metrics(analysis),
        findings=findings,
        errors=evidence_errors(evidence),
        exit_status=shell_exit_code(evidence.exit_status),
    )


EVIDENCE_FORMAT = "infradoctor.profile-evidence/1"
"""``format`` of a saved evidence bundle (``profile --save-evidence``; read back by ``profile --evidence``)."""

EvidenceSink = Callable[[dict[str, Any]], None]
"""Receives the evidence bundle of a run (JSON-ready), e.g. to save it."""


def evidence_bundle(evidence: ProfileEvidence, started_at: str) -> dict[str, Any]:
    """A run's evidence as JSON (judged again by :func:`judge_bundle`)."""
    return {"format": EVIDENCE_FORMAT, "started_at": started_at, "profile": evidence.to_dict()}


def profile_run(
    argv: Sequence[str],
    options: ProfileOptions | None = None,
    rule_options: RuleOptions | None = None,
    *,
    timeout_s: float | None = None,
    on_evidence: EvidenceSink | None = None,
) -> Result:
    """Run ``argv`` to the end (or its step/duration limit) under the profiler and return the result.

    A KeyboardInterrupt in the caller (Ctrl-C reaches the workload too) stops the workload and still returns the
    result of what was gathered.
    """
    started_at = utc_now_iso()
    proc = start_profiled(argv, options)
    try:
        try:
            if proc.wait(timeout_s) is None:
                proc.stop(reason="stopped")
        except KeyboardInterrupt:
            with further_interrupts_kill(proc):
                proc.interrupt()  # the workload's own process group does not hear the terminal
                deadline = time.monotonic() + proc.options.stop_grace_s
                while proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                if proc.poll() is None:
                    proc.stop(reason="interrupted")
                proc.stop_reason = "interrupted"
        evidence = proc.collect()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.close()
    if on_evidence is not None:
        on_evidence(evidence_bundle(evidence, started_at))
    return build_result(evidence, started_at=started_at, rule_options=rule_options)


@contextlib.contextmanager
def further_interrupts_kill(proc: ProfiledProcess) -> Iterator[None]:
    """While a Ctrl-C stops the workload, a second Ctrl-C kills it at once instead of raising.

    The partial result is still written (a second KeyboardInterrupt used to end the profiler and lose it).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def kill_now(signum: int, frame: object) -> None:
        proc.stop_reason = "interrupted"
        proc.kill()

    previous = signal.signal(signal.SIGINT, kill_now)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)

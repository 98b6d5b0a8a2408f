"""Evidence -> Result: analysis, rules, metrics and error notes, and the whole run (start, wait, collect).

:func:`run` is the ``profile`` command as a library: ``run(ProfileRunOptions(argv, max_steps=200)) -> Result``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from infradoctor.errors import UsageError
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
        metrics=build_metrics(analysis).to_dict(),
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


@dataclass(frozen=True)
class ProfileRunOptions:
    """What to profile and how: the library form of ``infradoctor profile [--steps N | --duration S] -- CMD``."""

    argv: Sequence[str]
    """The workload's command line, e.g. ``["python", "train.py", "--epochs", "1"]``."""
    max_steps: int | None = None
    """Stop the workload after this many steps (SIGINT, as Ctrl-C would)."""
    duration_s: float | None = None
    """Stop the workload after this many seconds."""
    sample_interval_s: float = 0.5
    """System sampling period (CPU per core, the process tree's CPU and memory, GPU utilisation)."""
    rule_options: RuleOptions | None = None
    """Rule thresholds and the folder relative source paths are shown against (default: the rules' defaults)."""
    on_evidence: EvidenceSink | None = field(default=None, compare=False)
    """Receives the run's evidence bundle (JSON-ready) before it is judged, e.g. to save it
    (``--save-evidence``; judged again by :func:`infradoctor.profile_load.run.judge_bundle`)."""
    cwd: str | None = None
    """The workload's working folder (default: ours)."""
    env: Mapping[str, str] | None = None
    """Extra environment variables for the workload."""
    stdout: int | None = None
    """Where the workload's stdout goes (a file descriptor; default: inherited)."""
    timeout_s: float | None = None
    """Stop the workload after this many seconds of waiting (a bound for callers; None: no bound)."""

    def validate(self) -> None:
        """Raises UsageError for options that cannot run."""
        if not self.argv:
            raise UsageError("give the workload's command line")
        if self.max_steps is not None and self.max_steps < 1:
            raise UsageError("the step limit must be at least 1")
        if self.duration_s is not None and not self.duration_s > 0:
            raise UsageError("the duration must be positive")
        if not self.sample_interval_s > 0:
            raise UsageError("the sample interval must be positive")

    def launch_options(self, base: ProfileOptions | None = None) -> ProfileOptions:
        """The launcher's options (``base`` for the settings these options do not name)."""
        return replace(base or ProfileOptions(), max_steps=self.max_steps, duration_s=self.duration_s,
                       sample_interval_s=self.sample_interval_s, cwd=self.cwd, env=self.env, stdout=self.stdout)


def run(options: ProfileRunOptions) -> Result:
    """Profile ``options.argv`` to its end (or its step or time limit) and return the ``profile`` result.

    A program that could not start (``-m`` naming no module) gives a result with a ``profile.start`` error; a
    Ctrl-C stops the workload and still returns what was gathered.

    Raises:
        UsageError: the options cannot run.
    """
    options.validate()
    return profile_run(list(options.argv), options.launch_options(), options.rule_options,
                       timeout_s=options.timeout_s, on_evidence=options.on_evidence)


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

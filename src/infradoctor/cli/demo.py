"""``infradoctor demo``: the whole method on bundled sick workloads, ending in a report.

It runs the library, not the command line: each workload through :func:`infradoctor.profile_load.run.run`, each
run into the store (:class:`~infradoctor.store.RunStore`) with its label and note, the write-up through
:func:`~infradoctor.report.writeup.build_writeup` and its renderers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from infradoctor.bounded import printable
from infradoctor.cli.base import Command
from infradoctor.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TARGET,
    EXIT_USAGE,
    InfradoctorError,
    MissingExtraError,
    StoreError,
    UsageError,
)

if TYPE_CHECKING:
    from infradoctor.demo.scenarios import Scenario
    from infradoctor.profile_load.run import ServiceLoadOptions
    from infradoctor.result import Result
    from infradoctor.store import RunStore


class DemoCommand(Command):
    """Run the method end to end on bundled sick workloads: baseline, diagnose, fix, measure again, report.

    Three small CPU workloads ship inside the package, each with a known defect and its fix:
      serve  an inference service that loads its model per request and blocks its event loop
      batch  a batch-inference job that scores one record at a time with autograd on
      train  a training loop starved by its data loading
    Each is profiled as written (label NAME-baseline), then in its fixed version (NAME-after, with a note saying
    what changed); the runs are compared and written up in DIR/demo-report.md and DIR/demo-report.html. The
    workloads are copied to DIR/workloads and the runs stored in DIR/.infradoctor, so `infradoctor runs --store
    DIR/.infradoctor` and `infradoctor compare` work on them afterwards. Needs torch, fastapi and uvicorn
    (pip install 'infradoctor[demo]' torch).
    """

    name = "demo"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Arguments."""
        parser.add_argument("--out", type=Path, default=Path("demo-out"), help="output directory (default demo-out)")
        parser.add_argument(
            "--only",
            action="append",
            choices=("serve", "batch", "train"),
            help="run only this scenario (repeatable; default: all three)",
        )
        parser.add_argument(
            "--point-duration",
            type=float,
            default=2.0,
            help="seconds per concurrency level for the service scenario (default 2)",
        )

    def run(self, args: argparse.Namespace) -> int:
        """Run the scenarios and write the report."""
        for module, extra in (("torch", "demo"), ("fastapi", "demo"), ("uvicorn", "demo")):
            try:
                __import__(module)
            except ImportError:
                raise MissingExtraError(module, extra, "infradoctor demo") from None
        from infradoctor.demo.scenarios import SCENARIOS, copy_workloads
        from infradoctor.result import Result
        from infradoctor.store import RunStore

        out: Path = args.out.resolve()
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create {out}: {exc}") from exc
        store = RunStore(out / ".infradoctor")
        workloads = copy_workloads(out)
        logs = out / "logs"
        logs.mkdir(exist_ok=True)
        chosen = [s for s in SCENARIOS if not args.only or s.name in args.only]
        started = time.monotonic()
        say = _printer(sys.stdout)
        say(f"infradoctor demo: {len(chosen)} sick workloads -> {out}")
        failures = 0
        for number, scenario in enumerate(chosen, 1):
            say(f"\n[{number}/{len(chosen)}] {scenario.name}: {scenario.title}")
            results: dict[str, Result] = {}
            for phase, script in (("baseline", scenario.sick), ("after", scenario.fixed)):
                label = f"{scenario.name}-{phase}"
                run = _Step(scenario, phase, label, workloads / script, workloads, logs / f"{label}.log")
                shown = " ".join([script, *run.options.argv[2:]])
                say(f"  {phase:8} {'profiling under load' if run.service else 'profiling'}: {shown}")
                t0 = time.monotonic()
                outcome = run.measure(store, out / f"{label}.json", args.point_duration)
                if outcome == EXIT_INTERRUPTED:  # Ctrl-C stops the whole demo, not just the step that was running
                    say(f"  {phase:8} interrupted: the demo stops here (the partial run is stored, marked "
                        "interrupted, and never compared as if complete)")
                    return EXIT_INTERRUPTED
                if not isinstance(outcome, Result):
                    say(f"  {phase:8} failed (exit {outcome}); see {run.log}")
                    failures += 1
                    break
                results[phase] = outcome
                say(f"  {phase:8} {time.monotonic() - t0:5.1f} s  {_headline(outcome)}")
                for finding in outcome.ranked()[:3] if phase == "baseline" else outcome.ranked()[:1]:
                    where = f" ({_short(str(finding.location))})" if finding.location else ""
                    say(f"           {finding.code} {finding.name}: {finding.title}{where}")
            if len(results) == 2:
                missing = [c for c in scenario.expected if c not in {f.code for f in results["baseline"].findings}]
                if missing:
                    say(f"  note: expected {', '.join(missing)} in the baseline and did not find it")
                self._print_change(say, results["baseline"], results["after"])
        say("\nwriting the report ...")
        for target in _write_report(store, out):
            say(f"  {target}")
        say(f"done in {time.monotonic() - started:.0f} s. Runs: infradoctor runs --store {store.root}")
        return EXIT_TARGET if failures else EXIT_OK

    @staticmethod
    def _print_change(say: Say, before: Result, after: Result) -> None:
        from infradoctor.compare.analysis import compare_changes
        from infradoctor.report.writeup import describe_change

        rows = compare_changes(before, after, resamples=200)
        wanted = ("samples_per_s", "throughput_rps", "p99_ms", "latency_ms", "step_time_ms", "data_wait_fraction")
        shown = 0
        for name in wanted:
            for row in rows:
                if not row.comparable or not (row.before or row.after):
                    continue
                if row.metric == name and row.statistic in ("value", "p99"):
                    say(f"  result   {describe_change(row)}")
                    shown += 1
                    break
            if shown >= 3:
                break


Say = Callable[[str], None]


def _printer(stream: TextIO) -> Say:
    def say(text: str) -> None:
        stream.write(text + "\n")
        stream.flush()

    return say


def _short(text: str) -> str:
    return text if len(text) <= 70 else "…" + text[-69:]


def _headline(result: Result) -> str:
    from infradoctor.profile.metrics import ProfileMetrics
    from infradoctor.report.sections import format_value

    head = ProfileMetrics.from_dict(result.metrics).to_dict()["headline"]
    keys = [k for k in ("samples_per_s", "throughput_rps", "p99_ms", "data_wait_fraction", "step_time_ms_p50")
            if k in head]
    return ", ".join(f"{k}={format_value(head[k])}" for k in keys[:3]) or json.dumps(head)[:80]


class _Step:
    """One measurement of the demo: a scenario's workload (sick or fixed), profiled, stored and written as JSON."""

    def __init__(self, scenario: Scenario, phase: str, label: str, script: Path, workloads: Path, log: Path) -> None:
        from infradoctor.procs import free_port
        from infradoctor.profile.result import ProfileRunOptions
        from infradoctor.profile.rules import RuleOptions

        self.label = label
        self.note = scenario.fix_note if phase == "after" else scenario.title
        self.log = log
        argv = [sys.executable, str(script), *scenario.args]
        self.port = free_port() if scenario.service else None
        if self.port is not None:
            argv.append(str(self.port))
        self.workloads = workloads
        self.service = scenario.service
        self.options = ProfileRunOptions(argv=tuple(argv), rule_options=RuleOptions(cwd=os.getcwd()))

    def measure(self, store: RunStore, json_path: Path, point_duration_s: float) -> Result | int:
        """The stored result (also written to ``json_path``), or the exit code the step failed with (130: Ctrl-C).

        The workload's output (and any error) goes to the step's log.
        """
        from infradoctor.profile_load.run import run

        try:
            with _quiet_fds(self.log):
                try:
                    result = run(self.options, self._service(point_duration_s))
                except InfradoctorError as exc:
                    print(f"infradoctor profile: error: {printable(str(exc))}", file=sys.stderr)
                    return exc.exit_code
                start_error = next((e.message for e in result.errors if e.source == "profile.start"), None)
                if start_error is not None:  # the program never ran: nothing to keep
                    print(f"infradoctor profile: error: {printable(start_error)}", file=sys.stderr)
                    return EXIT_TARGET
                kept = _keep(result.with_(label=self.label, note=self.note), store)
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
        try:
            json_path.write_text(kept.to_json() + "\n", encoding="utf-8")
        except OSError as exc:
            print(f"infradoctor demo: cannot write {printable(str(json_path))}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        return EXIT_INTERRUPTED if _interrupted(kept) else kept

    def _service(self, point_duration_s: float) -> ServiceLoadOptions | None:
        """The load driven at a service scenario (none for a batch or training workload)."""
        from infradoctor.profile_load.run import ServiceLoadOptions

        if self.port is None:
            return None
        base = f"http://127.0.0.1:{self.port}"
        return ServiceLoadOptions(load_url=f"{base}/predict", ready_url=f"{base}/health",
                                  bodies=((self.workloads / "request.json").read_bytes(),), concurrency=(1, 2, 4, 8),
                                  point_duration_s=point_duration_s, timeout_s=10.0)


def _keep(result: Result, store: RunStore) -> Result:
    """The run with the machine it ran on, stored (a store that fails is a note on the result, as for any command)."""
    from infradoctor.environment import describe_environment
    from infradoctor.redact import redact
    from infradoctor.result import ErrorNote, Result

    result = result.with_(environment=result.environment or describe_environment())
    try:
        return store.save(result)
    except StoreError as exc:
        print(f"infradoctor: warning: run not stored: {printable(str(exc))}", file=sys.stderr)
        noted = result.with_(errors=(*result.errors, ErrorNote("store", str(exc))))
        return Result.from_dict(redact(noted.to_dict()))


def _interrupted(result: Result) -> bool:
    """Ctrl-C cut the run short (the workload was interrupted, or the load on a service)."""
    from infradoctor.profile.metrics import ProfileMetrics

    if any(note.source.endswith(".interrupted") for note in result.errors):
        return True
    return ProfileMetrics.from_dict(result.metrics).workload.stop_reason == "interrupted"


REPORT_RUNS = 20
"""Newest stored runs the report covers (as ``infradoctor report`` without arguments)."""


def _write_report(store: RunStore, out: Path) -> list[Path]:
    """The write-up of the stored runs as ``demo-report.md`` and ``demo-report.html``; the files written."""
    from infradoctor.report.writeup import build_writeup
    from infradoctor.report.writeup_render import to_html, to_markdown

    results: list[Result] = []
    skipped: list[str] = []
    for summary in store.list(limit=REPORT_RUNS):
        if summary.command == "compare":
            continue
        try:
            results.append(store.load(summary.id))
        except StoreError as exc:  # one damaged run must not sink the report
            skipped.append(str(exc))
    if not results:
        return []
    writeup = build_writeup(results, title="infradoctor demo report", skipped=skipped)
    written = []
    for suffix, render in (("md", to_markdown), ("html", to_html)):
        target = out / f"demo-report.{suffix}"
        target.write_text(render(writeup), encoding="utf-8")
        written.append(target)
    return written


@contextlib.contextmanager
def _quiet_fds(log: Path) -> Iterator[None]:
    """Send this process's and its children's stdout/stderr to ``log`` for the duration (the workload's chatter)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with log.open("ab") as fh:
        os.dup2(fh.fileno(), 1)
        os.dup2(fh.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


COMMAND = DemoCommand()

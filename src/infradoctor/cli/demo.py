"""``infradoctor demo``: the whole method on bundled sick workloads, ending in a report."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from infradoctor.cli.base import Command
from infradoctor.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_TARGET, MissingExtraError, UsageError


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
        from infradoctor.cli import main as cli_main
        from infradoctor.demo.scenarios import SCENARIOS, copy_workloads
        from infradoctor.procs import free_port
        from infradoctor.result import Result

        out: Path = args.out.resolve()
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create {out}: {exc}") from exc
        store = out / ".infradoctor"
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
                json_path = out / f"{label}.json"
                argv = ["profile", "--store", str(store), "--label", label, "--quiet", "--json", str(json_path)]
                argv += ["--note", scenario.fix_note if phase == "after" else scenario.title]
                workload = [sys.executable, str(workloads / script), *scenario.args]
                if scenario.service:
                    port = free_port()
                    base = f"http://127.0.0.1:{port}"
                    argv += [
                        "--load-url", f"{base}/predict",
                        "--ready-url", f"{base}/health",
                        "--load-body", str(workloads / "request.json"),
                        "--concurrency", "1,2,4,8",
                        "--point-duration", str(args.point_duration),
                        "--load-timeout", "10",
                    ]
                    workload.append(str(port))
                what = "profiling under load" if scenario.service else "profiling"
                shown = " ".join([Path(workload[1]).name, *workload[2:]])
                say(f"  {phase:8} {what}: {shown}")
                t0 = time.monotonic()
                with _quiet_fds(logs / f"{label}.log"):
                    code = cli_main([*argv, "--", *workload])
                if code == EXIT_INTERRUPTED:  # Ctrl-C stops the whole demo, not just the step that was running
                    say(f"  {phase:8} interrupted: the demo stops here (the partial run is stored, marked "
                        "interrupted, and never compared as if complete)")
                    return EXIT_INTERRUPTED
                if not json_path.exists():
                    say(f"  {phase:8} failed (exit {code}); see {logs / f'{label}.log'}")
                    failures += 1
                    break
                result = Result.from_json(json_path.read_text(encoding="utf-8"))
                results[phase] = result
                say(f"  {phase:8} {time.monotonic() - t0:5.1f} s  {_headline(result)}")
                for finding in result.ranked()[:3] if phase == "baseline" else result.ranked()[:1]:
                    where = f" ({_short(str(finding.location))})" if finding.location else ""
                    say(f"           {finding.code} {finding.name}: {finding.title}{where}")
            if len(results) == 2:
                missing = [c for c in scenario.expected if c not in {f.code for f in results["baseline"].findings}]
                if missing:
                    say(f"  note: expected {', '.join(missing)} in the baseline and did not find it")
                self._print_change(say, results["baseline"], results["after"])
        say("\nwriting the report ...")
        for suffix in ("md", "html"):
            target = out / f"demo-report.{suffix}"
            with _quiet_fds(logs / "report.log"):
                cli_main(["report", "--store", str(store), "--title", "infradoctor demo report", "-o", str(target)])
            say(f"  {target}")
        say(f"done in {time.monotonic() - started:.0f} s. Runs: infradoctor runs --store {store}")
        return EXIT_TARGET if failures else EXIT_OK

    @staticmethod
    def _print_change(say: Say, before: object, after: object) -> None:
        from infradoctor.compare.analysis import compare_changes
        from infradoctor.report.writeup import describe_change
        from infradoctor.result import Result

        assert isinstance(before, Result) and isinstance(after, Result)
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


def _headline(result: object) -> str:
    from infradoctor.report.sections import format_value
    from infradoctor.result import Result

    assert isinstance(result, Result)
    head = result.metrics.get("headline") or {}
    keys = [k for k in ("samples_per_s", "throughput_rps", "p99_ms", "data_wait_fraction", "step_time_ms_p50")
            if k in head]
    return ", ".join(f"{k}={format_value(head[k])}" for k in keys[:3]) or json.dumps(head)[:80]


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

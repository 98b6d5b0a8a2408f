"""Start a program under the profiler as its own child process, sample the machine, stop it, collect evidence.

``start_profiled(argv, options) -> ProfiledProcess`` is the reusable entry point (``profile`` and
``profile --load-url`` both use it)::

    proc = start_profiled(["python", "server.py"], ProfileOptions())
    ...                      # drive load at it
    proc.stop()              # SIGINT, then SIGTERM, then SIGKILL
    evidence = proc.collect()

A ``python`` command runs through ``python -m infradoctor.profile.runner`` (the cProfile way); any other command
(a console script such as ``uvicorn``) is instrumented by an injected ``sitecustomize`` when it imports torch. The
program's stdin/stdout/stderr are inherited untouched; evidence comes back through files in a private folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import psutil

from infradoctor.errors import TargetError, UsageError
from infradoctor.node.gpu.nvml import NA, NVML_MEMORY_V2, NvmlQuery, load_pynvml
from infradoctor.procs import stop_process
from infradoctor.profile.evidence import ProfileEvidence, SystemSample, read_events
from infradoctor.profile.instrument import EVENTS_DIR_ENV, MAX_STEPS_ENV, STOP_MARKER

PACKAGE_DIR = Path(__file__).resolve().parents[1]
INJECT_DIR = Path(__file__).resolve().parent / "inject"
_PYTHON_NAME = re.compile(r"^(python|pypy)[0-9.]*$")
# Interpreter options that take a value (the next argument) when given alone.
_OPTIONS_WITH_VALUE = {"-W", "-X", "--check-hash-based-pycs"}


@dataclass(frozen=True)
class ProfileOptions:
    """How to run the workload."""

    max_steps: int | None = None
    """Interrupt the workload (SIGINT) after this many steps."""
    duration_s: float | None = None
    """Stop the workload (SIGINT, SIGTERM, SIGKILL) after this many seconds."""
    sample_interval_s: float = 0.5
    """System sampling period (CPU per core, process tree CPU and RSS, GPU utilisation)."""
    cwd: str | None = None
    """Working directory of the workload (default: ours)."""
    env: Mapping[str, str] | None = None
    """Extra environment variables for the workload."""
    stdin: int | IO[Any] | None = None
    """The workload's stdin (default: inherited)."""
    stdout: int | IO[Any] | None = None
    """The workload's stdout (default: inherited)."""
    stderr: int | IO[Any] | None = None
    """The workload's stderr (default: inherited)."""
    stop_grace_s: float = 5.0
    """Seconds between SIGINT, SIGTERM and SIGKILL when stopping."""
    own_group: bool | None = None
    """Run the workload in a process group of its own (default: when not at a terminal)."""


@dataclass(frozen=True)
class LaunchPlan:
    """The command actually run and how it is instrumented."""

    argv: tuple[str, ...]
    """Child command line."""
    mode: str
    """``runner`` (python program) or ``sitecustomize`` (any other command)."""
    python: bool = True
    """The command runs Python (a ``python`` command, or a script whose first line names a Python interpreter);
    other programs are measured from outside only (CPU, memory), not instrumented."""


LEFTOVER_GRACE_S = 3.0
"""Seconds a process the workload left running gets between SIGTERM and SIGKILL."""
KILL_GRACE_S = 0.5
"""A second Ctrl-C: seconds the workload gets after SIGTERM (its profiler writes the steps it holds, up to a second
of them) before SIGKILL."""


def _at_terminal() -> bool:
    """Our standard input is a terminal (an interactive session, where Ctrl-C reaches the whole process group)."""
    try:
        return os.isatty(0)
    except OSError:
        return False


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _runs_python(executable: str) -> bool:
    """The executable is a Python script (a console script such as ``uvicorn``: its ``#!`` line names Python)."""
    try:
        with open(executable, "rb") as fh:
            first = fh.read(256).split(b"\n", 1)[0]
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def plan_command(argv: Sequence[str], cwd: str | None = None) -> LaunchPlan:
    """The child command for a user command; raises UsageError/TargetError for what cannot run."""
    if not argv:
        raise UsageError("no command to profile: give it after --, e.g. `infradoctor profile -- python train.py`")
    exe = argv[0]
    base = os.path.basename(exe)
    resolved = shutil.which(exe) if os.sep not in exe else (exe if os.path.exists(exe) else None)
    if resolved is None:
        raise TargetError(f"cannot run {exe!r}: command not found")
    if not _PYTHON_NAME.match(base):
        if base.endswith(".py"):
            return plan_command([sys.executable, *argv], cwd)
        return LaunchPlan((resolved, *argv[1:]), "sitecustomize", python=_runs_python(resolved))
    interpreter_opts: list[str] = []
    i = 1
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-m", "-c", "-"):
        interpreter_opts.append(argv[i])
        if argv[i] in _OPTIONS_WITH_VALUE and i + 1 < len(argv):
            interpreter_opts.append(argv[i + 1])
            i += 1
        i += 1
    rest = list(argv[i:])
    if not rest or rest[0] == "-":
        raise UsageError("profile needs a script, -m module or -c code after the interpreter (stdin is not supported)")
    if rest[0] in ("-m", "-c") and len(rest) < 2:
        raise UsageError(f"{rest[0]} needs an argument")
    if rest[0] not in ("-m", "-c"):
        script = Path(cwd or ".") / rest[0]
        if script.is_dir():
            if not (script / "__main__.py").is_file():  # Python runs a folder through its __main__.py
                raise TargetError(f"{rest[0]} is a directory without __main__.py: give the script to run")
        elif not script.is_file():
            raise TargetError(f"script not found: {rest[0]}")
    return LaunchPlan((resolved, *interpreter_opts, "-m", "infradoctor.profile.runner", *rest), "runner")


MAIN_PSS_INTERVAL_S = 5.0
"""The main process's PSS is read at most this often (see ``_SystemSampler._tree_pss``)."""


def _add_pss(total: int | None, proc: psutil.Process) -> int | None:
    """``total`` plus the process's PSS; None once a process's PSS cannot be read (the tree's sum is unknown)."""
    if total is None:
        return None
    try:
        return total + int(proc.memory_full_info().pss)
    except (psutil.Error, AttributeError, OSError):
        return None


def gpu_sample(query: NvmlQuery, handles: Sequence[Any]) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """Utilisation (%) and used memory (bytes) of each GPU that answers both (through the NVML query helper)."""
    util: list[float] = []
    mem: list[int] = []
    for handle in handles:
        rates = query("nvmlDeviceGetUtilizationRates", handle)
        info = query("nvmlDeviceGetMemoryInfo", handle, NVML_MEMORY_V2)
        if info is NA:  # an older driver or nvidia-ml-py without the v2 struct
            info = query("nvmlDeviceGetMemoryInfo", handle)
        if rates is NA or info is NA:
            continue
        util.append(float(rates.gpu))
        mem.append(int(info.used))
    return tuple(util), tuple(mem)


class _SystemSampler(threading.Thread):
    """Samples CPU per core, the workload tree's CPU and RSS, and GPU utilisation (NVML) in the parent."""

    def __init__(self, pid: int, interval_s: float, nvml: Any = None) -> None:
        super().__init__(name="infradoctor-profile-sampler", daemon=True)
        self.pid = pid
        self.interval_s = interval_s
        self.nvml_lib = nvml
        """``pynvml`` or a :class:`ReplayNvml` of recorded values (None: the installed ``pynvml``)."""
        self.samples: list[SystemSample] = []
        self.stop_event = threading.Event()
        self.max_rss = 0
        """Peak RSS of the main process (summing RSS over forked workers would count shared pages per worker)."""
        self.max_tree_pss = 0
        """Peak proportional set size of the whole tree (each shared page split among the processes sharing it)."""
        self.main_pss: int | None = None
        self.main_pss_rss = 0
        self.main_pss_at = 0.0
        self.nvml: NvmlQuery | None = None
        self.gpus: list[Any] = []
        self.procs: dict[int, psutil.Process] = {}
        self.cpu_prev: dict[int, float] = {}

    def _init_nvml(self) -> None:
        lib = self.nvml_lib if self.nvml_lib is not None else load_pynvml()
        self.nvml = None
        self.gpus = []
        if lib is None:
            return
        query = NvmlQuery(lib)
        if query("nvmlInit") is NA:  # no NVML or no GPU: GPU columns stay empty
            return
        self.nvml = query
        count = query("nvmlDeviceGetCount", default=0)
        self.gpus = [h for i in range(int(count)) if (h := query("nvmlDeviceGetHandleByIndex", i)) is not NA]

    def _tree(self) -> list[psutil.Process]:
        try:
            root = self.procs.get(self.pid) or psutil.Process(self.pid)
            self.procs[self.pid] = root
            children = root.children(recursive=True)
            return [root, *(self.procs.setdefault(child.pid, child) for child in children)]
        except psutil.Error:
            return []

    def _tree_pss(self, tree: list[psutil.Process], main_rss: int, children_pss: int | None) -> int | None:
        """The tree's PSS: the children's (read each sample) and the main process's.

        Reading PSS walks a process's page tables under its memory-map lock, which slows a workload that maps and
        unmaps buffers (torch's large tensors): the main process's PSS is read at most every
        ``MAIN_PSS_INTERVAL_S`` and follows its RSS in between; alone in its tree, its RSS stands for it.
        """
        if not tree or not main_rss:
            return None
        if len(tree) == 1:
            return main_rss
        if children_pss is None:
            return None
        now = time.monotonic()
        if self.main_pss is None or now - self.main_pss_at >= MAIN_PSS_INTERVAL_S:
            root = self.procs.get(self.pid)
            read = _add_pss(0, root) if root is not None else None
            if read is None:
                return None
            self.main_pss, self.main_pss_rss, self.main_pss_at = read, main_rss, now
        return max(0, self.main_pss + main_rss - self.main_pss_rss) + children_pss

    def sample(self, last_t: float) -> float:
        now = time.monotonic()
        cores = tuple(float(x) for x in psutil.cpu_percent(percpu=True))
        cpu_total = 0.0
        main_rss = 0
        tree = self._tree()
        children_pss: int | None = 0
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                total = times.user + times.system
                cpu_total += total - self.cpu_prev.get(proc.pid, total)
                self.cpu_prev[proc.pid] = total
                if proc.pid == self.pid:
                    main_rss = proc.memory_info().rss
            if proc.pid != self.pid:
                children_pss = _add_pss(children_pss, proc)
        pss_total = self._tree_pss(tree, main_rss, children_pss)
        self.max_rss = max(self.max_rss, main_rss)
        if pss_total:
            self.max_tree_pss = max(self.max_tree_pss, pss_total)
        util, mem = gpu_sample(self.nvml, self.gpus) if self.nvml is not None else ((), ())
        elapsed = now - last_t
        self.samples.append(
            SystemSample(
                t=now,
                cpu_percent=cores,
                process_cpu_percent=round(100.0 * cpu_total / elapsed, 1) if elapsed > 0 else None,
                rss_bytes=main_rss or None,
                gpu_util_percent=util,
                gpu_memory_bytes=mem,
                tree_pss_bytes=pss_total or None,
                processes=len(tree),
            )
        )
        return now

    def run(self) -> None:
        self._init_nvml()
        psutil.cpu_percent(percpu=True)
        self._tree()
        for proc in self.procs.values():
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                self.cpu_prev[proc.pid] = times.user + times.system
        last = time.monotonic()
        while not self.stop_event.wait(self.interval_s):
            try:
                last = self.sample(last)
            except Exception:  # noqa: BLE001 - sampling is best effort
                continue
        if self.nvml is not None:
            self.nvml("nvmlShutdown")


class ProfiledProcess:
    """A workload running under the profiler."""

    def __init__(self, argv: Sequence[str], options: ProfileOptions) -> None:
        self.argv = tuple(argv)
        self.options = options
        self.plan = plan_command(argv, options.cwd)
        self.events_dir = Path(tempfile.mkdtemp(prefix="infradoctor-profile-"))
        inject = self.events_dir / "inject"
        inject.mkdir()
        shutil.copy(INJECT_DIR / "sitecustomize.py", inject / "sitecustomize.py")
        os.symlink(PACKAGE_DIR, inject / "infradoctor")
        env = dict(os.environ)
        env.update(options.env or {})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(inject), env.get("PYTHONPATH", "")) if p)
        env[EVENTS_DIR_ENV] = str(self.events_dir)
        env["INFRADOCTOR_PROFILE_ROLE"] = "any" if self.plan.mode == "sitecustomize" else "runner"
        if options.max_steps:
            env[MAX_STEPS_ENV] = str(options.max_steps)
        self.started = time.monotonic()
        self.stop_reason = "exit"
        self._peak_rss: int | None = None
        self._evidence: ProfileEvidence | None = None
        # Away from a terminal (CI, nohup, a pipeline) the workload gets a process group of its own, so stopping
        # it stops everything it started. At a terminal it stays in ours: it keeps the terminal (input(), pdb)
        # and Ctrl-C reaches it directly, as without the profiler; stopping then ends its process tree.
        self.own_group = options.own_group if options.own_group is not None else not _at_terminal()
        self._tree: list[psutil.Process] = []
        self._killing = False
        try:
            self.popen = subprocess.Popen(  # noqa: S603 - the user's own command
                list(self.plan.argv),
                cwd=options.cwd,
                env=env,
                stdin=options.stdin,
                stdout=options.stdout,
                stderr=options.stderr,
                preexec_fn=os.setpgrp if self.own_group else None,  # noqa: PLW1509 - no threads run in the child
            )
        except OSError as exc:
            shutil.rmtree(self.events_dir, ignore_errors=True)
            raise TargetError(f"cannot start {self.argv[0]!r}: {exc}") from exc
        self.pid = self.popen.pid
        self.ended: float | None = None
        self.sampler = _SystemSampler(self.pid, options.sample_interval_s)
        self.sampler.start()

    def poll(self) -> int | None:
        """Exit status if it has ended (negative: killed by that signal), else None."""
        if self.popen.returncode is not None:
            return self.popen.returncode
        try:
            pid, status, usage = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:
            return self.popen.poll()
        if pid == 0:
            return None
        self.popen.returncode = os.waitstatus_to_exitcode(status)
        self._peak_rss = int(usage.ru_maxrss) * 1024  # Linux reports KiB
        self.ended = time.monotonic()
        return self.popen.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait until it ends (bounded by ``timeout``); its exit status or None."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.options.duration_s is not None:
            stop_at = self.started + self.options.duration_s
            deadline = stop_at if deadline is None else min(deadline, stop_at)
        while True:
            code = self.poll()
            if code is not None:
                return code
            if deadline is not None and time.monotonic() >= deadline:
                if self.options.duration_s is not None and time.monotonic() >= self.started + self.options.duration_s:
                    self.stop_reason = "duration"
                    return self.stop(reason="duration")
                return None
            time.sleep(0.02)

    def stop(self, reason: str = "stopped", grace_s: float | None = None) -> int | None:
        """SIGINT, then SIGTERM, then SIGKILL, each after the grace period; its exit status.

        The signals go to the workload's process group when it has one of its own; what it started and left
        running (a forked helper, a worker) is ended too.
        """
        if self.poll() is None:
            with contextlib.suppress(OSError):
                (self.events_dir / STOP_MARKER).touch()  # the runner ends quietly on our SIGINT
        self.remember_tree()

        def note_reason(sig: signal.Signals) -> None:
            if self.stop_reason == "exit":
                self.stop_reason = reason

        status = stop_process(self.popen, grace_s=self.options.stop_grace_s if grace_s is None else grace_s,
                              group=self.own_group, poll=self.poll, before_signal=note_reason)
        self.end_leftovers()
        return status

    def interrupt(self) -> None:
        """Pass a Ctrl-C on to the workload when it has a group of its own (at a terminal it got it already)."""
        if self.own_group and self.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGINT)

    def kill(self, grace_s: float = KILL_GRACE_S) -> None:
        """End the workload and everything it started, at once (a second Ctrl-C).

        SIGTERM first: the profiler inside writes the steps it still holds (it flushes once a second, so a bare
        SIGKILL lost up to a second of them) and the workload dies of it; SIGKILL after ``grace_s``, or at once
        when a kill is already under way (a third Ctrl-C).
        """
        self.remember_tree()
        first, self._killing = not self._killing, True
        if first and grace_s > 0 and self.poll() is None:
            self._send(signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while self.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
        if self.poll() is None:
            self._send(signal.SIGKILL)
        self.end_leftovers(grace_s=0.0)

    def _send(self, sig: signal.Signals) -> None:
        """A signal to the workload's group when it has one of its own, else to the workload."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.own_group:
                os.killpg(self.pid, sig)
            else:
                self.popen.send_signal(sig)

    def remember_tree(self) -> None:
        """Note the workload's descendants while it still runs (they are reparented once it exits)."""
        if self.poll() is not None:
            return
        with contextlib.suppress(psutil.Error):
            known = {p.pid for p in self._tree}
            self._tree.extend(p for p in psutil.Process(self.pid).children(recursive=True) if p.pid not in known)

    def end_leftovers(self, grace_s: float = LEFTOVER_GRACE_S) -> None:
        """SIGTERM, then SIGKILL, the workload's descendants that outlived it."""
        alive = [p for p in self._tree if _running(p)]
        for child in alive:
            with contextlib.suppress(psutil.Error):
                if grace_s > 0:
                    child.terminate()
                else:
                    child.kill()
        if alive:
            _, still = psutil.wait_procs(alive, timeout=max(grace_s, 0.5))
            for child in still:
                with contextlib.suppress(psutil.Error):
                    child.kill()

    def collect(self) -> ProfileEvidence:
        """Evidence gathered so far (complete once it has ended); removes the events folder after it ended."""
        if self._evidence is not None:
            return self._evidence
        code = self.poll()
        if code is not None:
            self.sampler.stop_event.set()
            self.sampler.join(timeout=5)
        if code in (130, -signal.SIGINT) and self.stop_reason == "exit":
            self.stop_reason = "interrupted"
        end = self.ended if self.ended is not None else time.monotonic()
        evidence = read_events(
            self.events_dir,
            main_pid=self.pid,
            argv=self.argv,
            exit_status=code,
            stop_reason=self.stop_reason,
            duration_s=end - self.started,
            system=tuple(self.sampler.samples),
            peak_rss_bytes=max(self._peak_rss or 0, self.sampler.max_rss) or None,
            peak_tree_pss_bytes=self.sampler.max_tree_pss or None,
            python_program=self.plan.python,
            cwd=os.path.abspath(self.options.cwd or os.getcwd()),
        )
        if self.options.max_steps and evidence.stop_reason == "exit" and len(evidence.steps) >= self.options.max_steps:
            evidence = replace(evidence, stop_reason="steps")
        if code is not None:
            self._evidence = evidence
            self.close()
        return evidence

    def close(self) -> None:
        """Remove the events folder (the process must have ended)."""
        shutil.rmtree(self.events_dir, ignore_errors=True)

    def __enter__(self) -> ProfiledProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.poll() is None:
            self.stop()
        else:
            self.end_leftovers()
        self.sampler.stop_event.set()
        self.close()


def start_profiled(argv: Sequence[str], options: ProfileOptions | None = None) -> ProfiledProcess:
    """Start ``argv`` under the profiler; raises UsageError/TargetError when it cannot start."""
    return ProfiledProcess(argv, options or ProfileOptions())

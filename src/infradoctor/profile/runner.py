"""Run a Python program under the profiler, the way ``python -m cProfile`` does.

Usage: ``python -m infradoctor.profile.runner script.py ARGS`` (or ``-m module ARGS``, ``-c CODE ARGS``).

It sets ``sys.argv`` and ``sys.path[0]`` as Python would, activates the recorder (torch patches when torch is
imported), runs the program as ``__main__``, and writes the evidence in a ``finally``, so an exception, ``sys.exit``
or Ctrl-C still leaves a result. The program's exit status and exceptions are passed on unchanged.
Only the standard library is imported here: the child may run another interpreter than the parent.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import runpy
import signal
import sys

from infradoctor.profile import instrument

MISSING_MODULE_STATUS = 3
"""Exit status when ``-m module`` names no importable module (the launcher reads it as 'could not start')."""


def _exit_status(exc: BaseException) -> int:
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return 1


def _module_missing(name: str) -> str | None:
    """Why ``-m name`` cannot run (the message), or None when the module can be found."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:  # a missing parent package, or a bad name
        return f"No module named {name!r} ({exc})"
    return None if spec is not None else f"No module named {name!r}"


def _stopped_by_launcher(events_dir: str | None) -> bool:
    """The profiler itself sent the SIGINT (``--duration``, ``--load-url`` stopping a server)."""
    return bool(events_dir) and os.path.exists(os.path.join(str(events_dir), instrument.STOP_MARKER))


def main(argv: list[str]) -> None:
    """Run the program named by ``argv`` (``script ARGS``, ``-m module ARGS`` or ``-c code ARGS``)."""
    if not argv:
        sys.stderr.write("usage: python -m infradoctor.profile.runner (script.py | -m module | -c code) [args]\n")
        raise SystemExit(2)
    events_dir = os.environ.get(instrument.EVENTS_DIR_ENV)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Started from a background job (CI, nohup), which leaves SIGINT ignored: the profiler stops the program
        # with SIGINT, so restore Python's Ctrl-C before the program runs (it may still set its own).
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if argv[0] == "-m" and len(argv) >= 2:
        kind, target, args = "module", argv[1], argv[2:]
        sys.argv = [target, *args]
        sys.path.insert(0, os.getcwd())
    elif argv[0] == "-c" and len(argv) >= 2:
        kind, target, args = "code", argv[1], argv[2:]
        sys.argv = ["-c", *args]
        sys.path.insert(0, "")
    else:
        kind, target, args = "script", argv[0], argv[1:]
        sys.argv = [target, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(target))
    if kind == "module" and (why := _module_missing(target)) is not None:
        message = f"cannot run -m {target}: {why}"
        if events_dir:  # the profiler reports it
            with open(os.path.join(events_dir, instrument.START_ERROR_FILE), "w", encoding="utf-8") as fh:
                fh.write(message)
        else:
            sys.stderr.write(f"infradoctor profile: {message}\n")
        raise SystemExit(MISSING_MODULE_STATUS)
    recorder = instrument.activate(events_dir, "main", argv) if events_dir else None
    os.environ["INFRADOCTOR_PROFILE_ROLE"] = "child"  # child processes (DataLoader workers) time fetches only
    status = 0
    quiet_stop = False
    try:
        if kind == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif kind == "code":
            exec(compile(target, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102
        else:
            runpy.run_path(target, run_name="__main__")
    except KeyboardInterrupt:
        if recorder is not None and recorder.stop_requested:
            sys.stderr.write(f"infradoctor profile: stopped the program after {recorder.steps_total} steps\n")
            return  # --steps reached: a clean end
        status = 130
        if not _stopped_by_launcher(events_dir):
            raise
        quiet_stop = True  # our own stop: end by SIGINT as before, without a traceback
    except BaseException as exc:
        status = _exit_status(exc)
        if recorder is not None and not isinstance(exc, SystemExit):
            with contextlib.suppress(Exception):  # the evidence must still be written
                recorder.exception = recorder.describe_exception(exc)
        raise
    finally:
        if recorder is not None:
            recorder.finish(status)
    if quiet_stop:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        raise SystemExit(130)  # not reached: the default action ends the process


if __name__ == "__main__":
    main(sys.argv[1:])

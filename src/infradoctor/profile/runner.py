"""Run a Python program under the profiler, the way ``python -m cProfile`` does.

Usage: ``python -m infradoctor.profile.runner script.py ARGS`` (or ``-m module ARGS``, ``-c CODE ARGS``).

It sets ``sys.argv`` and ``sys.path[0]`` as Python would, activates the recorder (torch patches when torch is
imported), runs the program as ``__main__``, and writes the evidence in a ``finally``, so an exception, ``sys.exit``
or Ctrl-C still leaves a result. The program's exit status and exceptions are passed on unchanged.
Only the standard library is imported here: the child may run another interpreter than the parent.
"""

from __future__ import annotations

import os
import runpy
import sys

from infradoctor.profile import instrument


def _exit_status(exc: BaseException) -> int:
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return 1


def main(argv: list[str]) -> None:
    """Run the program named by ``argv`` (``script ARGS``, ``-m module ARGS`` or ``-c code ARGS``)."""
    if not argv:
        sys.stderr.write("usage: python -m infradoctor.profile.runner (script.py | -m module | -c code) [args]\n")
        raise SystemExit(2)
    events_dir = os.environ.get(instrument.EVENTS_DIR_ENV)
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
    recorder = instrument.activate(events_dir, "main", argv) if events_dir else None
    os.environ["INFRADOCTOR_PROFILE_ROLE"] = "child"  # child processes (DataLoader workers) time fetches only
    status = 0
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
        raise
    except BaseException as exc:
        status = _exit_status(exc)
        raise
    finally:
        if recorder is not None:
            recorder.finish(status)


if __name__ == "__main__":
    main(sys.argv[1:])

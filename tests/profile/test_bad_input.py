"""Bad input and hard endings: missing script, a raising script, no torch, DataLoader workers, SIGINT, -m."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from infradoctor.errors import TargetError, UsageError
from infradoctor.profile.launcher import ProfileOptions, plan_command, start_profiled
from infradoctor.profile.result import build_result, profile_run
from infradoctor.profile.rules import RuleOptions
from infradoctor.result import utc_now_iso

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_plan_command_forms(tmp_path: Path) -> None:
    script = write(tmp_path / "s.py", "print(1)\n")
    plan = plan_command([sys.executable, "-u", str(script), "--x"])
    assert plan.mode == "runner" and plan.argv[1:5] == ("-u", "-m", "infradoctor.profile.runner", str(script))
    assert plan_command([sys.executable, "-m", "json.tool"]).argv[-2:] == ("-m", "json.tool")
    assert plan_command([str(script)]).argv[0] == sys.executable
    assert plan_command(["true"]).mode == "sitecustomize" and not plan_command(["true"]).python
    console = write(tmp_path / "tool", f"#!{sys.executable}\nprint(1)\n")
    console.chmod(0o755)
    assert plan_command([str(console)]).python  # a console script (uvicorn) runs Python: instrumented
    with pytest.raises(TargetError, match="script not found"):
        plan_command([sys.executable, str(tmp_path / "missing.py")])
    # Python runs a folder through its __main__.py; a folder without one is said as such, not "not found"
    (tmp_path / "app").mkdir()
    write(tmp_path / "app" / "__main__.py", "print(1)\n")
    assert plan_command([sys.executable, str(tmp_path / "app")]).mode == "runner"
    (tmp_path / "empty").mkdir()
    with pytest.raises(TargetError, match="is a directory without __main__.py"):
        plan_command([sys.executable, str(tmp_path / "empty")])
    with pytest.raises(TargetError, match="command not found"):
        plan_command(["no-such-command-xyz"])
    with pytest.raises(UsageError):
        plan_command([sys.executable, "-m"])


def test_a_program_that_is_not_python_is_measured_from_outside_and_said_so(tmp_path: Path) -> None:
    result = profile_run(["ls", "-la", str(tmp_path)], ProfileOptions(stdout=subprocess.DEVNULL), timeout_s=30)
    assert result.exit_status == 0
    [note] = [e for e in result.errors if e.source == "profile.instrumentation"]
    assert "ls is not a Python program: only Python is instrumented" in note.message
    assert "ended before the profiler started" not in note.message
    assert result.metrics["workload"]["python_program"] is False


def test_cli_missing_script_exits_3(cli, tmp_path: Path) -> None:
    out = cli("profile", "--no-store", "--", sys.executable, str(tmp_path / "missing.py"))
    assert out.exit_code == 3
    assert "script not found" in out.stderr


def test_cli_no_workload_is_a_usage_error(cli) -> None:
    assert cli("profile", "--no-store").exit_code == 2


def test_raising_script_returns_its_exit_code_and_a_partial_result(cli, tmp_path: Path, result_validator) -> None:
    script = write(tmp_path / "boom.py", """
        import torch
        model = torch.nn.Linear(8, 2)
        with torch.no_grad():
            for _ in range(30):
                model(torch.randn(4, 8))
        raise RuntimeError("boom")
    """)
    out_json = tmp_path / "r.json"
    out = cli("profile", "--no-store", "--json", str(out_json), "--", sys.executable, str(script))
    assert out.exit_code == 1
    data = json.loads(out_json.read_text())
    result_validator(data)
    assert data["exit_status"] == 1
    assert data["metrics"]["steps"]["count"] >= 20
    assert any("exited with status 1" in e["message"] for e in data["errors"])
    assert "Where the time goes" in out.stdout


def test_script_without_torch_gets_a_cpu_only_profile(tmp_path: Path, result_validator) -> None:
    script = write(tmp_path / "plain.py", """
        import sys
        total = sum(i * i for i in range(300000))
        print(total)
    """)
    result = profile_run([sys.executable, str(script)], ProfileOptions(stdout=-3))
    result_validator(result)
    assert result.exit_status == 0
    assert result.metrics["workload"]["profile_kind"] == "cpu-only"
    assert result.metrics["headline"]["peak_rss_mb"] > 0
    assert any(e.source == "profile.torch" for e in result.errors)
    assert result.findings == ()


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_worker_processes(tmp_path: Path, context: str) -> None:
    script = write(tmp_path / "workers.py", """
        import sys, time, torch
        from torch.utils.data import DataLoader, Dataset

        class Slow(Dataset):
            def __len__(self):
                return 96
            def __getitem__(self, i):
                time.sleep(0.002)
                return torch.full((8,), float(i))

        if __name__ == "__main__":
            model = torch.nn.Linear(8, 1)
            loader = DataLoader(Slow(), batch_size=8, num_workers=2, multiprocessing_context=sys.argv[1])
            with torch.no_grad():
                for x in loader:
                    model(x)
    """)
    result = profile_run([sys.executable, str(script), context], ProfileOptions(), timeout_s=100)
    assert result.exit_status == 0 and not result.errors
    data = result.metrics["dataloader"]
    assert data["worker_processes"] == 2
    assert data["loaders"][0]["num_workers"] == 2 and data["loaders"][0]["batches"] == 12
    assert data["item_time_ms"] >= 2.0  # measured inside the workers
    assert result.metrics["steps"]["boundary"] == "dataloader"


def test_sigint_during_the_run_still_gives_a_result(tmp_path: Path, result_validator) -> None:
    script = write(tmp_path / "forever.py", """
        import time, torch
        model = torch.nn.Linear(64, 64)
        with torch.no_grad():
            for i in range(100000):
                model(torch.randn(16, 64))
                if i == 30:
                    print("ready", flush=True)
                time.sleep(0.002)
    """)
    started = utc_now_iso()
    proc = start_profiled([sys.executable, str(script)], ProfileOptions(stdout=-1))
    try:
        assert proc.popen.stdout is not None
        assert proc.popen.stdout.readline().strip() == b"ready"
        time.sleep(0.3)
        proc.stop()
        evidence = proc.collect()
    finally:
        proc.__exit__(None, None, None)
    assert evidence.stop_reason == "stopped" and evidence.exit_status == -2
    result = build_result(evidence, started_at=started)
    result_validator(result)
    assert result.exit_status == 130
    assert result.metrics["steps"]["count"] >= 30
    assert result.metrics["steps"]["boundary"] == "forward"


def test_steps_limit_and_module_form(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    write(package / "__init__.py", "")
    write(package / "loop.py", """
        import torch
        model = torch.nn.Linear(16, 4)
        with torch.inference_mode():
            for _ in range(100000):
                model(torch.randn(32, 16))
    """)
    result = profile_run([sys.executable, "-m", "pkg.loop"], ProfileOptions(max_steps=50, cwd=str(tmp_path)),
                         timeout_s=100)
    assert result.metrics["workload"]["stop_reason"] == "steps"
    assert 50 <= result.metrics["steps"]["count"] <= 52
    assert result.metrics["throughput"]["batch_size"] == 32


def test_console_script_is_instrumented_through_sitecustomize(tmp_path: Path) -> None:
    tool = tmp_path / "score-tool"
    tool.write_text(f"#!{sys.executable}\n" + textwrap.dedent("""
        import torch
        model = torch.nn.Linear(8, 8)
        with torch.no_grad():
            for _ in range(40):
                model(torch.randn(4, 8))
    """), encoding="utf-8")
    tool.chmod(0o755)
    assert plan_command([str(tool)]).mode == "sitecustomize"
    result = profile_run([str(tool)], ProfileOptions(), timeout_s=100)
    assert result.exit_status == 0 and not result.errors
    assert result.metrics["workload"]["torch_imported"] is True
    assert result.metrics["steps"]["count"] >= 35


def test_a_failure_inside_the_instrumentation_is_reported_once_and_never_breaks_the_workload(tmp_path: Path) -> None:
    script = write(tmp_path / "odd.py", """
        import torch

        class Odd(torch.nn.Module):
            # a model whose `training` flag cannot be read once it runs: the profiler reads it after each call
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(4, 4)
                self.running = False

            @property
            def training(self):
                if self.__dict__.get("running"):
                    raise RuntimeError("training flag unavailable")
                return self.__dict__.get("_training", True)

            @training.setter
            def training(self, value):
                self.__dict__["_training"] = value

            def forward(self, x):
                return self.fc(x)

        model = Odd()
        model.running = True
        with torch.no_grad():
            outputs = [model(torch.ones(2, 4)) for _ in range(25)]
        print("sum", float(sum(o.sum() for o in outputs)))
    """)
    err_path = tmp_path / "stderr.txt"
    with err_path.open("wb") as err:
        result = profile_run([sys.executable, str(script)], ProfileOptions(stdout=-3, stderr=err), timeout_s=100)
    assert result.exit_status == 0
    logged = [line for line in err_path.read_text().splitlines() if "instrumentation error" in line]
    # once per failing place (the first call goes through discovery, the rest through the wrapper), not per call
    assert len(logged) == 2 and any("forward.after" in line for line in logged)
    notes = {e.source: e for e in result.errors}
    assert "profile.forward.after" in notes and notes["profile.forward.after"].count >= 20
    assert "training flag unavailable" in notes["profile.forward.after"].message


def test_an_existing_sitecustomize_still_runs(tmp_path: Path) -> None:
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    write(site_dir / "sitecustomize.py", """
        import os
        os.environ["USER_SITECUSTOMIZE_RAN"] = "yes"
    """)
    script = write(tmp_path / "check.py", """
        import os, sys
        sys.exit(0 if os.environ.get("USER_SITECUSTOMIZE_RAN") == "yes" else 5)
    """)
    options = ProfileOptions(env={"PYTHONPATH": str(site_dir)})
    assert profile_run([sys.executable, str(script)], options, timeout_s=60).exit_status == 0


def test_whole_model_pickling_still_works_with_the_forward_wrapper(tmp_path: Path) -> None:
    script = write(tmp_path / "save.py", """
        import copy, io, sys, torch
        model = torch.nn.Sequential(torch.nn.Linear(4, 4))
        with torch.no_grad():
            for _ in range(5):
                model(torch.ones(1, 4))
        assert "forward" in model.__dict__  # the profiler wrapped this top-level module
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        clone = copy.deepcopy(model)
        clean = "forward" not in loaded.__dict__ and "forward" not in clone.__dict__  # the wrapper is not saved
        same = torch.equal(loaded(torch.ones(1, 4)), model(torch.ones(1, 4)))
        sys.exit(0 if same and clean else 7)
    """)
    assert profile_run([sys.executable, str(script)], ProfileOptions(), timeout_s=60).exit_status == 0


def test_ctrl_c_in_the_terminal_still_writes_the_result(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess

    script = write(tmp_path / "loop.py", """
        import time, torch
        model = torch.nn.Linear(32, 32)
        with torch.no_grad():
            for i in range(1000000):
                model(torch.randn(8, 32))
                if i == 50:
                    print("ready", flush=True)
                time.sleep(0.001)
    """)
    out_json = tmp_path / "r.json"
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": str(src)}
    # Ctrl-C reaches the whole foreground process group: the CLI and the workload
    proc = subprocess.Popen(
        [sys.executable, "-m", "infradoctor", "profile", "--no-store", "-q", "--json", str(out_json), "--",
         sys.executable, str(script)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    data = json.loads(out_json.read_text())
    assert data["exit_status"] == 130
    assert data["metrics"]["workload"]["stop_reason"] == "interrupted"
    assert data["metrics"]["steps"]["count"] >= 50
    assert any("interrupted" in e["message"] for e in data["errors"])


def test_missing_module_is_a_target_error_without_a_traceback(tmp_path: Path, cli, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    run = cli("profile", "--no-store", "--", sys.executable, "-m", "no_such_module_xyz")
    assert run.exit_code == 3
    assert "cannot run -m no_such_module_xyz: No module named 'no_such_module_xyz'" in run.stderr
    assert "Traceback" not in run.stderr


def test_cuda_oom_crash_is_n011_at_the_raising_line(tmp_path: Path, result_validator) -> None:
    script = write(tmp_path / "oom.py", """
        import torch


        def allocate(model):
            for _ in range(3):
                model(torch.randn(8, 16))
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")  # OOM-LINE


        allocate(torch.nn.Linear(16, 16))
    """)
    line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if "OOM-LINE" in text)
    result = profile_run([sys.executable, str(script)], ProfileOptions(stderr=-3),
                         RuleOptions(cwd=str(tmp_path)))
    result_validator(result)
    assert result.exit_status == 1
    crash = result.metrics["workload"]["exception"]
    assert crash["type"] == "OutOfMemoryError" and crash["message"].startswith("CUDA out of memory")
    assert (crash["file"], crash["line"], crash["function"]) == (str(script), line, "allocate")
    n011 = next(f for f in result.findings if f.code == "N011")
    assert str(n011.location) == f"oom.py:{line}"


def test_other_exceptions_are_recorded_without_n011(tmp_path: Path) -> None:
    script = write(tmp_path / "bad.py", """
        import json
        json.loads("{not json")
    """)
    result = profile_run([sys.executable, str(script)], ProfileOptions(stderr=-3), RuleOptions(cwd=str(tmp_path)))
    crash = result.metrics["workload"]["exception"]
    assert crash["type"] == "JSONDecodeError" and (crash["file"], crash["line"]) == (str(script), 3)
    assert not any(f.code == "N011" for f in result.findings)


def _cli(args: list[str], **kw):  # type: ignore[no-untyped-def]
    import os
    import subprocess

    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.Popen([sys.executable, "-m", "infradoctor", *args], env=env, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kw)


def test_a_second_ctrl_c_still_writes_the_result(tmp_path: Path) -> None:
    # a workload that ignores SIGINT: the first Ctrl-C waits for it, the second kills it, and the partial result
    # is written either way (issue 17: the second KeyboardInterrupt used to end the profiler and lose it)
    import os

    script = write(tmp_path / "stubborn.py", """
        import signal, time, torch
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        model = torch.nn.Linear(32, 32)
        with torch.no_grad():
            for i in range(10000000):
                model(torch.randn(8, 32))
                if i == 50:
                    print("ready", flush=True)
                time.sleep(0.001)
    """)
    out_json = tmp_path / "r.json"
    proc = _cli(["profile", "--no-store", "-q", "--json", str(out_json), "--", sys.executable, str(script)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(1.0)
        assert proc.poll() is None  # still waiting for the stubborn workload (grace period)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) != 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    data = json.loads(out_json.read_text())
    assert data["metrics"]["workload"]["stop_reason"] == "interrupted"
    # the second Ctrl-C sends SIGTERM first: the profiler writes the steps it held since its last flush (once a
    # second); a bare SIGKILL kept only those flushed, 48 in one CI run where the workload had made hundreds
    assert data["metrics"]["steps"]["count"] >= 200, data["metrics"]["steps"]


def test_duration_ends_what_the_workload_started(tmp_path: Path) -> None:
    # --duration stops the workload and the processes it forked (a helper left running used to outlive it)
    import psutil

    pid_file = tmp_path / "child.pid"
    script = write(tmp_path / "forky.py", f"""
        import subprocess, sys, time
        child = subprocess.Popen(["sleep", "1234"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(600)
    """)
    proc = _cli(["profile", "--no-store", "-q", "--duration", "2", "--", sys.executable, str(script)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    child = int(pid_file.read_text())
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_at_a_terminal_the_workload_keeps_the_terminal_and_hears_ctrl_c_itself(tmp_path: Path) -> None:
    # with a terminal on stdin the workload stays in the profiler's process group (it can read the terminal; a
    # Ctrl-C reaches both), and the result is still written
    import os
    import pty

    script = write(tmp_path / "loop.py", """
        import os, time, torch
        model = torch.nn.Linear(32, 32)
        print("group", os.getpgrp(), flush=True)
        with torch.no_grad():
            for i in range(1000000):
                model(torch.randn(8, 32))
                if i == 50:
                    print("ready", flush=True)
                time.sleep(0.001)
    """)
    out_json = tmp_path / "r.json"
    primary, secondary = pty.openpty()
    proc = _cli(["profile", "--no-store", "-q", "--json", str(out_json), "--", sys.executable, str(script)],
                stdin=secondary, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        group = int(proc.stdout.readline().split()[1])
        assert group == os.getpgid(proc.pid)  # the profiler's own group: no group of its own at a terminal
        assert proc.stdout.readline().strip() == b"ready"
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        os.close(primary)
        os.close(secondary)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert json.loads(out_json.read_text())["metrics"]["workload"]["stop_reason"] == "interrupted"

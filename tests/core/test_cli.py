import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infradoctor import __version__
from infradoctor.cli import build_parser, load_commands
from infradoctor.findings import catalog, make_finding
from infradoctor.result import new_result
from infradoctor.store import RunStore

ROOT = Path(__file__).resolve().parents[2]


def test_version(cli) -> None:
    run = cli("--version")
    assert run.exit_code == 0
    assert __version__ in run.stdout


def test_every_command_has_help(cli) -> None:
    for command in load_commands():
        run = cli(command.name, "--help")
        assert run.exit_code == 0, command.name
        assert f"infradoctor {command.name}" in run.stdout
        assert command.summary


def test_usage_error_exits_2(cli) -> None:
    assert cli("no-such-command").exit_code == 2
    assert cli().exit_code == 2
    assert cli("rules", "Z999").exit_code == 2


def test_rules_lists_and_explains(cli) -> None:
    listing = cli("rules")
    assert listing.exit_code == 0
    assert len(listing.stdout.strip().splitlines()) == len(catalog())
    one = cli("rules", "P001")
    assert one.exit_code == 0 and "data-starvation" in one.stdout
    data = json.loads(cli("rules", "--format", "json", "--group", "N").stdout)
    assert [d["code"] for d in data][0] == "N001"


def test_runs_and_show(cli, isolated_store: Path) -> None:
    store = RunStore(isolated_store)
    saved = store.save(
        new_result(
            "load",
            started_at="2026-11-29T10:00:00Z",
            duration_s=2.0,
            target={"url": "http://127.0.0.1:9/x"},
            metrics={"headline": {"p99_ms": 12.5}},
            findings=[make_finding("S008", "knee at concurrency 8")],
        ).with_(label="baseline")
    )
    listing = cli("runs")
    assert saved.run_id in listing.stdout and "baseline" in listing.stdout
    shown = cli("show", "baseline")
    assert shown.exit_code == 0 and "S008" in shown.stdout
    as_json = json.loads(cli("show", saved.run_id, "--format", "json").stdout)
    assert as_json["run_id"] == saved.run_id
    assert cli("show", "missing-run").exit_code == 2


def test_console_script_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "infradoctor", "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0 and __version__ in out.stdout


def test_readme_usage_matches_help() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "readme_usage.py"), "--check"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert out.returncode == 0, out.stderr
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for command in load_commands():
        assert f"<!-- usage:{command.name} -->" in readme, f"README has no usage section for {command.name}"


def test_readme_names_the_ci_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    match = re.search(r"<!-- test-command -->\n```(?:sh|bash)?\n(.+?)\n```", readme, re.S)
    assert match, "README lacks the marked test command"
    assert match.group(1).strip() in ci


def test_library_never_prints_or_exits() -> None:
    import ast

    offenders = []
    for path in (ROOT / "src" / "infradoctor").rglob("*.py"):
        rel = path.relative_to(ROOT / "src" / "infradoctor")
        if rel.parts[0] == "cli" or rel.parts[:2] == ("demo", "workloads") or rel.name == "__main__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Name) and func.id in ("print", "exit", "quit"):
                    offenders.append(f"{rel}:{node.lineno} {func.id}()")
                if isinstance(func, ast.Attribute) and func.attr == "exit" and isinstance(func.value, ast.Name) \
                        and func.value.id == "sys":
                    offenders.append(f"{rel}:{node.lineno} sys.exit()")
    assert not offenders, offenders


@pytest.mark.parametrize("severity,code", [("high", 0), ("info", 1), ("never", 0)])
def test_fail_on_policy(severity: str, code: int) -> None:
    from infradoctor.cli.base import exit_code_for, parse_fail_on

    result = new_result("load", started_at="2026-11-29T10:00:00Z", duration_s=1,
                        findings=[make_finding("S008", "knee")])
    assert exit_code_for(result, parse_fail_on(severity)) == code


def test_an_interrupted_measurement_exits_130_after_writing_its_partial_result(tmp_path: Path) -> None:
    import argparse

    from infradoctor.cli.base import finish_interruptible
    from infradoctor.result import ErrorNote

    out = tmp_path / "partial.json"
    args = argparse.Namespace(no_store=True, json=str(out), quiet=True, fail_on=None)
    whole = new_result("load", started_at="2026-11-29T10:00:00Z", duration_s=1)
    assert finish_interruptible(args, whole) == 0
    cut = whole.with_(errors=(ErrorNote("load.interrupted", "stopped by Ctrl-C"),))
    assert finish_interruptible(args, cut) == 130
    assert json.loads(out.read_text())["errors"][0]["source"] == "load.interrupted"


def test_level_and_header_options_are_read_alike_by_every_command() -> None:
    from infradoctor.cli.base import parse_headers, parse_levels
    from infradoctor.errors import UsageError

    assert parse_levels(" 1, 2,8 ", int, "--concurrency") == [1, 2, 8]
    assert parse_levels("AUTO", int, "--concurrency") == "auto"
    assert parse_levels("0.5,10", float, "--rate") == [0.5, 10.0]
    for bad, message in (
        ("1,x", "cannot read --rate"),
        ("4,0", "--rate levels must be positive"),
        (",", "positive"),
        ("nan", "positive finite"),
        ("10,inf", "positive finite"),
    ):
        with pytest.raises(UsageError, match=message):
            parse_levels(bad, float if any(c.isalpha() for c in bad) else int, "--rate")
    assert parse_headers(["Authorization: Bearer a:b", "X-Id:7"], "-H") == {"Authorization": "Bearer a:b", "X-Id": "7"}
    with pytest.raises(UsageError, match="bad --load-header 'nocolon'"):
        parse_headers(["nocolon"], "--load-header")


@pytest.mark.parametrize("option,value", [("--duration", "nan"), ("--timeout", "inf"), ("--start-rate", "0")])
def test_load_durations_and_rates_must_be_positive_and_finite(cli, option: str, value: str) -> None:
    run = cli("load", "http://127.0.0.1:9/", option, value)
    assert run.exit_code == 2 and "positive finite" in run.stderr


def test_parser_builds() -> None:
    assert build_parser().prog == "infradoctor"


def test_fail_on_is_validated_before_measuring(cli) -> None:
    run = cli("node", "--no-host", "--gpu-backend", "none", "--fail-on", "bogus")
    assert run.exit_code == 2 and "expected one of" in run.stderr


def test_store_failure_keeps_the_measurement(cli, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out = tmp_path / "out.json"
    run = cli("node", "--no-host", "--gpu-backend", "none", "--store", str(blocker / "store"), "--json", str(out))
    assert run.exit_code == 0, run.stderr
    data = json.loads(out.read_text())
    assert any(e["source"] == "store" for e in data["errors"])
    assert "not stored" in run.stderr


@pytest.mark.integration
def test_sigterm_stops_the_workload_and_keeps_the_partial_result(tmp_path: Path) -> None:
    import signal
    import time

    from infradoctor.procs import free_port, port_open, wait_until

    server = tmp_path / "server.py"
    server.write_text(
        "import http.server, sys\n"
        "http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])),"
        " http.server.SimpleHTTPRequestHandler).serve_forever()\n"
    )
    port = free_port()
    out = tmp_path / "out.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "infradoctor", "profile", "--no-store", "--quiet", "--json", str(out),
         "--load-url", f"http://127.0.0.1:{port}/", "--concurrency", "1", "--point-duration", "60",
         "--", sys.executable, str(server), str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path,
    )
    try:
        assert wait_until(lambda: port_open("127.0.0.1", port), timeout=60, alive=lambda: proc.poll() is None)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert wait_until(lambda: not port_open("127.0.0.1", port), timeout=10), "the server outlived infradoctor"
    data = json.loads(out.read_text())
    assert data["command"] == "profile" and data["errors"]


def test_command_table_summaries_match_the_commands() -> None:
    from infradoctor.cli import COMMANDS

    for ref in COMMANDS:
        command = ref.load()
        assert command.name == ref.name
        assert command.summary == ref.summary, ref.name


def test_help_imports_only_the_command_it_shows() -> None:
    # A fresh interpreter: `scan --help` must not import the other commands or the library's heavy parts.
    code = (
        "import sys, contextlib, io\n"
        "from infradoctor.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()): main(['scan', '--help'])\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('infradoctor.load', 'infradoctor.profile', "
        "'infradoctor.route', 'infradoctor.logs', 'infradoctor.node', 'infradoctor.report', 'infradoctor.scan.engine', "
        "'torch', 'numpy', 'polars', 'rich')))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == ""

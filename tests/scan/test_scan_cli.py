"""The `infradoctor scan` command end to end: formats, exit codes, suppression, configuration, fixes, bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest

from infradoctor.scan.engine import ScanOptions, scan_paths
from infradoctor.scan.sarif import to_sarif

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scan"
SARIF_SCHEMA = json.loads((FIXTURES / "sarif-2.1.0-subset.schema.json").read_text(encoding="utf-8"))

SERVICE = '''\
import time
import torch
from fastapi import FastAPI

app = FastAPI()


@app.post("/predict")
async def predict(x):
    model = torch.load("m.pt")
    time.sleep(1)
    return model(x)
'''


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "service.py").write_text(SERVICE, encoding="utf-8")
    (root / "clean.py").write_text("import torch\n\nx = torch.ones(3)\n", encoding="utf-8")
    monkeypatch.chdir(root)
    return root


def test_text_output_and_exit_code(cli, project: Path) -> None:
    run = cli("scan", "service.py", "--no-store")
    assert run.exit_code == 1
    lines = run.stdout.splitlines()
    assert "service.py:10:13: C001 model loaded inside request handler `predict` (torch.load); load it once at " \
        "start-up" in lines
    assert any(line.startswith("service.py:11:5: C003 ") for line in lines)
    # `model = torch.load(...)` then `model(x)`: a pickled module, where weights_only=True would fail: no safe fix
    assert any(line.startswith("service.py:10:13: C014 torch.load() without") for line in lines)
    assert lines[-2] == "Found 7 findings."
    assert cli("scan", "clean.py", "--no-store").exit_code == 0
    assert cli("scan", "service.py", "--no-store", "--fail-on", "never").exit_code == 0
    assert cli("scan", "service.py", "--no-store", "--fail-on", "high").exit_code == 1
    assert cli("scan", "service.py", "--no-store", "--fail-on", "critical").exit_code == 0


def test_select_and_ignore(cli, project: Path) -> None:
    run = cli("scan", "service.py", "--no-store", "--select", "C00", "--ignore", "C003,C004", "--ignore", "C005")
    codes = {line.split(": ")[1].split()[0] for line in run.stdout.splitlines() if ": C0" in line}
    assert codes == {"C001"}
    bad = cli("scan", "service.py", "--no-store", "--select", "C9")
    assert bad.exit_code == 2 and "matches no scan code" in bad.stderr


def test_json_result_is_stored_only_when_asked(cli, project: Path, result_validator, isolated_store: Path) -> None:
    unstored = cli("scan", ".", "--format", "json")
    assert unstored.exit_code == 1 and "run_id" not in json.loads(unstored.stdout)
    assert not list(isolated_store.glob("**/*.json")), "a scan was stored without --save"
    run = cli("scan", ".", "--format", "json", "--save")
    assert run.exit_code == 1
    data = json.loads(run.stdout)
    result_validator(data)
    assert data["command"] == "scan" and data["run_id"]
    assert data["metrics"]["headline"]["files_scanned"] == 2
    assert data["metrics"]["by_code"]["C003"] == 3
    finding = next(f for f in data["findings"] if f["code"] == "C014")
    assert finding["location"] == {"file": "service.py", "line": 10, "column": 13, "function": "predict"}
    assert finding["evidence"]["fix"] == "unsafe" and "fixable" not in finding["evidence"]
    shown = cli("show", data["run_id"])
    assert shown.exit_code == 0 and "Findings by rule" in shown.stdout


def test_output_file_and_json_option(cli, project: Path, result_validator, tmp_path: Path) -> None:
    out = tmp_path / "scan.txt"
    result_json = tmp_path / "result.json"
    run = cli("scan", "service.py", "--no-store", "--output", str(out), "--json", str(result_json))
    assert run.stdout == ""
    assert "C001" in out.read_text(encoding="utf-8")
    result_validator(json.loads(result_json.read_text(encoding="utf-8")))
    assert cli("scan", "service.py", "--no-store", "--json", "-").exit_code == 2


def test_sarif_validates_and_fingerprints_are_stable(cli, project: Path, tmp_path: Path) -> None:
    out = tmp_path / "scan.sarif"
    run = cli("scan", ".", "--no-store", "--format", "sarif", "--output", str(out))
    assert run.exit_code == 1
    log = json.loads(out.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator(SARIF_SCHEMA, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER).validate(log)
    sarif_run = log["runs"][0]
    rule_ids = [r["id"] for r in sarif_run["tool"]["driver"]["rules"]]
    assert rule_ids == [f"C{n:03d}" for n in range(1, 15)]
    results = sarif_run["results"]
    assert {r["ruleId"] for r in results} == {"C001", "C003", "C004", "C005", "C014"}
    for r in results:
        assert rule_ids[r["ruleIndex"]] == r["ruleId"]
        assert r["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "service.py",
                                                                              "uriBaseId": "%SRCROOT%"}
    before = {r["partialFingerprints"]["infradoctor/v1"] for r in results}
    assert len(before) == len(results)
    # Code moving down keeps each finding's identity; the line numbers change.
    (project / "service.py").write_text("# a new comment\n\n" + SERVICE, encoding="utf-8")
    moved = to_sarif(scan_paths(["."], ScanOptions()))["runs"][0]["results"]
    assert {r["partialFingerprints"]["infradoctor/v1"] for r in moved} == before
    assert {r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in moved} == {12, 13, 14}


def test_noqa(cli, project: Path) -> None:
    (project / "service.py").write_text(
        SERVICE.replace('torch.load("m.pt")', 'torch.load("m.pt")  # noqa: C014,C001')
        .replace("time.sleep(1)", "time.sleep(1)  # noqa")
        .replace("return model(x)", "return model(x)  # noqa: E501"),
        encoding="utf-8",
    )
    run = cli("scan", "service.py", "--no-store")
    codes = sorted(line.split(": ")[1].split()[0] for line in run.stdout.splitlines() if ": C0" in line)
    assert codes == ["C003", "C003", "C004", "C005"]
    assert "3 suppressed by noqa" in run.stdout


def test_pyproject_configuration(cli, project: Path) -> None:
    (project / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.infradoctor.scan]\nignore = ["C004"]\n'
        'per-file-ignores = {"serv*.py" = ["C003"]}\n',
        encoding="utf-8",
    )
    (project / "sub").mkdir()
    (project / "sub" / "other.py").write_text(SERVICE, encoding="utf-8")
    run = cli("scan", "sub", "service.py", "--no-store", "--format", "json")
    data = json.loads(run.stdout)
    by_file: dict[str, set[str]] = {}
    for f in data["findings"]:
        by_file.setdefault(f["location"]["file"], set()).add(f["code"])
    assert by_file == {"service.py": {"C001", "C005", "C014"},
                       os.path.join("sub", "other.py"): {"C001", "C003", "C005", "C014"}}
    assert data["metrics"]["config"] == [str(project / "pyproject.toml")] * 1
    assert cli("scan", "service.py", "--no-store", "--no-config", "--select", "C004").exit_code == 1
    (project / "pyproject.toml").write_text('[tool.infradoctor.scan]\nselct = ["C0"]\n', encoding="utf-8")
    bad = cli("scan", "service.py", "--no-store")
    assert bad.exit_code == 2 and "unknown key" in bad.stderr


def test_fix_adds_weights_only_where_it_is_safe(cli, project: Path) -> None:
    source = (
        "import torch\n"
        "def load(m):\n"
        "    m.load_state_dict(torch.load('a.pt'))\n"
        "    sd = torch.load(\n        'b.pt',\n        map_location='cpu',\n    )\n"
        "    m.load_state_dict(sd)\n"
        "    c = torch.load('c.pt', weights_only=False)\n"
        "    [m.load_state_dict(torch.load(p)) for p in ['é.pt']]  # ünïcode\n"
        "    return torch.load('whole_module.pt'), c\n"
    )
    target = project / "ckpt.py"
    target.write_text(source, encoding="utf-8")
    run = cli("scan", "ckpt.py", "--fix", "--select", "C014")
    assert run.exit_code == 1  # weights_only=False is left for a person, and so is the unsafe fix
    fixed = target.read_text(encoding="utf-8")
    assert fixed == (
        "import torch\n"
        "def load(m):\n"
        "    m.load_state_dict(torch.load('a.pt', weights_only=True))\n"
        "    sd = torch.load(\n        'b.pt',\n        map_location='cpu', weights_only=True,\n    )\n"
        "    m.load_state_dict(sd)\n"
        "    c = torch.load('c.pt', weights_only=False)\n"
        "    [m.load_state_dict(torch.load(p, weights_only=True)) for p in ['é.pt']]  # ünïcode\n"
        "    return torch.load('whole_module.pt'), c\n"
    )
    assert "ckpt.py:3: fixed C014: added weights_only=True to torch.load(...)" in run.stdout
    assert [line.split(": C014 ")[0] for line in run.stdout.splitlines() if ": C014 " in line] == [
        "ckpt.py:9:9", "ckpt.py:11:12"]
    again = cli("scan", "ckpt.py", "--fix", "--select", "C014")
    assert target.read_text(encoding="utf-8") == fixed and "fixed" not in again.stdout
    unsafe = cli("scan", "ckpt.py", "--fix", "--unsafe-fixes", "--select", "C014")
    assert "ckpt.py:11: fixed C014" in unsafe.stdout
    assert "return torch.load('whole_module.pt', weights_only=True), c" in target.read_text(encoding="utf-8")


def test_bad_input_is_reported_and_scan_continues(cli, project: Path, tmp_path: Path) -> None:
    bad = project / "bad"
    bad.mkdir()
    (bad / "syntax.py").write_text("def broken(:\n    pass\n", encoding="utf-8")
    (bad / "latin1.py").write_bytes("x = 'caf\xe9'\n".encode("latin-1"))
    (bad / "cookie.py").write_bytes("# -*- coding: latin-1 -*-\nimport torch\nx = torch.load('caf\xe9')\n"
                                    .encode("latin-1"))
    (bad / "nul.py").write_bytes(b"x = 1\x00\n")
    (bad / "deep.py").write_text("x = " + " + ".join(["1"] * 30000) + "\n", encoding="utf-8")
    (bad / "loop").symlink_to(bad, target_is_directory=True)
    (bad / "self.py").symlink_to(bad / "self.py")
    (bad / "dangling.py").symlink_to(bad / "missing.py")
    os.mkfifo(bad / "fifo.py")
    run = cli("scan", "bad", "service.py", "bad/fifo.py", "missing.py", "--no-store", "--format", "json")
    assert run.exit_code == 2  # a named path does not exist: a usage error, after a partial result
    assert "missing.py: no such file or directory" in run.stderr
    data = json.loads(run.stdout)
    errors = {e["message"].split(": error: ")[0]: e["source"] for e in data["errors"]}
    assert errors["bad/syntax.py:1:12"] == "scan:parse-error"
    assert errors["bad/latin1.py"] == "scan:decode-error"
    assert errors["bad/nul.py"] == "scan:parse-error"
    assert errors["bad/self.py"] == "scan:unreadable"
    assert errors["bad/dangling.py"] == "scan:unreadable"
    assert errors["bad/fifo.py"] == "scan:unreadable"
    assert errors["missing.py"] == "scan:not-found"
    assert errors["bad/loop"] == "scan:symlink-loop"
    scanned = {f["location"]["file"] for f in data["findings"]}
    assert scanned == {"service.py", "bad/cookie.py"}  # the good files were still checked
    # deep.py nests 30000 operators: either checked, or reported as too complex / a parse error.
    assert data["metrics"]["headline"]["files_scanned"] + ("bad/deep.py" in errors) == 3


def test_huge_and_unreadable_files(project: Path, tmp_path: Path) -> None:
    big = project / "big.py"
    big.write_text("x = 1\n" * 1000, encoding="utf-8")
    report = scan_paths(["big.py"], ScanOptions(max_file_bytes=100))
    assert [(p.kind, p.path) for p in report.problems] == [("too-large", "big.py")]
    if os.geteuid() != 0:
        locked = project / "locked.py"
        locked.write_text("x = 1\n", encoding="utf-8")
        locked.chmod(0)
        report = scan_paths(["locked.py"], ScanOptions())
        assert [p.kind for p in report.problems] == ["unreadable"]


def test_pre_commit_hook_entry_runs(cli, project: Path) -> None:
    hooks = (Path(__file__).resolve().parents[2] / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    entry = next(line.split(":", 1)[1].strip() for line in hooks.splitlines() if line.strip().startswith("entry:"))
    argv = entry.split()
    assert argv[:2] == ["infradoctor", "scan"]
    run = cli(*argv[1:], "service.py", "clean.py")
    assert run.exit_code == 1 and "service.py:10:13: C001" in run.stdout and "Found" not in run.stdout
    assert cli(*argv[1:], "clean.py").exit_code == 0


def test_a_failing_rule_is_an_error_note_not_a_crash(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from infradoctor.scan import engine
    from infradoctor.scan.rules import c014_unsafe_torch_load as c014

    def broken(call, ctx):
        raise RuntimeError("injected fault")

    monkeypatch.setattr(c014, "check", broken)
    engine.rule_set.cache_clear()
    try:
        report = scan_paths(["service.py", "clean.py"], ScanOptions())
    finally:
        monkeypatch.undo()
        engine.rule_set.cache_clear()
    assert [(p.path, p.kind) for p in report.problems] == [("service.py", "internal-error")]
    assert "injected fault" in report.problems[0].message
    assert report.files_scanned == 1  # clean.py has no torch.load call, so the broken hook never ran there


def test_runs_as_a_process(project: Path, isolated_store: Path) -> None:
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    done = subprocess.run([sys.executable, "-m", "infradoctor", "scan", "service.py", "--format", "sarif", "--save"],
                          capture_output=True, text=True, timeout=120, check=False, env=env)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["runs"][0]["results"]
    assert list(isolated_store.glob("**/*.json")), "the run was not stored"


def test_pyproject_exclude_and_select(project: Path) -> None:
    (project / "pyproject.toml").write_text(
        '[tool.infradoctor.scan]\nselect = ["C01"]\nexclude = ["generated/*"]\n', encoding="utf-8")
    (project / "generated").mkdir()
    (project / "generated" / "model_io.py").write_text("import torch\nx = torch.load('x')\n", encoding="utf-8")
    report = scan_paths(["."], ScanOptions())
    assert report.selected == ("C010", "C014")  # C011-C013 are preview rules: a prefix does not select them
    assert {v.path for v in report.violations} == {"service.py"}
    assert {v.code for v in report.violations} == {"C014"}


def test_unchecked_input_never_passes(cli, project: Path, tmp_path: Path) -> None:
    (project / "bad.py").write_text("def broken(:\n    pass\n", encoding="utf-8")
    (project / "latin1.py").write_bytes("x = 'caf\xe9'\n".encode("latin-1"))
    missing = cli("scan", str(tmp_path / "nonexistent"), "--no-store")
    assert missing.exit_code == 2
    assert "All checks passed" not in missing.stdout and "1 path not found" in missing.stdout
    # said once: in the linter text, not again on stderr
    assert missing.stdout.count("nonexistent") == 1 and "nonexistent" not in missing.stderr
    for name, kind in (("bad.py", "parse-error"), ("latin1.py", "decode-error")):
        run = cli("scan", name, "--no-store")
        assert run.exit_code == 1, run.stdout
        assert "All checks passed" not in run.stdout
        assert f"{name}:" in run.stdout and f"error: {kind}:" in run.stdout
        assert "No findings in the checked files, but 1 file could not be checked" in run.stdout
        # --fail-on is about findings; a file that was never checked still fails.
        assert cli("scan", name, "--no-store", "--fail-on", "never").exit_code == 1
        assert cli("scan", name, "clean.py", "--no-store", "-q").exit_code == 1
    both = cli("scan", "service.py", "bad.py", "--no-store")
    assert both.exit_code == 1
    assert "Found 7 findings; 1 file could not be checked (errors above)." in both.stdout
    as_json = cli("scan", "bad.py", "clean.py", "--no-store", "--format", "json")
    assert as_json.exit_code == 1
    data = json.loads(as_json.stdout)
    assert [e["source"] for e in data["errors"]] == ["scan:parse-error"]
    assert data["metrics"]["headline"]["file_problems"] == 1 and data["metrics"]["headline"]["files_scanned"] == 1
    from infradoctor.report.present.scan import sections
    from infradoctor.result import Result

    [section] = sections(Result.from_dict(data))
    assert "1 file problem (could not be read, decoded, parsed or fixed): see the errors" in section.lines
    empty = project / "empty"
    empty.mkdir()
    nothing = cli("scan", "empty", "--no-store")
    assert nothing.exit_code == 0 and "No Python files found." in nothing.stdout
    assert cli("scan", "clean.py", "--no-store").stdout.startswith("All checks passed.\n")


def test_sarif_reports_unchecked_files(cli, project: Path, tmp_path: Path) -> None:
    (project / "bad.py").write_text("def broken(:\n    pass\n", encoding="utf-8")
    validator = jsonschema.Draft7Validator(SARIF_SCHEMA, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    out = tmp_path / "bad.sarif"
    run = cli("scan", "bad.py", "clean.py", "--no-store", "--format", "sarif", "--output", str(out))
    assert run.exit_code == 1
    log = json.loads(out.read_text(encoding="utf-8"))
    validator.validate(log)
    invocation = log["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    [note] = invocation["toolExecutionNotifications"]
    assert note["level"] == "error" and note["descriptor"] == {"id": "parse-error"}
    assert note["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "bad.py", "uriBaseId": "%SRCROOT%"}
    assert note["locations"][0]["physicalLocation"]["region"]["startLine"] == 1
    assert "informationUri" not in log["runs"][0]["tool"]["driver"]  # no placeholder URL
    gone = tmp_path / "gone.sarif"
    assert cli("scan", "missing.py", "--no-store", "--format", "sarif", "--output", str(gone)).exit_code == 2
    missing = json.loads(gone.read_text(encoding="utf-8"))["runs"][0]["invocations"][0]
    assert missing["executionSuccessful"] is False
    assert missing["toolExecutionNotifications"][0]["descriptor"] == {"id": "not-found"}
    clean = tmp_path / "clean.sarif"
    assert cli("scan", "clean.py", "--no-store", "--format", "sarif", "--output", str(clean)).exit_code == 0
    ok = json.loads(clean.read_text(encoding="utf-8"))
    validator.validate(ok)
    assert ok["runs"][0]["invocations"] == [{"executionSuccessful": True, "toolExecutionNotifications": []}]


def test_fix_replaces_the_file_atomically_and_keeps_its_mode(cli, project: Path) -> None:
    target = project / "ckpt.py"
    target.write_text("import torch\na = torch.load('a.pt')\n", encoding="utf-8")
    target.chmod(0o640)
    inode = target.stat().st_ino
    link = project / "link.py"
    other = project / "real" / "other.py"
    other.parent.mkdir()
    other.write_text("import torch\nb = torch.load('b.pt')\n", encoding="utf-8")
    other.chmod(0o755)
    link.symlink_to(other)
    run = cli("scan", "ckpt.py", "link.py", "--fix", "--unsafe-fixes", "--select", "C014")
    assert run.exit_code == 0, run.stdout
    assert target.read_text(encoding="utf-8") == "import torch\na = torch.load('a.pt', weights_only=True)\n"
    assert target.stat().st_ino != inode  # a new file was renamed over the old one, not rewritten in place
    assert target.stat().st_mode & 0o7777 == 0o640
    assert link.is_symlink() and os.readlink(link) == str(other)  # the link stays; its target is fixed
    assert other.read_text(encoding="utf-8") == "import torch\nb = torch.load('b.pt', weights_only=True)\n"
    assert other.stat().st_mode & 0o7777 == 0o755
    leftovers = [p.name for p in project.rglob("*.tmp")]
    assert leftovers == []
    if os.geteuid() == 0:  # root can give the file away: the fix keeps its owner and group
        owned = project / "owned.py"
        owned.write_text("import torch\nd = torch.load('d.pt')\n", encoding="utf-8")
        os.chown(owned, 4321, 4322)
        assert cli("scan", "owned.py", "--fix", "--unsafe-fixes", "--select", "C014").exit_code == 0
        assert (owned.stat().st_uid, owned.stat().st_gid) == (4321, 4322)
        assert "weights_only=True" in owned.read_text(encoding="utf-8")
    if os.geteuid() != 0:  # root writes anywhere
        locked = project / "locked"
        locked.mkdir()
        kept = locked / "m.py"
        kept.write_text("import torch\nc = torch.load('c.pt')\n", encoding="utf-8")
        locked.chmod(0o555)
        try:
            failed = cli("scan", "locked/m.py", "--fix", "--unsafe-fixes", "--select", "C014")
        finally:
            locked.chmod(0o755)
        assert failed.exit_code == 1 and "error: fix-failed: cannot write" in failed.stdout
        assert kept.read_text(encoding="utf-8") == "import torch\nc = torch.load('c.pt')\n"
        assert list(locked.iterdir()) == [kept]


def test_c013_follows_an_app_import_string_and_gunicorn_files_to_the_gpu_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A launcher in one file, the GPU model in the app's module in another: found only when both are scanned."""
    monkeypatch.chdir(tmp_path)
    app = tmp_path / "svc" / "app"
    app.mkdir(parents=True)
    (app / "__init__.py").write_text("", encoding="utf-8")
    (app / "model_server.py").write_text(
        "import torch\nfrom fastapi import FastAPI\n\napp = FastAPI()\nmodel = torch.nn.Linear(4, 2)\n"
        "model = model.to('cuda')\n",
        encoding="utf-8",
    )
    (app / "cpu_server.py").write_text(
        "import torch\nfrom fastapi import FastAPI\n\napp = FastAPI()\nmodel = torch.nn.Linear(4, 2)\n",
        encoding="utf-8",
    )
    svc = tmp_path / "svc"
    (svc / "run.py").write_text(
        "import uvicorn\n\nif __name__ == '__main__':\n"
        "    uvicorn.run('app.model_server:app', host='0.0.0.0', workers=4)\n"
        "    uvicorn.run('app.cpu_server:app', workers=4)\n"  # no GPU model there
        "    uvicorn.run('elsewhere.main:app', workers=4)\n"  # not scanned
        "    uvicorn.run('app.model_server:app', workers=1)\n"  # one worker
        "    uvicorn.run(app='app.model_server:app', workers=8)  # noqa: C013\n",
        encoding="utf-8",
    )
    (svc / "gunicorn.conf.py").write_text(
        "import multiprocessing\n\nworker_class = 'uvicorn.workers.UvicornWorker'\n"
        "workers = multiprocessing.cpu_count() * 2 + 1\nwsgi_app = 'app.model_server:app'\n",
        encoding="utf-8",
    )
    (svc / "gunicorn_cli.conf.py").write_text("workers = 4\n", encoding="utf-8")  # the app comes on a command line

    report = scan_paths([svc], ScanOptions(select=("C013",)))
    found = sorted((v.path, v.line, v.evidence.get("app"), v.evidence.get("model_path")) for v in report.violations)
    assert found == [
        ("svc/gunicorn.conf.py", 4, "app.model_server:app", "svc/app/model_server.py"),
        ("svc/run.py", 4, "app.model_server:app", "svc/app/model_server.py"),
    ]
    assert all(v.evidence["gpu_model_line"] == 6 for v in report.violations)
    assert report.suppressed == 1
    assert "multiprocessing.cpu_count() * 2 + 1" in report.violations[0].message

    alone = scan_paths([svc / "run.py"], ScanOptions(select=("C013",)))  # the app's module is not scanned
    assert alone.violations == ()


def test_c013_resolves_the_app_module_as_python_would(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`main:app` next to the launcher is that folder's main.py, not a GPU main.py in a sibling service."""
    monkeypatch.chdir(tmp_path)
    gpu = "import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n"
    for name, text in {
        "mono/service_a/run.py": "import uvicorn\nuvicorn.run('main:app', workers=4)\n",
        "mono/service_a/main.py": "import torch\nmodel = torch.nn.Linear(2, 2)\n",  # CPU only
        "mono/service_b/main.py": gpu,
        "mono/service_c/scripts/serve.py": "import uvicorn\nuvicorn.run('main:app', workers=2)\n",
        "mono/service_c/main.py": gpu,  # one folder above the launcher: found
        "mono/service_d/gunicorn.conf.py": "workers: int = 3\nwsgi_app: str = 'main:app'\n",
        "mono/service_d/main.py": gpu,
        "mono/service_d/test_gunicorn_settings.py": "workers = 4\nwsgi_app = 'main:app'\n",  # not a config file
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    report = scan_paths([tmp_path / "mono"], ScanOptions(select=("C013",)))
    found = sorted((Path(v.path).relative_to("mono").as_posix(), v.evidence["model_path"]) for v in report.violations)
    assert found == [
        ("service_c/scripts/serve.py", str(Path("mono/service_c/main.py"))),
        ("service_d/gunicorn.conf.py", str(Path("mono/service_d/main.py"))),
    ]
    twice = scan_paths([tmp_path / "mono", tmp_path / "mono" / "service_c"], ScanOptions(select=("C013",)))
    assert len(twice.violations) == 3  # the overlapping root repeats its file once, as for any finding

    # from inside the launcher's folder (display paths then mix relative and absolute) the module is still found
    monkeypatch.chdir(tmp_path / "mono" / "service_c" / "scripts")
    inside = scan_paths([Path(".."), tmp_path / "mono" / "service_c" / "main.py"], ScanOptions(select=("C013",)))
    assert [Path(v.path).name for v in inside.violations] == ["serve.py"]
    # import strings that name no module are skipped, not a crash
    (tmp_path / "odd.py").write_text(
        "import uvicorn\nuvicorn.run('.:app', workers=2)\nuvicorn.run('/:app', workers=2)\n"
        "uvicorn.run('a..b:app', workers=2)\n",
        encoding="utf-8",
    )
    assert scan_paths([tmp_path / "odd.py"], ScanOptions(select=("C013",))).problems == ()

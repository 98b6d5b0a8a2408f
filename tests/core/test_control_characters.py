"""No raw control character of untrusted text reaches a terminal: Markdown, HTML, JSON, reports, error lines, scan.

An escape sequence in a log file's name, a ``--label`` or a scanned file's name once reached stdout/stderr raw
(retitle the terminal, clear the screen) outside the terminal renderer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from infradoctor.bounded import json_printable, printable
from infradoctor.report import render
from infradoctor.report.markdown import md_escape
from infradoctor.report.writeup import build_writeup
from infradoctor.report.writeup_render import to_html, to_markdown
from infradoctor.result import ErrorNote, new_result

HOSTILE = "x\x1b]0;pwned\x07\x1b[2J\x9b31m\u202egnp\x7f"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _clean(text: str, where: str) -> None:
    found = RAW.findall(text)
    assert not found, f"{where}: raw {found!r}"


def _hostile_result():
    return new_result(
        "logs", started_at="2026-11-29T10:00:00Z", duration_s=1.0, target={"files": [f"/var/log/{HOSTILE}.log"]},
        metrics={"files": [{"file": f"/var/log/{HOSTILE}.log", "format": "text", "lines": 1, "parsed": 0}]},
        errors=[ErrorNote(f"logs:{HOSTILE}", f"cannot read {HOSTILE}")],
    ).with_(label=HOSTILE, note=HOSTILE)


def test_markdown_html_and_json_renderers_escape_control_characters() -> None:
    result = _hostile_result()
    for fmt in ("md", "html", "json"):
        text = render([result, result], fmt)
        _clean(text, fmt)
        assert "\\x1b]0;pwned" in text or "\\u001b]0;pwned" in text, fmt
    assert json.loads(render(result, "json"))["label"] == HOSTILE  # JSON escapes: the same document
    assert json.loads(result.to_json())["note"] == HOSTILE
    writeup = build_writeup([result], title=f"report {HOSTILE}")
    for text in (to_markdown(writeup), to_html(writeup)):
        _clean(text, "report")
        assert "\\x1b" in text


def test_md_escape_shows_controls_as_plain_escapes() -> None:
    assert md_escape("a\x1b[2Jb|c") == "a\\x1b[2Jb\\|c"
    assert md_escape("back\\slash \x07") == "back\\\\slash \\x07"  # a real backslash stays distinguishable
    assert printable("line\n\ttab") == "line\n\ttab"
    assert json_printable('"\x9b\u202e"') == '"\\u009b\\u202e"' and json_printable("plain") == "plain"


def test_show_and_report_to_stdout_with_hostile_file_name_and_label(cli, tmp_path: Path) -> None:
    log = tmp_path / f"app{HOSTILE}.log"
    log.write_text("2026-11-29T10:00:00Z ERROR CUDA out of memory\n" * 3)
    run = cli("logs", str(log), "--label", f"lbl{HOSTILE}")
    assert run.exit_code in (0, 1), run.stderr
    _clean(run.stdout + run.stderr, "logs terminal")
    runs = cli("runs")
    _clean(runs.stdout + runs.stderr, "runs")
    for fmt in ("terminal", "md", "html", "json"):
        shown = cli("show", "latest", "--format", fmt)
        assert shown.exit_code == 0, shown.stderr
        _clean(shown.stdout + shown.stderr, f"show {fmt}")
        assert "app" in shown.stdout and "lbl" in shown.stdout, fmt
    for fmt in ("md", "html"):
        report = cli("report", "latest", "--format", fmt)
        assert report.exit_code == 0, report.stderr
        _clean(report.stdout + report.stderr, f"report {fmt}")
        assert "\\x1b]0;pwned" in report.stdout, fmt
    out = tmp_path / f"r{HOSTILE}.md"
    written = cli("report", "latest", "-o", str(out))
    assert written.exit_code == 0 and out.exists()
    _clean(written.stdout + written.stderr, "report -o")


def test_logs_error_line_escapes_file_names(cli, tmp_path: Path) -> None:
    empty = tmp_path / f"empty{HOSTILE}.log"
    empty.write_bytes(b"")
    run = cli("logs", str(empty), str(tmp_path / f"missing{HOSTILE}.log"), "--no-store")
    assert run.exit_code == 3
    assert "no file yielded a parsed line" in run.stderr and "\\x1b]0;pwned" in run.stderr
    _clean(run.stdout + run.stderr, "logs")


@pytest.fixture
def hostile_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "model\x1b]0;T\x07\u202e\nAll checks passed.py").write_text(
        "import torch\nm = torch.load('m.pt')\n", encoding="utf-8")
    (root / "broken\x1b[2J.py").write_text("def broken(:\n", encoding="utf-8")
    monkeypatch.chdir(root)
    return root


def test_scan_text_output_escapes_scanned_file_names(cli, hostile_tree: Path) -> None:
    run = cli("scan", ".", "--no-config")
    assert run.exit_code == 1
    _clean(run.stdout + run.stderr, "scan text")
    assert "model\\x1b]0;T\\x07\\u202e\\nAll checks passed.py:2:" in run.stdout
    assert "broken\\x1b[2J.py" in run.stdout
    assert not any(line.startswith("All checks passed") for line in run.stdout.splitlines())


def test_scan_json_sarif_and_missing_paths_escape_control_characters(cli, hostile_tree: Path) -> None:
    missing = f"gone{HOSTILE}"
    for fmt in ("json", "sarif"):
        run = cli("scan", ".", missing, "--no-config", "--format", fmt)
        assert run.exit_code == 2
        _clean(run.stdout + run.stderr, f"scan {fmt}")
        json.loads(run.stdout)
    run = cli("scan", ".", missing, "--no-config", "--format", "json")
    assert "gonex\\x1b]0;pwned" in run.stderr

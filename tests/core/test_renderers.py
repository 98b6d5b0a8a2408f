import json
from html.parser import HTMLParser

import pytest

from infradoctor.findings import Location, make_finding
from infradoctor.report import FORMATS, render
from infradoctor.result import ErrorNote, Result, new_result

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)> | `rm -rf` **bold** & "quotes"'


def results() -> list[Result]:
    hostile = new_result(
        "logs",
        started_at="2026-11-29T10:00:00Z",
        duration_s=3.2,
        target={"files": [f"/var/log/{HOSTILE}.log"]},
        metrics={"headline": {"lines": 1200, "error_rate": 0.031, HOSTILE: HOSTILE}},
        findings=[
            make_finding("R007", f"connect refused: {HOSTILE}", {"example": HOSTILE, "count": 12},
                         location=Location(f"{HOSTILE}.log", 3)),
        ],
        errors=[ErrorNote("parser:nginx", HOSTILE, count=4)],
    ).with_(label=HOSTILE, note=HOSTILE, run_id="20261129T100000-abcdef")
    clean = new_result(
        "node",
        started_at="2026-11-29T10:00:00Z",
        duration_s=0.4,
        target={"host": "gpu-01"},
        metrics={"headline": {"gpus": 8, "cpu_percent": 12.5}},
    )
    return [hostile, clean]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_renderer_renders_the_same_results(fmt: str) -> None:
    for result in results():
        text = render(result, fmt)
        assert result.command in text
        for finding in result.findings:
            assert finding.code in text
        if result.findings:
            assert "12" in text  # evidence numbers shown
        else:
            assert "No findings" in text or fmt == "json"
    both = render(results(), fmt)
    assert "logs" in both and "node" in both


def test_json_renderer_is_the_contract() -> None:
    data = json.loads(render(results()[0], "json"))
    assert data["schema"] == "infradoctor.result/1"
    assert len(json.loads(render(results(), "json"))) == 2


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag, attrs):  # type: ignore[no-untyped-def]
        self.tags.append(tag)
        self.attrs.extend(attrs)


def test_html_escapes_untrusted_text() -> None:
    page = render(results(), "html")
    assert "<script>" not in page and "<img" not in page
    assert "&lt;script&gt;" in page
    parser = _Collector()
    parser.feed(page)
    assert "script" not in parser.tags and "img" not in parser.tags
    assert not any(name.startswith("on") for name, _ in parser.attrs)
    assert "http://" not in page.replace("http-equiv", "")  # self-contained: no external resources


def test_markdown_escapes_table_and_html() -> None:
    text = render(results()[0], "md")
    assert "<script>" not in text
    for line in text.splitlines():
        if line.startswith("| ") and HOSTILE[:5] in line:
            assert line.count(" | ") == 1  # the hostile pipe did not add a column


def test_terminal_shows_fix_and_partial_result() -> None:
    text = render(results()[0], "terminal")
    assert "fix:" in text and "partial result" in text


def test_terminal_output_escapes_control_characters_of_untrusted_text() -> None:
    from infradoctor.report.terminal import TerminalRenderer

    hostile = "x\x1b]0;pwned\x07\x1b[2J\x9b31m\u202egnp.exe"
    result = new_result("logs", started_at="2026-11-29T10:00:00Z", duration_s=1.0, target={"files": [hostile]},
                        findings=[make_finding("R006", f"no healthy upstream in {hostile}")]).with_(label=hostile)
    text = TerminalRenderer(color=False).render([result])
    assert "\x1b" not in text and "\x9b" not in text and "\u202e" not in text and "\x07" not in text
    assert "\\x1b]0;pwned" in text and "\\u202e" in text

"""Secrets never land in stored runs, reports or the terminal: keys and values, URLs with or without a scheme."""

from __future__ import annotations

import json
import time
from pathlib import Path

from infradoctor.redact import REDACTED, USERINFO_REDACTED, redact, redact_text, redact_url
from infradoctor.result import ErrorNote, new_result
from infradoctor.store import RunStore


def test_mapping_keys_are_redacted_too() -> None:
    # a distribution per backend URL: the URL is a key
    out = redact({"http://bob:S3CRET@host/v1?key=K3Y": [1.0], "code": "P001"})
    assert list(out) == [f"http://{USERINFO_REDACTED}@host/v1?key={REDACTED}", "code"]
    assert "S3CRET" not in str(out) and "K3Y" not in str(out)


def test_userinfo_without_a_scheme_and_wider_url_parameters() -> None:
    assert redact({"upstream_host": "bob:pw@10.0.0.1:80"}) == {"upstream_host": f"{USERINFO_REDACTED}@10.0.0.1:80"}
    url = "https://app/cb?code=abc&state=xyz&session=s1&X-Amz-Signature=q&X-Amz-Credential=c&page=2"
    out = redact_url(url)
    assert "abc" not in out and "xyz" not in out and "s1" not in out and "=q" not in out and "page=2" in out
    assert redact_text("GET /login?session=deadbeef HTTP/1.1") == f"GET /login?session={REDACTED} HTTP/1.1"
    assert redact({"code": "C003", "codes": ["P001"]}) == {"code": "C003", "codes": ["P001"]}  # finding codes stay
    assert redact_text("email a@b.com at 10.0.0.1") == "email a@b.com at 10.0.0.1"


def test_redaction_is_linear_on_hostile_lines() -> None:
    for line in ("y" * 100_000 + "://a", "k" * 100_000 + "=v", "x:" + "y" * 100_000 + "@", "a=b " * 25_000):
        start = time.perf_counter()
        redact_text(line)
        assert time.perf_counter() - start < 1.0  # quadratic versions took 0.4-17 s per 100 KB


def test_secret_keys_hide_their_whole_value_whatever_the_scheme() -> None:
    cases = {
        '{"authorization":"Bearer short7"}': '{"authorization":"[REDACTED]"}',
        '{"msg":"authorization=Bearer ZZ9"}': '{"msg":"authorization=[REDACTED]"}',
        '{"cookie":"a=1; sid=SECRET"}': '{"cookie":"[REDACTED]"}',
        '{"password":"correct horse battery"}': '{"password":"[REDACTED]"}',
        '{"password": "a\\"b c", "user": "ann"}': '{"password": "[REDACTED]", "user": "ann"}',
        "req x-api-key: 'k 1' next": "req x-api-key: '[REDACTED]' next",
        "authorization=Bearer ZZ9 status=200": "authorization=[REDACTED] status=200",
        "auth: Basic QWxhZGRpbg== host=a": "auth: [REDACTED] host=a",
        "set-cookie=sid=S1; theme=T2 ok": "set-cookie=[REDACTED] ok",
        "req cookie: a=1; sid=SECRET; lang=en done": "req cookie: [REDACTED] done",
        # JSON inside a JSON string (a log record carrying a request)
        '{"msg":"{\\"authorization\\":\\"Bearer s7\\",\\"a\\":1}"}':
            '{"msg":"{\\"authorization\\":\\"[REDACTED]\\",\\"a\\":1}"}',
        'password="unclosed\nnext=1': 'password="[REDACTED]\nnext=1',
        "password=1234 token=null time_to_first_token=12.5": "password=[REDACTED] token=null time_to_first_token=12.5",
        "upstream_host=bob:pw@10.0.0.1:80": f"upstream_host={USERINFO_REDACTED}@10.0.0.1:80",
    }
    for line, expected in cases.items():
        assert redact_text(line) == expected, line
    assert redact_text("status=200 latency_ms=12.5 path=/v1/chat") == "status=200 latency_ms=12.5 path=/v1/chat"


def test_string_lists_are_command_lines_and_secret_keys_hide_lists() -> None:
    assert redact(["--api-key", "AK1", "--port", "80"]) == ["--api-key", REDACTED, "--port", "80"]
    assert redact({"target": {"cmd": ("serve", "--token", "T1")}}) == {"target": {"cmd": ["serve", "--token",
                                                                                          REDACTED]}}
    assert redact({"set_cookie": ["sid=1", "theme=2"]}) == {"set_cookie": [REDACTED, REDACTED]}
    assert redact(["a", 1, "--token=T2"]) == ["a", 1, f"--token={REDACTED}"]


def test_url_userinfo_marker_keeps_urls_parsable() -> None:
    from urllib.parse import urlsplit

    for url in ("http://bob:S3CRET@host:80/v1?key=K3Y", "https://tok@host/x", "http://u:p@[::1]:8000/"):
        out = redact_url(url)
        assert "S3CRET" not in out and "tok@" not in out and "u:p" not in out
        assert urlsplit(out).hostname in ("host", "::1"), out
    text = redact_text("proxy http://bob:S3CRET@10.0.0.1:3128 and dsn bob:S3CRET@db:5432")
    assert "S3CRET" not in text and urlsplit(text.split()[1]).hostname == "10.0.0.1"


def test_key_value_redaction_is_linear_on_hostile_lines() -> None:
    hostile = ('password="' + "\\" * 100_000, 'password="' + '\\"' * 50_000, '"password":"' * 8_000,
               "password=Bearer " * 6_000, "cookie=a" + "; b=c" * 20_000, '\\"password\\":\\"x' * 6_000,
               '{"msg":"' * 12_000, "ab=" * 33_000, 'password="x\n' * 8_000)
    for line in hostile:
        start = time.perf_counter()
        redact_text(line)
        assert time.perf_counter() - start < 1.0, line[:40]


PLANTED = ("Sh0rt7q", "ZZ9qv", "C00kieS3C", "Batt3ryX", "Pw9Secret", "UrlPw55", "Sess10n9", "AK1zzq", "TkN8w",
           "hunter2x", "K3Yq9z")


def _planted_log(path: Path) -> None:
    t = "2026-11-29T10:00:0{}Z"
    lines = [
        {"time": t.format(0), "level": "error", "msg": "upstream connect error", "status": 503,
         "authorization": "Bearer Sh0rt7q"},
        {"time": t.format(1), "level": "error", "msg": "request failed authorization=Bearer ZZ9qv", "status": 502},
        {"time": t.format(2), "level": "error", "msg": "upstream connect error", "cookie": "a=1; sid=C00kieS3C",
         "status": 503},
        {"time": t.format(3), "level": "error", "msg": "upstream connect error", "password": "correct horse Batt3ryX",
         "status": 503},
        {"time": t.format(4), "level": "error", "msg": "upstream request timeout", "status": 504,
         "upstream_host": "bob:Pw9Secret@10.0.0.1:80"},
    ]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    text += f"{t.format(5)} ERROR CUDA out of memory calling http://u:UrlPw55@h/x?session=Sess10n9\n"
    path.write_text(text)


def test_planted_secrets_reach_no_stored_run_report_or_terminal(cli, tmp_path: Path, isolated_store: Path) -> None:
    log = tmp_path / "app.log"
    _planted_log(log)
    run = cli("logs", str(log), "--label", "planted", "--json", str(tmp_path / "logs.json"))
    assert run.exit_code in (0, 1), run.stderr
    outputs = {"logs terminal": run.stdout + run.stderr, "logs --json": (tmp_path / "logs.json").read_text()}
    assert "upstream" in run.stdout  # the lines were read
    # a run with secrets in its argv (a list), headers, URLs and note
    result = new_result(
        "load", started_at="2026-11-29T10:00:00Z", duration_s=1.0,
        target={"url": "http://u:UrlPw55@10.0.0.1:8000/v1?key=K3Yq9z", "argv": ["serve", "--api-key", "AK1zzq"],
                "cmd": ["serve", "--token", "TkN8w"], "headers": {"Authorization": "Bearer Sh0rt7q"}},
        errors=[ErrorNote("load:http", 'peer said {"cookie":"a=1; sid=C00kieS3C"}')],
    ).with_(note="db password: hunter2x", label="planted")
    saved = RunStore(isolated_store).save(result)
    for ref in (saved.run_id or "", "planted"):
        for fmt in ("terminal", "md", "html", "json"):
            shown = cli("show", ref, "--format", fmt)
            assert shown.exit_code == 0, shown.stderr
            outputs[f"show {ref} {fmt}"] = shown.stdout + shown.stderr
    for fmt in ("md", "html"):
        report = cli("report", "--label", "planted", "--format", fmt)
        assert report.exit_code == 0, report.stderr
        outputs[f"report {fmt}"] = report.stdout + report.stderr
    for path in isolated_store.rglob("*"):
        if path.is_file():
            outputs[str(path)] = path.read_bytes().decode("utf-8", "replace")
    leaks = {where: [s for s in PLANTED if s in text] for where, text in outputs.items()}
    assert {where: found for where, found in leaks.items() if found} == {}
    assert "10.0.0.1" in outputs["report md"]

import json
from pathlib import Path

from infradoctor.report import render
from infradoctor.result import Result


def run_json(cli, tmp_path: Path, *args: str) -> tuple[int, dict]:
    out = tmp_path / "out.json"
    run = cli("logs", *args, "--json", str(out), "--no-store", "-q")
    return run.exit_code, json.loads(out.read_text())


def test_all_fixtures_in_one_run(cli, tmp_path: Path, logs_dir: Path, result_validator) -> None:
    code, data = run_json(cli, tmp_path, *sorted(str(p) for p in logs_dir.iterdir()))
    assert code == 0
    result_validator(data)
    codes = {f["code"] for f in data["findings"]}
    assert {"R003", "R005", "R006", "R007", "R008", "R009", "R012", "N001", "N011"} <= codes
    metrics = data["metrics"]
    assert {f["format"] for f in metrics["files"]} == {"nginx", "envoy", "haproxy", "nginx-error", "jsonl", "kernel",
                                                       "text"}
    assert metrics["headline"]["requests"] == 95 + 12 + 10 + 40 + 40 + 24 + 45 + 4
    assert len(metrics["distributions"]["upstream_latency_ms"]) <= 5000
    assert metrics["timeline"]["bucket_s"] == 60 and metrics["timeline"]["points"]
    kinds = {(i["kind"], i["subject"]) for i in metrics["incidents"]}
    assert ("upstream_timeout", "10.1.0.13:8000") in kinds and ("gpu_xid", "Xid 79 (PCI:0000:3b:00)") in kinds
    # secrets in example lines are redacted before they are stored or shown
    assert "sk-abcdefghijklmnop" not in json.dumps(data)


def test_bad_inputs_make_a_partial_result(cli, tmp_path: Path, logs_dir: Path, result_validator) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 400)
    code, data = run_json(cli, tmp_path, str(logs_dir / "nginx_upstream.log"), str(empty), str(junk),
                          str(tmp_path), str(tmp_path / "missing.log"))
    assert code == 0
    result_validator(data)
    sources = {e["source"] for e in data["errors"]}
    assert {"logs:empty", "logs:directory", "logs:not_found"} <= sources
    rows = {Path(f["file"]).name: f for f in data["metrics"]["files"]}
    assert rows["nginx_upstream.log"]["parsed"] == 95
    assert rows["junk.bin"]["parsed"] == 0 or rows["junk.bin"]["format"] == "text"


def test_no_readable_file_exits_3(cli, tmp_path: Path) -> None:
    run = cli("logs", str(tmp_path / "nope.log"), "--no-store", "-q")
    assert run.exit_code == 3


def test_bad_log_format_is_a_usage_error(cli, logs_dir: Path) -> None:
    run = cli("logs", str(logs_dir / "nginx_combined.log"), "--nginx-log-format", "no variables", "--no-store")
    assert run.exit_code == 2 and "no variables" in run.stderr


def test_fail_on_and_stored_run(cli, logs_dir: Path, isolated_store: Path) -> None:
    run = cli("logs", str(logs_dir / "kern.log"), "--fail-on", "critical", "--label", "node7")
    assert run.exit_code == 1
    assert "Xid 79" in run.stdout and "GPU Xid errors" in run.stdout
    shown = cli("show", "node7", "--format", "md")
    assert shown.exit_code == 0 and "gpu-xid" in shown.stdout


def test_renderers_escape_untrusted_log_text(cli, tmp_path: Path) -> None:
    path = tmp_path / "evil.log"
    path.write_text('2026/11/29 10:00:03 [error] 31#31: *1 connect() failed (111: Connection refused) while '
                    'connecting to upstream, client: <script>alert(1)</script>, server: _, request: "GET /?token='
                    'abcdefghijklmnop HTTP/1.1", upstream: "http://10.0.0.9:80/\x1b[31mred", host: "x"\n')
    code, data = run_json(cli, tmp_path, str(path))
    result = Result.from_dict(data)
    html = render(result, "html")
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    example = data["metrics"]["incidents"][0]["examples"][0]
    assert "\x1b" not in example and "\\x1b" in example and "abcdefghijklmnop" not in example
    assert "\x1b[31m" not in render(result, "terminal")


def test_engine_choice(cli, tmp_path: Path, logs_dir: Path) -> None:
    path = str(logs_dir / "nginx_upstream.log")
    _, auto = run_json(cli, tmp_path, path)
    _, forced = run_json(cli, tmp_path, path, "--engine", "polars")
    assert auto["metrics"]["files"][0]["engine"] == "python"  # small files skip polars' import cost
    assert forced["metrics"]["files"][0]["engine"] == "polars"
    for key in ("upstreams", "attempts", "router_split"):
        assert auto["metrics"][key] == forced["metrics"][key], key
    strip = [{k: v for k, v in i.items() if k != "examples"} for i in auto["metrics"]["incidents"]]
    assert strip == [{k: v for k, v in i.items() if k != "examples"} for i in forced["metrics"]["incidents"]]


def test_special_files_are_reported_not_opened(cli, tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it for reading would block: it must be refused before that
    dangling = tmp_path / "gone.log"
    dangling.symlink_to(tmp_path / "nowhere.log")
    run = cli("logs", str(fifo), "/dev/null", str(dangling), "--no-store", "-q", "--json", str(tmp_path / "o.json"))
    assert run.exit_code == 3
    data = json.loads((tmp_path / "o.json").read_text())
    assert [f["error"] for f in data["metrics"]["files"]] == ["not_a_file", "not_a_file", "not_found"]


METRICS_CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "metrics"


def test_router_stats_dumps_join_the_logs_findings(cli, tmp_path: Path, logs_dir: Path, result_validator) -> None:
    """A saved Envoy /stats?format=json dump (the recorded run: every request to the dead host b1 failed to connect
    and was retried on b0) and its /clusters dump, read beside an access log."""
    log = str(logs_dir / "nginx_upstream.log")
    stats, clusters = METRICS_CORPUS / "envoy-1.40.0-stats.json", METRICS_CORPUS / "envoy-1.40.0-clusters.json"
    _, alone = run_json(cli, tmp_path, log)
    code, data = run_json(cli, tmp_path, log, "--router-stats-dump", str(stats), "--router-stats-dump", str(clusters))
    assert code == 0
    result_validator(data)
    assert data["target"]["router_stats_dumps"] == [{"file": str(stats), "kind": "envoy"},
                                                    {"file": str(clusters), "kind": "envoy"}]
    from_dump = [f for f in data["findings"] if (f.get("location") or {}).get("file") == f"{stats} + {clusters}"]
    # retries; b1 named from /clusters, failing every attempt, and held healthy by Envoy (no health check) meanwhile
    assert {(f["code"], f["evidence"].get("router_name")) for f in from_dump} == {
        ("R005", None), ("R003", "b1"), ("R010", "b1")}
    recorded = json.loads(stats.read_text())["stats"]
    retries = next(s["value"] for s in recorded if s["name"] == "cluster.app.upstream_rq_retry")
    r005 = next(f for f in from_dump if f["code"] == "R005")
    assert r005["evidence"]["extra_attempts"] == retries and r005["evidence"]["source"] == "router-stats"
    r003 = next(f for f in from_dump if f["code"] == "R003")
    assert r003["evidence"]["router_name"] == "b1" and r003["evidence"]["errors"] == retries
    # the logs' own findings are all still there
    assert [f["title"] for f in alone["findings"]] == [f["title"] for f in data["findings"] if f not in from_dump]


def test_a_router_stats_dump_alone(cli, tmp_path: Path, result_validator) -> None:
    dump = METRICS_CORPUS / "haproxy-stats-csv-datadog-mock.csv"  # servers DOWN, DOWN (agent), UP 1/2, MAINT
    code, data = run_json(cli, tmp_path, "--router-stats-dump", str(dump))
    assert code == 0
    result_validator(data)
    states = {(f["evidence"]["router_name"], f["evidence"]["state"]) for f in data["findings"] if f["code"] == "R003"}
    assert {("i-4", "down"), ("i-1", "failing"), ("i-5", "maint")} <= states
    assert data["target"]["files"] == [] and data["metrics"]["files"] == []


def test_router_stats_dumps_that_cannot_be_read(cli, tmp_path: Path) -> None:
    html = tmp_path / "login.html"
    html.write_text("<!doctype html><title>Sign in</title>")
    out = tmp_path / "out.json"
    run = cli("logs", "--router-stats-dump", str(html), "--router-stats-dump", str(tmp_path / "gone.json"),
              "--json", str(out), "--no-store", "-q")
    assert run.exit_code == 3 and "no --router-stats-dump could be read" in run.stderr
    data = json.loads(out.read_text())
    notes = [e["message"] for e in data["errors"] if e["source"] == "logs.router-stats-dump"]
    assert len(notes) == 2 and "HTML" in notes[0] and "cannot be read" in notes[1]
    assert cli("logs", "--no-store", "-q").exit_code == 2  # neither a file nor a dump: a usage error

import json
import multiprocessing
import os
import sqlite3
from pathlib import Path

import pytest

from infradoctor.errors import StoreError
from infradoctor.findings import make_finding
from infradoctor.result import new_result
from infradoctor.store import RunStore


def make(command: str = "load", label: str | None = None, **target: object):
    result = new_result(
        command,
        started_at="2026-11-29T10:00:00Z",
        duration_s=1.0,
        target=target or {"url": "http://127.0.0.1:8000/predict"},
        metrics={"headline": {"p99_ms": 120.0, "rps": 50.0}},
        findings=[make_finding("S008", "knee at 8")],
    )
    return result.with_(label=label)


def test_save_list_resolve_load(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "s")
    a = store.save(make(label="baseline"))
    b = store.save(make(label="after"))
    assert a.run_id and b.run_id and a.run_id != b.run_id
    runs = store.list()
    assert {r.id for r in runs} == {a.run_id, b.run_id}
    assert runs[0].headline == {"p99_ms": 120.0, "rps": 50.0}
    assert store.resolve("baseline") == a.run_id
    assert store.resolve(a.run_id[:-1]) == a.run_id
    with pytest.raises(StoreError, match="ambiguous"):
        store.resolve(a.run_id[:4])
    assert store.load("after").run_id == b.run_id
    assert store.load(a.run_id).findings[0].code == "S008"
    with pytest.raises(StoreError, match="no run"):
        store.load("nope")


def test_empty_store_errors_cleanly(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "empty")
    assert store.list() == []
    with pytest.raises(StoreError, match="no runs stored"):
        store.load("latest")


def test_secrets_are_redacted_before_storing(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "s")
    result = make(
        url="http://user:hunter2@127.0.0.1:8000/v1?api_key=sk-live-123&x=1",
        headers={"Authorization": "Bearer abcdefghijklmnop", "Cookie": "session=zzz", "Accept": "json"},
        argv=["curl", "-H", "Authorization: Bearer abcdefghijklmnop", "--token", "t0ps3cret"],
    ).with_(note="used token sk-abcdefghijklmnopqrstuvwx")
    saved = store.save(result)
    raw = (store.runs_dir / f"{saved.run_id}.json").read_text()
    for secret in ("hunter2", "sk-live-123", "abcdefghijklmnop", "session=zzz", "t0ps3cret", "sk-abcdefgh"):
        assert secret not in raw
    data = json.loads(raw)
    assert data["target"]["headers"]["Accept"] == "json"
    assert "x=1" in data["target"]["url"]
    index = sqlite3.connect(store.index_path).execute("SELECT target FROM runs").fetchone()[0]
    assert "hunter2" not in index


def _writer(root: str, n: int, worker: int) -> None:
    store = RunStore(root)
    for i in range(n):
        store.save(make(label=f"w{worker}-{i}"))


def test_concurrent_writers_do_not_corrupt_the_index(tmp_path: Path) -> None:
    root = tmp_path / "s"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(root), 15, w)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    store = RunStore(root)
    runs = store.list()
    assert len(runs) == 45
    assert len(list(store.runs_dir.glob("*.json"))) == 45
    assert sqlite3.connect(store.index_path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_reindex_from_json_files(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "s")
    saved = store.save(make(label="baseline"))
    store.index_path.unlink()
    for suffix in ("-wal", "-shm"):
        Path(str(store.index_path) + suffix).unlink(missing_ok=True)
    assert store.load("baseline").run_id == saved.run_id


def test_damaged_index_is_rebuilt_from_json(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "s")
    first = store.save(make(label="baseline"))
    for suffix in ("-wal", "-shm"):
        Path(str(store.index_path) + suffix).unlink(missing_ok=True)
    store.index_path.write_bytes(b"this is not a sqlite database" * 100)
    second = store.save(make(label="after"))
    assert {r.id for r in store.list()} == {first.run_id, second.run_id}
    assert list(store.root.glob("index.sqlite.damaged-*"))


@pytest.mark.parametrize(
    ("text", "secret", "kept"),
    [
        ("ERROR request failed token=abc123 password=hunter2 user=bob", ["abc123", "hunter2"], ["user=bob"]),
        ('{"api_key": "sk_live_zzz", "prompt_tokens": 45, "max_tokens": 128}', ["sk_live_zzz"], ['"max_tokens": 128']),
        ("python serve.py --api-key S1ekrit --port 8000 --max-tokens 5", ["S1ekrit"], ["--port 8000", "--max-tokens 5"]),
        ("X-Goog-Api-Key: AIzaSyABCDEF", ["AIzaSyABCDEF"], []),
        ("Authorization: Bearer abcdefghijkl", ["abcdefghijkl"], []),
        ('GET /v1/models?api_key=zzz9 HTTP/1.1" 200 time_to_first_token=12.5', ["zzz9"], ["time_to_first_token=12.5"]),
    ],
)
def test_free_text_redaction(text: str, secret: list[str], kept: list[str]) -> None:
    from infradoctor.redact import redact_text

    out = redact_text(text)
    for s in secret:
        assert s not in out, out
    for k in kept:
        assert k in out, out


def test_argv_and_mapping_redaction() -> None:
    from infradoctor.redact import redact, redact_argv

    assert redact_argv(["python", "t.py", "--hf-token", "abc123secret", "--steps", "5"]) == [
        "python", "t.py", "--hf-token", "[REDACTED]", "--steps", "5"]
    data = redact({"headline": {"time_to_first_token": 12.3}, "hf_token": "x", "cmdline": "srv --api-key Q9"})
    assert data == {"headline": {"time_to_first_token": 12.3}, "hf_token": "[REDACTED]", "cmdline": "srv --api-key [REDACTED]"}


def _stored(tmp_path, n=3):
    store = RunStore(tmp_path / "store")
    ids = []
    for i in range(n):
        result = new_result("node", started_at=f"2026-11-29T10:00:0{i}Z", duration_s=1.0,
                            findings=[make_finding("N007", "busy")] if i else [])
        ids.append(store.save(result.with_(label=f"l{i}")).run_id)
    return store, ids


def test_missing_or_empty_index_is_rebuilt_for_filtered_listings_too(tmp_path) -> None:
    import sqlite3

    store, ids = _stored(tmp_path)
    store.index_path.unlink()
    assert [r.id for r in RunStore(store.root).list(label="l1")] == [ids[1]]
    with sqlite3.connect(store.index_path) as conn:
        conn.execute("DELETE FROM runs")
    assert len(RunStore(store.root).list(command="node")) == 3


def test_damaged_rows_and_files_are_reported_not_raised(tmp_path) -> None:
    import sqlite3

    store, ids = _stored(tmp_path)
    (store.runs_dir / "20990101T000000-bad.json").write_text("[]")
    fresh = RunStore(store.root)
    listed = fresh.list()
    assert {r.id for r in listed} == set(ids)
    assert any("20990101T000000-bad.json" in d for d in fresh.damaged)
    with pytest.raises(StoreError, match="damaged"):
        fresh.load("20990101T000000-bad")
    with sqlite3.connect(store.index_path) as conn:
        conn.execute("INSERT INTO runs (id, command, started_at, path) VALUES (?, ?, ?, ?)",
                     ("x", sqlite3.Binary(b"\xff"), "2026-11-29T11:00:00Z", "x.json"))
    again = RunStore(store.root)
    assert {r.id for r in again.list()} == set(ids)
    assert any("'x'" in d for d in again.damaged)


def test_reading_opens_the_index_read_only(tmp_path) -> None:
    store, ids = _stored(tmp_path)
    before = store.index_path.stat().st_mtime_ns
    os.chmod(store.root, 0o555)
    try:
        assert len(RunStore(store.root).list()) == 3
        assert RunStore(store.root).load(ids[0]).run_id == ids[0]
    finally:
        os.chmod(store.root, 0o755)
    assert store.index_path.stat().st_mtime_ns == before


def test_a_store_that_cannot_be_written_keeps_the_result(tmp_path, cli) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    out = tmp_path / "out.json"
    run = cli("node", "--no-host", "--gpu-backend", "none", "--store", str(blocker), "--json", str(out), "-q")
    assert run.exit_code == 0, run.stderr
    assert "run not stored" in run.stderr
    data = json.loads(out.read_text())
    assert any(e["source"] == "store" for e in data["errors"])

"""Runs on disk: ``.infradoctor/`` with a SQLite index and one JSON file per run.

The JSON files are the truth; the index is rebuilt from them when it is missing or damaged. Writers take SQLite's
write lock (``BEGIN IMMEDIATE`` with a busy timeout) and write each JSON file atomically (temp file + rename), so two
commands storing at once cannot corrupt either. Secrets are redacted before anything is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from infradoctor.errors import StoreError
from infradoctor.redact import redact
from infradoctor.result import Result, describe_target

ENV_VAR = "INFRADOCTOR_HOME"
DEFAULT_DIRNAME = ".infradoctor"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    command TEXT NOT NULL,
    label TEXT,
    note TEXT,
    started_at TEXT NOT NULL,
    duration_s REAL,
    target TEXT,
    headline TEXT,
    findings INTEGER,
    worst TEXT,
    path TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_started ON runs(started_at);
CREATE INDEX IF NOT EXISTS runs_label ON runs(label);
"""


@dataclass(frozen=True)
class RunSummary:
    """One row of the index."""

    id: str
    """Run id, e.g. ``20261129T100000-3fa2``."""
    command: str
    """Command that made it."""
    label: str | None
    """User's label."""
    note: str | None
    """User's note."""
    started_at: str
    """UTC start time."""
    duration_s: float
    """Wall time."""
    target: str
    """One-line description of what was measured."""
    headline: Mapping[str, Any]
    """Key numbers (``metrics.headline``)."""
    findings: int
    """Number of findings."""
    worst: str | None
    """Worst severity, or None."""
    path: Path
    """The run's JSON file."""


_Runs = list[RunSummary]  # (the class's own ``list`` method shadows the builtin inside it)
_Params = list[Any]


def default_store_dir(cwd: Path | None = None) -> Path:
    """``$INFRADOCTOR_HOME`` if set, else ``.infradoctor`` under the current directory."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    return (cwd or Path.cwd()) / DEFAULT_DIRNAME


class RunStore:
    """A directory of stored runs with its index."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.runs_dir = self.root / "runs"
        self.index_path = self.root / "index.sqlite"
        self.damaged: list[str] = []
        """Run files and index rows the last listing or rebuild could not read (file or id: reason)."""

    # -- writing -------------------------------------------------------------------------------------------------

    def save(self, result: Result) -> Result:
        """Store a run; returns it with ``run_id`` set and secrets redacted."""
        try:
            self.runs_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create run store {self.root}: {exc}") from exc
        run_id = result.run_id or _new_run_id()
        clean = Result.from_dict(redact(result.with_(run_id=run_id).to_dict()))
        path = self.runs_dir / f"{run_id}.json"
        try:
            _atomic_write(path, clean.to_json())
        except OSError as exc:  # a full disk, a read-only store: the caller still has the result
            raise StoreError(f"cannot write run {run_id} to {self.runs_dir}: {exc.strerror or exc}") from exc
        with self._connect() as conn:
            self._insert(conn, clean, path)
        return clean

    def _insert(self, conn: sqlite3.Connection, result: Result, path: Path) -> None:
        headline = result.metrics.get("headline") if isinstance(result.metrics, Mapping) else None
        worst = result.worst_severity()
        conn.execute(
            "INSERT OR REPLACE INTO runs (id, command, label, note, started_at, duration_s, target, headline,"
            " findings, worst, path) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                result.run_id,
                result.command,
                result.label,
                result.note,
                result.started_at,
                result.duration_s,
                describe_target(result.target),
                json.dumps(headline or {}, allow_nan=False, default=str),
                len(result.findings),
                worst.value if worst else None,
                path.name,
            ),
        )

    def reindex(self) -> int:
        """Rebuild the index from the JSON files; returns how many runs were indexed."""
        with self._connect() as conn:
            return self._rebuild(conn)

    def _rebuild(self, conn: sqlite3.Connection) -> int:
        count = 0
        conn.execute("DELETE FROM runs")
        for result, path in self._read_files():
            self._insert(conn, result, path)
            count += 1
        return count

    def _read_files(self) -> Iterator[tuple[Result, Path]]:
        """Every readable run file with its result; damaged ones are remembered in :attr:`damaged`."""
        self.damaged = []
        for path in sorted(self.runs_dir.glob("*.json")):
            try:
                result = Result.from_json(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                self.damaged.append(f"{path.name}: {exc}")
                continue
            yield (result if result.run_id is not None else result.with_(run_id=path.stem)), path

    def _file_count(self) -> int:
        try:
            return sum(1 for entry in os.scandir(self.runs_dir) if entry.name.endswith(".json"))
        except OSError:
            return 0

    # -- reading -------------------------------------------------------------------------------------------------

    def list(
        self, *, command: str | None = None, label: str | None = None, limit: int | None = None
    ) -> list[RunSummary]:
        """Stored runs, newest first.

        The index is rebuilt when it is missing, empty or behind the run files; a store that cannot be written
        (read-only, another user's) is listed from its run files directly. Damaged rows and files are skipped and
        named in :attr:`damaged`, never raised.
        """
        self.damaged = []
        if not self.index_path.exists() and not self.runs_dir.exists():
            return []
        files = self._file_count()
        try:
            with self._connect(write=False) as conn:
                indexed = int(conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])
            if indexed < files:
                self.reindex()
            with self._connect(write=False) as conn:
                rows = conn.execute(*self._query(command, label, limit)).fetchall()
        except StoreError:  # an index that cannot be read or rebuilt here (read-only store, damaged): the files
            return self._list_files(command, label, limit)
        summaries = []
        for row in rows:
            try:
                summaries.append(self._summary(row))
            except (TypeError, ValueError, IndexError) as exc:
                self.damaged.append(f"index row {row[0] if row else '?'!r}: {exc}")
        return summaries

    @staticmethod
    def _query(command: str | None, label: str | None, limit: int | None) -> tuple[str, _Params]:
        query = "SELECT id, command, label, note, started_at, duration_s, target, headline, findings, worst, path"
        query += " FROM runs WHERE 1=1"
        params: list[Any] = []
        if command:
            query += " AND command = ?"
            params.append(command)
        if label:
            query += " AND label = ?"
            params.append(label)
        query += " ORDER BY started_at DESC, id DESC"
        if limit:
            query += " LIMIT ?"
            params.append(int(limit))
        return query, params

    def _list_files(self, command: str | None, label: str | None, limit: int | None) -> _Runs:
        """The listing without an index (a store this process cannot write)."""
        found = []
        for result, path in self._read_files():
            if (command and result.command != command) or (label and result.label != label):
                continue
            worst = result.worst_severity()
            headline = result.metrics.get("headline") if isinstance(result.metrics, Mapping) else None
            found.append(RunSummary(
                id=str(result.run_id), command=result.command, label=result.label, note=result.note,
                started_at=result.started_at, duration_s=float(result.duration_s),
                target=describe_target(result.target), headline=headline if isinstance(headline, Mapping) else {},
                findings=len(result.findings), worst=worst.value if worst else None, path=path,
            ))
        found.sort(key=lambda r: (r.started_at, r.id), reverse=True)
        return found[:limit] if limit else found

    def _summary(self, row: tuple[Any, ...]) -> RunSummary:
        try:
            headline = json.loads(row[7] or "{}")
        except (ValueError, TypeError):
            headline = {}
        if not all(isinstance(row[i], str) for i in (0, 1, 4, 10)):
            raise ValueError("missing or mistyped id, command, start time or path")
        return RunSummary(
            id=row[0],
            command=row[1],
            label=row[2] if isinstance(row[2], str) else None,
            note=row[3] if isinstance(row[3], str) else None,
            started_at=row[4],
            duration_s=float(row[5] or 0.0),
            target=str(row[6] or ""),
            headline=headline if isinstance(headline, Mapping) else {},
            findings=int(row[8] or 0),
            worst=row[9] if isinstance(row[9], str) else None,
            path=self.runs_dir / row[10],
        )

    def resolve(self, ref: str) -> str:
        """Run id for a reference: an id, a unique id prefix, ``latest``, ``latest-N``, or a label (newest)."""
        ref = ref.strip()
        runs = self.list()
        if not runs:
            raise StoreError(f"no runs stored in {self.root}")
        if ref in ("latest", "last", "-1"):
            return runs[0].id
        if ref.startswith("latest-") and ref[7:].isdigit():
            n = int(ref[7:])
            if n >= len(runs):
                raise StoreError(f"only {len(runs)} runs stored; {ref!r} is out of range")
            return runs[n].id
        exact = [r.id for r in runs if r.id == ref]
        if exact:
            return exact[0]
        prefixed = [r.id for r in runs if r.id.startswith(ref)]
        if len(prefixed) == 1:
            return prefixed[0]
        if len(prefixed) > 1:
            raise StoreError(f"run reference {ref!r} is ambiguous: {', '.join(prefixed[:5])}")
        labelled = [r.id for r in runs if r.label == ref]
        if labelled:
            return labelled[0]
        raise StoreError(f"no run {ref!r} in {self.root} (try `infradoctor runs`)")

    def load(self, ref: str) -> Result:
        """The stored result for a reference (see :meth:`resolve`)."""
        run_id = self.resolve(ref)
        path = self.runs_dir / f"{run_id}.json"
        try:
            return Result.from_json(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise StoreError(f"cannot read run {run_id}: {exc}") from exc
        except ValueError as exc:
            raise StoreError(f"run {run_id} is damaged ({path}): {exc}") from exc

    # -- plumbing ------------------------------------------------------------------------------------------------

    @contextmanager
    def _connect(self, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        if not write and self.index_path.exists():
            conn, rebuilt = self._open_read_only(), False  # reading never needs write access
        else:
            conn, rebuilt = self._open()
        with closing(conn):
            try:
                conn.execute("BEGIN IMMEDIATE" if write or rebuilt else "BEGIN")
                if rebuilt:
                    self._rebuild(conn)
                yield conn
                conn.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise StoreError(f"run index {self.index_path} is unusable: {exc}") from exc
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _open_read_only(self) -> sqlite3.Connection:
        """The index opened read-only (no WAL pragma, no schema creation): for a store this process cannot write."""
        try:
            return sqlite3.connect(f"{self.index_path.resolve().as_uri()}?mode=ro", uri=True, timeout=30.0,
                                   isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open run index {self.index_path} read-only: {exc}") from exc

    def _open(self) -> tuple[sqlite3.Connection, bool]:
        """A connection with the schema in place; a damaged index is moved aside and rebuilt from the JSON files."""
        for attempt in range(2):
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.index_path, timeout=30.0, isolation_level=None)
            except (OSError, sqlite3.Error) as exc:
                raise StoreError(f"cannot open run index {self.index_path}: {exc}") from exc
            try:
                conn.execute("PRAGMA busy_timeout = 30000")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.executescript(_SCHEMA)
                return conn, attempt > 0
            except sqlite3.OperationalError as exc:
                conn.close()
                raise StoreError(f"run index {self.index_path} is busy or unwritable: {exc}") from exc
            except sqlite3.DatabaseError:
                conn.close()
                if attempt:
                    raise
                stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
                for suffix in ("", "-wal", "-shm"):
                    damaged = Path(str(self.index_path) + suffix)
                    if damaged.exists():
                        damaged.replace(Path(f"{self.index_path}{suffix}.damaged-{stamp}"))
        raise StoreError(f"run index {self.index_path} could not be rebuilt")


def _new_run_id() -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{secrets.token_hex(3)}"


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise

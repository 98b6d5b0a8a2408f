"""Launcher files are hostile input: whatever a Dockerfile, Procfile, shell script, Compose file, Kubernetes manifest
or gunicorn configuration holds, reading it never raises, and takes time in proportion to its size.

Seeded (``derandomize``) and bounded so the fast tier stays fast; ``benchmarks/bench_scan_fuzz.py`` runs the same
generators for many more cases.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infradoctor.scan import launchers
from infradoctor.scan.engine import ScanOptions, scan_paths, scan_source

KINDS = ("dockerfile", "procfile", "shell", "compose", "manifest")
FILE_NAMES = {"dockerfile": "Dockerfile", "procfile": "Procfile", "shell": "start.sh", "compose": "compose.yaml",
              "manifest": "deploy.yaml"}
TOKENS = [
    "CMD", "ENTRYPOINT", "RUN", "ENV", "FROM python", "web:", "worker:", "command:", "entrypoint:", "args:",
    "kind: Deployment", "kind: Pod", "containers:", "- name: WEB_CONCURRENCY", "value: '4'", "WEB_CONCURRENCY=4",
    "uvicorn", "gunicorn", "hypercorn", "python -m uvicorn", "app.main:app", "pkg.api:create_app()", "--workers",
    "-w", "4", "$WORKERS", "${WORKERS:-1}", "-c", "gunicorn.conf.py", "-k", "uvicorn.workers.UvicornWorker",
    "sh -c", "bash -lc", "exec", "&&", "||", ";", "|", "&", "<<EOF", "EOF", "<<-'END'", "END", "[", "]", "{", "}",
    '"', "'", "\\", "#", "# noqa: C013", ":", "-", "|", ">", "|-", ">+", "  ", "\t", "\n", "\r\n", ",", "=",
    "\x00", "\u2028", "é", "\ufeff",
]
launcher_text = st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=12)), max_size=80).map(" ".join)
"""Text made of the tokens the readers look for, in any order, with junk between them."""


@pytest.mark.parametrize("file_kind", KINDS)
@settings(max_examples=60, deadline=None, derandomize=True)
@given(text=launcher_text)
def test_launcher_readers_never_raise(file_kind: str, text: str) -> None:
    found = launchers.launches(text, file_kind)
    lines = launchers.lines_of(text)
    for launch in found:
        assert 1 <= launch.line <= len(lines)
        assert launch.server in launchers.SERVERS
        assert launch.workers != "" or launch.config is not None
        assert ":" in launch.app
    launchers.is_manifest(text)
    launchers.kind(text[:40])


gunicorn_conf = st.lists(st.sampled_from([
    "workers = 4", "workers = multiprocessing.cpu_count() * 2 + 1", "workers: int = 2", "wsgi_app = 'app.main:app'",
    "wsgi_app = \"pkg.api:create_app()\"", "bind = '0.0.0.0:8000'", "import multiprocessing", "workers = 1",
    "if True:\n    workers = 8", "def post_fork(server, worker):\n    pass", "workers = (", "wsgi_app = ",
    "# comment", "x = 'unterminated", "\\", "lambda: 0",
]), max_size=12).map("\n".join)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(text=gunicorn_conf)
def test_gunicorn_configuration_files_never_raise(text: str) -> None:
    try:
        violations = scan_source(text, "gunicorn.conf.py", select={"C013"})
    except (SyntaxError, ValueError):
        return  # not Python: the engine reports a parse error for the file, as for any Python file
    assert all(v.code == "C013" for v in violations)


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(files=st.lists(st.tuples(st.sampled_from(KINDS), launcher_text), min_size=1, max_size=4))
def test_a_folder_of_hostile_launchers_is_scanned_without_file_problems(tmp_path: Path,
                                                                        files: list[tuple[str, str]]) -> None:
    folder = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    for n, (file_kind, text) in enumerate(files):
        (folder / f"{n}{FILE_NAMES[file_kind]}" if file_kind != "dockerfile" else folder / f"Dockerfile.{n}").write_text(
            text, encoding="utf-8", errors="surrogatepass")
    (folder / "app").mkdir()
    (folder / "app" / "main.py").write_text("import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n", encoding="utf-8")
    report = scan_paths([folder], ScanOptions(use_config=False, select=["C013"]))
    assert not report.problems
    assert all(v.code == "C013" for v in report.violations)


ADVERSARIAL = {
    "open quote continued": lambda n: "RUN echo '" + "a b \\\n" * n,
    "open quote over long lines": lambda n: "RUN echo '" + ("x" * 500 + "\n") * (n // 10),
    "quote opened on every line": lambda n: "CMD uvicorn app:app --workers 4 \"\n" * n,
    "long continued line": lambda n: "RUN " + "x" * (n * 50) + " \\\n" + "y" * (n * 50),
    "one huge line of quotes": lambda n: "CMD " + "'\"" * (n * 20),
    "unclosed flow list": lambda n: "command: [" + "\"uvicorn\", " * n,
    "deep block list": lambda n: "command:\n" + "  - gunicorn -w 4 app:app\n" * n,
    "block scalar": lambda n: "kind: Pod\nargs: |\n" + "  uvicorn app:app --workers 2\n" * n,
    "many heredocs": lambda n: "cat <<EOF\nuvicorn a:b --workers 2\nEOF\n" * n,
    "web concurrency everywhere": lambda n: "WEB_CONCURRENCY=4 uvicorn a:b\n" * n,
    "separators": lambda n: "uvicorn a:b -w 2 && " * n,
}


def _seconds(text: str, file_kind: str) -> float:
    start = time.perf_counter()
    launchers.launches(text, file_kind)
    return time.perf_counter() - start


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
@pytest.mark.parametrize("file_kind", ["dockerfile", "shell", "compose", "manifest"])
def test_reading_time_grows_with_the_input_not_its_square(name: str, file_kind: str) -> None:
    make = ADVERSARIAL[name]
    small, large = make(500), make(4000)
    assert len(large) >= 6 * len(small)
    small_s = min(_seconds(small, file_kind) for _ in range(2))
    large_s = min(_seconds(large, file_kind) for _ in range(2))
    # Linear reading makes the large input cost about 8x the small one; a quadratic reader costs ~64x. The bounds
    # leave room for a loaded machine: an absolute floor, and a ratio far below the quadratic one.
    assert large_s < max(0.5, 24 * small_s), (name, file_kind, small_s, large_s, len(large))
    assert large_s < 5.0, (name, file_kind, large_s, len(large))

"""C013 from command lines: Dockerfiles, Procfiles, shell scripts and Compose files that start several workers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infradoctor.scan.engine import ScanOptions, scan_paths
from infradoctor.scan.launchers import kind, launches


@pytest.mark.parametrize(
    "name,expected",
    [
        ("Dockerfile", "dockerfile"),
        ("Dockerfile.gpu", "dockerfile"),
        ("api.Dockerfile", "dockerfile"),
        ("Containerfile", "dockerfile"),
        ("Procfile", "procfile"),
        ("start.sh", "shell"),
        ("docker-compose.yml", "compose"),
        ("compose.prod.yaml", "compose"),
        ("main.py", None),
        ("Dockerfile.py", None),
        ("dockerfiles.txt", None),
        ("config.yml", "manifest"),  # read only when it holds a Kubernetes workload
    ],
)
def test_launcher_files_by_name(name: str, expected: str | None) -> None:
    assert (kind(name) if not name.endswith(".py") else None) == expected


DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
spec:
  template:
    spec:
      containers:
        - name: api
          image: registry/api:1
          command: ["gunicorn"]
          args:
          - --workers
          - "4"   # one per core
          - -k
          - uvicorn.workers.UvicornWorker
          - app.main:app
          resources:
            limits:
              nvidia.com/gpu: 1
        - name: sidecar
          image: envoy
          args: ["--config-path", "/etc/envoy.yaml"]
"""


@pytest.mark.parametrize(
    "file_kind,text,expected",
    [
        ("dockerfile", 'CMD ["uvicorn", "app.main:app", "--host", "0.0.0.0", "--workers", "4"]', [("uvicorn", "4")]),
        ("dockerfile", "CMD uvicorn app.main:app --workers=4", [("uvicorn", "4")]),
        (
            "dockerfile",
            'ENTRYPOINT ["gunicorn", "-k", "uvicorn.workers.UvicornWorker", "-b", "unix:api.sock", "-w", "3",'
            ' "app.main:app"]',
            [("gunicorn", "3")],
        ),
        ("dockerfile", 'CMD ["sh", "-c", "alembic upgrade head && exec hypercorn -w 2 app.main:app"]', [("hypercorn", "2")]),
        ("dockerfile", "RUN pip install uvicorn \\\n    && echo done\nCMD python3 -m uvicorn app.main:app --workers ${N}",
         [("uvicorn", "${N}")]),
        ("dockerfile", "ENV WEB_CONCURRENCY=4\nCMD gunicorn app.main:app", [("gunicorn", "4")]),
        ("dockerfile", "ENV WEB_CONCURRENCY=1\nCMD gunicorn app.main:app", [("gunicorn", "")]),  # its config decides
        ("dockerfile", "CMD uvicorn app.main:app --workers 1", []),
        ("dockerfile", "CMD uvicorn app.main:app", []),  # one worker by default
        ("dockerfile", "# CMD uvicorn app.main:app --workers 4", []),
        ("dockerfile", "CMD uvicorn --workers 4", []),  # no app named: nothing to follow
        ("procfile", "web: gunicorn -w4 --preload app.main:create_app()\nworker: celery -A app worker -c 8", [
            ("gunicorn", "4")]),
        ("shell", "#!/bin/sh\nset -e\nexec poetry run uvicorn app.main:app \\\n  --workers \"$WORKERS\" # prod",
         [("uvicorn", "$WORKERS")]),
        ("shell", "echo 'run uvicorn app.main:app --workers 4 to start'", []),
        ("shell", "uvicorn app.main:app --workers 4 'unbalanced", [("uvicorn", "4")]),
        ("compose", "services:\n  api:\n    command: [\"uvicorn\", \"app.main:app\", \"--workers\", \"2\"]\n",
         [("uvicorn", "2")]),
        ("compose", "services:\n  api:\n    command: \"gunicorn --workers 5 app.main:app\"\n", [("gunicorn", "5")]),
        ("compose", "services:\n  api:\n    environment:\n      - WEB_CONCURRENCY=3\n    command: uvicorn app.main:app\n",
         [("uvicorn", "3")]),
        # a default taken from the variable itself, a comment, a server that ignores it: no worker count set here
        ("shell", 'export WEB_CONCURRENCY="${WEB_CONCURRENCY:-1}"\nexec uvicorn app.main:app', []),
        ("shell", ': "${WEB_CONCURRENCY:=1}"\n# workers from WEB_CONCURRENCY=4\nexec uvicorn app.main:app', []),
        ("shell", "export WEB_CONCURRENCY=4\nhypercorn app.main:app", []),
        ("shell", "export WEB_CONCURRENCY=4  # two GPUs\ngunicorn app.main:app", [("gunicorn", "4")]),
        ("dockerfile", "ENV WEB_CONCURRENCY 2\nCMD uvicorn app.main:app", [("uvicorn", "2")]),
        ("shell", "python3 -u -X dev -m uvicorn app.main:app --workers 2", [("uvicorn", "2")]),
        ("shell", "python serve.py uvicorn app.main:app --workers 2", []),  # a script, not the server
        ("shell", 'if [ -n "$PROD" ]; then uvicorn app.main:app --workers 4; fi', [("uvicorn", "4")]),
        ("shell", "gunicorn --statsd-host statsd:x -w 2 --env A=b:c app.main:app", [("gunicorn", "2")]),
        ("shell", "gunicorn app.main:app -w 2 --name api:web --dogstatsd-tags env:prod", [("gunicorn", "2")]),
        ("shell", "uvicorn app.main:app --workers \u00b2", [("uvicorn", "\u00b2")]),  # not a number: kept as written
        # heredocs, strings over several lines and ": '...'" comments are not commands
        ("shell", "cat <<EOF\nusage: gunicorn -w 4 app.main:app\nEOF\nuvicorn app.main:app --workers 2", [("uvicorn", "2")]),
        ("shell", 'echo "start with\n  uvicorn app.main:app --workers 4"\n', []),
        ("shell", ": '\nuvicorn app.main:app --workers 4\n'\n", []),
        ("shell", "uvicorn app.main:app --workers ${WORKERS:-1}", []),  # one worker unless set
        ("shell", "uvicorn app.main:app --workers " + "9" * 5000, [("uvicorn", "9" * 5000)]),
        ("shell", "WEB_CONCURRENCY=4 uvicorn app.main:app", [("uvicorn", "4")]),
        ("shell", "exec gosu app /usr/bin/env uv run --frozen gunicorn -w 3 app.main:app", [("gunicorn", "3")]),
        ("shell", "newrelic-admin run-program hypercorn -w 2 app.main:app", [("hypercorn", "2")]),
        ("shell", 'case "$MODE" in\n  prod) gunicorn -w 4 app.main:app ;;\nesac', [("gunicorn", "4")]),
        ("dockerfile", "ENV PORT=8000 WEB_CONCURRENCY=4 LOG=info\nCMD uvicorn app.main:app", [("uvicorn", "4")]),
        ("dockerfile", 'CMD ["bash", "-lc", "uvicorn app.main:app --workers 2"]', [("uvicorn", "2")]),
        ("dockerfile", 'ENTRYPOINT ["gunicorn"]\nCMD ["-w", "4", "app.main:app"]', [("gunicorn", "4")]),
        ("compose", "services:\n  api:\n    command: |\n      # migrate first\n      alembic upgrade head\n"
         "      uvicorn app.main:app --workers 4\n", [("uvicorn", "4")]),
        ("manifest", "kind: Deployment\nspec:\n  containers:\n  - args: [app.main:app, --workers, '2']\n"
         "    command: [uvicorn]\n    env:\n", [("uvicorn", "2")]),  # args before command
        ("manifest", "kind: Deployment\nspec:\n  containers:\n  - command: [gunicorn, app.main:app]\n    env:\n"
         "    - name: WEB_CONCURRENCY\n      value: \"4\"\n", [("gunicorn", "4")]),
        ("manifest", DEPLOYMENT, [("gunicorn", "4")]),
        ("manifest", DEPLOYMENT.replace("kind: Deployment", "kind: ConfigMap"), []),  # no workload
        ("manifest", "kind: Pod\nspec:\n  containers:\n  - name: a\n    command:\n    - /bin/sh\n    - -c\n"
         "    - |\n      alembic upgrade head\n      python -m uvicorn app.main:app --workers 2\n    - x\n",
         [("uvicorn", "2")]),  # a block scalar as a list item
        ("manifest", "kind: Job\nspec:\n  containers:\n  - args: [uvicorn, 'app.main:app',\n      --workers, '3']\n",
         [("uvicorn", "3")]),
        ("compose", "services:\n  api:\n    command:\n      - gunicorn\n      - -w\n      - '2'\n      - app.main:app\n",
         [("gunicorn", "2")]),
        ("compose", "services:\n  api:\n    command: >\n      uvicorn app.main:app\n      --workers 6\n",
         [("uvicorn", "6")]),
        ("compose", "services:\n  api:\n    command: |\n      alembic upgrade head\n      uvicorn app.main:app --workers 2\n",
         [("uvicorn", "2")]),
    ],
)
def test_launches(file_kind: str, text: str, expected: list[tuple[str, str]]) -> None:
    found = launches(text, file_kind)
    assert [(launch.server, launch.workers) for launch in found] == expected
    for launch in found:
        assert launch.module == "app.main"


def test_c013_takes_gunicorns_worker_count_from_its_configuration_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gunicorn app:app` reads gunicorn.conf.py from its working directory (or `-c FILE`): its `workers` decide."""
    monkeypatch.chdir(tmp_path)
    gpu = "import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n"
    write(tmp_path, {
        "a/main.py": gpu,
        "a/gunicorn.conf.py": "import multiprocessing\nworkers = multiprocessing.cpu_count()\n",
        "a/Dockerfile": "CMD gunicorn -k uvicorn.workers.UvicornWorker main:app\n",
        "b/main.py": gpu,
        "b/deploy/gunicorn_prod.conf.py": "workers = 4\n",
        "b/Procfile": "web: gunicorn --config=deploy/gunicorn_prod.conf.py main:app\n",
        "b/run.sh": "exec gunicorn -c /srv/gunicorn.conf.py main:app\n",  # a container path: its name here: none
        "c/main.py": gpu,
        "c/gunicorn.conf.py": "workers = 1\n",  # the file wins over WEB_CONCURRENCY
        "c/Dockerfile": "ENV WEB_CONCURRENCY=4\nCMD gunicorn main:app\n",
        "d/main.py": gpu,
        "d/Dockerfile": "ENV WEB_CONCURRENCY=3\nCMD gunicorn main:app\n",  # no configuration file: the variable
        "e/main.py": gpu,
        "e/Dockerfile": "CMD gunicorn main:app\n",  # neither: one worker
    })
    report = scan_paths([tmp_path], ScanOptions(select=("C013",)))
    found = sorted((v.path, v.evidence["workers"], v.evidence.get("workers_from")) for v in report.violations)
    assert found == [
        ("a/Dockerfile", "multiprocessing.cpu_count()", "a/gunicorn.conf.py"),
        ("b/Procfile", "4", "b/deploy/gunicorn_prod.conf.py"),
        ("d/Dockerfile", "3", "WEB_CONCURRENCY"),
    ]
    message = next(v.message for v in report.violations if v.path == "a/Dockerfile")
    assert message.startswith("gunicorn with workers = multiprocessing.cpu_count() from a/gunicorn.conf.py")
    assert all("config" not in v.evidence and "server" not in v.evidence for v in report.violations)


def test_c013_reads_kubernetes_manifests_beside_the_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {
        "app/__init__.py": "",
        "app/main.py": "import torch\nmodel = torch.nn.Linear(2, 2).to('cuda')\n",
        "deploy/k8s/api.yaml": DEPLOYMENT,
        "deploy/k8s/kustomization.yaml": "resources:\n  - api.yaml\n",  # YAML without a workload: not checked
        ".github/workflows/ci.yml": "jobs:\n  t:\n    steps:\n      - run: uvicorn app.main:app --workers 4 &\n",
    })
    report = scan_paths([tmp_path], ScanOptions(select=("C013",)))
    assert [(v.path, v.line, v.evidence["workers"], v.evidence["model_path"]) for v in report.violations] == [
        ("deploy/k8s/api.yaml", 11, "4", "app/main.py"),
    ]
    assert report.files_scanned == 3  # the two Python files and the manifest


def test_big_or_unselected_launcher_files_are_skipped_quietly(tmp_path: Path) -> None:
    """A launcher-named file too large to be one, or any of them when C013 is not selected, is neither a problem nor
    counted; many blank lines do not slow the reader down (its patterns are linear)."""
    write(tmp_path, {"main.py": "import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n",
                     "run.sh": "\n" * 200_000 + "uvicorn main:app --workers 2\n",
                     "values.yaml": "kind: Deployment\n" + "\n" * 200_000})
    (tmp_path / "openapi.yaml").write_bytes(b"x: " + b"y" * 2_000)
    small = ScanOptions(select=("C013",), max_file_bytes=1_000)
    report = scan_paths([tmp_path], small)
    assert report.problems == () and report.files_scanned == 1  # main.py; the big launchers are skipped, not problems
    report = scan_paths([tmp_path], ScanOptions(select=("C013",)))
    assert [v.path.rsplit("/", 1)[-1] for v in report.violations] == ["run.sh"] and report.violations[0].line == 200_001
    assert scan_paths([tmp_path], ScanOptions(select=("C001",))).files_scanned == 1  # main.py only


def test_odd_launcher_files_are_problems_not_crashes(tmp_path: Path) -> None:
    write(tmp_path, {
        "Dockerfile": "CMD " + "[" * 50_000 + "\n",
        "run.sh": "uvicorn main:app --workers \u00b2\n\x00\xff",
        "Procfile": "web: gunicorn -w 'unbalanced main:app\n",
        "main.py": "import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n",
    })
    (tmp_path / "compose.yaml").write_bytes(b"command: uvicorn main:app --workers 4 \xff\xfe\n")
    report = scan_paths([tmp_path], ScanOptions(select=("C013",)))
    # read as far as it goes (unbalanced quotes: split on whitespace; a count that is no number: as written)
    assert sorted(v.path.rsplit("/", 1)[-1] for v in report.violations) == ["Procfile", "compose.yaml", "run.sh"]
    assert report.problems == () and report.files_scanned == 5


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def test_c013_follows_launchers_to_the_gpu_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {
        "svc/app/__init__.py": "",
        "svc/app/main.py": "import torch\nfrom fastapi import FastAPI\n\napp = FastAPI()\n"
        "model = torch.nn.Linear(4, 2).to('cuda')\n",
        "svc/app/cpu.py": "import torch\nmodel = torch.nn.Linear(4, 2)\n",
        "svc/Dockerfile": "FROM python:3.11-slim\nWORKDIR /srv\nCOPY . .\n"
        'CMD ["gunicorn", "-k", "uvicorn.workers.UvicornWorker", "-w", "4", "app.main:app"]\n',
        "svc/Procfile": "web: uvicorn app.cpu:app --workers 4\n",  # CPU model: fine
        "svc/scripts/serve.sh": "#!/bin/sh\n# noqa: C013 - one GPU per worker via CUDA_VISIBLE_DEVICES\n"
        "exec uvicorn app.main:app --workers 2\n",
        "svc/docker-compose.yml": "services:\n  api:\n    build: .\n    command: uvicorn app.main:app --workers ${WORKERS}\n",
        "other/Dockerfile": "CMD uvicorn app.main:app --workers 4\n",  # app/main.py is not under other/: not found
    })
    report = scan_paths([tmp_path / "svc", tmp_path / "other"], ScanOptions(select=("C013",)))
    found = sorted((v.path, v.line, v.column, v.evidence["workers"], v.evidence["launcher"]) for v in report.violations)
    assert found == [
        ("svc/Dockerfile", 4, 7, "4", "dockerfile"),
        ("svc/docker-compose.yml", 4, 14, "${WORKERS}", "compose"),
    ]
    assert all(v.evidence["model_path"] == "svc/app/main.py" and v.evidence["gpu_model_line"] == 5
               for v in report.violations)
    assert report.suppressed == 1 and report.problems == ()
    assert report.files_scanned == 8  # 3 Python files, 5 launchers
    # the CLI shows and stores them like any finding (SARIF locations name the launcher file)
    result = cli("scan", "svc", "--select", "C013", "--format", "sarif")
    sarif = json.loads(result.stdout)
    uris = sorted(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in sarif["runs"][0]["results"])
    assert uris == ["svc/Dockerfile", "svc/docker-compose.yml"]

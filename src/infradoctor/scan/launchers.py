"""Server command lines outside Python (for C013): Dockerfiles, Procfiles, shell scripts, Compose, Kubernetes.

A deployment usually sets its worker count where it starts the server, not in Python:
``CMD ["gunicorn", "-w", "4", "-k", "uvicorn.workers.UvicornWorker", "app.main:app"]``,
``web: uvicorn app.main:app --workers 4``, ``exec python -m uvicorn app.main:app --workers "$WORKERS"``. This module
finds such commands (uvicorn, gunicorn and hypercorn, run directly or as ``python -m``) and reads their worker
count and app import string. It reads commands, not shells: variables stay as written (``$WORKERS``), and a
worker count set only through ``WEB_CONCURRENCY`` (uvicorn, gunicorn) counts when the same file assigns it a
number (in a Compose file, whichever service sets it). Not read: Compose's ``entrypoint`` joined to its
``command``, YAML anchors and aliases, Helm templates' values, commands inside shell functions called elsewhere.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

SERVERS = frozenset({"uvicorn", "gunicorn", "hypercorn"})

_DOCKERFILE = re.compile(r"^(?:dockerfile|containerfile)(?:[._-][\w.-]*)?$|\.(?:dockerfile|containerfile)$", re.I)
_COMPOSE = re.compile(r"^(?:docker-)?compose(?:[._-][\w.-]*)?\.ya?ml$", re.I)
_APP = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*(?:\(.*\))?$")
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", ";;"})
_WEB_CONCURRENCY = re.compile(
    r"""^\s*(?:-\s*)?(?:export\s+|ENV\s+)?["']?WEB_CONCURRENCY["']?(?:\s*[=:]\s*|\s+)["']?([0-9]+)["']?\s*(?:#.*)?$""",
    re.M | re.I,
)
"""An assignment of a number (shell, Dockerfile ``ENV``, Compose ``environment``); a default taken from another
variable (``${WEB_CONCURRENCY:-1}``) is not a worker count this file sets."""
_ENV_SERVERS = frozenset({"uvicorn", "gunicorn"})
"""The servers that take their worker count from ``WEB_CONCURRENCY``."""
_DOCKER_INSTRUCTION = re.compile(r"^\s*(CMD|ENTRYPOINT|RUN)\s+(.*)$", re.I | re.S)
_YAML_KEY = re.compile(r"^\s*(?:-\s+)?(command|entrypoint|args)\s*:(?:\s+(.*?))?\s*$")
_MANIFEST_KIND = re.compile(
    r"^\s*kind:\s*[\"']?(?:Deployment|StatefulSet|DaemonSet|Pod|Job|CronJob|ReplicaSet|Rollout|PodTemplate)\b", re.M
)
_BLOCK_SCALAR = re.compile(r"^[|>][-+0-9]*$")
_PROCFILE_ENTRY = re.compile(r"^\s*[\w-]+\s*:\s*(.*)$")


@dataclass(frozen=True)
class Launch:
    """One server started with several workers."""

    line: int
    """1-based line where the command starts."""
    column: int
    """0-based character column of the server's name on that line."""
    end_column: int
    """0-based end column of the server's name."""
    server: str
    """``uvicorn``, ``gunicorn`` or ``hypercorn``."""
    workers: str
    """The worker count as written (a number above 1, or a variable)."""
    app: str
    """The app's import string, ``pkg.main:app``."""
    config: str | None = None
    """gunicorn without a worker count on its command line: the configuration file it reads (``-c FILE``, else
    ``gunicorn.conf.py`` in its working directory), whose ``workers`` decides when the scan reads that file;
    ``workers`` then holds ``WEB_CONCURRENCY`` from the same file when above 1, else is empty."""

    @property
    def module(self) -> str:
        """``pkg.main``."""
        return self.app.split(":", 1)[0]


def kind(name: str) -> str | None:
    """``dockerfile``, ``procfile``, ``shell``, ``compose`` or ``manifest`` for a launcher file's name, else None.

    ``manifest`` is any other YAML file: a Kubernetes manifest if :func:`is_manifest` says so.
    """
    if _DOCKERFILE.search(name):
        return "dockerfile"
    if name == "Procfile" or name.startswith("Procfile."):
        return "procfile"
    if name.endswith(".sh"):
        return "shell"
    if _COMPOSE.match(name):
        return "compose"
    if name.endswith((".yaml", ".yml")):
        return "manifest"
    return None


def is_manifest(text: str) -> bool:
    """The YAML text holds a Kubernetes workload (Deployment, StatefulSet, Pod, Job, ...)."""
    return _MANIFEST_KIND.search(text) is not None


def launches(text: str, file_kind: str) -> list[Launch]:
    """The multi-worker server commands in a launcher file's text (``file_kind`` from :func:`kind`)."""
    if file_kind == "manifest" and not is_manifest(text):
        return []
    env_workers = None
    for match in _WEB_CONCURRENCY.finditer(text):
        env_workers = match.group(1)  # the last assignment wins
    found: list[Launch] = []
    for line_no, first_line, command in _commands(text, file_kind):
        for words in _split(command):
            launch = _read(words, env_workers)
            if launch is None:
                continue
            server, workers, app, config = launch
            column = max(0, first_line.find(server))
            found.append(Launch(line_no, column, column + len(server), server, workers, app, config))
    return found


def _logical_lines(text: str, continued: bool) -> list[tuple[int, str, str]]:
    """(first line number, first line, whole text) of each line, joining backslash continuations when asked."""
    out: list[tuple[int, str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start, first, parts = i + 1, lines[i], [lines[i]]
        while continued and parts[-1].rstrip().endswith("\\") and i + 1 < len(lines):
            parts[-1] = parts[-1].rstrip()[:-1]
            i += 1
            if not lines[i].lstrip().startswith("#"):  # comment lines inside a continued instruction are dropped
                parts.append(lines[i])
        out.append((start, first, " ".join(parts)))
        i += 1
    return out


def _commands(text: str, file_kind: str) -> list[tuple[int, str, str | list[str]]]:
    """(line, first line, command) for each command the file runs: a shell string or an exec-form word list."""
    if file_kind in ("compose", "manifest"):
        return _yaml_commands(text, file_kind == "manifest")
    out: list[tuple[int, str, str | list[str]]] = []
    for line_no, first, whole in _logical_lines(text, file_kind in ("dockerfile", "shell")):
        stripped = whole.strip()
        if not stripped or stripped.startswith("#"):
            continue
        command: str | list[str] | None = None
        if file_kind == "dockerfile":
            match = _DOCKER_INSTRUCTION.match(whole)
            if match:
                command = _exec_form(match.group(2)) or match.group(2)
        elif file_kind == "procfile":
            match = _PROCFILE_ENTRY.match(whole)
            command = match.group(1) if match else None
        else:
            command = whole
        if command:
            out.append((line_no, first, command))
    return out


def _yaml_commands(text: str, manifest: bool) -> list[tuple[int, str, str | list[str]]]:
    """``command:``/``entrypoint:``/``args:`` values of a Compose file or Kubernetes manifest.

    Read without a YAML library: plain and quoted scalars, flow lists (over several lines too), block lists and
    block scalars (``|`` keeps lines as separate commands, ``>`` folds them). In a manifest a container's ``args``
    follow its ``command``; ``args`` alone (the image's entrypoint) count when they start with the server.
    """
    lines = text.splitlines()
    entries: list[tuple[str, int, int, str, str | list[str]]] = []  # key, column, line, first line, value
    i = 0
    while i < len(lines) and len(entries) < 10_000:
        line = lines[i]
        match = _YAML_KEY.match(line)
        if match is None or line.lstrip().startswith("#"):
            i += 1
            continue
        key, column = match.group(1), line.index(match.group(1))
        start = i + 1
        value, i = _yaml_value(lines, i, column, match.group(2) or "")
        entries.append((key, column, start, line, value))
    out: list[tuple[int, str, str | list[str]]] = []
    k = 0
    while k < len(entries):
        key, column, line_no, first, value = entries[k]
        if manifest and key == "command" and k + 1 < len(entries) and entries[k + 1][:2] == ("args", column):
            value = _words(value) + _words(entries[k + 1][4])
            k += 1
        out.append((line_no, first, value))
        k += 1
    return out


def _words(value: str | list[str]) -> list[str]:
    return value if isinstance(value, list) else [value]


def _yaml_value(lines: list[str], i: int, column: int, inline: str) -> tuple[str | list[str], int]:
    """The value of the key on line ``i`` (at ``column``) and the index of the line after it."""
    inline = inline.strip()
    if inline.startswith("["):
        text, j = inline, i
        while text.count("[") > text.count("]") and j + 1 < len(lines) and j - i < 200:
            j += 1
            text += " " + lines[j].strip()
        return _flow_list(text[: text.rfind("]") + 1] if "]" in text else text), j + 1
    if inline and not _BLOCK_SCALAR.match(inline):
        return _scalar(inline), i + 1
    j = i + 1
    if inline:  # block scalar: the lines indented past the key
        body: list[str] = []
        while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > column):
            if lines[j].strip():
                body.append(lines[j].strip())
            j += 1
        return (" ; " if inline.startswith("|") else " ").join(body), j
    items: list[str] = []  # block list: "- item" lines at the key's column or deeper
    while j < len(lines):
        stripped = lines[j].strip()
        if not stripped or stripped.startswith("#"):
            j += 1
            continue
        if _indent(lines[j]) < column or not (stripped.startswith("- ") or stripped == "-"):
            break
        item = stripped[1:].strip()
        if _BLOCK_SCALAR.match(item):  # "- |": the item is the block indented past its dash
            dash = _indent(lines[j])
            block: list[str] = []
            j += 1
            while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > dash):
                if lines[j].strip():
                    block.append(lines[j].strip())
                j += 1
            items.append((" ; " if item.startswith("|") else " ").join(block))
            continue
        items.append(_scalar(item))
        j += 1
    return items, j


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _scalar(value: str) -> str:
    """A YAML scalar's text: quotes removed, a trailing comment dropped from a plain one."""
    if len(value) >= 2 and value[0] in "'\"" and value.rfind(value[0]) > 0:
        return value[1 : value.rfind(value[0])]
    return re.split(r"\s+#", value, maxsplit=1)[0].strip()


def _flow_list(text: str) -> list[str]:
    """``["a", "b"]`` or ``[a, b]``."""
    words = _exec_form(text)
    if words is not None:
        return words
    inner = text.strip()[1:-1] if text.strip().endswith("]") else text.strip()[1:]
    return [_scalar(part.strip()) for part in inner.split(",") if part.strip()]


def _exec_form(value: str) -> list[str] | None:
    """``["uvicorn", "main:app"]`` as a word list (Dockerfile exec form, Compose flow list), else None."""
    value = value.strip()
    if not value.startswith("["):
        return None
    try:
        words = json.loads(value)
    except (ValueError, RecursionError):
        return None
    if isinstance(words, list) and all(isinstance(w, str) for w in words):
        return words
    return None


def _split(command: str | list[str]) -> list[list[str]]:
    """The simple commands in a shell string (split at ``&&``, ``;``, ``|``, ...), or the exec form's one command.

    ``sh -c "..."`` is opened up.
    """
    if isinstance(command, list):
        words = command
        if len(words) >= 3 and words[0].rsplit("/", 1)[-1] in ("sh", "bash", "dash") and words[1] == "-c":
            return _split(words[2])
        return [words]
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: read what splits on whitespace
        tokens = command.split()
    out: list[list[str]] = [[]]
    for token in tokens:
        if token in _SEPARATORS:
            out.append([])
        else:
            out[-1].append(token)
    expanded: list[list[str]] = []
    for words in out:
        if len(words) >= 3 and words[0].rsplit("/", 1)[-1] in ("sh", "bash", "dash") and words[1] == "-c":
            expanded.extend(_split(words[2]))
        elif words:
            expanded.append(words)
    return expanded


_VALUE_OPTIONS = frozenset(
    {"-b", "--bind", "--uds", "--host", "-e", "--env", "--env-file", "-c", "--config", "--chdir", "--app-dir",
     "-k", "--worker-class", "--log-config", "--root-path", "--certfile", "--keyfile", "--pid", "-p",
     "--statsd-host", "--statsd-prefix", "--forwarded-allow-ips", "--proxy-allow-from", "--error-logfile",
     "--log-file", "--access-logfile", "--ssl-keyfile", "--ssl-certfile", "--ca-certs", "--user", "--group"}
)
"""Options whose value follows as the next word and may look like an import string (``--bind unix:app.sock``)."""
_WRAPPERS = frozenset({"exec", "env", "nohup", "time", "tini", "dumb-init", "--", "ddtrace-run",
                       "opentelemetry-instrument", "run", "poetry", "pipenv", "pdm", "uv", "hatch", "then", "do",
                       "else", "{", "("})
_NUMBER = re.compile(r"[0-9]+")


def _server(words: list[str]) -> tuple[str, int] | None:
    """The server a command runs and the index of its first argument: ``uvicorn ...``, ``python -u -m gunicorn``."""
    i = 0
    while i < len(words) and (words[i] in _WRAPPERS or ("=" in words[i] and not words[i].startswith("-"))):
        i += 1  # exec, env VAR=value, poetry run, ... before the command
    if i >= len(words):
        return None
    head = words[i].rsplit("/", 1)[-1]
    if re.fullmatch(r"python[0-9.]*", head):
        i += 1
        while i < len(words) and words[i].startswith("-") and words[i] != "-m":
            i += 2 if words[i] in ("-X", "-W") else 1  # interpreter options before -m
        if i + 1 >= len(words) or words[i] != "-m":
            return None  # a script, not a module
        head = words[i + 1]
        i += 1
    return (head, i + 1) if head in SERVERS else None


def _read(words: list[str], env_workers: str | None) -> tuple[str, str, str, str | None] | None:
    """(server, workers, app, config) when ``words`` start a server and name its app.

    The server runs more than one worker, or is gunicorn leaving its worker count to a configuration file.
    """
    found = _server(words)
    if found is None:
        return None
    head, start = found
    workers: str | None = None
    config: str | None = None
    apps: list[str] = []
    rest = words[start:]
    j = 0
    while j < len(rest):
        word = rest[j]
        if head == "gunicorn" and word in ("-c", "--config") and j + 1 < len(rest):
            config = rest[j + 1]
            j += 1
        elif head == "gunicorn" and word.startswith("--config="):
            config = word.split("=", 1)[1]
        elif (word == "--workers" or (word == "-w" and head != "uvicorn")) and j + 1 < len(rest):
            workers = rest[j + 1]
            j += 1
        elif word.startswith("--workers="):
            workers = word.split("=", 1)[1]
        elif head != "uvicorn" and word.startswith("-w") and len(word) > 2:
            workers = word[2:]
        elif word in _VALUE_OPTIONS:
            j += 1  # its value is not the app
        elif _APP.match(word):
            apps.append(word)
        j += 1
    if not apps:
        return None
    # gunicorn takes the app as its last argument; uvicorn and hypercorn as their first
    app = apps[-1] if head == "gunicorn" else apps[0]
    if workers is None and head == "gunicorn":
        # its configuration file (gunicorn.conf.py in the working directory by default) overrides WEB_CONCURRENCY
        config = config or "gunicorn.conf.py"
        if not config.startswith("python:"):  # (a module given as python:pkg.conf is not followed)
            env = env_workers if env_workers is not None and int(env_workers) > 1 else ""
            return head, env, app, config
    if workers is None and head in _ENV_SERVERS:
        workers = env_workers
    if workers is None:
        return None
    if _NUMBER.fullmatch(workers) and int(workers) <= 1:
        return None
    return head, workers, app, None

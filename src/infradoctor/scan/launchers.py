"""Server command lines outside Python (for C013): Dockerfiles, Procfiles, shell scripts, Compose, Kubernetes.

A deployment usually sets its worker count where it starts the server, not in Python:
``CMD ["gunicorn", "-w", "4", "-k", "uvicorn.workers.UvicornWorker", "app.main:app"]``,
``web: uvicorn app.main:app --workers 4``, ``exec python -m uvicorn app.main:app --workers "$WORKERS"``. This module
finds such commands (uvicorn, gunicorn and hypercorn, run directly or as ``python -m``) and reads their worker
count and app import string. It reads commands, not shells: variables stay as written (``$WORKERS``), and a
worker count set only through ``WEB_CONCURRENCY`` (uvicorn, gunicorn) counts when the same file assigns it a
number (in a Compose file, whichever service sets it). A variable with a default of one (``${WORKERS:-1}``) is one
worker. Not read: Compose's ``entrypoint`` joined to its ``command``, YAML anchors and aliases, Helm templates'
values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

SERVERS = frozenset({"uvicorn", "gunicorn", "hypercorn"})

_DOCKERFILE = re.compile(r"^(?:dockerfile|containerfile)(?:[._-][\w.-]*)?$|\.(?:dockerfile|containerfile)$", re.I)
_COMPOSE = re.compile(r"^(?:docker-)?compose(?:[._-][\w.-]*)?\.ya?ml$", re.I)
_APP = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*(?:\(.*\))?$")
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", ";;"})
_ENV_ASSIGN = re.compile(r"""(?:^|[ \t;])WEB_CONCURRENCY=["']?([0-9]+)["']?(?=[ \t;]|$)""")
"""``WEB_CONCURRENCY=4`` anywhere on a line (``export``, ``ENV A=1 WEB_CONCURRENCY=4``, a command's prefix, a Compose
list item); a default taken from another variable (``${WEB_CONCURRENCY:-1}``) is not a count this file sets."""
_ENV_LEGACY = re.compile(r"""^[ \t]*ENV[ \t]+WEB_CONCURRENCY[ \t]+["']?([0-9]+)["']?[ \t]*$""", re.I)
_ENV_MAPPING = re.compile(r"""^[ \t]*["']?WEB_CONCURRENCY["']?[ \t]*:[ \t]*["']?([0-9]+)["']?[ \t]*$""")
_ENV_NAME = re.compile(r"""^[ \t]*-?[ \t]*name:[ \t]*["']?WEB_CONCURRENCY["']?[ \t]*$""")
_ENV_VALUE = re.compile(r"""^[ \t]*value:[ \t]*["']?([0-9]+)["']?[ \t]*$""")
_ENV_SERVERS = frozenset({"uvicorn", "gunicorn"})
"""The servers that take their worker count from ``WEB_CONCURRENCY``."""
_DOCKER_INSTRUCTION = re.compile(r"^\s*(CMD|ENTRYPOINT|RUN)\s+(.*)$", re.I | re.S)
_YAML_KEY = re.compile(r"^\s*(?:-\s+)?(command|entrypoint|args)\s*:(?:\s+(.*?))?\s*$")
_MANIFEST_KIND = re.compile(
    r"^[ \t]*kind:[ \t]*[\"']?(?:Deployment|StatefulSet|DaemonSet|Pod|Job|CronJob|ReplicaSet|Rollout|PodTemplate)\b",
    re.M,
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
    from_env: bool = False
    """The worker count is ``WEB_CONCURRENCY``'s (set in the same file), not an option of the command."""
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
    env_workers = _web_concurrency(text)
    found: list[Launch] = []
    read = 0
    for line_no, first_line, command in _commands(text, file_kind):
        for words in _split(command):
            read += 1
            if read > MAX_SERVER_COMMANDS:
                return found  # a file that starts this many servers is data, not a launcher
            launch = _read(words, env_workers)
            if launch is None:
                continue
            server, workers, app, from_env, config = launch
            column = max(0, first_line.find(server))
            found.append(Launch(line_no, column, column + len(server), server, workers, app, from_env, config))
    return found


def lines_of(text: str) -> list[str]:
    """The text's lines, split at newlines only (form feeds and Unicode separators stay inside a line)."""
    return text.replace("\r\n", "\n").split("\n")


def _web_concurrency(text: str) -> str | None:
    """The last number the file assigns to ``WEB_CONCURRENCY`` (comments skipped), else None."""
    value = None
    lines = lines_of(text)
    for index, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or "WEB_CONCURRENCY" not in line:
            continue
        line = re.split(r"[ \t]#", line, maxsplit=1)[0]
        match = _ENV_ASSIGN.search(line) or _ENV_LEGACY.match(line) or _ENV_MAPPING.match(line)
        if match is None and _ENV_NAME.match(line):  # Kubernetes: - name: WEB_CONCURRENCY / value: "4"
            match = next((m for m in map(_ENV_VALUE.match, lines[index + 1 : index + 4]) if m), None)
        if match is not None:
            value = match.group(1)
    return value


_HEREDOC = re.compile(r"""<<-?[ \t]*(["']?)([A-Za-z_][\w]*)\1""")
MAX_JOINED_LINES = 200
"""A command continued (backslashes, an open quote) over more lines than this is cut there."""
MAX_SERVER_COMMANDS = 200
"""Commands naming a server read per file; a launcher starts a handful, so the rest of such a file is not read."""


def _logical_lines(text: str, shell: bool) -> list[tuple[int, str, str]]:
    """(first line number, first line, whole text) of each line.

    For shell text (``shell``), backslash continuations and quotes left open are joined over lines, and
    here-document bodies are skipped. Each line's quotes are scanned once, whatever the number of lines joined.
    """
    out: list[tuple[int, str, str]] = []
    lines = lines_of(text)
    i = 0
    while i < len(lines):
        start, first, parts = i + 1, lines[i], [lines[i]]
        before_last = ("", "\n")  # quote state after every part but the last, joined by newlines
        while shell and i + 1 < len(lines) and len(parts) < MAX_JOINED_LINES:
            if parts[-1].rstrip().endswith("\\"):
                parts[-1] = parts[-1].rstrip()[:-1]
                i += 1
                if not lines[i].lstrip().startswith("#"):  # comment lines inside a continued instruction
                    before_last = _scan_quotes(parts[-1] + "\n", before_last)
                    parts.append(lines[i])
            elif _scan_quotes(parts[-1], before_last)[0] in ("'", '"'):  # a string over several lines: one word
                i += 1
                before_last = _scan_quotes(parts[-1] + "\n", before_last)
                parts.append(lines[i])
            else:
                break
        whole = " ".join(parts)
        out.append((start, first, whole))
        i += 1
        heredoc = _HEREDOC.search(whole) if shell and "<<" in whole else None
        if heredoc is not None:  # its body is data, not commands
            while i < len(lines) and lines[i].strip() != heredoc.group(2):
                i += 1
            i += 1
    return out


def _open_quote(text: str) -> bool:
    """A quote opened in shell text is not closed by its end (escapes and comments followed)."""
    return _scan_quotes(text, ("", "\n"))[0] in ("'", '"')


_PLAIN_SPECIAL = re.compile(r"""[\\'"#\n]""")
_DOUBLE_SPECIAL = re.compile(r"""[\\"]""")


def _scan_quotes(text: str, start: tuple[str, str]) -> tuple[str, str]:
    """The quote state after ``text``, from ``start``: (``""``, ``"'"``, ``'"'`` or ``"#"``, the last character).

    Jumps from one quote, escape, comment sign or newline to the next (regex and ``str.find``), so long lines of
    plain text cost next to nothing.
    """
    state, previous = start
    pos, end = 0, len(text)
    while pos < end:
        if state == "#":
            j = text.find("\n", pos)
            if j < 0:
                return state, text[-1]
            state, previous, pos = "", "\n", j + 1
        elif state == "'":
            j = text.find("'", pos)
            if j < 0:
                return state, text[-1]
            state, previous, pos = "", "'", j + 1
        elif state == '"':
            match = _DOUBLE_SPECIAL.search(text, pos)
            if match is None:
                return state, text[-1]
            if match.group() == "\\":
                previous, pos = "\\", match.start() + 2  # the next character is escaped
            else:
                state, previous, pos = "", '"', match.end()
        else:
            match = _PLAIN_SPECIAL.search(text, pos)
            if match is None:
                return state, text[-1]
            char, k = match.group(), match.start()
            before = text[k - 1] if k > pos else previous
            if char == "\\":
                previous, pos = "\\", k + 2
                continue
            if char in "'\"":
                state = char
            elif char == "#" and before in " \t\n;":
                state = "#"
            previous, pos = char, k + 1
    return state, previous if pos > end or not text else (text[-1] if pos == end else previous)


def _commands(text: str, file_kind: str) -> list[tuple[int, str, str | list[str]]]:
    """(line, first line, command) for each command the file runs: a shell string or an exec-form word list."""
    if file_kind in ("compose", "manifest"):
        return _yaml_commands(text, file_kind == "manifest")
    out: list[tuple[int, str, str | list[str]]] = []
    entrypoint: list[str] = []
    for line_no, first, whole in _logical_lines(text, file_kind in ("dockerfile", "shell")):
        stripped = whole.strip()
        if not stripped or stripped.startswith("#"):
            continue
        command: str | list[str] | None = None
        if file_kind == "dockerfile":
            match = _DOCKER_INSTRUCTION.match(whole)
            if match:
                words = _exec_form(match.group(2))
                command = words or match.group(2)
                instruction = match.group(1).upper()
                if instruction == "ENTRYPOINT":
                    entrypoint = words or []
                elif instruction == "CMD" and words is not None and entrypoint:
                    command = entrypoint + words  # exec-form CMD: the ENTRYPOINT's arguments
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
    lines = lines_of(text)
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
        pair = {"command", "args"}
        if manifest and key in pair and k + 1 < len(entries) and entries[k + 1][:2] == ((pair - {key}).pop(), column):
            # one container's command and args, in either order
            command_value, args_value = (value, entries[k + 1][4]) if key == "command" else (entries[k + 1][4], value)
            value = _words(command_value) + _words(args_value)
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
        return _block_scalar(lines, j, column, inline)
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
            block, j = _block_scalar(lines, j + 1, _indent(lines[j]), item)
            items.append(block)
            continue
        items.append(_scalar(item))
        j += 1
    return items, j


def _block_scalar(lines: list[str], j: int, column: int, indicator: str) -> tuple[str, int]:
    """The block scalar whose lines start at ``j`` and are indented past ``column``, and the index after it.

    Comment lines are dropped; ``|`` keeps the lines as separate commands, ``>`` folds them into one.
    """
    body: list[str] = []
    while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > column):
        stripped = lines[j].strip()
        if stripped and not stripped.startswith("#"):
            body.append(stripped)
        j += 1
    return (" ; " if indicator.startswith("|") else " ").join(body), j


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


def _split(command: str | list[str]) -> Iterator[list[str]]:
    """The simple commands in a shell string (split at ``&&``, ``;``, ``|``, ...), or the exec form's one command.

    ``sh -c "..."`` is opened up. Lazily: a reader that has seen enough commands stops the tokenising there.
    """
    if isinstance(command, list):
        words = command
        if _shell_c(words):
            yield from _split(words[2])
        elif words:
            yield words
        return
    if not any(server in command for server in SERVERS):
        return  # no server is started here: nothing to split
    words = []
    for token in shell_words(command):
        if token in _SEPARATORS:
            if _shell_c(words):
                yield from _split(words[2])
            elif words:
                yield words
            words = []
        else:
            words.append(token)
    if _shell_c(words):
        yield from _split(words[2])
    elif words:
        yield words


_SHELL_TOKEN = re.compile(
    r"""(?P<space>[ \t\r\n\f\v]+)"""
    r"""|(?P<punct>&&|\|\||;;|[;&|])"""
    r"""|(?P<word>(?:[^ \t\r\n\f\v'"\\;&|]|'[^']*'|"(?:[^"\\]|\\.)*"|\\.)+)""",
    re.S,
)
"""One shell token. A word is built one character or one whole quoted string at a time: no two ways to match the
same text, so a scan never backtracks (linear in the command's length, unlike ``shlex``, which grows each token by
one character at a time)."""
_WORD_PART = re.compile(r"""'([^']*)'|"((?:[^"\\]|\\.)*)"|\\(.)|([^'"\\]+)""", re.S)
_DOUBLE_QUOTE_ESCAPE = re.compile(r"""\\([$`"\\\n])""")


def shell_words(command: str) -> Iterator[str]:
    """The words and separators (``;``, ``&&``, ``||``, ``|``, ``&``, ``;;``) of a shell command, POSIX quoting.

    A ``#`` that starts a word starts a comment to the end of the line. With a quote left open, the rest of the
    command is split on whitespace (a shell would refuse it; the reader takes what it can).
    """
    pos, end = 0, len(command)
    while pos < end:
        match = _SHELL_TOKEN.match(command, pos)
        if match is None:  # an unbalanced quote
            yield from command[pos:].split()
            return
        pos = match.end()
        if match.lastgroup == "space":
            continue
        text = match.group()
        if match.lastgroup == "word" and text.startswith("#"):
            newline = command.find("\n", match.start())
            pos = end if newline < 0 else newline
            continue
        word = text if match.lastgroup == "punct" else _unquote(text)
        if word or "'" in text or '"' in text:  # a backslash-newline alone joins lines; it is no word
            yield word


def _unquote(word: str) -> str:
    out = []
    for single, double, escaped, plain in _WORD_PART.findall(word):
        if plain:
            out.append(plain)
        elif escaped:
            out.append(escaped if escaped != "\n" else "")
        elif double:
            out.append(_DOUBLE_QUOTE_ESCAPE.sub(lambda m: m.group(1) if m.group(1) != "\n" else "", double))
        else:
            out.append(single)
    return "".join(out)


def _shell_c(words: list[str]) -> bool:
    """``sh -c "..."``, ``bash -lc "..."``, ``/bin/sh -ec "..."``."""
    return (
        len(words) >= 3
        and words[0].rsplit("/", 1)[-1] in ("sh", "bash", "dash", "ash", "zsh")
        and _SHELL_C_OPTION.fullmatch(words[1]) is not None
    )


_VALUE_OPTIONS = frozenset(
    {"-b", "--bind", "--uds", "--host", "-e", "--env", "--env-file", "-c", "--config", "--chdir", "--app-dir",
     "-k", "--worker-class", "--log-config", "--root-path", "--certfile", "--keyfile", "--pid", "-p",
     "--statsd-host", "--statsd-prefix", "--forwarded-allow-ips", "--proxy-allow-from", "--error-logfile",
     "--log-file", "--access-logfile", "--ssl-keyfile", "--ssl-certfile", "--ca-certs", "--user", "--group",
     "-n", "--name", "--dogstatsd-tags", "--logger-class", "--paste", "--paste-global", "--factory"}
)
"""Options whose value follows as the next word and may look like an import string (``--bind unix:app.sock``)."""
_WRAPPERS = frozenset({"exec", "env", "nohup", "time", "tini", "dumb-init", "--", "ddtrace-run",
                       "opentelemetry-instrument", "run", "poetry", "pipenv", "pdm", "uv", "hatch", "then", "do",
                       "else", "{", "(", "run-program", "newrelic-admin", "sudo", "nice", "ionice", "stdbuf"})
_USER_WRAPPERS = frozenset({"gosu", "su-exec", "chpst", "setpriv"})
"""Wrappers whose next word is a user (``gosu app gunicorn ...``)."""
_CASE_ARM = re.compile(r"[\w|*.-]+\)")
_SHELL_C_OPTION = re.compile(r"-[a-z]*c[a-z]*")
_PYTHON = re.compile(r"python[0-9.]*")
_DEFAULT_VALUE = re.compile(r"\$\{\w+:?[-=]([0-9]+)\}")
_NUMBER = re.compile(r"[0-9]+")


def _server(words: list[str]) -> tuple[str, int] | None:
    """The server a command runs and the index of its first argument: ``uvicorn ...``, ``python -u -m gunicorn``."""
    i = 0
    after_wrapper = False
    while i < len(words):
        word = words[i]
        base = word.rsplit("/", 1)[-1]
        if base in _WRAPPERS or (i == 0 and _CASE_ARM.fullmatch(word)):
            after_wrapper = True
        elif base in _USER_WRAPPERS:
            i += 1  # and its user
            after_wrapper = True
        elif ("=" in word and not word.startswith("-")) or (after_wrapper and word.startswith("-")):
            pass  # VAR=value, a wrapper's options (uv run --frozen, env -i)
        else:
            break
        i += 1
    if i >= len(words):
        return None
    head = words[i].rsplit("/", 1)[-1]
    if _PYTHON.fullmatch(head):
        i += 1
        while i < len(words) and words[i].startswith("-") and words[i] != "-m":
            i += 2 if words[i] in ("-X", "-W") else 1  # interpreter options before -m
        if i + 1 >= len(words) or words[i] != "-m":
            return None  # a script, not a module
        head = words[i + 1]
        i += 1
    return (head, i + 1) if head in SERVERS else None


def _read(words: list[str], env_workers: str | None) -> tuple[str, str, str, bool, str | None] | None:
    """(server, workers, app, from_env, config) when ``words`` start a server and name its app.

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
    app = apps[0]  # each of them takes the app as its first argument
    env = env_workers if env_workers is not None and not _at_most_one(env_workers) else None
    if workers is None and head == "gunicorn":
        # its configuration file (gunicorn.conf.py in the working directory by default) overrides WEB_CONCURRENCY
        config = (config or "gunicorn.conf.py").removeprefix("file:")
        if not config.startswith("python:"):  # (a module given as python:pkg.conf is not followed)
            return head, env or "", app, env is not None, config
    if workers is None and head in _ENV_SERVERS and env is not None:
        return head, env, app, True, None
    if workers is None or _at_most_one(workers):
        return None
    return head, workers, app, False, None


def _at_most_one(workers: str) -> bool:
    """``1``, ``0``, ``01``, or a variable whose default is one of those (``${WORKERS:-1}``)."""
    default = _DEFAULT_VALUE.fullmatch(workers)
    digits = default.group(1) if default else workers
    return _NUMBER.fullmatch(digits) is not None and digits.lstrip("0") in ("", "1")

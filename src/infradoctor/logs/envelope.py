"""Envelopes: the prefixes and wrappers that collectors put around log lines, detected and stripped per line.

Real lines rarely arrive bare. ``kubectl logs --prefix`` and stern name the pod and container, ``docker compose logs``
the service, syslog (RFC 3164 with or without ``<PRI>``, RFC 5424, rsyslog's RFC 3339 headers) and journald the host
and program, the container runtime (CRI/containerd ``<time> stdout F``, docker's json-file
``{"log": ..., "stream": ..., "time": ...}``) the stream and time, ``kubectl logs --timestamps`` and ``docker logs
-t`` a time; Emissary tags access lines ``ACCESS``; ``dmesg --decode`` prints ``kern  :warn  :``; log viewers add
``- <time>``; exported Cloud Logging JSON has the line in ``"textPayload": "..."``. :class:`EnvelopeReader`
removes up to :data:`MAX_LAYERS` of them from each line and keeps what they say: the time (used when the payload
has none) and the source (pod/container, service or program: the subject of free-text failures). CRI partial
records (``P``) and docker json-file records without a final newline are joined with the records that complete
them (up to :data:`MAX_JOINED_CHARS`).

Every detector is anchored, dispatched on the line's first character, and bounded in how far it reads, so stripping
is linear in the line and costs a few string comparisons for a bare line.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from infradoctor.bounded import load_json
from infradoctor.logs.formats.timestamps import MONTHS, iso_time, syslog_time
from infradoctor.logs.stats import NO_TIME

MAX_LAYERS = 3
"""Envelopes removed from one line at most (e.g. compose service, then docker's timestamp)."""
MAX_JOINED_CHARS = 64 * 1024
"""Partial records joined into one line up to this many characters; beyond, the line is cut (and noted)."""
HEAD = 512
"""Characters of a line an envelope detector reads at most."""

KUBECTL_PREFIX = "kubectl-prefix"
STERN = "stern"
COMPOSE = "compose"
TIMESTAMP = "timestamp"
CRI = "cri"
DOCKER_JSON = "docker-json"
SYSLOG = "syslog"
SYSLOG_5424 = "syslog-rfc5424"
ACCESS_TAG = "access-tag"
DMESG_DECODE = "dmesg-decode"
KERNEL_TAG = "kernel-tag"
VIEWER = "log-viewer"
JSON_MEMBER = "json-member"
ENVELOPES = (KUBECTL_PREFIX, STERN, COMPOSE, TIMESTAMP, CRI, DOCKER_JSON, SYSLOG, SYSLOG_5424, ACCESS_TAG,
             DMESG_DECODE, KERNEL_TAG, VIEWER, JSON_MEMBER)
AMBIGUOUS = frozenset({STERN, COMPOSE, TIMESTAMP})
"""Envelopes whose shape a payload can have itself ("word-abcde word ...", "name | ...", a line that starts with
its own RFC 3339 time): stripped only in files whose first lines read better with them stripped."""
"""Every envelope kind, as named in results."""

_RFC3339 = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)"
_CRI = re.compile(rf"({_RFC3339}) (stdout|stderr) ([PF]) ?")
_TIMESTAMP = re.compile(rf"({_RFC3339}) ")
_KUBECTL = re.compile(r"\[pod/([^/\]\s]{1,253})/([^\]\s]{1,253})\] ")
_STERN = re.compile(r"([a-z0-9](?:[a-z0-9.-]{0,240}[a-z0-9])?-[a-z0-9]{5}) ([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?) ")
_COMPOSE = re.compile(r"([A-Za-z0-9][\w.-]{0,127}) {0,40}\| ")
_RANCHER = re.compile(r"\d{1,2}\.\d{1,2}\.\d{4} \d\d:\d\d:\d\d([A-Za-z0-9][\w.-]{0,127}) {0,40}\| ")
_SYSLOG_3164 = re.compile(
    r"(?:<\d{1,3}>)?([A-Z][a-z]{2}) {1,2}(\d{1,2}) (\d\d:\d\d:\d\d) (?:([^\s:\[\]]{1,255}) )?"
    r"([A-Za-z0-9_./@-]{1,64})(?:\[(\d{1,10})\])?(?:: ?|(?<=\]) | (?=\[))"
)
_SYSLOG_3339 = re.compile(
    rf"(?:<\d{{1,3}}>)?({_RFC3339}) ([^\s:\[\]]{{1,255}}) ([A-Za-z0-9_./@-]{{1,64}})(?:\[(\d{{1,10}})\])?"
    r"(?:: ?|(?<=\]) )"
)
_SYSLOG_5424 = re.compile(
    r"<\d{1,3}>1 (\S{1,64}) (\S{1,255}) (\S{1,48}) (\S{1,128}) (\S{1,32}) (?:-|(?:\[[^\]]{0,512}\]){1,8}) ?"
)
_DMESG_DECODE = re.compile(r"(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7]) {0,3}:"
                           r"(?:emerg|alert|crit|err|warn|notice|info|debug) {0,3}: ")
_DECODE_TIME = re.compile(rf"({_RFC3339}) ")
_VIEWER = re.compile(rf"- ({_RFC3339}) ")
_JSON_MEMBER = re.compile(r'\s{0,64}"(textPayload|message|log|msg|MESSAGE)": (".*"),?\s*$')
_ANSI = re.compile(r"\x1b\[[0-9;]{0,32}m")


@dataclass(slots=True)
class Stripped:
    """What the envelopes of one line said, and the line without them."""

    payload: str
    """The line without its envelopes."""
    second: int = NO_TIME
    """The envelope's time (epoch second), NO_TIME when it had none."""
    source: str = ""
    """The envelope's source: ``pod/container``, a compose service, a syslog program (``""`` when none)."""
    program: str = ""
    """The syslog/journald program tag (``kernel``, ``nginx``...), ``""`` when none."""
    kinds: tuple[str, ...] = ()
    """The envelopes removed, outermost first."""
    cut: bool = False
    """True when joined partial records were cut at :data:`MAX_JOINED_CHARS`."""


class EnvelopeReader:
    """Strips envelopes line by line for one file (keeps partial CRI / docker records until they complete)."""

    def __init__(self, year: int = 1970, ambiguous: frozenset[str] = AMBIGUOUS) -> None:
        self.year = year
        """Year for RFC 3164 times (which carry none)."""
        self.ambiguous = ambiguous
        """The :data:`AMBIGUOUS` envelopes this file may have (all of them while sniffing)."""
        self.counts: Counter[str] = Counter()
        """Envelope kind -> lines it wrapped."""
        self._partial: list[str] = []
        self._partial_chars = 0

    def unwrap(self, line: str) -> Stripped | None:
        """The line without its envelopes; None while it is a partial record waiting for the rest."""
        out = Stripped(line)
        kinds: list[str] = []
        for _ in range(MAX_LAYERS):
            kind = self._layer(out)
            if kind is None:
                break
            kinds.append(kind)
            if kind in (CRI, DOCKER_JSON) and self._hold(out):
                self.counts[kind] += 1
                return None
        if kinds:
            out.kinds = tuple(kinds)
            for kind in kinds:
                self.counts[kind] += 1
        return out

    def flush(self) -> Stripped | None:
        """A partial record left at the end of the file, as one line (None when there is none)."""
        if not self._partial:
            return None
        payload = "".join(self._partial)
        self._partial, self._partial_chars = [], 0
        return Stripped(payload, kinds=("partial",))

    def _hold(self, out: Stripped) -> bool:
        """For a partial record: keep its payload and return True; for a final one, prepend what was kept."""
        partial = getattr(self, "_last_partial", False)
        if partial:
            if self._partial_chars < MAX_JOINED_CHARS:
                piece = out.payload[: MAX_JOINED_CHARS - self._partial_chars]
                self._partial.append(piece)
                self._partial_chars += len(piece)
            return True
        if self._partial:
            joined = "".join(self._partial) + out.payload
            out.cut = len(joined) > MAX_JOINED_CHARS
            out.payload = joined[:MAX_JOINED_CHARS]
            self._partial, self._partial_chars = [], 0
        return False

    def _layer(self, out: Stripped) -> str | None:
        """Remove one envelope from ``out.payload`` (recording its time and source); its kind, or None."""
        text = out.payload
        if not text:
            return None
        self._last_partial = False
        first = text[0]
        head = text[:HEAD]
        if first == "\x1b":
            cleaned = _ANSI.sub("", head) + text[HEAD:]
            if cleaned != text:
                out.payload = cleaned
                return self._layer(out)
            return None
        if first.isdigit():
            if len(head) > 20 and head[4] == "-" and head[10] == "T":
                return self._rfc3339(out, text, head)
            if head[1:3].count(".") == 1:
                match = _RANCHER.match(head)
                if match:
                    out.payload = text[match.end():]
                    out.source = out.source or match.group(1)
                    return COMPOSE
            return None
        return self._other(out, text, head, first)

    def _rfc3339(self, out: Stripped, text: str, head: str) -> str | None:
        """A line starting with an RFC 3339 time: CRI, rsyslog's RFC 3339 header, or a bare timestamp."""
        match = _CRI.match(head)
        if match:
            out.payload = text[match.end():]
            self._set_time(out, iso_time(match.group(1)))
            out.source = out.source or match.group(2)
            self._last_partial = match.group(3) == "P"
            return CRI
        match = _SYSLOG_3339.match(head)
        if match:
            out.payload = text[match.end():]
            self._set_time(out, iso_time(match.group(1)))
            out.program = match.group(3)
            out.source = out.source or match.group(3)
            return SYSLOG
        match = _TIMESTAMP.match(head) if TIMESTAMP in self.ambiguous else None
        if match:
            out.payload = text[match.end():]
            self._set_time(out, iso_time(match.group(1)))
            return TIMESTAMP
        return None

    def _other(self, out: Stripped, text: str, head: str, first: str) -> str | None:  # noqa: C901 - one per envelope
        """Envelopes that do not start with a digit."""
        if first == "{":
            if text.startswith('{"log":'):
                return self._docker_json(out)
            return None
        if first == "<":
            match = _SYSLOG_5424.match(head)
            if match:
                out.payload = text[match.end():]
                self._set_time(out, iso_time(match.group(1)))
                app = match.group(3)
                out.program = "" if app == "-" else app
                out.source = out.source or out.program
                return SYSLOG_5424
            return self._syslog(out, head)
        if first == "[":
            if head.startswith("[pod/"):
                match = _KUBECTL.match(head)
                if match:
                    out.payload = text[match.end():]
                    out.source = f"{match.group(1)}/{match.group(2)}"
                    return KUBECTL_PREFIX
            return None
        if first == "-":
            match = _VIEWER.match(head)
            if match:
                out.payload = text[match.end():]
                self._set_time(out, iso_time(match.group(1)))
                return VIEWER
            return None
        if first in " \t\"":
            if '": "' in head:
                return self._json_member(out)
            return None
        if head[:3] in MONTHS:
            return self._syslog(out, head)
        if head.startswith(("ACCESS ", "[ACCESS] ")):
            out.payload = text[text.index(" ") + 1:]
            return ACCESS_TAG
        if first.isalpha():
            if head.startswith("kernel: "):
                out.payload = text[8:]
                out.program = "kernel"
                return KERNEL_TAG
            if first.islower():
                match = _DMESG_DECODE.match(head)
                if match:
                    rest = text[match.end():]
                    stamp = _DECODE_TIME.match(rest[:HEAD])
                    if stamp:
                        self._set_time(out, iso_time(stamp.group(1)))
                        rest = rest[stamp.end():]
                    out.payload = rest
                    out.program = "kernel"
                    return DMESG_DECODE
                match = _STERN.match(head) if STERN in self.ambiguous else None
                if match and len(text) > match.end() and not text[match.end()].isspace():
                    out.payload = text[match.end():]
                    out.source = f"{match.group(1)}/{match.group(2)}"
                    return STERN
            if COMPOSE in self.ambiguous and (" | " in head or "  |" in head):
                match = _COMPOSE.match(head)
                if match:
                    out.payload = text[match.end():]
                    out.source = out.source or match.group(1)
                    return COMPOSE
        return None

    def _set_time(self, out: Stripped, second: int) -> None:
        if out.second == NO_TIME:
            out.second = second

    def _syslog(self, out: Stripped, head: str) -> str | None:
        match = _SYSLOG_3164.match(head)
        if match is None:
            return None
        month, day, clock, _host, tag, _pid = match.groups()
        out.payload = out.payload[match.end():]
        self._set_time(out, syslog_time(month, day, clock, self.year))
        out.program = tag
        out.source = out.source or tag
        return SYSLOG

    def _docker_json(self, out: Stripped) -> str | None:
        try:
            record = load_json(out.payload, max_chars=4 * MAX_JOINED_CHARS)
        except ValueError:
            return None
        if not isinstance(record, dict) or not isinstance(record.get("log"), str):
            return None
        log = record["log"]
        self._last_partial = not log.endswith("\n")
        out.payload = log.rstrip("\r\n") if not self._last_partial else log
        time = record.get("time")
        if isinstance(time, str):
            self._set_time(out, iso_time(time))
        stream = record.get("stream")
        if isinstance(stream, str) and not out.source:
            out.source = stream[:32]
        return DOCKER_JSON

    def _json_member(self, out: Stripped) -> str | None:
        match = _JSON_MEMBER.match(out.payload)
        if match is None:
            return None
        try:
            value = load_json(match.group(2), max_chars=4 * MAX_JOINED_CHARS)
        except ValueError:
            return None
        if not isinstance(value, str):
            return None
        out.payload = value.replace("\\r\\n", "").replace("\\n", "").rstrip("\r\n")
        return JSON_MEMBER


PREFIX_PATTERNS: dict[str, str] = {
    KUBECTL_PREFIX: _KUBECTL.pattern,
    STERN: _STERN.pattern,
    COMPOSE: _COMPOSE.pattern,
    TIMESTAMP: _TIMESTAMP.pattern,
    CRI: r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d) (?:stdout|stderr) F ?",
    SYSLOG: r"(?:<\d{1,3}>)?[A-Z][a-z]{2} {1,2}\d{1,2} \d\d:\d\d:\d\d (?:[^\s:\[\]]{1,255} )?[A-Za-z0-9_./@-]{1,64}"
            r"(?:\[\d{1,10}\])?: ?",
    SYSLOG_5424: _SYSLOG_5424.pattern,
    ACCESS_TAG: r"ACCESS ",
}
"""Envelopes the polars engine can strip as a regular-expression prefix of the first column (no quotes in them,
no groups that matter): a file wrapped uniformly in one of these keeps the fast engine."""


def uniform_envelope(stripped: list[Stripped]) -> tuple[str, ...] | None:
    """The envelope kinds every sampled line has, in order (``()`` for bare lines); None when they differ."""
    kinds = {s.kinds for s in stripped}
    return next(iter(kinds)) if len(kinds) == 1 else None


def prefix_regex(kinds: tuple[str, ...]) -> str | None:
    """A regular expression (no capture groups) matching these envelopes in order, or None.

    None when one of them is not a plain prefix (docker json-file, JSON members).
    """
    parts = []
    for kind in kinds:
        pattern = PREFIX_PATTERNS.get(kind)
        if pattern is None:
            return None
        pattern = re.sub(r"\((?!\?)", "(?:", pattern)
        # Rust's regex (polars) has no backtracking to bound, and large bounded repeats make its automaton slow
        pattern = re.sub(r"\{1,\d{2,}\}", "+", re.sub(r"\{0,\d{2,}\}", "*", pattern))
        parts.append(pattern)
    return "".join(parts)

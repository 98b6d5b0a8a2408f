"""The bounded accumulator every parser fills: histograms and counters, never one object per line kept.

Latencies are kept as whole-millisecond histograms, which give exact percentiles at millisecond resolution in memory
that does not grow with the file. Failure events are counted per (signature, subject, second, file) so incidents can
be rebuilt as time windows; example lines are kept, at most :data:`MAX_EXAMPLES` per (signature, subject, file).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

from infradoctor.bounded import read_float

UNKNOWN = -1
"""Histogram key for a missing value (``-`` in the log)."""
NO_TIME = -1
"""Second key of events whose line has no absolute timestamp."""
MAX_EPOCH = 7_258_118_400
"""Times after 2200-01-01 are not log times (a year 9999 or a 20-digit epoch): read as no time."""
MAX_MS = 10**10
"""Durations above this many milliseconds (115 days) are not measurements: read as unknown."""
MAX_SUBJECT_CHARS = 200
"""Subjects (upstreams, sources, devices) are cut to this many characters (noted as ``field_cut``)."""
REQUEST = "r"
"""Channel of failures read from access-log requests."""
MESSAGE = "m"
"""Channel of failures read from messages (error logs, app logs, kernel lines)."""
MAX_EXAMPLES = 3
"""Example lines kept per (signature, subject)."""
MAX_EXAMPLE_CHARS = 400
"""Example lines are cut to this many characters."""
MAX_EVENT_KEYS = 200_000
"""Beyond this many (kind, subject, second, file) event keys, event times are coarsened (x10, up to a minute) so
memory stays bounded even when many upstreams fail all day; incident windows then have that resolution."""


def status_class(status: int | None) -> str:
    """``2xx``...``5xx``, ``0`` (no response), or ``other``."""
    if status is None or status < 0:
        return "other"
    if status == 0:
        return "0"
    if 100 <= status < 600:
        return f"{status // 100}xx"
    return "other"


@lru_cache(maxsize=65536)
def to_ms(value: str, scale: float) -> int:
    """A time field as whole ms (``0.241`` s with scale 1000, or ``241`` ms with scale 1); UNKNOWN if no number.

    Read with :func:`infradoctor.bounded.read_float` (finite, sane length); negative or above :data:`MAX_MS` is
    unknown.
    """
    number = read_float(value, low=0.0)
    if number is None:
        return UNKNOWN
    ms = round(number * scale)
    return ms if ms <= MAX_MS else UNKNOWN


@dataclass
class LogStats:
    """Everything the analysis needs from the lines of all files."""

    lines: int = 0
    """Lines seen (including skipped ones)."""
    parsed: int = 0
    """Lines that matched their file's format."""
    bytes: int = 0
    """Bytes read (decompressed)."""
    skipped: Counter[str] = field(default_factory=Counter)
    """Lines not used, by reason (``format_mismatch``, ``binary``, ``line_too_long``, ...)."""
    notes: Counter[str] = field(default_factory=Counter)
    """Lines used with a caveat, by reason (``invalid_utf8``, ``truncated_last_line``)."""
    messages: list[str] = field(default_factory=list)
    """Problems with whole files (unreadable, empty, directory), one message each."""
    requests: int = 0
    """Access-log requests parsed."""
    attempt_hist: Counter[tuple[str, int, int]] = field(default_factory=Counter)
    """(upstream, upstream status or UNKNOWN, upstream ms or UNKNOWN) -> attempts; one per upstream try."""
    request_hist: Counter[tuple[int, int, bool]] = field(default_factory=Counter)
    """(status, request ms or UNKNOWN, served) -> requests; ``served``: an upstream answered it (not a reply the
    router made itself: Envoy UH/NR/UO..., nginx without an upstream address, HAProxy ``<NOSRV>``)."""
    overhead_hist: Counter[int] = field(default_factory=Counter)
    """Router time (request ms minus upstream ms, single-attempt requests with both known) -> requests."""
    attempts_hist: Counter[int] = field(default_factory=Counter)
    """Upstream attempts per request -> requests (only where the format records attempts)."""
    timeline_lines: Counter[tuple[int, str]] = field(default_factory=Counter)
    """(epoch minute, status class or ``log``) -> lines."""
    timeline_kinds: Counter[tuple[int, str]] = field(default_factory=Counter)
    """(epoch minute, signature) -> failing lines (a line with two signatures counts under each)."""
    events: Counter[tuple[str, str, int, str, str]] = field(default_factory=Counter)
    """(signature, subject, epoch second or NO_TIME, source file, channel) -> failing lines; subject is the upstream,
    GPU or source; channel :data:`REQUEST` or :data:`MESSAGE`."""
    examples: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    """(signature, subject, source file) -> first example lines (raw; redacted when the result is built)."""
    source: str = ""
    """The file being parsed (set by the parsers; events and examples are kept per file)."""
    event_resolution_s: int = 1
    """Seconds per event time bucket (1 unless MAX_EVENT_KEYS forced coarser buckets)."""
    sig_durations: Counter[tuple[str, int]] = field(default_factory=Counter)
    """(signature, request ms) -> lines, for signature lines that carry a duration (timeout inference)."""
    queue: dict[int, list[int]] = field(default_factory=dict)
    """HAProxy queue time per epoch minute: [requests, sum of Tw ms, max Tw ms]."""
    exceptions: Counter[str] = field(default_factory=Counter)
    """Python exception types that ended a traceback -> count."""
    xids: Counter[tuple[int, str, int]] = field(default_factory=Counter)
    """(Xid code, device, code it names as its cause or 0) -> kernel log lines; "fallen off the bus" printed without
    an Xid counts as Xid 79 and also in :attr:`bus_drops`."""
    xid_actions: dict[int, str] = field(default_factory=dict)
    """Xid code -> the most disruptive action its lines called for (NVLink5 Fatal/Nonfatal, Xid 154's target)."""
    xid_examples: dict[int, str] = field(default_factory=dict)
    """Xid code -> its first line's message."""
    bus_drops: Counter[str] = field(default_factory=Counter)
    """Device -> "fallen off the bus" messages without an Xid line."""
    envoy_flags: Counter[str] = field(default_factory=Counter)
    """Envoy response flag -> requests carrying it (a comma list counts under each)."""
    haproxy_states: Counter[str] = field(default_factory=Counter)
    """HAProxy termination state (first two letters) -> requests."""
    formats: Counter[str] = field(default_factory=Counter)
    """Format name -> files parsed with it."""
    line_formats: Counter[str] = field(default_factory=Counter)
    """Format name -> lines it parsed (a mixed file's lines go to the format that reads each)."""
    envelopes: Counter[str] = field(default_factory=Counter)
    """Envelope kind -> lines it wrapped."""
    engines: Counter[str] = field(default_factory=Counter)
    """Access-log engine (``polars``/``python``) -> files parsed with it."""
    fast_engine_missing: bool = False
    """A file would have been parsed by polars, but polars is not installed (the Python engine parsed it)."""

    def skip(self, reason: str, count: int = 1, message: str | None = None) -> None:
        """Count skipped lines (or a skipped file, with its message)."""
        self.skipped[reason] += count
        if message is not None:
            self.messages.append(message)

    def note(self, reason: str, count: int = 1) -> None:
        """Count lines used with a caveat."""
        self.notes[reason] += count

    def add_event(self, signature: str, subject: str, second: int, line: str, duration_ms: int = UNKNOWN,
                  channel: str = MESSAGE) -> None:
        """One failing line."""
        subject = self.subject(subject)
        self.count_event(signature, subject, second, 1, channel)
        if duration_ms != UNKNOWN:
            self.sig_durations[(signature, duration_ms)] += 1
        self.add_example(signature, subject, line)

    def subject(self, text: str) -> str:
        """A subject cut to :data:`MAX_SUBJECT_CHARS` (noted as ``field_cut`` when cut)."""
        if len(text) <= MAX_SUBJECT_CHARS:
            return text
        self.note("field_cut")
        return text[: MAX_SUBJECT_CHARS - 1] + "\u2026"

    def count_event(self, signature: str, subject: str, second: int, count: int, channel: str = REQUEST) -> None:
        """Count failing lines of one kind at one subject and second (bucketed at ``event_resolution_s``)."""
        if second != NO_TIME and self.event_resolution_s > 1:
            second -= second % self.event_resolution_s
        self.events[(signature, subject, second, self.source, channel)] += count
        if len(self.events) > MAX_EVENT_KEYS and self.event_resolution_s < 60:
            self.event_resolution_s = min(60, self.event_resolution_s * 10)
            coarse: Counter[tuple[str, str, int, str, str]] = Counter()
            step = self.event_resolution_s
            for (sig, subj, sec, src, chan), n in self.events.items():
                coarse[(sig, subj, sec - sec % step if sec != NO_TIME else sec, src, chan)] += n
            self.events = coarse

    def add_example(self, signature: str, subject: str, line: str) -> None:
        """Keep ``line`` as an example of (signature, subject) while fewer than MAX_EXAMPLES are kept."""
        kept = self.examples.setdefault((signature, subject, self.source), [])
        if len(kept) < MAX_EXAMPLES:
            kept.append(line[:MAX_EXAMPLE_CHARS])

    def add_timeline(self, second: int, klass: str, signatures: tuple[str, ...] | str | None, count: int = 1) -> None:
        """Count a line in its minute (and its signatures, each)."""
        if second == NO_TIME:
            return
        minute = second // 60
        self.timeline_lines[(minute, klass)] += count
        if isinstance(signatures, str):
            self.timeline_kinds[(minute, signatures)] += count
        elif signatures:
            for signature in signatures:
                self.timeline_kinds[(minute, signature)] += count

    def add_queue(self, second: int, queue_ms: int, count: int = 1) -> None:
        """Router queue time of ``count`` requests."""
        if second == NO_TIME or queue_ms == UNKNOWN:
            return
        slot = self.queue.setdefault(second // 60, [0, 0, 0])
        slot[0] += count
        slot[1] += queue_ms * count
        slot[2] = max(slot[2], queue_ms)

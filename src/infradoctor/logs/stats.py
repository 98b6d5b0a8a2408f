"""The bounded accumulator every parser fills: histograms and counters, never one object per line kept.

Latencies are kept as whole-millisecond histograms, which give exact percentiles at millisecond resolution in memory
that does not grow with the file. Failure events are counted per (signature, subject, second, file) so incidents can
be rebuilt as time windows; example lines are kept, at most :data:`MAX_EXAMPLES` per (signature, subject, file).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

UNKNOWN = -1
"""Histogram key for a missing value (``-`` in the log)."""
NO_TIME = -1
"""Second key of events whose line has no absolute timestamp."""
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
    """A time field as whole ms (``0.241`` s with scale 1000, or ``241`` ms with scale 1); UNKNOWN if no number."""
    try:
        number = float(value)
    except ValueError:
        return UNKNOWN
    if number != number or number < 0 or number > 1e12:  # NaN, negative, absurd
        return UNKNOWN
    return round(number * scale)


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
    request_hist: Counter[tuple[int, int]] = field(default_factory=Counter)
    """(status, request ms or UNKNOWN) -> requests."""
    overhead_hist: Counter[int] = field(default_factory=Counter)
    """Router time (request ms minus upstream ms, single-attempt requests with both known) -> requests."""
    attempts_hist: Counter[int] = field(default_factory=Counter)
    """Upstream attempts per request -> requests (only where the format records attempts)."""
    timeline: Counter[tuple[int, str, str]] = field(default_factory=Counter)
    """(epoch minute, status class or ``log``, signature or ``""``) -> lines."""
    events: Counter[tuple[str, str, int, str]] = field(default_factory=Counter)
    """(signature, subject, epoch second or NO_TIME, source file) -> failing lines; subject is the upstream, GPU
    or source."""
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
    xids: Counter[tuple[int, str]] = field(default_factory=Counter)
    """(Xid code, device) -> kernel log lines."""
    formats: Counter[str] = field(default_factory=Counter)
    """Format name -> files parsed with it."""
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

    def add_event(self, signature: str, subject: str, second: int, line: str, duration_ms: int = UNKNOWN) -> None:
        """One failing line."""
        self.count_event(signature, subject, second, 1)
        if duration_ms != UNKNOWN:
            self.sig_durations[(signature, duration_ms)] += 1
        self.add_example(signature, subject, line)

    def count_event(self, signature: str, subject: str, second: int, count: int) -> None:
        """Count failing lines of one kind at one subject and second (bucketed at ``event_resolution_s``)."""
        if second != NO_TIME and self.event_resolution_s > 1:
            second -= second % self.event_resolution_s
        self.events[(signature, subject, second, self.source)] += count
        if len(self.events) > MAX_EVENT_KEYS and self.event_resolution_s < 60:
            self.event_resolution_s = min(60, self.event_resolution_s * 10)
            coarse: Counter[tuple[str, str, int, str]] = Counter()
            step = self.event_resolution_s
            for (sig, subj, sec, src), n in self.events.items():
                coarse[(sig, subj, sec - sec % step if sec != NO_TIME else sec, src)] += n
            self.events = coarse

    def add_example(self, signature: str, subject: str, line: str) -> None:
        """Keep ``line`` as an example of (signature, subject) while fewer than MAX_EXAMPLES are kept."""
        kept = self.examples.setdefault((signature, subject, self.source), [])
        if len(kept) < MAX_EXAMPLES:
            kept.append(line[:MAX_EXAMPLE_CHARS])

    def add_timeline(self, second: int, klass: str, signature: str | None, count: int = 1) -> None:
        """Count a line in its minute."""
        if second != NO_TIME:
            self.timeline[(second // 60, klass, signature or "")] += count

    def add_queue(self, second: int, queue_ms: int, count: int = 1) -> None:
        """Router queue time of ``count`` requests."""
        if second == NO_TIME or queue_ms == UNKNOWN:
            return
        slot = self.queue.setdefault(second // 60, [0, 0, 0])
        slot[0] += count
        slot[1] += queue_ms * count
        slot[2] = max(slot[2], queue_ms)

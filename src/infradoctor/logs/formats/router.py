"""One file, line by line: strip each line's envelope, hand it to the format that reads it, search the rest as text.

:func:`choose` sniffs a file from its first lines, with their envelopes stripped: the format that reads most of them
is the file's *primary* format; in ``--format auto`` every other format stays available as a fallback, so a mixed
file (a pod's combined output: router lines, app JSON, tracebacks) yields every signature: each line goes to the
first format that reads it (the last one that did is tried first), and a line no format reads is still searched for
failure signatures as free text. With ``--format X`` only X reads lines; the others are counted as
``format_mismatch`` and still searched.

Large access logs in one compiled layout go to the polars engine (also inside a plain-prefix envelope such as
kubectl's, stern's, compose's, syslog's or CRI's); the lines it cannot read come back to this router.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from infradoctor.logs.envelope import AMBIGUOUS, EnvelopeReader, Stripped, prefix_regex, uniform_envelope
from infradoctor.logs.formats.access import AccessFormat, polars_wanted, use_polars
from infradoctor.logs.formats.base import LineContext, LineHandler, LogFormat, ParseOptions
from infradoctor.logs.formats.envoy_text import EnvoyTextFormat
from infradoctor.logs.formats.haproxy import HaproxyFormat
from infradoctor.logs.formats.jsonl import JsonLinesFormat, KeyValueFormat
from infradoctor.logs.formats.kernel import KernelFormat
from infradoctor.logs.formats.layout import (
    ENVOY_PRESETS,
    NGINX_PRESETS,
    TIME_EPOCH,
    TIME_ISO,
    TIME_LOCAL,
    AccessLayout,
    FormatError,
    compile_envoy,
    compile_nginx,
    derive_nginx_format,
)
from infradoctor.logs.formats.nginx_error import NginxErrorFormat
from infradoctor.logs.formats.text import TextFormat
from infradoctor.logs.source import SKIP_MISMATCH, CutLine, LogSource, iter_lines
from infradoctor.logs.stats import LogStats

FORMAT_NAMES = ("auto", "nginx", "nginx-error", "envoy", "haproxy", "jsonl", "kernel", "text")
"""Values of ``--format``."""
SNIFF_THRESHOLD = 0.5
"""A format must read at least this share of a file's first lines to be its primary format (else ``text``)."""
POLARS_TIME_KINDS = (None, TIME_LOCAL, TIME_ISO, TIME_EPOCH)
"""Time kinds the polars engine cuts to seconds and minutes (a custom START_TIME format is read in Python)."""


@dataclass
class FileChoice:
    """How to read one file."""

    primary: LogFormat
    """The format that reads most of its first lines (``text`` when none reads half)."""
    share: float
    """Share of the sampled lines the primary format read."""
    fallbacks: tuple[LogFormat, ...] = ()
    """Other formats tried, in order, on lines the primary does not read (none with a forced ``--format``)."""
    forced: bool = False
    """``--format`` named the format: other lines are ``format_mismatch`` (still searched as text)."""
    envelope: tuple[str, ...] | None = None
    """The envelopes every sampled line had (``()`` for bare lines), None when they differ."""
    ambiguous: frozenset[str] = frozenset()
    """The :data:`~infradoctor.logs.envelope.AMBIGUOUS` envelopes seen in the sample (only these are stripped)."""
    year: int = 1970
    """Year for times without one."""


@dataclass
class FileReport:
    """What reading one file found (its ``metrics.files`` row is built from it)."""

    formats: Counter[str] = field(default_factory=Counter)
    """Format -> lines it read."""
    envelopes: Counter[str] = field(default_factory=Counter)
    """Envelope -> lines it wrapped."""
    engine: str = "python"
    """``polars`` or ``python``."""


def access_formats(nginx_log_format: str | None, envoy_log_format: str | None) -> list[LogFormat]:
    """The compiled access layouts: the user's, then the presets.

    Raises:
        FormatError: a given format does not compile.
    """
    formats: list[LogFormat] = []
    if nginx_log_format:
        formats.append(AccessFormat("nginx", compile_nginx(nginx_log_format)))
    formats += [AccessFormat("nginx", compile_nginx(fmt)) for fmt in NGINX_PRESETS.values()]
    if envoy_log_format:
        formats.append(AccessFormat("envoy", compile_envoy(envoy_log_format)))
    formats += [AccessFormat("envoy", compile_envoy(fmt)) for fmt in ENVOY_PRESETS.values()]
    return formats


def candidates(
    nginx_log_format: str | None = None, year: int = 1970, envoy_log_format: str | None = None
) -> list[LogFormat]:
    """Every format ``auto`` considers, most specific first (ties go to the earlier one).

    Raises:
        FormatError: ``nginx_log_format`` or ``envoy_log_format`` does not compile.
    """
    return [*access_formats(nginx_log_format, envoy_log_format), EnvoyTextFormat(), HaproxyFormat(),
            NginxErrorFormat(year), JsonLinesFormat(year), KeyValueFormat(year), KernelFormat(year)]


def _forced_pool(name: str, nginx_log_format: str | None, envoy_log_format: str | None,
                 year: int) -> list[LogFormat]:
    if name == "nginx":
        if nginx_log_format:
            return [AccessFormat("nginx", compile_nginx(nginx_log_format))]
        return [AccessFormat("nginx", compile_nginx(fmt)) for fmt in NGINX_PRESETS.values()]
    if name == "envoy":
        user = [AccessFormat("envoy", compile_envoy(envoy_log_format))] if envoy_log_format else []
        return [*user, *(AccessFormat("envoy", compile_envoy(f)) for f in ENVOY_PRESETS.values()), EnvoyTextFormat(),
                JsonLinesFormat(year), KeyValueFormat(year)]
    pools: dict[str, list[LogFormat]] = {"haproxy": [HaproxyFormat()], "nginx-error": [NginxErrorFormat(year)],
                                         "jsonl": [JsonLinesFormat(year)], "kernel": [KernelFormat(year)]}
    if name not in pools:
        raise FormatError(f"unknown format {name!r}; expected one of {', '.join(FORMAT_NAMES)}")
    return pools[name]


def _derived_nginx(sample: Sequence[str]) -> AccessFormat | None:
    """An nginx format derived from the first sample line that starts like ``combined`` (custom fields after it)."""
    for line in sample[:5]:
        derived = derive_nginx_format(line)
        if derived is not None:
            return _compiled_nginx(derived)
    return None


@lru_cache(maxsize=64)
def _nginx_layout(format_string: str) -> AccessLayout | None:
    try:
        return compile_nginx(format_string)
    except FormatError:
        return None


def _compiled_nginx(format_string: str) -> AccessFormat | None:
    layout = _nginx_layout(format_string)
    return AccessFormat("nginx", layout) if layout is not None else None


def strip_sample(raw: Sequence[str], year: int, ambiguous: frozenset[str] = AMBIGUOUS) -> list[Stripped]:
    """The sample's lines with their envelopes stripped (the ambiguous ones only when allowed)."""
    reader = EnvelopeReader(year, ambiguous)
    return [s for line in raw if (s := reader.unwrap(line)) is not None]


def _best(pool: Sequence[LogFormat], payloads: list[str]) -> tuple[LogFormat, float]:
    best, best_score = pool[0], -1.0
    for fmt in pool:
        score = fmt.sniff(payloads)
        if score > best_score:
            best, best_score = fmt, score
        if score == 1.0:
            break
    return best, best_score


def choose(
    name: str,
    raw_sample: Sequence[str],
    *,
    nginx_log_format: str | None = None,
    envoy_log_format: str | None = None,
    year: int = 1970,
) -> FileChoice:
    """How to read a file whose first lines are ``raw_sample`` (``name`` is a ``--format`` value).

    When the sample shows an ambiguous envelope (a stern or compose prefix, a leading timestamp), it is read both
    ways and the reading a format reads more of wins (stripping it on a tie: the envelope's time and source are kept).

    Raises:
        FormatError: a given log format does not compile, or ``name`` is unknown.
    """
    forced = name not in ("auto", "text")
    pool: list[LogFormat] = []
    if name != "text":
        pool = candidates(nginx_log_format, year, envoy_log_format) if not forced else _forced_pool(
            name, nginx_log_format, envoy_log_format, year)
    stripped = strip_sample(raw_sample, year)
    ambiguous = frozenset(k for s in stripped for k in s.kinds if k in AMBIGUOUS)
    payloads = [s.payload for s in stripped if s.payload.strip()]
    best, best_score = _best(pool, payloads) if pool else (TextFormat(year), 1.0)
    if ambiguous and pool:
        plain = strip_sample(raw_sample, year, frozenset())
        plain_payloads = [s.payload for s in plain if s.payload.strip()]
        other, other_score = _best(pool, plain_payloads)
        if other_score > best_score:
            stripped, payloads, best, best_score, ambiguous = plain, plain_payloads, other, other_score, frozenset()
    envelope = uniform_envelope(stripped) if stripped else ()
    if name == "text":
        return FileChoice(TextFormat(year), 1.0, forced=True, envelope=envelope, ambiguous=ambiguous, year=year)
    if name in ("auto", "nginx") and best_score < SNIFF_THRESHOLD and not nginx_log_format:
        derived = _derived_nginx(payloads)
        if derived is not None:
            score = derived.sniff(payloads)
            if score >= SNIFF_THRESHOLD:
                best, best_score = derived, score
                pool = [derived, *pool]
    if not forced and best_score < SNIFF_THRESHOLD:
        best, best_score = TextFormat(year), 1.0
    fallbacks: tuple[LogFormat, ...] = ()
    if not forced:
        derived = _derived_nginx(payloads)
        extra = [derived] if derived is not None and not isinstance(best, AccessFormat) else []
        fallbacks = tuple(f for f in [*extra, *pool] if f is not best)
    return FileChoice(best, max(best_score, 0.0), fallbacks, forced, envelope, ambiguous, year)


class LineRouter:
    """Feeds one file's lines to its formats (see the module docstring); counts what each read."""

    def __init__(self, choice: FileChoice, stats: LogStats, name: str, report: FileReport,
                 formats: Sequence[LogFormat] | None = None) -> None:
        self.stats = stats
        self.report = report
        self.context = LineContext(name)
        self.envelopes = EnvelopeReader(choice.year, choice.ambiguous)
        self.forced = choice.forced
        self.formats = list(formats if formats is not None else (choice.primary, *choice.fallbacks))
        self.handlers: list[tuple[str, LineHandler, str]] = [
            (f.name, f.handler(stats, self.context), f.needs) for f in self.formats if f.structured]
        self.text = TextFormat(choice.year).handler(stats, self.context)
        self.primary_first = formats is None and choice.primary.structured
        """The primary format is tried first on every line, then the one that read the line before, then the rest."""
        self.last = 0
        self.parsed = self.mismatched = 0

    def feed(self, line: str) -> None:
        """Read one raw line."""
        stripped = self.envelopes.unwrap(line)
        if stripped is None:
            return  # a partial record: it is read with the record that completes it
        self._read(stripped, line, isinstance(line, CutLine))

    def _read(self, stripped: Stripped, raw: str, cut: bool) -> None:
        payload = stripped.payload
        if not payload.strip():
            return  # blank lines are neither parsed nor skipped
        context = self.context
        context.second = stripped.second
        context.source = stripped.source or context.file
        context.program = stripped.program
        context.raw = raw
        if stripped.cut:
            self.stats.note("line_cut")
        if not cut and self.handlers:
            last = self.last
            if self.primary_first and last:  # the file's format reads a line before any other (as polars does)
                name, handle, needs = self.handlers[0]
                if (not needs or needs in payload) and handle(payload, context):
                    self.last = 0
                    self.parsed += 1
                    self.report.formats[name] += 1
                    return
            name, handle, _ = self.handlers[last]
            if handle(payload, context):  # the format of the line before: most lines
                self.parsed += 1
                self.report.formats[name] += 1
                return
            for index, (name, handle, needs) in enumerate(self.handlers):
                if index != last and not (index == 0 and self.primary_first) and (not needs or needs in payload) \
                        and handle(payload, context):
                    self.last = index
                    self.parsed += 1
                    self.report.formats[name] += 1
                    return
        self.text(payload, context)
        if cut:
            return  # counted as skipped (line_too_long) when it was read
        if self.forced and self.handlers:
            self.mismatched += 1
        else:
            self.parsed += 1
            self.report.formats["text"] += 1

    def close(self) -> None:
        """After the last line: a partial record left, then every format's grouped counts."""
        left = self.envelopes.flush()
        if left is not None:
            self._read(left, left.payload, False)
        for fmt in self.formats:
            fmt.finish(self.stats)
        self.stats.parsed += self.parsed
        if self.mismatched:
            self.stats.skip(SKIP_MISMATCH, self.mismatched)
        for kind, count in self.envelopes.counts.items():
            self.report.envelopes[kind] += count
            self.stats.envelopes[kind] += count
        for name, count in self.report.formats.items():
            self.stats.line_formats[name] += count


def parse_source(source: LogSource, choice: FileChoice, stats: LogStats, options: ParseOptions) -> FileReport:
    """Read the whole file into ``stats``: polars for a large access log in one layout, else line by line."""
    stats.source = source.name
    report = FileReport()
    primary = choice.primary
    if isinstance(primary, AccessFormat):
        prefix = prefix_regex(choice.envelope) if choice.envelope is not None else None
        fast = prefix is not None and primary.layout.time_kind in POLARS_TIME_KINDS
        if fast and use_polars(source, options):
            from infradoctor.logs.formats.access_polars import parse_access_polars

            router = LineRouter(choice, stats, source.name, report)
            read: Counter[str] = Counter()
            if parse_access_polars(source, primary.layout, stats, prefix or "", router.feed, read):
                report.formats.update(read)
                for kind in choice.envelope or ():  # every line polars read had the file's envelope
                    router.envelopes.counts[kind] += read.total()
                router.close()
                report.engine = "polars"
                stats.engines["polars"] += 1
                return report
        if polars_wanted(source, options) and not use_polars(source, options):
            stats.fast_engine_missing = True
    stats.engines["python"] += 1
    router = LineRouter(choice, stats, source.name, report)
    feed = router.feed
    for line in iter_lines(source, stats):
        feed(line)
    router.close()
    return report


def read_lines(lines: Iterable[str], choice: FileChoice, stats: LogStats, name: str = "-") -> FileReport:
    """Read lines already in memory (tests, fuzzing): what :func:`parse_source` does with a file's lines."""
    stats.source = name
    report = FileReport()
    router = LineRouter(choice, stats, name, report)
    for line in lines:
        stats.lines += 1
        router.feed(line)
    router.close()
    return report

"""nginx and Envoy access logs from a compiled :class:`AccessLayout`: polars for large files, Python otherwise.

Both engines count identical tuples of raw field strings (the Python engine with one regular expression per line,
polars per column) and hand each distinct tuple, with its count, to one :class:`RequestDecoder`. So both give the
same statistics by construction; only the line splitting differs. JSON and tolerant Envoy text lines use the decoder
line by line.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache

from infradoctor.bounded import read_int
from infradoctor.logs.formats.base import LineContext, LineHandler, LogFormat, ParseOptions
from infradoctor.logs.formats.layout import (
    ROLE_ATTEMPTS,
    ROLE_FLAGS,
    ROLE_REQUEST_TIME,
    ROLE_STATUS,
    ROLE_TIME,
    ROLE_UPSTREAM,
    ROLE_UPSTREAM_STATUS,
    ROLE_UPSTREAM_TIME,
    TIME_EPOCH,
    TIME_ISO,
    TIME_LOCAL,
    AccessLayout,
    is_multi,
    last_try,
    parse_time,
    split_tries,
)
from infradoctor.logs.signatures import (
    ENVOY_LOCAL_REPLY_FLAGS,
    envoy_flags,
    envoy_signatures,
    is_group_name,
    nginx_signature,
)
from infradoctor.logs.source import LogSource
from infradoctor.logs.stats import NO_TIME, REQUEST, UNKNOWN, LogStats, status_class, to_ms

NGINX_FAILING_STATUSES = ("429", "499", "502", "503", "504")
"""nginx statuses that can carry a signature (see :func:`nginx_signature`); others never do."""
ALL_ROLES = (ROLE_TIME, ROLE_STATUS, ROLE_REQUEST_TIME, ROLE_UPSTREAM, ROLE_UPSTREAM_STATUS, ROLE_UPSTREAM_TIME,
             ROLE_FLAGS, ROLE_ATTEMPTS)
"""The roles in the order the raw tuples use."""
SIGNATURE_CACHE = 100_000
"""Distinct (status, upstream, flags) signatures remembered by a decoder (the cache is cleared beyond)."""

TimeKey = str | int | None
"""A request's time as grouped: the raw time field (cut to the second or minute), or an epoch second from the
line's envelope when the format has no time field."""


@lru_cache(maxsize=65536)
def to_int(text: str | None) -> int | None:
    """An integer field (status, attempts), None for ``-`` or junk (read with :func:`infradoctor.bounded.read_int`)."""
    if text is None:
        return None
    return read_int(text, low=0, high=99_999)


class RequestDecoder:
    """Turns the raw role strings of one request (or a group of identical ones) into statistics."""

    def __init__(self, layout: AccessLayout) -> None:
        self.layout = layout
        roles = layout.roles
        self.is_envoy = layout.router == "envoy"
        self.has_upstream = ROLE_UPSTREAM in roles
        self.has_ustatus = ROLE_UPSTREAM_STATUS in roles
        self.has_utime = ROLE_UPSTREAM_TIME in roles
        self.has_attempts = ROLE_ATTEMPTS in roles
        self._signatures: dict[tuple[int | None, str | None, str | None], tuple[tuple[str, ...], str]] = {}
        self._outcomes: dict[tuple[str | None, str | None, str | None],
                             tuple[str, tuple[str, ...], str, tuple[str, ...]]] = {}

    def signatures(self, status: int | None, addr: str | None, flags: str | None) -> tuple[tuple[str, ...], str]:
        """(signatures, subject): the subject is the last upstream tried, ``-`` when none."""
        key = (status, addr, flags)
        found = self._signatures.get(key)
        if found is None:
            if len(self._signatures) > SIGNATURE_CACHE:
                self._signatures.clear()
            found = self._signatures[key] = self._signature(status, addr, flags)
        return found

    def _signature(self, status: int | None, addr: str | None, flags: str | None) -> tuple[tuple[str, ...], str]:
        subject = "-"
        if addr and addr != "-":
            subject = addr if self.is_envoy else last_try(addr)
        if self.is_envoy:
            return envoy_signatures(flags or "-", status), subject
        found = nginx_signature(status, subject, self.has_upstream)
        return ((found,) if found else ()), subject

    def served(self, addr: str | None, flags: str | None, utime_raw: str | None = None) -> bool:
        """True when an upstream answered the request (its duration is not a reply the router made itself)."""
        if self.is_envoy:
            return addr is not None and addr != "-" and self.served_by(flags)
        return self.served_by(addr if self.has_upstream else utime_raw)

    @property
    def served_role(self) -> str | None:
        """The role whose value decides :meth:`served` (with Envoy, given an upstream address), None: never."""
        if self.is_envoy:
            return ROLE_FLAGS
        if self.has_upstream:
            return ROLE_UPSTREAM
        return ROLE_UPSTREAM_TIME if self.has_utime else None

    def served_by(self, value: str | None) -> bool:
        """:meth:`served` from the value of :attr:`served_role` (the polars engine asks once per distinct value).

        Envoy: no flag of a reply Envoy made itself; nginx: an address tried (not only an upstream group's name), or
        without addresses, an upstream time.
        """
        if self.is_envoy:
            return not any(f in ENVOY_LOCAL_REPLY_FLAGS for f in envoy_flags(value))
        if value is None:
            return False
        if self.has_upstream:
            return value != "-" and not all(is_group_name(a) for a in split_tries(value))
        return self.has_utime and to_ms(last_try(value), self.layout.upstream_scale) != UNKNOWN

    def overhead_ms(
        self, request_raw: str | None, addr: str | None, ustatus_raw: str | None, utime_raw: str | None
    ) -> int | None:
        """Router time: request ms minus upstream ms (at least 0), or None.

        Only for a request with exactly one upstream attempt and both times known (a format with upstream time but
        no address counts one attempt when the time is a single value); the polars engine computes the same in an
        expression.
        """
        if request_raw is None or utime_raw is None:
            return None
        if self.has_upstream and (addr is None or addr == "-"):
            return None
        multi = (addr is not None and is_multi(addr)) or is_multi(utime_raw) or (
            ustatus_raw is not None and is_multi(ustatus_raw))
        if not self.is_envoy and multi:
            return None
        request_ms = to_ms(request_raw, self.layout.request_scale)
        upstream_ms = to_ms(utime_raw, self.layout.upstream_scale)
        if request_ms == UNKNOWN or upstream_ms == UNKNOWN:
            return None
        return max(0, request_ms - upstream_ms)

    def add_counts(
        self,
        stats: LogStats,
        status_raw: str | None,
        request_raw: str | None,
        addr: str | None,
        ustatus_raw: str | None,
        utime_raw: str | None,
        attempts_raw: str | None,
        flags: str | None,
        count: int,
    ) -> None:
        """Request, upstream and router-time histograms for ``count`` requests with these raw fields."""
        self.add_request_time(stats, status_raw, request_raw, self.served(addr, flags, utime_raw), count)
        self.add_upstreams(stats, status_raw, addr, ustatus_raw, utime_raw, attempts_raw, count)
        overhead = self.overhead_ms(request_raw, addr, ustatus_raw, utime_raw)
        if overhead is not None:
            stats.overhead_hist[overhead] += count

    def add_request_time(self, stats: LogStats, status_raw: str | None, request_raw: str | None, served: bool,
                         count: int) -> int:
        """Request histogram; returns the request ms."""
        status = to_int(status_raw)
        request_ms = to_ms(request_raw, self.layout.request_scale) if request_raw is not None else UNKNOWN
        stats.requests += count
        stats.request_hist[(UNKNOWN if status is None else status, request_ms, served)] += count
        return request_ms

    def add_upstreams(
        self,
        stats: LogStats,
        status_raw: str | None,
        addr: str | None,
        ustatus_raw: str | None,
        utime_raw: str | None,
        attempts_raw: str | None,
        count: int,
    ) -> tuple[list[tuple[str, int, int]], int]:
        """Attempt and attempts-per-request histograms; returns (attempts, Envoy's upstream ms or UNKNOWN)."""
        status = to_int(status_raw)
        upstreams: list[tuple[str, int, int]] = []
        attempts: int | None = None
        upstream_ms = UNKNOWN
        if self.is_envoy:
            upstream_ms = to_ms(utime_raw, self.layout.upstream_scale) if utime_raw is not None else UNKNOWN
            if addr is not None and addr != "-":
                upstreams = [(stats.subject(addr), UNKNOWN if status is None else status, upstream_ms)]
            if self.has_attempts:
                attempts = to_int(attempts_raw)
        elif self.has_upstream and addr is not None and addr != "-":
            upstreams = self._nginx_attempts(stats, status, addr, ustatus_raw, utime_raw)
            attempts = len(upstreams)
        elif self.has_upstream:
            attempts = 0
        elif self.has_utime and utime_raw is not None and not is_multi(utime_raw):
            ms = to_ms(utime_raw, self.layout.upstream_scale)
            if ms != UNKNOWN:  # the format logs the upstream's time but not its address
                upstreams = [("-", UNKNOWN if status is None else status, ms)]
        for attempt in upstreams:
            stats.attempt_hist[attempt] += count
        if attempts is not None:
            stats.attempts_hist[attempts] += count
        return upstreams, upstream_ms

    def _nginx_attempts(
        self, stats: LogStats, status: int | None, addr: str, ustatus_raw: str | None, utime_raw: str | None
    ) -> list[tuple[str, int, int]]:
        """(address, status, ms) per upstream try from nginx's multi-value fields; [] when they do not line up.

        An upstream group's name (nginx found no live server in it) is not a try.
        """
        if not (is_multi(addr) or (ustatus_raw is not None and is_multi(ustatus_raw))
                or (utime_raw is not None and is_multi(utime_raw))):  # one try: most requests
            if is_group_name(addr):
                return []
            ustatus = to_int(ustatus_raw) if self.has_ustatus and ustatus_raw is not None else status
            utime = to_ms(utime_raw, self.layout.upstream_scale) if self.has_utime and utime_raw is not None \
                else UNKNOWN
            return [(stats.subject(addr), UNKNOWN if ustatus is None else ustatus, utime)]
        addrs = split_tries(addr)
        if self.has_ustatus and ustatus_raw is not None:
            statuses = [UNKNOWN if (v := to_int(s)) is None else v for s in split_tries(ustatus_raw)]
        else:
            statuses = [UNKNOWN if status is None else status] * len(addrs)
        if self.has_utime and utime_raw is not None:
            times = [to_ms(t, self.layout.upstream_scale) for t in split_tries(utime_raw)]
        else:
            times = [UNKNOWN] * len(addrs)
        if not len(addrs) == len(statuses) == len(times):
            return []
        return [(stats.subject(a), s, t) for a, s, t in zip(addrs, statuses, times, strict=True)
                if not is_group_name(a)]

    def second_key(self, time_raw: str | None) -> str | None:
        """The time field cut to the second (UTC ISO times lose their fraction), as the polars engine cuts it."""
        if time_raw is not None and self.layout.time_kind == TIME_ISO and time_raw.endswith("Z"):
            return time_raw[:19] + "Z"
        return time_raw

    def minute_key(self, time_raw: str | None) -> str | None:
        """The time field with its seconds set to 00, as the polars engine sets them."""
        if time_raw is None:
            return None
        kind = self.layout.time_kind
        if kind == TIME_LOCAL:
            return time_raw[:18] + "00" + time_raw[20:]
        if kind == TIME_ISO:
            return time_raw[:17] + "00" + ("Z" if time_raw.endswith("Z") else time_raw[19:])
        if kind == TIME_EPOCH:
            second = parse_time(TIME_EPOCH, time_raw)
            return None if second == NO_TIME else str(second // 60 * 60)
        return time_raw

    def second(self, time_key: TimeKey) -> int:
        """Epoch second of a time key: the raw time field parsed, or the envelope's second; NO_TIME when none."""
        if time_key is None:
            return NO_TIME
        if isinstance(time_key, int):
            return time_key
        kind = self.layout.time_kind
        return parse_time(kind, time_key) if kind else NO_TIME

    def add_outcome(
        self,
        stats: LogStats,
        time_key: TimeKey,
        status_raw: str | None,
        addr: str | None,
        flags: str | None,
        count: int,
    ) -> None:
        """Timeline counts by status class and kind, Envoy flags; for failures also the events."""
        key = (status_raw, addr, flags)
        found = self._outcomes.get(key)
        if found is None:  # decoded once per distinct (status, upstream, flags)
            if len(self._outcomes) > SIGNATURE_CACHE:
                self._outcomes.clear()
            status = to_int(status_raw)
            signatures, subject = self.signatures(status, addr, flags)
            found = self._outcomes[key] = (status_class(status), signatures, subject,
                                           envoy_flags(flags) if self.is_envoy else ())
        klass, signatures, subject, flag_list = found
        second = self.second(time_key)
        stats.add_timeline(second, klass, signatures, count)
        for flag in flag_list:
            stats.envoy_flags[flag] += count
        subject = stats.subject(subject)
        for signature in signatures:
            stats.count_event(signature, subject, second, count, REQUEST)

    def add_durations(
        self, stats: LogStats, status_raw: str | None, addr: str | None, flags: str | None, request_raw: str | None,
        count: int,
    ) -> None:
        """Request durations of failing requests, per kind (for timeout inference)."""
        signatures, _ = self.signatures(to_int(status_raw), addr, flags)
        request_ms = to_ms(request_raw, self.layout.request_scale) if request_raw is not None else UNKNOWN
        if request_ms != UNKNOWN:
            for signature in signatures:
                stats.sig_durations[(signature, request_ms)] += count

    def add_example(
        self, stats: LogStats, status_raw: str | None, addr: str | None, flags: str | None, line: str
    ) -> None:
        """Keep a failing line as an example."""
        signatures, subject = self.signatures(to_int(status_raw), addr, flags)
        subject = stats.subject(subject)
        for signature in signatures:
            stats.add_example(signature, subject, line)

    def add_line(self, stats: LogStats, get: Callable[[str], str | None], line: str,
                 fallback_second: int = NO_TIME) -> None:
        """Everything one line contributes, from a getter of its raw role strings.

        ``fallback_second`` (the envelope's time) is used when the line has no time field.
        """
        time_raw, status_raw, addr, flags = get(ROLE_TIME), get(ROLE_STATUS), get(ROLE_UPSTREAM), get(ROLE_FLAGS)
        request_raw = get(ROLE_REQUEST_TIME)
        self.add_counts(stats, status_raw, request_raw, addr, get(ROLE_UPSTREAM_STATUS), get(ROLE_UPSTREAM_TIME),
                        get(ROLE_ATTEMPTS), flags, 1)
        time_key: TimeKey = time_raw
        if time_raw is None or self.second(time_raw) == NO_TIME:
            time_key = fallback_second if fallback_second != NO_TIME else None
        self.add_outcome(stats, time_key, status_raw, addr, flags, 1)
        if self.may_fail(status_raw, flags):
            self.add_durations(stats, status_raw, addr, flags, request_raw, 1)
            self.add_example(stats, status_raw, addr, flags, line)

    def may_fail(self, status_raw: str | None, flags: str | None) -> bool:
        """Cheap superset test of "has a signature" (the polars engine filters with the same condition)."""
        if self.is_envoy:
            return (flags is not None and flags != "-") or status_raw in ("0", "429")
        return status_raw in NGINX_FAILING_STATUSES


class _RawGroups:
    """Counts of identical raw field tuples, decoded once per distinct tuple at the end of a file."""

    def __init__(self) -> None:
        self.requests: Counter[tuple[str | None, str | None, bool]] = Counter()
        self.upstreams: Counter[tuple[str | None, ...]] = Counter()
        self.outcomes: Counter[tuple[TimeKey, str | None, str | None, str | None]] = Counter()
        self.durations: Counter[tuple[str | None, ...]] = Counter()
        self.overheads: Counter[tuple[str, str | bool | None, str]] = Counter()
        """(request time, the address (Envoy, none) or whether it is a multi-value (nginx), upstream time) ->
        requests."""


class AccessFormat(LogFormat):
    """An access log in a compiled layout."""

    def __init__(self, name: str, layout: AccessLayout) -> None:
        self.name = name
        self.layout = layout
        self._decoder = RequestDecoder(layout)
        self._groups = _RawGroups()
        self.required = "".join(sorted({c for t in layout.tokens if isinstance(t, str) for c in t if c != " "}))
        """Characters every line of the layout contains (its literals'): checked before the full expression."""
        self.needs = '"' if '"' in self.required else ""

    def handler(self, stats: LogStats, context: LineContext) -> LineHandler:
        """A line handler that counts raw field tuples (decoded in :meth:`finish`, as the polars engine does)."""
        match = self.layout.line_regex().match
        decoder = self._decoder = RequestDecoder(self.layout)
        groups = self._groups = _RawGroups()
        requests, upstreams, outcomes, durations = groups.requests, groups.upstreams, groups.outcomes, groups.durations
        second_key, minute_key = decoder.second_key, decoder.minute_key
        has_time = ROLE_TIME in self.layout.roles
        by_address = decoder.is_envoy or decoder.has_upstream
        envoy = decoder.is_envoy
        overheads = groups.overheads
        served_cache: dict[tuple[str | None, str | None], bool] = {}
        required = self.required

        def handle(line: str, ctx: LineContext) -> bool:
            for char in required:
                if char not in line:
                    return False
            found = match(line)
            if found is None:
                return False
            get = found.groupdict().get
            time_raw, status, request = get(ROLE_TIME), get(ROLE_STATUS), get(ROLE_REQUEST_TIME)
            addr = get(ROLE_UPSTREAM)
            ustatus, utime, flags, attempts = (get(ROLE_UPSTREAM_STATUS), get(ROLE_UPSTREAM_TIME), get(ROLE_FLAGS),
                                               get(ROLE_ATTEMPTS))
            served_key = (addr, flags) if by_address else (utime, None)
            served = served_cache.get(served_key)
            if served is None:
                if len(served_cache) > SIGNATURE_CACHE:
                    served_cache.clear()
                served = served_cache[served_key] = decoder.served(addr, flags, utime)
            requests[(status, request, served)] += 1
            upstreams[(status, addr, ustatus, utime, attempts)] += 1
            if request is not None and utime is not None:  # router time, decoded per distinct pair in finish()
                overheads[(request, addr if addr is None or addr == "-" or envoy else is_multi(addr) or (
                    ustatus is not None and is_multi(ustatus)), utime)] += 1
            fails = decoder.may_fail(status, flags)
            key: TimeKey
            if has_time:
                key = second_key(time_raw) if fails else minute_key(time_raw)
            else:
                key = None if ctx.second == NO_TIME else (ctx.second if fails else ctx.second // 60 * 60)
            if fails:
                outcomes[(key, status, addr, flags)] += 1
                durations[(status, addr, flags, request)] += 1
                decoder.add_example(stats, status, addr, flags, ctx.raw or line)
            else:
                outcomes[(key, status, None, flags)] += 1
            return True

        return handle

    def finish(self, stats: LogStats) -> None:
        """Decode the counted groups (once per distinct tuple)."""
        decoder, groups = self._decoder, self._groups
        for (status, request, served), count in groups.requests.items():
            decoder.add_request_time(stats, status, request, served, count)
        for (status, addr, ustatus, utime, attempts), count in groups.upstreams.items():
            decoder.add_upstreams(stats, status, addr, ustatus, utime, attempts, count)
        for (time_key, status, addr, flags), count in groups.outcomes.items():
            decoder.add_outcome(stats, time_key, status, addr, flags, count)
        for (status, addr, flags, request), count in groups.durations.items():
            decoder.add_durations(stats, status, addr, flags, request, count)
        for (request, address, utime), count in groups.overheads.items():
            if isinstance(address, bool):  # nginx: the address had several tries (True) or one (False)
                address = "a, b" if address else "a:1"
            overhead = decoder.overhead_ms(request, address, None, utime)
            if overhead is not None:
                stats.overhead_hist[overhead] += count
        self._groups = _RawGroups()

    def sniff(self, lines: Sequence[str]) -> float:
        """Share of lines matching the layout's full-line expression."""
        if not lines:
            return 0.0
        match = self.layout.line_regex().match
        return sum(1 for line in lines if match(line)) / len(lines)


POLARS_REQUIREMENT = "polars>=2.1"
"""What to install for the fast engine (as in pyproject.toml)."""


def polars_wanted(source: LogSource, options: ParseOptions) -> bool:
    """Whether the polars engine should parse this file, if it is installed."""
    if options.engine == "python":
        return False
    return options.engine != "auto" or max(source.size_bytes, source.content_bytes) >= options.polars_min_bytes


def use_polars(source: LogSource, options: ParseOptions) -> bool:
    """Whether the polars engine should parse this file (wanted and installed)."""
    if not polars_wanted(source, options):
        return False
    from infradoctor.logs.formats.access_polars import polars_available

    return polars_available()

r"""Access-log format strings compiled to parsers: nginx ``log_format`` and Envoy access-log format strings.

A format string is split into literals and variables. Variables the analysis needs get a *role* (time, status,
request time, upstream address/status/time, Envoy flags, attempts); the rest are matched and ignored. The layout
gives two equivalent parsers:

- a full-line regular expression (the pure-Python engine, one ``re.match`` per line), and
- per-column extractions after splitting the line on ``"`` (the polars engine): the text between quotes is one
  column, a variable alone between quotes is taken as is, and only short unquoted segments need a regex.

Splitting on ``"`` is safe for nginx, which escapes ``"`` inside values as ``\\x22``; a line with a stray quote
has the wrong number of columns and is counted as a format mismatch by both engines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import lru_cache

from infradoctor.bounded import read_float
from infradoctor.logs.stats import MAX_EPOCH, NO_TIME

ROLE_TIME = "time"
ROLE_STATUS = "status"
ROLE_REQUEST_TIME = "request_time"
ROLE_UPSTREAM = "upstream"
ROLE_UPSTREAM_STATUS = "upstream_status"
ROLE_UPSTREAM_TIME = "upstream_time"
ROLE_FLAGS = "flags"
ROLE_ATTEMPTS = "attempts"

TIME_LOCAL = "local"
"""``29/Nov/2026:10:00:00 +0000`` (nginx ``$time_local``)."""
TIME_ISO = "iso"
"""``2026-11-29T10:00:00+00:00`` or ``2026-11-29T10:00:00.123Z`` (nginx ``$time_iso8601``, Envoy START_TIME)."""
TIME_EPOCH = "epoch"
"""``1795946400.123`` (nginx ``$msec``)."""

NGINX_COMBINED = (
    '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" '
    '"$http_user_agent"'
)
"""nginx's built-in ``combined`` format (the default)."""
NGINX_UPSTREAM_TIME = (
    NGINX_COMBINED + ' rt=$request_time uct="$upstream_connect_time" uht="$upstream_header_time" '
    'urt="$upstream_response_time"'
)
"""The ``upstream_time`` format from nginx's blog on logging upstream timings."""
NGINX_UPSTREAM_FULL = NGINX_UPSTREAM_TIME + ' ua="$upstream_addr" us="$upstream_status"'
"""``upstream_time`` plus the upstream address and status, which per-upstream tables need."""
NGINX_INGRESS = (
    NGINX_COMBINED + " $request_length $request_time [$proxy_upstream_name] [$proxy_alternative_upstream_name] "
    "$upstream_addr $upstream_response_length $upstream_response_time $upstream_status $req_id"
)
"""Kubernetes ingress-nginx's default ``log-format-upstream``."""
NGINX_INGRESS_OLD = (
    '$remote_addr - [$the_real_ip] - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" '
    '"$http_user_agent" $request_length $request_time [$proxy_upstream_name] $upstream_addr '
    "$upstream_response_length $upstream_response_time $upstream_status $req_id"
)
"""ingress-nginx's default before 0.24 (the real client IP in brackets, no alternative upstream)."""
NGINX_VHOST = '$host ' + NGINX_COMBINED
"""nginx-proxy's ``vhost`` format: the virtual host, then ``combined``."""
NGINX_PRESETS: dict[str, str] = {
    "upstream_full": NGINX_UPSTREAM_FULL,
    "ingress": NGINX_INGRESS,
    "ingress_old": NGINX_INGRESS_OLD,
    "vhost": NGINX_VHOST,
    "upstream_time": NGINX_UPSTREAM_TIME,
    "combined": NGINX_COMBINED,
}
"""Formats tried when sniffing nginx access logs, most specific first."""

ENVOY_DEFAULT = (
    '[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% '
    '%RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% '
    '"%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"'
)
"""Envoy's default access-log format."""
ENVOY_ISTIO = (
    '[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% %RESPONSE_FLAGS% '
    '%RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% "%UPSTREAM_TRANSPORT_FAILURE_REASON%" '
    '%BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" '
    '"%REQ(USER-AGENT)%" "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%" %UPSTREAM_CLUSTER% '
    "%UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS% %REQUESTED_SERVER_NAME% "
    "%ROUTE_NAME%"
)
"""Istio's sidecar/gateway access-log format (Envoy with response-code details and cluster names)."""
ENVOY_PRESETS: dict[str, str] = {"default": ENVOY_DEFAULT, "istio": ENVOY_ISTIO}
"""Envoy formats tried when sniffing."""

# nginx variable -> (role, time kind or scale to milliseconds)
_NGINX_ROLES: dict[str, tuple[str, str | float]] = {
    "time_local": (ROLE_TIME, TIME_LOCAL),
    "time_iso8601": (ROLE_TIME, TIME_ISO),
    "msec": (ROLE_TIME, TIME_EPOCH),
    "status": (ROLE_STATUS, 1.0),
    "request_time": (ROLE_REQUEST_TIME, 1000.0),
    "upstream_addr": (ROLE_UPSTREAM, 1.0),
    "upstream_status": (ROLE_UPSTREAM_STATUS, 1.0),
    "upstream_response_time": (ROLE_UPSTREAM_TIME, 1000.0),
}
_NGINX_MULTI = {"upstream_addr", "upstream_status", "upstream_response_time", "upstream_connect_time",
                "upstream_header_time", "upstream_response_length", "upstream_bytes_received",
                "upstream_bytes_sent", "upstream_cache_status"}
_NGINX_SPACEY = {"time_local", "request", "http_user_agent", "http_referer", "request_uri", "args",
                 "query_string", "http_cookie", "sent_http_content_type"}
_ENVOY_ROLES: dict[str, tuple[str, str | float]] = {
    "START_TIME": (ROLE_TIME, TIME_ISO),
    "RESPONSE_CODE": (ROLE_STATUS, 1.0),
    "RESPONSE_FLAGS": (ROLE_FLAGS, 1.0),
    "DURATION": (ROLE_REQUEST_TIME, 1.0),
    "RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)": (ROLE_UPSTREAM_TIME, 1.0),
    "UPSTREAM_HOST": (ROLE_UPSTREAM, 1.0),
    "UPSTREAM_REQUEST_ATTEMPT_COUNT": (ROLE_ATTEMPTS, 1.0),
}
_ENVOY_SPACEY = {"REQ(USER-AGENT)", "REQ(REFERER)"}

MULTI_SEPARATORS = (", ", " : ")
"""What joins the values of an nginx multi-value field: ``, `` (next upstream) and `` : `` (internal redirect)."""
MULTI_SPLIT = re.compile("|".join(MULTI_SEPARATORS))
"""The separators as a pattern (the polars engine searches the same one)."""
MULTI_VALUE = rf'[^ ",]*(?:(?:{MULTI_SPLIT.pattern})[^ ",]*)*'
"""An nginx multi-value field in a format's regular expression."""
_NEXT_TRY, _REDIRECT = MULTI_SEPARATORS


def split_tries(value: str) -> list[str]:
    """The values of an nginx multi-value field (``$upstream_addr``, ``$upstream_status``...), one per try, in order.

    ``"a, b : c"`` -> ``["a", "b", "c"]`` (``, `` between upstream tries, `` : `` between internal redirects); a
    single value -> ``[value]``. The one reading of these fields: the logs engines and ``route`` use it.
    """
    return MULTI_SPLIT.split(value)


def last_try(value: str) -> str:
    """The last value of an nginx multi-value field (the try that gave the response)."""
    return split_tries(value)[-1]


def is_multi(value: str) -> bool:
    """True for an nginx multi-value field with several tries."""
    return _NEXT_TRY in value or _REDIRECT in value


@dataclass(frozen=True)
class Var:
    """One variable of a format string."""

    name: str
    """As written, without ``$`` or ``%``: ``upstream_addr``, ``RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)``."""
    role: str | None
    """What the analysis uses it for, or None."""
    pattern: str
    """Regular expression for its value (no groups)."""


Token = str | Var


class FormatError(ValueError):
    """A format string that cannot be compiled (unbalanced quotes, no variables)."""


@dataclass(frozen=True)
class AccessLayout:
    """A compiled access-log format."""

    router: str
    """``nginx`` or ``envoy``: decides how signatures are read from the fields."""
    format_string: str
    """The format as given."""
    tokens: tuple[Token, ...]
    """Literals and variables in order."""
    time_kind: str | None
    """How to parse the time role (TIME_LOCAL, TIME_ISO, TIME_EPOCH), None without a time variable."""
    request_scale: float
    """Multiplier from the request-time field to milliseconds."""
    upstream_scale: float
    """Multiplier from the upstream-time field to milliseconds."""

    @property
    def roles(self) -> frozenset[str]:
        """Roles present in the format."""
        return frozenset(t.role for t in self.tokens if isinstance(t, Var) and t.role)

    def segments(self) -> list[list[Token]]:
        """Tokens split at every ``"`` in the literals: segment *i* is column *i* after splitting a line on ``"``."""
        out: list[list[Token]] = [[]]
        for token in self.tokens:
            if isinstance(token, Var):
                out[-1].append(token)
                continue
            pieces = token.split('"')
            for index, piece in enumerate(pieces):
                if index:
                    out.append([])
                if piece:
                    out[-1].append(piece)
        return out

    def with_time_kind(self, kind: str) -> AccessLayout:
        """The same layout reading its time field as ``kind``."""
        return replace(self, time_kind=kind)

    def line_regex(self) -> re.Pattern[str]:
        """Full-line regular expression; each role is a named group (its first occurrence)."""
        return re.compile("^" + tokens_regex(self.tokens) + "$")


_GENERIC_PATTERNS = frozenset({'[^ "]*', '[^"]*', '[^"]*?'})
"""Patterns of variables that take any run of characters of a class: two of them side by side cannot be told
apart, and k in a row backtrack in O(n^k) on a line that does not fit (``$a$b$c$d`` in a format string)."""


def tokens_regex(tokens: list[Token] | tuple[Token, ...], capture: frozenset[str] | None = None) -> str:
    """Regex text for a token sequence; roles (all, or those in ``capture``) become named groups once each.

    A variable right after another one (no literal between) of a generic pattern matches nothing: the first takes
    the run (they cannot be told apart), and the regex stays linear.
    """
    parts: list[str] = []
    seen: set[str] = set()
    previous_generic = False
    for token in tokens:
        if isinstance(token, str):
            parts.append(re.escape(token))
            previous_generic = False
            continue
        generic = token.pattern in _GENERIC_PATTERNS
        pattern = "" if generic and previous_generic else token.pattern
        previous_generic = generic
        if token.role and token.role not in seen and (capture is None or token.role in capture):
            seen.add(token.role)
            parts.append(f"(?P<{token.role}>{pattern})")
        else:
            parts.append(f"(?:{pattern})")
    return "".join(parts)


_NGINX_VAR = re.compile(r"\$(?:\{([A-Za-z0-9_]+)\}|([A-Za-z0-9_]+))")


def compile_nginx(format_string: str) -> AccessLayout:
    """Compile an nginx ``log_format`` string (the part after the name, quotes of the config removed).

    Raises:
        FormatError: no variables, or an odd number of literal ``"`` (columns would not line up).
    """
    if len(format_string) > MAX_FORMAT_CHARS:
        raise FormatError(f"nginx log format of {len(format_string)} characters (at most {MAX_FORMAT_CHARS})")
    tokens: list[Token] = []
    pos = 0
    quoted = False
    for match in _NGINX_VAR.finditer(format_string):
        literal = format_string[pos:match.start()]
        if literal:
            tokens.append(literal)
            quoted ^= literal.count('"') % 2 == 1
        name = match.group(1) or match.group(2)
        role, _ = _NGINX_ROLES.get(name, (None, 1.0))
        tokens.append(Var(name, role, _nginx_pattern(name, quoted)))
        pos = match.end()
    if format_string[pos:]:
        tokens.append(format_string[pos:])
    return _layout("nginx", format_string, tokens, _NGINX_ROLES)


def _nginx_pattern(name: str, quoted: bool) -> str:
    if quoted:
        return '[^"]*'
    if name in _NGINX_MULTI:
        return MULTI_VALUE
    if name in _NGINX_SPACEY:
        return '[^"]*?'
    return '[^ "]*'


def _envoy_operators(text: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of each ``%OPERATOR%`` in an Envoy format string, linear in its length.

    An operator may take arguments in parentheses that themselves contain ``%`` (``%START_TIME(%Y/%m/%d %s)%``) and
    a length limit (``%REQ(:PATH):256%``); ``%%`` is not an operator.
    """
    found: list[tuple[int, int, str]] = []
    pos, length = 0, len(text)
    while True:
        start = text.find("%", pos)
        if start < 0 or start + 1 >= length:
            return found
        end = start + 1
        while end < length and (text[end].isupper() or text[end].isdigit() or text[end] == "_"):
            end += 1
        if end == start + 1:
            pos = start + 1
            continue
        if end < length and text[end] == "(":
            close = text.find(")", end)
            if close < 0:
                pos = start + 1
                continue
            end = close + 1
        if end < length and text[end] == ":":
            digits = end + 1
            while digits < length and text[digits].isdigit():
                digits += 1
            end = digits if digits > end + 1 else end
        if end < length and text[end] == "%":
            found.append((start, end + 1, text[start + 1:end]))
            pos = end + 1
        else:
            pos = start + 1


def compile_envoy(format_string: str = ENVOY_DEFAULT) -> AccessLayout:
    """Compile an Envoy access-log format string (``%COMMAND%`` operators; trailing newline optional).

    ``%START_TIME(...)%`` with a strftime format (``%d/%m/%YT%H:%M:%S%z``, ``%s``, ``%3f``...) is read in that format;
    key=value layouts (``status=%RESPONSE_CODE% response_flag=%RESPONSE_FLAGS%``) are literals between operators.

    Raises:
        FormatError: no operators, unbalanced quotes, or a START_TIME format with a directive it cannot read.
    """
    if len(format_string) > MAX_FORMAT_CHARS:
        raise FormatError(f"Envoy log format of {len(format_string)} characters (at most {MAX_FORMAT_CHARS})")
    text = format_string.rstrip("\n")
    if text.endswith("\\n"):
        text = text[:-2]
    tokens: list[Token] = []
    pos = 0
    quoted = False
    for start, end, name in _envoy_operators(text):
        literal = text[pos:start]
        if literal:
            tokens.append(literal)
            quoted ^= literal.count('"') % 2 == 1
        pos = end
        if name.startswith("START_TIME(") and name.endswith(")") and len(name) > 12:
            tokens.append(Var(name, ROLE_TIME, strftime_regex(name[11:-1])))
            continue
        base = name.split(":")[0] if not name.startswith(("REQ(", "RESP(")) else name.rsplit(")", 1)[0] + ")"
        role, _ = _ENVOY_ROLES.get(base, _ENVOY_ROLES.get(base.split("(")[0], (None, 1.0)))
        if quoted:
            pattern = '[^"]*'
        elif base in _ENVOY_SPACEY:
            pattern = '[^"]*?'
        else:
            pattern = '[^ "]*'
        tokens.append(Var(name, role, pattern))
    if text[pos:]:
        tokens.append(text[pos:])
    return _layout("envoy", format_string, tokens, _ENVOY_ROLES)


_STRFTIME: dict[str, str] = {
    "Y": r"\d{4}", "m": r"\d\d", "d": r"\d\d", "e": r"[ \d]\d", "H": r"\d\d", "M": r"\d\d", "S": r"\d\d",
    "z": r"[+-]\d\d:?\d\d", "Z": r"[A-Za-z]{1,5}", "s": r"\d{1,12}", "f": r"\d{1,9}", "b": r"[A-Z][a-z]{2}",
    "T": r"\d\d:\d\d:\d\d", "F": r"\d{4}-\d\d-\d\d", "%": "%",
}
"""strftime directives a START_TIME format may use, and what each matches."""


def _strftime_pieces(fmt: str, strict: bool = True) -> list[tuple[str, str]]:
    """(directive, regex) for each piece of a strftime format, in order: ``""`` and the escaped text for a literal.

    ``%3f`` (any digit) is the directive ``f``. Raises FormatError on a directive not in :data:`_STRFTIME` when
    ``strict``; otherwise it matches any one character.
    """
    pieces: list[tuple[str, str]] = []
    index = 0
    while index < len(fmt):
        char = fmt[index]
        if char != "%" or index + 1 >= len(fmt):
            pieces.append(("", re.escape(char)))
            index += 1
            continue
        directive = fmt[index + 1]
        if directive.isdigit() and index + 2 < len(fmt) and fmt[index + 2] == "f":  # %3f, %6f, %9f
            pieces.append(("f", _STRFTIME["f"]))
            index += 3
            continue
        if directive not in _STRFTIME and strict:
            raise FormatError(f"START_TIME format {fmt!r}: %{directive} is not a directive infradoctor reads")
        pieces.append((directive, _STRFTIME.get(directive, ".")))
        index += 2
    return pieces


def strftime_regex(fmt: str) -> str:
    """A regular expression (no groups) for times written in the strftime format ``fmt``.

    Raises:
        FormatError: a directive that is not in :data:`_STRFTIME`.
    """
    return "".join(pattern for _, pattern in _strftime_pieces(fmt))


def strftime_kind(fmt: str) -> str:
    """The time kind (for :func:`parse_time`) of times written in the strftime format ``fmt``."""
    return "strftime:" + fmt


_COMPOUND = {"T": (("H", r"\d\d"), ":", ("M", r"\d\d"), ":", ("S", r"\d\d")),
             "F": (("Y", r"\d{4}"), "-", ("m", r"\d\d"), "-", ("d", r"\d\d"))}
"""Directives that stand for several: their parts, named."""


@lru_cache(maxsize=64)
def _strftime_parser(fmt: str) -> re.Pattern[str]:
    """:func:`strftime_regex` with each field a named group (its directive's letter; the first of each)."""
    parts: list[str] = []
    seen: set[str] = set()

    def field(name: str, pattern: str) -> str:
        if name in seen:
            return pattern
        seen.add(name)
        return f"(?P<{name}>{pattern})"

    for directive, pattern in _strftime_pieces(fmt, strict=False):
        if directive in _COMPOUND:
            parts += [part if isinstance(part, str) else field(*part) for part in _COMPOUND[directive]]
        elif directive.isalpha():
            parts.append(field(directive, pattern))
        else:
            parts.append(pattern)
    return re.compile("".join(parts))


def _parse_strftime(fmt: str, text: str) -> int:
    match = _strftime_parser(fmt).match(text)
    if match is None:
        return NO_TIME
    fields = match.groupdict()
    if fields.get("s"):
        second = int(fields["s"])
        return second if 0 <= second <= MAX_EPOCH else NO_TIME
    try:
        month = int(fields["m"]) if fields.get("m") else _MONTHS[fields["b"]] if fields.get("b") else 1
        base = datetime(int(fields.get("Y") or 1970), month, int((fields.get("d") or fields.get("e") or "1").strip()),
                        int(fields.get("H") or 0), int(fields.get("M") or 0), int(fields.get("S") or 0),
                        tzinfo=timezone.utc)
    except (ValueError, KeyError, OverflowError):
        return NO_TIME
    zone = fields.get("z")
    second = int(base.timestamp()) - (_offset_seconds(zone.replace(":", "")) if zone else 0)
    return second if 0 <= second <= MAX_EPOCH else NO_TIME


def _tighten(tokens: list[Token]) -> list[Token]:
    """Make a lazy ``[^"]*?`` before a literal starting with X (not a space) the greedy ``[^"X]*``.

    It is the same match without backtracking (``[$time_local]`` matches twice as fast).
    """
    out = list(tokens)
    for index, token in enumerate(out[:-1]):
        following = out[index + 1]
        if isinstance(token, Var) and token.pattern == '[^"]*?' and isinstance(following, str) and following[0] != " ":
            out[index] = Var(token.name, token.role, f'[^"{re.escape(following[0])}]*')
    return out


def _layout(
    router: str, format_string: str, tokens: list[Token], table: dict[str, tuple[str, str | float]]
) -> AccessLayout:
    if not any(isinstance(t, Var) for t in tokens):
        raise FormatError(f"{router} log format has no variables: {format_string!r}")
    quotes = sum(t.count('"') for t in tokens if isinstance(t, str))
    if quotes % 2:
        raise FormatError(f"{router} log format has an odd number of quotes: {format_string!r}")
    tokens = _tighten(tokens)
    time_kind: str | None = None
    request_scale = upstream_scale = 1.0
    for token in tokens:
        if not isinstance(token, Var) or token.role is None:
            continue
        key = token.name if token.name in table else token.name.split("(")[0]
        _, extra = table.get(key, (token.role, 1.0))
        if token.role == ROLE_TIME and time_kind is None:
            time_kind = strftime_kind(token.name[11:-1]) if token.name.startswith("START_TIME(") else str(extra)
        elif token.role == ROLE_REQUEST_TIME:
            request_scale = float(extra)
        elif token.role == ROLE_UPSTREAM_TIME:
            upstream_scale = float(extra)
    return AccessLayout(router, format_string, tuple(tokens), time_kind, request_scale, upstream_scale)


# --- time parsing (Python engine; the polars engine computes the same in expressions) ------------------------

_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                        "Dec"), start=1)}
_ISO_OFFSET = re.compile(r"([+-])(\d\d):?(\d\d)$")


@lru_cache(maxsize=4096)
def parse_time(kind: str, text: str) -> int:
    """Epoch second of a timestamp of the given kind; NO_TIME when it does not parse.

    A time outside 1970..:data:`~infradoctor.logs.stats.MAX_EPOCH` does not parse.
    """
    second = _parse_time(kind, text[:64])
    return second if 0 <= second <= MAX_EPOCH else NO_TIME


def _parse_time(kind: str, text: str) -> int:
    if kind.startswith("strftime:"):
        return _parse_strftime(kind[9:], text)
    try:
        if kind == TIME_LOCAL:  # 29/Nov/2026:10:00:00 +0000
            base = datetime(int(text[7:11]), _MONTHS[text[3:6]], int(text[0:2]), int(text[12:14]), int(text[15:17]),
                            int(text[18:20]), tzinfo=timezone.utc)
            return int(base.timestamp()) - _offset_seconds(text[21:26])
        if kind == TIME_ISO:
            base = datetime(int(text[0:4]), int(text[5:7]), int(text[8:10]), int(text[11:13]), int(text[14:16]),
                            int(text[17:19]), tzinfo=timezone.utc)
            if text[10] not in "T ":
                return NO_TIME
            offset = _ISO_OFFSET.search(text[19:])
            return int(base.timestamp()) - (_offset_seconds("".join(offset.groups())) if offset else 0)
        if kind == TIME_EPOCH:
            number = read_float(text, low=0.0, high=float(MAX_EPOCH) * 1000)
            if number is None:
                return NO_TIME
            return int(number if number <= MAX_EPOCH else number / 1000)
    except (ValueError, KeyError, IndexError, OverflowError):
        return NO_TIME
    return NO_TIME


def _offset_seconds(text: str) -> int:
    """``+0130`` -> 5400."""
    if len(text) != 5 or text[0] not in "+-" or not text[1:].isdigit():
        raise ValueError(text)
    seconds = int(text[1:3]) * 3600 + int(text[3:5]) * 60
    return seconds if text[0] == "+" else -seconds


# --- deriving an unknown nginx format from its lines ---------------------------------------------------------

KEY_ALIASES: dict[str, str] = {
    "rt": "request_time", "request_time": "request_time", "reqtime": "request_time",
    "urt": "upstream_response_time", "upstream_response_time": "upstream_response_time",
    "uct": "upstream_connect_time", "upstream_connect_time": "upstream_connect_time",
    "uht": "upstream_header_time", "upstream_header_time": "upstream_header_time",
    "ua": "upstream_addr", "upstream_addr": "upstream_addr", "upstream": "upstream_addr",
    "us": "upstream_status", "upstream_status": "upstream_status", "ust": "upstream_status",
}
"""Keys of ``key=value`` fields that custom nginx formats commonly use, and the variable each one logs."""


MAX_DERIVE_CHARS = 8192
"""A format is derived only from lines up to this long (the derived format's literals come from the line)."""
MAX_SPACE_RUN = 16
"""... with runs of spaces up to this long between fields."""
MAX_FORMAT_CHARS = 16384
"""A format string longer than this is refused."""


@lru_cache(maxsize=1)
def _combined_prefix() -> re.Pattern[str]:
    return re.compile("^" + tokens_regex(compile_nginx(NGINX_COMBINED).tokens))


def _tail_fields(tail: str) -> list[tuple[str, str, bool]] | None:
    """(leading spaces, field, quoted) for each field after ``combined``; None when a quote is not closed.

    A field is a quoted string or a run without spaces (a ``key="quoted value"`` is one field). Linear in the tail.
    """
    fields: list[tuple[str, str, bool]] = []
    pos, length = 0, len(tail)
    while pos < length and len(fields) < 64:
        start = pos
        while pos < length and tail[pos] in " \t":
            pos += 1
        if pos == start or pos >= length:
            return fields if pos >= length else None
        space = tail[start:pos]
        if len(space) > MAX_SPACE_RUN:
            return None
        if tail[pos] == '"':
            end = tail.find('"', pos + 1)
            if end < 0:
                return None
            fields.append((space, tail[pos + 1:end], True))
            pos = end + 1
            continue
        end = pos
        while end < length and tail[end] not in " \t":
            if tail[end] == '"':  # key="value with spaces"
                close = tail.find('"', end + 1)
                if close < 0:
                    return None
                end = close
            end += 1
        fields.append((space, tail[pos:end], False))
        pos = end
    return fields if pos >= length else None


def _key_value(field: str) -> tuple[str, str | None] | None:
    """(key, quoted value or None) of ``key=value`` / ``key="value"``; None when the field is not one."""
    key, equals, value = field.partition("=")
    if not equals or not key or not (key[0].isalpha() or key[0] == "_") or len(key) > 64:
        return None
    if not all(c.isalnum() or c in "_.-" for c in key):
        return None
    if value.startswith('"') and value.endswith('"') and len(value) >= 2:
        return key, value[1:-1]
    return (key, None) if '"' not in value else None


def derive_nginx_format(line: str) -> str | None:
    """A ``log_format`` string for a line that starts like ``combined`` and has more fields after it.

    ``key=value`` / ``key="value"`` fields with well-known keys (``rt``, ``urt``, ``ua``, ``us``, ``request_time``,
    ``upstream_addr``...) become those variables; any other field becomes an unnamed variable. None when the line
    does not start like ``combined``.
    """
    if len(line) > MAX_DERIVE_CHARS:
        return None
    found = _combined_prefix().match(line)
    if found is None:
        return None
    tail = line[found.end():]
    if not tail.strip():
        return None
    fields = _tail_fields(tail)
    if not fields:
        return None
    pairs = [None if quoted else _key_value(field) for _, field, quoted in fields]
    parts: list[str] = []
    if all(pair is not None for pair in pairs):
        for index, ((space, _, _), pair) in enumerate(zip(fields, pairs, strict=True)):
            assert pair is not None
            key, quoted_value = pair
            var = KEY_ALIASES.get(key.lower(), f"field_{index}")
            parts.append(f'{space}{key}="${var}"' if quoted_value is not None else f"{space}{key}=${var}")
    else:
        for index, (space, _, quoted) in enumerate(fields):
            parts.append(f'{space}"$field_{index}"' if quoted else f"{space}$field_{index}")
    return NGINX_COMBINED + "".join(parts)

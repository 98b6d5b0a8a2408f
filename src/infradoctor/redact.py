"""Secrets never land in stored runs or reports: headers, cookies, tokens in URLs and argv are redacted."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "[REDACTED]"
USERINFO_REDACTED = "REDACTED"
"""What stands for ``user:password`` in a URL (``http://REDACTED@host``): letters only, so the URL still parses
(``http://[REDACTED]@host`` reads as an IPv6 literal to ``urlsplit``, and any presenter of the URL fails)."""

_SECRET_NAME = re.compile(
    r"^(?:x_)?(?:authorization|proxy_authorization|cookie|set_cookie|api_?key|access_token|refresh_token|id_token|"
    r"auth_token|bearer_token|token|secret|client_secret|password|passwd|pwd|private_key|session|session_?id|sid|"
    r"signature|sig|credentials?|amz_security_token|goog_api_key|auth)$"
)
_SECRET_SUFFIX = re.compile(
    r"_(?:password|passwd|pass|secret|api_?key|key|token|access_token|auth_token|bearer_token|private_key|"
    r"credentials?)$"
)
_COOKIE_NAME = re.compile(r"^(?:x_)?(?:set_)?cookie$")
# ``key=value``, ``key: value``, ``"key": "value"`` (also JSON escaped inside a string) anywhere in free text: the
# key and its separator; the key decides (is_secret_key), then :func:`_value_end` finds where the value ends.
_KEY_SEP = re.compile(
    r"""(?P<q>\\?["']|)(?<![A-Za-z0-9_.-])(?P<key>[A-Za-z][A-Za-z0-9_.-]{1,60})(?P=q)"""  # a key starts a run: linear
    r"""(?P<sep>[ \t]*[:=][ \t]*)(?P<vq>\\?["']|)"""
)
_BARE_VALUE = re.compile(r"""[^\s"'&,;{}]+""")
# ``Authorization=Bearer TOKEN``: an unquoted value that is an auth scheme goes on to the credentials after it.
_SCHEME_WORDS = frozenset(("bearer", "basic", "digest", "negotiate", "ntlm", "token", "dpop", "hoba", "mutual"))
_SCHEME_CREDENTIALS = re.compile(r"""[ \t]+[^\s"'&,;{}]+""")
# ``cookie: a=1; sid=SECRET``: every pair of an unquoted cookie value.
_COOKIE_PAIRS = re.compile(r"""(?:;[ \t]*[^\s"'&,;{}=]{1,256}=[^\s"'&,;{}]*)+""")
_LITERALS = frozenset(("null", "true", "false", "none"))
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?(?:ms|s|us)?$")  # measurements such as time_to_first_token=12.5
# ``--api-key VALUE`` inside a command line stored as one string.
_FLAG_SPACE_VALUE = re.compile(r"(?P<flag>(?<!\S)--?[A-Za-z][A-Za-z0-9_-]+)(?P<sep>\s+)(?P<value>[^\s-]\S*)")
# Values that look like secrets wherever they appear in free text.
_INLINE_PATTERNS = (
    re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),  # OpenAI-style keys
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),  # Hugging Face tokens
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),  # GitHub tokens
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # JWTs
)
_HEADER_LINE = re.compile(
    r"(?i)^(\s*(?:authorization|proxy-authorization|cookie|set-cookie|x-api-key|api-key|x-auth-token)\s*:\s*).+$"
)
_QUERY_KEYS = (
    r"access_token|refresh_token|id_token|api[_-]?key|apikey|token|key|sig|signature|password|passwd|pwd|secret|"
    r"client_secret|auth|authorization|cookie|session|session_?id|sessionid|sid|code|state|otp|credentials?|"
    r"x-amz-[a-z-]+|x-goog-[a-z-]+|se?ig|jwt|assertion|ticket|nonce"
)
_QUERY_SECRET = re.compile(rf"([?&;](?:{_QUERY_KEYS})=)[^&\s\"'#]+", re.IGNORECASE)
_QUERY_KEY = re.compile(rf"^(?:{_QUERY_KEYS})$", re.IGNORECASE)
# ``user:password@host`` without a scheme (Envoy's upstream_host, a DSN in a log line, a bare proxy address).
_USERINFO = re.compile(
    # the look-behind lets a match start only where a run of user characters starts: linear on hostile lines.
    # ``=``, ``;``, ``,``, ``&``, quotes and parentheses end a user (``upstream_host=bob:pw@h`` keeps its key).
    r"(?<![A-Za-z0-9._~%!$*+/@:-])([A-Za-z0-9._~%!$*+-]{1,256}):([^\s@/:?#\[\]]{1,256})@"
    r"(?=[A-Za-z0-9.\[-])"
)
# A scheme starts where a run of scheme characters starts: linear, not quadratic, on a long run of letters.
_URL_IN_TEXT = re.compile(r"(?<![a-zA-Z0-9+.-])[a-zA-Z][a-zA-Z0-9+.-]{0,31}://[^\s\"'<>]+")
_FLAG_WITH_VALUE = re.compile(r"^(--?[A-Za-z0-9_-]+)=(.+)$")


def _key_name(key: str) -> str:
    return key.strip().lower().replace("-", "_")


def is_secret_key(key: str) -> bool:
    """True when a header, field or parameter name usually holds a secret."""
    name = _key_name(key)
    return bool(_SECRET_NAME.match(name) or _SECRET_SUFFIX.search(name))


def _secret_query_key(key: str) -> bool:
    """A URL parameter that carries a secret.

    The secret names, plus session ids, OAuth codes and signed-URL parameters (``?session=``, ``?code=``,
    ``X-Amz-Signature``), which are credentials when they are in a URL.
    """
    return is_secret_key(key) or bool(_QUERY_KEY.match(key.strip()))


def redact_url(url: str) -> str:
    """URL with user:password and secret-looking query parameters replaced."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url, _urls=False)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{USERINFO_REDACTED}@{netloc.rsplit('@', 1)[1]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_secret_query_key(k) for k, _ in pairs):
            query = urlencode([(k, REDACTED if _secret_query_key(k) else v) for k, v in pairs], safe="[]")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str, *, _urls: bool = True) -> str:
    """Free text (log lines, argv items, notes) with tokens, keys and credentials in URLs replaced."""
    if _HEADER_LINE.match(text):
        return _HEADER_LINE.sub(lambda m: m.group(1) + REDACTED, text)
    flag = _FLAG_WITH_VALUE.match(text)
    if flag and is_secret_key(flag.group(1).lstrip("-")):
        return f"{flag.group(1)}={REDACTED}"
    out = text
    if _urls and "://" in out:
        out = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), out)
    if "@" in out:
        out = _USERINFO.sub(f"{USERINFO_REDACTED}@", out)
    if "=" in out:
        out = _QUERY_SECRET.sub(lambda m: m.group(1) + REDACTED, out)
    for pattern in _INLINE_PATTERNS:
        out = pattern.sub(_keep_scheme, out)
    if ":" in out or "=" in out:
        out = _redact_key_values(out)
    if "-" in out:
        out = _FLAG_SPACE_VALUE.sub(_redact_flag_value, out)
    return out


def _redact_key_values(text: str) -> str:
    """Every value of a secret key replaced, whatever it holds.

    A quoted value up to its closing quote (a scheme word and a token, a passphrase with spaces, cookie pairs), an
    unquoted one to the end of its field (with the credentials after an auth scheme word, every pair of a cookie).
    A key that is not secret is stepped over, not its value: ``{"msg": "authorization=Bearer X"}`` is read inside.
    One pass, linear: each search starts past the previous key, each value is scanned once.
    """
    parts: list[str] = []
    done = 0  # text[:done] is in parts
    pos = 0
    while True:
        match = _KEY_SEP.search(text, pos)
        if match is None:
            break
        key = match.group("key").rsplit(".", 1)[-1]
        if not is_secret_key(key):
            pos = match.end("key")
            continue
        start = match.end()
        end, value = _value_end(text, start, match.group("vq"), key)
        pos = max(end, match.end("key"))
        if not value or value == REDACTED or _kept_value(key, value, quoted=bool(match.group("vq"))):
            continue
        parts += [text[done:start], REDACTED]
        done = end
    if not parts:
        return text
    parts.append(text[done:])
    return "".join(parts)


def _value_end(text: str, start: int, quote: str, key: str) -> tuple[int, str]:
    """Where the value that starts at ``start`` ends (its closing quote, or the end of its field) and the value."""
    if quote:
        end = _closing_quote(text, start, quote)
        return end, text[start:end]
    bare = _BARE_VALUE.match(text, start)
    if bare is None:
        return start, ""
    end = bare.end()
    if bare.group().lower() in _SCHEME_WORDS:
        credentials = _SCHEME_CREDENTIALS.match(text, end)
        if credentials is not None:
            end = credentials.end()
    if _COOKIE_NAME.match(_key_name(key)):
        pairs = _COOKIE_PAIRS.match(text, end)
        if pairs is not None:
            end = pairs.end()
    return end, text[start:end]


def _closing_quote(text: str, start: int, quote: str) -> int:
    r"""Index of the quote that closes a value opened at ``start`` by ``quote``: ``"``, ``'`` or JSON-escaped ``\"``.

    A value left open ends with its line.
    """
    i = start
    while True:
        j = text.find(quote, i)
        newline = text.find("\n", i, len(text) if j < 0 else j)
        if newline >= 0:
            return newline
        if j < 0:
            return len(text)
        if len(quote) == 2:  # an escaped quote (``\"``) is closed by the next escaped one
            return j
        k = j
        while k > i and text[k - 1] == "\\":
            k -= 1
        if (j - k) % 2 == 0:  # not escaped itself
            return j
        i = j + 1


def _kept_value(key: str, value: str, *, quoted: bool) -> bool:
    """A value of a secret-looking key that is not a secret: a measurement or a JSON literal.

    ``time_to_first_token=12.5`` and ``token=null`` stay; a number under an exact secret name (``password=1234``)
    is still a secret.
    """
    if not quoted and value.lower() in _LITERALS:
        return True
    return bool(_NUMBER.match(value)) and not _SECRET_NAME.match(_key_name(key))


def _redact_flag_value(match: re.Match[str]) -> str:
    if not is_secret_key(match.group("flag").lstrip("-")):
        return match.group(0)
    return f"{match.group('flag')}{match.group('sep')}{REDACTED}"


def _keep_scheme(match: re.Match[str]) -> str:
    word = match.group(0).split(None, 1)
    if len(word) == 2 and word[0].lower() in ("bearer", "basic", "token"):
        return f"{word[0]} {REDACTED}"
    return REDACTED


def redact_argv(argv: Sequence[str]) -> list[str]:
    """Command line with secret flag values (``--api-key X``, ``--token=X``, ``-H 'Authorization: ...'``) hidden."""
    out: list[str] = []
    hide_next = False
    for item in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        lowered = item.lower()
        if lowered.startswith("-") and "=" not in item and is_secret_key(lowered.lstrip("-")):
            out.append(item)
            hide_next = True
            continue
        out.append(redact_text(item))
    return out


def redact(value: Any) -> Any:
    """Deep copy of a JSON-like value with every secret redacted (keys by name, strings by content)."""
    if isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for key, item in value.items():
            skey = redact_text(str(key))  # keys carry URLs too (a distribution per backend URL)
            if is_secret_key(skey) and isinstance(item, (str, bytes)) and item:
                result[skey] = REDACTED
            elif is_secret_key(skey) and isinstance(item, (list, tuple)) and all(isinstance(x, str) for x in item):
                result[skey] = [REDACTED if x else x for x in item]
            elif skey in ("argv", "command") and isinstance(item, list):
                result[skey] = redact_argv([str(x) for x in item])
            else:
                result[skey] = redact(item)
        return result
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(item, str) for item in value):
            return redact_argv(value)  # a command line as a list: ``["--api-key", "AK1"]``
        return [redact(item) for item in value]
    if isinstance(value, str):
        return redact_text(value)
    return value

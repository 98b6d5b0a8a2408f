"""Secrets never land in stored runs, reports or the terminal: keys and values, URLs with or without a scheme."""

from __future__ import annotations

import time

from infradoctor.redact import REDACTED, redact, redact_text, redact_url


def test_mapping_keys_are_redacted_too() -> None:
    # a distribution per backend URL: the URL is a key
    out = redact({"http://bob:S3CRET@host/v1?key=K3Y": [1.0], "code": "P001"})
    assert list(out) == [f"http://{REDACTED}@host/v1?key={REDACTED}", "code"]
    assert "S3CRET" not in str(out) and "K3Y" not in str(out)


def test_userinfo_without_a_scheme_and_wider_url_parameters() -> None:
    assert redact({"upstream_host": "bob:pw@10.0.0.1:80"}) == {"upstream_host": f"{REDACTED}@10.0.0.1:80"}
    url = "https://app/cb?code=abc&state=xyz&session=s1&X-Amz-Signature=q&X-Amz-Credential=c&page=2"
    out = redact_url(url)
    assert "abc" not in out and "xyz" not in out and "s1" not in out and "=q" not in out and "page=2" in out
    assert redact_text("GET /login?session=deadbeef HTTP/1.1") == f"GET /login?session={REDACTED} HTTP/1.1"
    assert redact({"code": "C003", "codes": ["P001"]}) == {"code": "C003", "codes": ["P001"]}  # finding codes stay
    assert redact_text("email a@b.com at 10.0.0.1") == "email a@b.com at 10.0.0.1"


def test_redaction_is_linear_on_hostile_lines() -> None:
    for line in ("y" * 100_000 + "://a", "k" * 100_000 + "=v", "x:" + "y" * 100_000 + "@", "a=b " * 25_000):
        start = time.perf_counter()
        redact_text(line)
        assert time.perf_counter() - start < 1.0  # quadratic versions took 0.4-17 s per 100 KB

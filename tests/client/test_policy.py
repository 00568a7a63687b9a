"""The default ban policy, rule by rule, and its override."""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest
from egress_proxies_client import (
    BanPolicy,
    Classification,
    ProxyBannedError,
    ProxyRateLimitedError,
    Verdict,
)

pytestmark = pytest.mark.client

POLICY = BanPolicy()


def wrapped(error: Exception, cause: Exception) -> Exception:
    """`error` raised from `cause`, as Scrapy wraps Twisted's errors."""
    error.__cause__ = cause
    return error


BANNED, RATE_LIMITED = Verdict.BANNED, Verdict.RATE_LIMITED


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (403, {}, Classification(BANNED, "http_403")),
        (403, {"Retry-After": "60"}, Classification(BANNED, "http_403")),
        (429, {}, Classification(RATE_LIMITED, "http_429")),
        (429, {"Retry-After": "7"}, Classification(RATE_LIMITED, "http_429", 7.0)),
        (503, {"retry-after": "30"}, Classification(RATE_LIMITED, "http_503", 30.0)),
        (200, {}, None),
        (404, {}, None),
        (500, {}, None),
    ],
)
def test_status_rules(status: int, headers: dict[str, str], expected: object) -> None:
    assert POLICY.classify_response(status, headers, b"fine") == expected


def test_retry_after_as_an_http_date() -> None:
    when = email.utils.formatdate(time.time() + 120, usegmt=True)
    found = POLICY.classify_response(429, {"Retry-After": when})
    assert found is not None and found.retry_after is not None
    assert 115 <= found.retry_after <= 120


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'<div class="g-recaptcha" data-sitekey="x"></div>', "captcha"),
        ('<script src="https://js.hcaptcha.com/1/api.js">', "captcha"),
        (b"<title>Just a moment...</title><div id='cf-chl-widget'>", "challenge"),
        (b"<title>Attention Required! | Cloudflare</title>", "challenge"),
    ],
)
def test_body_markers_on_a_200_are_bans(body: str | bytes, reason: str) -> None:
    assert POLICY.classify_response(200, {}, body) == Classification(BANNED, reason)


def test_body_patterns_are_configurable() -> None:
    policy = BanPolicy(body_patterns={"blocked": r"Access denied"})
    assert policy.classify_response(200, {}, "Access denied")
    assert policy.classify_response(200, {}, '<div class="g-recaptcha">') is None


@pytest.mark.parametrize(
    "error",
    [
        httpx.ProxyError("tunnel"),
        httpx.ConnectError("refused"),
        ConnectionRefusedError(),
        type("TunnelError", (Exception,), {})("Could not open CONNECT tunnel"),
        wrapped(RuntimeError("download failed"), ConnectionResetError()),
    ],
)
def test_tunnel_and_connect_failures_count_against_the_proxy(error: BaseException) -> None:
    found = POLICY.classify_exception(error)
    assert found == Classification(BANNED, "tunnel_failed", against_proxy=True)


def test_raised_refusals_and_other_exceptions() -> None:
    assert POLICY.classify_exception(ProxyBannedError("captcha")) == Classification(
        BANNED, "captcha"
    )
    assert POLICY.classify_exception(ProxyRateLimitedError("http_429", 3)) == Classification(
        RATE_LIMITED, "http_429", 3
    )
    assert POLICY.classify_exception(ValueError("a parser bug")) is None
    assert POLICY.classify_exception(httpx.ReadTimeout("slow site")) is None


def test_the_override_decides_first_and_none_falls_through() -> None:
    def override(**seen: object) -> str | None:
        if seen.get("status") == 403:
            return "ok"  # this site answers 403 for missing pages
        if seen.get("body") == b"slow down":
            return "rate_limited"
        if isinstance(seen.get("exception"), KeyError):
            return "banned"
        return None

    policy = BanPolicy(override=override)
    assert policy.classify_response(403, {}) is None
    assert policy.classify_response(200, {"Retry-After": "5"}, b"slow down") == Classification(
        RATE_LIMITED, "http_200", 5.0
    )
    assert policy.classify_response(429, {}) == Classification(RATE_LIMITED, "http_429")
    assert policy.classify_exception(KeyError("x")) == Classification(BANNED, "key_error")

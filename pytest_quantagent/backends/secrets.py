"""Keeping API keys out of everything the harness prints or stores.

A key is held as a :class:`pydantic.SecretStr` from the moment it is read from the
environment (its ``repr`` and ``str`` are ``'**********'``, so a traceback's frame locals —
``pytest -l`` — show nothing); it is revealed only where the request header is set. Any
server text that is stored or printed goes through :func:`redact` (the key itself, bearer
tokens, ``api_key=...`` pairs), and URLs are shown through :func:`without_userinfo`.

**Credentials in a URL** (``http://user:password@host/v1``) are one rule for every remote
model (arms, LLM user, judge), the pre-flight and the run alike, with either HTTP client:
they are sent as HTTP Basic authentication (``Authorization: Basic``, from
:func:`basic_authorization`) and removed from the URL itself, so no request line, log line
or shown URL holds them. An Authorization header holds one credential, so a URL with
credentials *and* an ``api_key_env`` (sent as ``Authorization: Bearer``) is a configuration
error naming the model (:func:`credentials_conflict`), never one silently replacing the other.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

from pydantic import SecretStr

REDACTED = "[REDACTED]"

_BEARER_RE = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{4,}")
_KEY_PAIR_RE = re.compile(r"""(?i)\b(api[_-]?key|access[_-]?token|authorization)(["']?\s*[:=]\s*["']?)"""
                          r"""(?!(?:bearer|basic)\s|\[REDACTED\])[^\s"',}&]{4,}""")


def without_userinfo(url: str) -> str:
    """``http://user:secret@host/v1`` → ``http://host/v1`` (shown URLs never hold secrets)."""
    try:
        u = urlsplit(url)
        if u.username is None and u.password is None:
            return url
        return u._replace(netloc=u.netloc.rpartition("@")[2]).geturl()
    except ValueError:
        return "<unparseable URL>"


def url_credentials(url: str) -> tuple[str, str] | None:
    """``(user, password)`` of a URL's userinfo, percent-decoded; None when it has none."""
    try:
        u = urlsplit(url)
    except ValueError:
        return None
    if u.username is None and u.password is None:
        return None
    return unquote(u.username or ""), unquote(u.password or "")


def basic_authorization(url: str) -> str | None:
    """The ``Authorization`` header value for a URL's credentials (``Basic <base64>``), or
    None when the URL has none."""
    creds = url_credentials(url)
    if creds is None:
        return None
    return "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode("ascii")


def credentials_conflict(urls: Iterable[str], key_from: str | None) -> str | None:
    """Why a model's URLs and its key (``key_from`` names where the key comes from, e.g.
    ``"api_key_env 'MY_KEY'"``; None: no key) cannot both be sent (one Authorization
    header), or None."""
    if not key_from:
        return None
    for url in urls:
        if url_credentials(url) is not None:
            return (f"base_url {without_userinfo(url)!r} carries a user name and password "
                    f"(sent as HTTP Basic authentication) and {key_from} gives a key (sent as "
                    "Bearer); a request has one Authorization header: drop the user:password@ "
                    "from the URL or the key")
    return None


def redact(text: str, secrets: Iterable[SecretStr | str | None] = ()) -> str:
    """``text`` without the given secrets, bearer/basic tokens, ``api_key=...`` pairs and
    URL credentials."""
    for s in secrets:
        value = s.get_secret_value() if isinstance(s, SecretStr) else s
        if value and len(value) >= 4:
            text = text.replace(value, REDACTED)
    text = _BEARER_RE.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _KEY_PAIR_RE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return re.sub(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/@\s]+@", rf"\1{REDACTED}@", text)

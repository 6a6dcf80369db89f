"""Keeping API keys out of everything the harness prints or stores.

A key is held as a :class:`pydantic.SecretStr` from the moment it is read from the
environment (its ``repr`` and ``str`` are ``'**********'``, so a traceback's frame locals —
``pytest -l`` — show nothing); it is revealed only where the request header is set. Any
server text that is stored or printed goes through :func:`redact` (the key itself, bearer
tokens, ``api_key=...`` pairs), and URLs are shown through :func:`without_userinfo`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

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

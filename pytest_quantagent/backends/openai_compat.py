"""OpenAI-compatible chat completions (vLLM, SGLang, llama.cpp, OpenAI, ...): the backend.

Defaults keep failures observable: ``tool_choice="auto"`` and no ``strict`` schemas, so a
model that invents a tool or writes broken JSON is recorded as such rather than being forced
into a valid call by constrained decoding. Constrained decoding is available only as an
explicitly labelled option (``constrained = true`` in the arm's TOML table), which is part of
the arm's cache key.

The backend builds and encodes the request body (re-using what earlier calls of the same
conversation encoded), sends it through its :class:`~pytest_quantagent.backends.endpoints.EndpointPool`
and maps the answer onto the failure taxonomy. Its parts:

- :mod:`~pytest_quantagent.backends.http_client`: the transport (one connection pool per
  endpoint, sized to the run's concurrency: the native HTTP/1.1 client for ``http://``,
  ``httpx`` for ``https://`` or ``http_client = "httpx"``), size caps, redirects, Retry-After;
- :mod:`~pytest_quantagent.backends.endpoints`: several endpoints per arm (failover, ejection,
  health probes, figures);
- :mod:`~pytest_quantagent.backends.openai_parse`: the response body → ``Generation``
  (output caps, tool-call shapes, tool-name decisions);
- :mod:`~pytest_quantagent.backends.json_codec`: orjson or the standard library's JSON.

The API key is read from the environment variable the config names and only ever placed in
the request header: it is not an attribute of the arm, not in ``describe()``, not in error
messages.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr

from pytest_quantagent.backends import json_codec
from pytest_quantagent.backends.base import Backend, BackendOptions, GenerateRequest, Generation
from pytest_quantagent.backends.endpoints import Endpoint, EndpointPool
from pytest_quantagent.backends.http_client import (
    BackendHTTPError,
    HTTPRedirect,
    NativeHTTPClient,
    httpx_request,
    parse_retry_after,
    redirect_cause,
    set_bearer,
)
from pytest_quantagent.backends.openai_parse import (
    DEFAULT_MAX_OUTPUT_CHARS,
    BadResponseError,
    parse_response,
)
from pytest_quantagent.backends.secrets import (
    basic_authorization,
    credentials_conflict,
    redact,
    without_userinfo,
)
from pytest_quantagent.backends.spec import BackendSpec
from pytest_quantagent.errors import ConfigurationError, ContextOverflowError

HTTP_CLIENTS: tuple[str, ...] = ("auto", "native", "httpx")

_CONTEXT_RE = re.compile(r"(?i)(maximum context length|context length|context window|too many tokens|"
                         r"prompt is too long|max_model_len)")

#: Responses at least this long are decoded in a worker thread, not on the event loop.
PARSE_IN_THREAD_BYTES = 1 << 20


@dataclass
class _Prefix:
    """The encoded messages of one conversation's last request (see ``encode_body``)."""

    messages: list[dict[str, Any]]
    """The messages encoded (a copy of the request's list; holds them alive, so the key, the
    first one's id, stays theirs)."""
    pieces: list[bytes]
    """Encoded messages with ``b","`` between them."""


class OpenAICompatBackend(Backend):
    """Chat completions against ``base_url``."""

    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: SecretStr | None = None,
        concurrency: int = 8,
        timeout_s: float = 120.0,
        constrained: bool = False,
        logprobs: bool = True,
        extra_body: dict[str, Any] | None = None,
        http_client: str = "auto",
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        endpoints: Sequence[tuple[str, float]] | None = None,
    ) -> None:
        # Everything that can fail is checked before the key is touched, and the key is
        # revealed only inside the client's set_key/header update (never a local here).
        if isinstance(api_key, str):
            api_key = SecretStr(api_key)
        if http_client not in HTTP_CLIENTS:
            raise ValueError(f"http_client ({http_client!r}) must be one of {', '.join(HTTP_CLIENTS)}")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"max_connections ({concurrency!r}) must be an integer >= 1")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not (
                math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"timeout_s ({timeout_s!r}) must be a finite number of seconds > 0")
        if max_output_chars < 1:
            raise ValueError(f"max_output_chars ({max_output_chars!r}) must be >= 1")
        pairs = list(endpoints) if endpoints else [(base_url, 1.0)]
        for url, weight in pairs:
            shown = without_userinfo(url)
            scheme = urlsplit(url).scheme if "://" in url else ""
            if scheme not in ("http", "https") or not urlsplit(url).hostname:
                raise ConfigurationError(
                    f"base_url {shown!r} must be an http:// or https:// URL with a host "
                    "(e.g. http://127.0.0.1:8000/v1)")
            if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight > 0):
                raise ValueError(f"endpoint {shown!r}: weight ({weight!r}) must be a number > 0")
        if len({u.rstrip("/") for u, _ in pairs}) != len(pairs):
            raise ValueError("endpoints: the same URL is listed twice")
        conflict = credentials_conflict([u for u, _ in pairs], "the api_key" if api_key else None)
        if conflict is not None:
            raise ConfigurationError(conflict)
        self.model = model
        self.base_url = pairs[0][0].rstrip("/")
        self.shown_url = without_userinfo(self.base_url)
        self.constrained = constrained
        self.logprobs = logprobs
        self.extra_body = dict(extra_body or {})
        self.max_output_chars = max_output_chars
        self.timeout_s = float(timeout_s)
        self.served_model: str | None = None
        """The model id the server reported in pre-flight (``GET /models``), when known."""
        self._api_key = api_key
        use_native = http_client == "native" or (
            http_client == "auto" and all(u.startswith("http://") for u, _ in pairs)
        )
        self.http_client = "native" if use_native else "httpx"
        self.pool = EndpointPool([
            Endpoint(url.rstrip("/"), float(weight),
                     self._transport(url.rstrip("/"), use_native, concurrency, timeout_s, api_key))
            for url, weight in pairs
        ], timeout_s=self.timeout_s)
        self.endpoints = self.pool.endpoints
        ep0 = self.endpoints[0]
        self._native = ep0.transport if isinstance(ep0.transport, NativeHTTPClient) else None
        self._client = ep0.transport if isinstance(ep0.transport, httpx.AsyncClient) else None
        self._strict_tools_cache: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None
        self._enc_cache: dict[int, tuple[Any, bytes]] = {}
        self._prefix_cache: dict[int, _Prefix] = {}

    @staticmethod
    def _transport(url: str, native: bool, concurrency: int, timeout_s: float,
                   api_key: SecretStr | None) -> NativeHTTPClient | httpx.AsyncClient:
        if native:
            client = NativeHTTPClient(url, {}, max_connections=concurrency, timeout_s=timeout_s)
            if api_key is not None:
                client.set_key(api_key)
            return client
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        basic = basic_authorization(url)  # sent as a header; the URL (and httpx's log) without it
        hx = httpx.AsyncClient(base_url=without_userinfo(url), headers={
            "Content-Type": "application/json", **({"Authorization": basic} if basic else {})},
                               timeout=httpx.Timeout(timeout_s), limits=limits)
        if api_key is not None:
            set_bearer(hx.headers, api_key)
        return hx

    def __repr__(self) -> str:
        if self.pool.single is None:
            return (f"OpenAICompatBackend(endpoints={[e.shown for e in self.endpoints]!r}, "
                    f"model={self.model!r})")
        return f"OpenAICompatBackend(base_url={self.shown_url!r}, model={self.model!r})"

    def redact(self, text: str) -> str:
        """Server text made safe to store or print (no key, no bearer token, no URL creds)."""
        return redact(text, (self._api_key,))

    def identity(self) -> dict[str, Any]:
        """The arm's serving identity for the cache key: the served model id and where it is
        served (URL without credentials; with several endpoints the sorted set of them, so the
        key never depends on which endpoint answered a request, nor on weights); never the key."""
        served = self.served_model or self.model
        if self.pool.single is not None:
            return {"url": self.shown_url, "served_model": served}
        return {"urls": sorted(e.shown for e in self.endpoints), "served_model": served}

    def endpoint_stats(self) -> list[dict[str, Any]]:
        return self.pool.stats()

    def is_retryable(self, exc: BaseException) -> bool:
        if isinstance(exc, BackendHTTPError):
            return exc.retryable
        return isinstance(
            exc, (httpx.TimeoutException, httpx.TransportError, BadResponseError, TimeoutError, ConnectionError)
        )

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "version": self.version(),
            "model": self.model,
            "base_url": self.shown_url,
            **({} if self.pool.single is not None else {"endpoints": [e.shown for e in self.endpoints]}),
            "served_model": self.served_model,
            "constrained": self.constrained,
            "http_client": self.http_client,
        }

    def _tools(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not self.constrained:
            return tools
        # Schemas are built once per domain, so the same list object comes back every call.
        cached = self._strict_tools_cache
        if cached is not None and cached[0] is tools:
            return cached[1]
        strict = [{**t, "function": {**t["function"], "strict": True}} for t in tools]
        self._strict_tools_cache = (tools, strict)
        return strict

    def build_body(self, request: GenerateRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
            "seed": request.seed,
        }
        if request.tools:
            body["tools"] = self._tools(request.tools)
            body["tool_choice"] = "auto"
        if self.logprobs and request.want_margins:
            body["logprobs"] = True
            body["top_logprobs"] = 2
        body.update(self.extra_body)
        return body

    def _encoded(self, obj: Any) -> bytes:
        """JSON of a large object that recurs across calls (tool list, system prompt),
        encoded once. Keyed by identity; the cache holds the object so the id stays valid."""
        hit = self._enc_cache.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        if len(self._enc_cache) >= 64:
            self._enc_cache.clear()
        data = json_codec.dumps(obj)
        self._enc_cache[id(obj)] = (obj, data)
        return data

    def _encode_message(self, m: dict[str, Any]) -> bytes:
        content = m.get("content")
        if m.get("role") == "system" and isinstance(content, str) and len(m) == 2:
            return b'{"role":"system","content":' + self._encoded(content) + b"}"
        return json_codec.dumps(m)

    def encode_body(self, request: GenerateRequest) -> bytes:
        """The request body, byte-identical in meaning to ``json.dumps(build_body(request))``
        but re-using what earlier calls of the same conversation already encoded.

        A conversation's requests share a growing prefix of the very same message objects
        (the caller never mutates a message it has sent, see :class:`GenerateRequest`), so
        the encoded prefix is kept per conversation, keyed by its first message, and reused
        when the new request starts with exactly those objects (compared by identity; the
        entry holds them, so their ids cannot be reused). Only the new messages are encoded.
        """
        return b"".join(self.encode_body_parts(request))

    def encode_body_parts(self, request: GenerateRequest) -> list[bytes]:
        """:meth:`encode_body` as the pieces to join (the native client joins them with the
        HTTP head in one copy)."""
        body = self.build_body(request)
        messages: list[dict[str, Any]] = body.pop("messages")
        tools = body.pop("tools", None)
        entry = self._prefix_cache.get(id(messages[0])) if messages else None
        start = 0
        pieces: list[bytes] = []
        if entry is not None:
            n = len(entry.messages)
            # Element by element: identical objects compare at once (an equal one encodes
            # the same, so equality is enough).
            if n <= len(messages) and entry.messages[0] is messages[0] and messages[:n] == entry.messages:
                start, pieces = n, entry.pieces
        if start < len(messages):
            # ``pieces`` alternates encoded messages and commas. It is extended in place: it
            # belongs to the cache entry alone (joined before this returns), and the entry
            # is replaced below by one holding every message it now encodes.
            for m in messages[start:]:
                if pieces:
                    pieces.append(b",")
                pieces.append(self._encode_message(m))
            if entry is None and len(self._prefix_cache) >= 4096:
                self._prefix_cache.clear()
            if start and entry is not None:
                entry.messages = list(messages)
            else:
                self._prefix_cache[id(messages[0])] = _Prefix(list(messages), pieces)
        rest = json_codec.dumps(body)
        return [
            b'{"messages":[', *pieces, b"]",
            *((b',"tools":', self._encoded(tools)) if tools is not None else ()),
            b"," + rest[1:] if len(rest) > 2 else b"}",
        ]

    async def generate(self, request: GenerateRequest) -> Generation:
        parts = self.encode_body_parts(request)
        ep = self.pool.for_request(request)
        loop = asyncio.get_running_loop()
        ep.inflight += 1
        t0 = loop.time()
        try:
            transport = ep.transport
            if isinstance(transport, NativeHTTPClient):
                try:
                    status, content, retry_after = await transport.post("/chat/completions", parts)
                except HTTPRedirect as r:
                    self._raise_redirect(r.status, r.location, ep)
            else:
                status, content, headers = await httpx_request(
                    transport, "POST", "/chat/completions", content=b"".join(parts))
                retry_after = headers.get("retry-after")
                if 300 <= status < 400:
                    self._raise_redirect(status, headers.get("location"), ep)
            if status >= 400:
                self._raise_for_status(status, content, retry_after, ep)
            if len(content) < PARSE_IN_THREAD_BYTES:
                gen = self._parse(content, ep)
            else:  # a large body is decoded off the event loop (it would stall every arm)
                gen = await asyncio.to_thread(self._parse, content, ep)
        except Exception as exc:
            ep.inflight -= 1
            if self.is_retryable(exc):
                self.pool.failed(ep, exc, request, loop)
            raise
        ep.inflight -= 1
        ep.succeeded(loop.time() - t0)
        return gen

    def _parse(self, content: bytes, ep: Endpoint) -> Generation:
        return parse_response(content, max_chars=self.max_output_chars, source=ep.shown,
                              redact=self.redact)

    def _raise_redirect(self, status: int, location: str | None, ep: Endpoint | None = None) -> NoReturn:
        """A 3xx is the configuration's problem (a base URL that moved, http:// where the
        server wants https://), never retried and never the model's failure."""
        shown_url = ep.shown if ep is not None else self.shown_url
        raise ConfigurationError(
            f"{shown_url} (model {self.model!r}): "
            + redirect_cause(status, location, "/chat/completions", (self._api_key,)))

    def _raise_for_status(self, status: int, content: bytes, retry_after: str | None,
                          ep: Endpoint | None = None) -> None:
        """Map an error status onto the failure taxonomy: 5xx/408/429 → retried
        (:class:`BackendHTTPError`); a 400 about the context → :class:`ContextOverflowError`;
        any other 4xx → :class:`ConfigurationError` (the run stops; never an episode)."""
        body = self.redact(content.decode("utf-8", "replace"))
        shown_url = ep.shown if ep is not None else self.shown_url
        err = BackendHTTPError(status, body, parse_retry_after(retry_after), url=shown_url)
        if err.retryable:
            raise err
        if status in (400, 413) and _CONTEXT_RE.search(body):
            raise ContextOverflowError(f"HTTP {status}: {body[:300]}")
        cause = {401: "the API key was refused (check api_key_env)",
                 403: "access forbidden (check the API key and its permissions)",
                 404: f"not found: is {shown_url} the API root (…/v1) and is model "
                      f"{self.model!r} served there?"}.get(status, "the server refused the request")
        raise ConfigurationError(
            f"{shown_url} (model {self.model!r}): HTTP {status}: {cause}; server said: "
            f"{body[:300]}")

    async def aclose(self) -> None:
        await self.pool.aclose()


def create_backend(arm: BackendSpec, options: BackendOptions) -> OpenAICompatBackend:
    """Factory for ``backend = "openai"``; needs ``base_url`` and ``model``. Options are
    validated by :class:`~pytest_quantagent.backends.options.OpenAIOptions`."""
    from pytest_quantagent.backends.options import OpenAIOptions, arm_endpoints, validate_options

    opts = validate_options(OpenAIOptions, arm.options, where=f"arm {arm.label!r}")
    assert isinstance(opts, OpenAIOptions)
    endpoints = arm_endpoints(arm.base_url, {"endpoints": opts.endpoints} if opts.endpoints else {})
    if not endpoints:
        raise ValueError(f"arm {arm.label!r}: backend 'openai' needs base_url (e.g. http://127.0.0.1:8000/v1)")
    api_key: SecretStr | None = None
    if arm.api_key_env:
        api_key = SecretStr(os.environ.get(arm.api_key_env) or "")
        if not api_key.get_secret_value():
            raise ValueError(
                f"arm {arm.label!r}: environment variable {arm.api_key_env!r} (api_key_env) is not set"
            )
    try:
        return OpenAICompatBackend(
            base_url=endpoints[0][0],
            endpoints=endpoints,
            model=arm.model,
            api_key=api_key,
            concurrency=opts.max_connections or options.concurrency,
            timeout_s=opts.timeout_s or options.request_timeout_s,
            constrained=opts.constrained,
            logprobs=opts.logprobs,
            extra_body=opts.extra_body,
            http_client=opts.http_client,
            max_output_chars=opts.max_output_chars,
        )
    except ConfigurationError as e:
        raise ConfigurationError(f"arm {arm.label!r}: {e}") from None

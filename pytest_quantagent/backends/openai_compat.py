"""OpenAI-compatible chat completions over httpx (vLLM, SGLang, llama.cpp, OpenAI, ...).

Defaults keep failures observable: ``tool_choice="auto"`` and no ``strict`` schemas, so a
model that invents a tool or writes broken JSON is recorded as such rather than being forced
into a valid call by constrained decoding. Constrained decoding is available only as an
explicitly labelled option (``constrained = true`` in the arm's TOML table), which is part of
the arm's cache key.

One connection pool, sized to the run's concurrency, serves every request of the arm. For
``http://`` endpoints (a local vLLM/SGLang/llama.cpp server: the case where harness CPU
matters) the pool is a small keep-alive HTTP/1.1 client on asyncio streams: measured on this
project's 2-core machine against the loopback fake server, httpx spent 1.5 ms of CPU per
request at 8 connections and 8 ms at 64 (its pool scans every connection per request),
which alone caps a run far below the server's capacity. ``https://`` endpoints, or
``http_client = "httpx"`` in the arm's table, use ``httpx.AsyncClient`` (TLS, proxies). The API key is read from the environment variable the config names and
only ever placed in the request header: it is not an attribute of the arm, not in
``describe()``, not in error messages.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import httpx

from pytest_quantagent.backends.base import (
    Backend,
    BackendOptions,
    GenerateRequest,
    Generation,
    RawToolCall,
)
from pytest_quantagent.backends.wrapper import with_timeout
from pytest_quantagent.env.messages import Decision
from pytest_quantagent.quant.arms import ArmSpec

_ALLOWED_OPTIONS = frozenset(
    {"constrained", "logprobs", "timeout_s", "max_connections", "extra_body", "http_client"}
)
HTTP_CLIENTS: tuple[str, ...] = ("auto", "native", "httpx")


def _without_userinfo(url: str) -> str:
    """``http://user:secret@host/v1`` → ``http://host/v1`` (run metadata never holds secrets)."""
    u = urlsplit(url)
    if u.username is None and u.password is None:
        return url
    return u._replace(netloc=u.netloc.rpartition("@")[2]).geturl()


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


class BackendHTTPError(Exception):
    """The server answered with an error status (retryable for 5xx and 429)."""

    def __init__(self, status: int, body: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {body[:300]}")

    @property
    def retryable(self) -> bool:
        return self.status >= 500 or self.status in (408, 429)


class BadResponseError(Exception):
    """The server's answer was not a chat completion (truncated or garbled body): retried."""


class _HTTPConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: writes a request, frames the response.

    A plain :class:`asyncio.Protocol` rather than streams: the response is parsed straight
    from the bytes the loop hands over (``Content-Length`` or chunked, or up to EOF when
    neither is given), which costs about half the CPU of ``StreamReader`` per request.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[tuple[int, bool, bytes]] | None = None
        self.lost = False
        self._head: tuple[int, int, bool, int | None, bool] | None = None
        """(status, body start, keep-alive, content length, chunked) once the head is in."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's does not subclass asyncio.Transport).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.waiter is not None and not self.waiter.done():
            try:
                self._complete(eof=False)
            except ValueError as e:
                self.waiter.set_exception(e)

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        w = self.waiter
        if w is not None and not w.done():
            try:
                if not self._complete(eof=True):
                    w.set_exception(ConnectionError(
                        f"connection closed before the response was complete ({exc or 'EOF'})"))
            except ValueError as e:
                w.set_exception(e)

    def usable(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def request(self, payload: bytes) -> asyncio.Future[tuple[int, bool, bytes]]:
        """Send ``payload``; the future resolves to (status, keep-alive, body)."""
        assert self.transport is not None
        self.buf.clear()
        self._head = None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(payload)
        return self.waiter

    def _parse_head(self) -> bool:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return False
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ValueError(f"bad status line {lines[0][:80]!r}")
        status = int(parts[1])
        length: int | None = None
        chunked = False
        keep = parts[0] == "HTTP/1.1"
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding":
                chunked = "chunked" in value.lower()
            elif name == "connection":
                v = value.strip().lower()
                keep = v == "keep-alive" or (keep and v != "close")
        self._head = (status, end + 4, keep, length, chunked)
        return True

    def _complete(self, *, eof: bool) -> bool:
        """Resolve the waiter if the whole response is in ``buf``; True if it was."""
        if self._head is None and not self._parse_head():
            return False
        assert self._head is not None and self.waiter is not None
        status, start, keep, length, chunked = self._head
        if chunked:
            body = self._dechunk(start)
            if body is None:
                return False
            self.waiter.set_result((status, keep, body))
            return True
        if length is None:
            if not eof:
                return False
            self.waiter.set_result((status, False, bytes(self.buf[start:])))
            return True
        if len(self.buf) - start < length:
            return False
        self.waiter.set_result((status, keep, bytes(self.buf[start:start + length])))
        return True

    def _dechunk(self, pos: int) -> bytes | None:
        chunks: list[bytes] = []
        buf = self.buf
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
            pos = eol + 2
            if size == 0:
                return b"".join(chunks) if buf.find(b"\r\n", pos) >= 0 else None
            if len(buf) < pos + size + 2:
                return None
            chunks.append(bytes(buf[pos:pos + size]))
            pos += size + 2


def _expire(fut: asyncio.Future[Any], seconds: float) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError(f"no response within {seconds} s"))


class NativeHTTPClient:
    """Keep-alive HTTP/1.1 POSTs on asyncio protocols (plain ``http://`` only).

    One write per request (headers and body together, TCP_NODELAY), responses framed by
    ``Content-Length`` or chunked encoding. Any failure closes the connection and raises
    ``ConnectionError`` or ``TimeoutError`` (both retryable); an idle connection the server
    already closed is discarded before use, never sent on.
    """

    def __init__(self, base_url: str, headers: dict[str, str], *, max_connections: int,
                 timeout_s: float) -> None:
        u = urlsplit(base_url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"native HTTP client needs an http:// URL, got {base_url!r}")
        self.host = u.hostname
        self.port = u.port or 80
        self.prefix = u.path.rstrip("/")
        host_header = self.host if u.port is None else f"{self.host}:{u.port}"
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self._head_tail = f"Host: {host_header}\r\n{extra}Connection: keep-alive\r\n".encode()
        self.timeout_s = timeout_s
        self._idle: list[_HTTPConnection] = []
        self._sem = asyncio.Semaphore(max_connections)

    async def _connect(self) -> _HTTPConnection:
        loop = asyncio.get_running_loop()
        transport, conn = await loop.create_connection(_HTTPConnection, self.host, self.port)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """POST ``body`` (JSON) to ``path``; returns (status, response body)."""
        head = (f"POST {self.prefix}{path} HTTP/1.1\r\nContent-Length: {len(body)}\r\n"
                "Content-Type: application/json\r\n").encode() + self._head_tail + b"\r\n"
        async with self._sem:
            conn: _HTTPConnection | None = None
            while self._idle:
                c = self._idle.pop()
                if c.usable():
                    conn = c
                    break
                c.close()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.timeout_s
            try:
                if conn is None:
                    conn = await with_timeout(self._connect(), self.timeout_s)
                # The response future expires by itself at the deadline: no task
                # cancellation machinery on the path every request takes.
                fut = conn.request(head + body)
                timer = loop.call_at(deadline, _expire, fut, self.timeout_s)
                try:
                    status, keep, data = await fut
                finally:
                    timer.cancel()
            except TimeoutError:
                if conn is not None:
                    conn.close()
                raise TimeoutError(f"no response within {self.timeout_s} s") from None
            except (OSError, ValueError) as e:
                if conn is not None:
                    conn.close()
                raise ConnectionError(f"{type(e).__name__}: {e}") from e
            except BaseException:
                if conn is not None:
                    conn.close()
                raise
            if keep and conn.usable():
                self._idle.append(conn)
            else:
                conn.close()
            return status, data

    async def aclose(self) -> None:
        while self._idle:
            self._idle.pop().close()


@dataclass
class _Prefix:
    """The encoded messages of one conversation's last request (see ``encode_body``)."""

    ids: list[int]
    messages: list[dict[str, Any]]
    """Holds the messages alive so that their ids stay theirs."""
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
        api_key: str | None = None,
        concurrency: int = 8,
        timeout_s: float = 120.0,
        constrained: bool = False,
        logprobs: bool = True,
        extra_body: dict[str, Any] | None = None,
        http_client: str = "auto",
    ) -> None:
        if http_client not in HTTP_CLIENTS:
            raise ValueError(f"http_client ({http_client!r}) must be one of {', '.join(HTTP_CLIENTS)}")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.constrained = constrained
        self.logprobs = logprobs
        self.extra_body = dict(extra_body or {})
        headers: dict[str, str] = {}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        use_native = http_client == "native" or (
            http_client == "auto" and self.base_url.startswith("http://")
        )
        self.http_client = "native" if use_native else "httpx"
        self._native: NativeHTTPClient | None = None
        self._client: httpx.AsyncClient | None = None
        if use_native:
            self._native = NativeHTTPClient(self.base_url, headers, max_connections=concurrency,
                                            timeout_s=timeout_s)
        else:
            limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                headers={"Content-Type": "application/json", **headers},
                timeout=httpx.Timeout(timeout_s),
                limits=limits,
            )
        self._strict_tools_cache: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None
        self._enc_cache: dict[int, tuple[Any, bytes]] = {}
        self._prefix_cache: dict[int, _Prefix] = {}

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
            "base_url": _without_userinfo(self.base_url),
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
        data = _dumps(obj)
        self._enc_cache[id(obj)] = (obj, data)
        return data

    def _encode_message(self, m: dict[str, Any]) -> bytes:
        content = m.get("content")
        if m.get("role") == "system" and isinstance(content, str) and len(m) == 2:
            return b'{"role":"system","content":' + self._encoded(content) + b"}"
        return _dumps(m)

    def encode_body(self, request: GenerateRequest) -> bytes:
        """The request body, byte-identical in meaning to ``json.dumps(build_body(request))``
        but re-using what earlier calls of the same conversation already encoded.

        A conversation's requests share a growing prefix of the very same message objects
        (the caller never mutates a message it has sent, see :class:`GenerateRequest`), so
        the encoded prefix is kept per conversation, keyed by its first message, and reused
        when the new request starts with exactly those objects (compared by identity; the
        entry holds them, so their ids cannot be reused). Only the new messages are encoded.
        """
        body = self.build_body(request)
        messages: list[dict[str, Any]] = body.pop("messages")
        tools = body.pop("tools", None)
        ids = list(map(id, messages))
        entry = self._prefix_cache.get(ids[0]) if ids else None
        start = 0
        pieces: list[bytes] = []
        if entry is not None:
            n = len(entry.ids)
            if n <= len(ids) and ids[:n] == entry.ids:
                start, pieces = n, entry.pieces
        if start < len(ids):
            # ``pieces`` alternates encoded messages and commas; a cache entry is never
            # extended in place (an older request may still be using its list).
            pieces = list(pieces)
            for m in messages[start:]:
                if pieces:
                    pieces.append(b",")
                pieces.append(self._encode_message(m))
            if len(self._prefix_cache) >= 4096:
                self._prefix_cache.clear()
            self._prefix_cache[ids[0]] = _Prefix(ids, list(messages), pieces)
        rest = _dumps(body)
        return b"".join([
            b'{"messages":[', *pieces, b"]",
            *((b',"tools":', self._encoded(tools)) if tools is not None else ()),
            b"," + rest[1:] if len(rest) > 2 else b"}",
        ])

    async def generate(self, request: GenerateRequest) -> Generation:
        payload = self.encode_body(request)
        if self._native is not None:
            status, content = await self._native.post("/chat/completions", payload)
        else:
            assert self._client is not None
            resp = await self._client.post("/chat/completions", content=payload)
            status, content = resp.status_code, resp.content
        if status >= 400:
            raise BackendHTTPError(status, content.decode("utf-8", "replace"))
        try:
            data = json.loads(content)
            choice = data["choices"][0]
            message = choice["message"]
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise BadResponseError(f"not a chat completion: {content[:200]!r}") from e
        return parse_completion(message, choice.get("logprobs"), data.get("usage"))

    async def aclose(self) -> None:
        if self._native is not None:
            await self._native.aclose()
        if self._client is not None:
            await self._client.aclose()


_CALL_MARKUP = "<tool_call>"


def parse_completion(
    message: dict[str, Any], logprobs: dict[str, Any] | None, usage: dict[str, Any] | None
) -> Generation:
    """A chat-completion ``message`` (+ optional ``logprobs``/``usage``) → :class:`Generation`."""
    calls: list[RawToolCall] = []
    for i, tc in enumerate(message.get("tool_calls") or ()):
        fn = tc.get("function") or {}
        args = fn.get("arguments")
        if not isinstance(args, str):
            # Some servers send arguments already decoded; keep the call, re-encode.
            args = "" if args is None else json.dumps(args)
        calls.append(RawToolCall(id=str(tc.get("id") or f"call_{i}"), name=str(fn.get("name") or ""), arguments=args))
    content = original = message.get("content")
    if not calls and isinstance(content, str) and _CALL_MARKUP in content:
        # The server's tool parser gave up (e.g. vLLM's hermes parser on broken JSON) and
        # returned the model's tool-call markup as text. It is still a call, a malformed one:
        # read it with our own parser so the engine records malformed_call, not a message.
        from pytest_quantagent.reference.chat import parse_tool_calls

        turn = parse_tool_calls(content)
        calls = [RawToolCall(id=f"call_{i}", name=c.name, arguments=c.arguments)
                 for i, c in enumerate(turn.calls)]
        content = turn.content
    tokens = (logprobs or {}).get("content") or []
    decisions = tool_name_decisions(tokens, [c.name for c in calls]) if tokens and calls else []
    raw_text = "".join(t.get("token", "") for t in tokens) if tokens else original
    usage = usage or {}
    return Generation(
        content=content,
        tool_calls=calls,
        raw_text=raw_text,
        decisions=decisions,
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
    )


def tool_name_decisions(tokens: list[dict[str, Any]], names: list[str]) -> list[Decision]:
    """Top-1 vs top-2 logprob at the first token of each tool name in the generated text.

    The token stream is the text the model generated (tool-call markup included, as vLLM
    returns it); each name is located in order after the previous one. A name not found
    in the text, or a token without two alternatives, yields no decision.
    """
    starts: list[int] = []
    pos = 0
    for t in tokens:
        starts.append(pos)
        pos += len(t.get("token", ""))
    text = "".join(t.get("token", "") for t in tokens)
    out: list[Decision] = []
    search_from = 0
    tok_idx = 0
    for name in names:
        if not name:
            continue
        at = text.find(name, search_from)
        if at < 0:
            continue
        search_from = at + len(name)
        while tok_idx + 1 < len(starts) and starts[tok_idx + 1] <= at:
            tok_idx += 1
        top = tokens[tok_idx].get("top_logprobs") or []
        if len(top) < 2:
            continue
        out.append(
            Decision(
                kind="tool_name",
                top1=str(top[0]["token"]),
                top2=str(top[1]["token"]),
                margin=float(top[0]["logprob"]) - float(top[1]["logprob"]),
                chosen=name,
            )
        )
    return out


def create_backend(arm: ArmSpec, options: BackendOptions) -> OpenAICompatBackend:
    """Factory for ``backend = "openai"``; needs ``base_url`` and ``model``."""
    if not arm.base_url:
        raise ValueError(f"arm {arm.label!r}: backend 'openai' needs base_url (e.g. http://127.0.0.1:8000/v1)")
    unknown = set(arm.options) - _ALLOWED_OPTIONS
    if unknown:
        raise ValueError(
            f"arm {arm.label!r}: unknown openai option(s) {', '.join(sorted(unknown))}; "
            f"allowed: {', '.join(sorted(_ALLOWED_OPTIONS))}"
        )
    api_key = None
    if arm.api_key_env:
        api_key = os.environ.get(arm.api_key_env)
        if not api_key:
            raise ValueError(
                f"arm {arm.label!r}: environment variable {arm.api_key_env!r} (api_key_env) is not set"
            )
    opts = arm.options
    return OpenAICompatBackend(
        base_url=arm.base_url,
        model=arm.model,
        api_key=api_key,
        concurrency=int(opts.get("max_connections", options.concurrency)),
        timeout_s=float(opts.get("timeout_s", options.request_timeout_s)),
        constrained=bool(opts.get("constrained", False)),
        logprobs=bool(opts.get("logprobs", True)),
        extra_body=opts.get("extra_body"),
        http_client=str(opts.get("http_client", "auto")),
    )

"""HTTP transport of the OpenAI-compatible backend: a native keep-alive HTTP/1.1 client on
asyncio protocols for plain ``http://`` endpoints, and the same limits for ``httpx``.

For ``http://`` endpoints (a local vLLM/SGLang/llama.cpp server: the case where harness CPU
matters) :class:`NativeHTTPClient` is a small keep-alive HTTP/1.1 client: measured on this
project's 2-core machine against the loopback fake server, httpx spent 1.5 ms of CPU per
request at 8 connections and 8 ms at 64 (its pool scans every connection per request),
which alone caps a run far below the server's capacity. ``https://`` endpoints, or
``http_client = "httpx"`` in the arm's table, use ``httpx.AsyncClient`` (TLS, proxies) through
:func:`httpx_request`. Both cap the response (:data:`MAX_RESPONSE_HEAD`,
:data:`MAX_RESPONSE_BODY`), never follow a redirect (:class:`HTTPRedirect`,
:func:`redirect_cause`), and read ``Retry-After`` (:func:`parse_retry_after`). The API key is
only ever placed in the request header (:meth:`NativeHTTPClient.set_key`, :func:`set_bearer`).

Bytes in, bytes out: this module knows nothing of chat completions (the JSON codec is
:mod:`~pytest_quantagent.backends.json_codec`, the parsing
:mod:`~pytest_quantagent.backends.openai_parse`).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from typing import Any, cast
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr

from pytest_quantagent.backends.secrets import basic_authorization, redact, without_userinfo
from pytest_quantagent.backends.wrapper import Slots, with_timeout

_MAX_RETRY_AFTER_S = 120.0


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), capped at 120 s."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        import datetime as _dt

        seconds = (when - _dt.datetime.now(_dt.timezone.utc)).total_seconds()
    if seconds != seconds:  # nan
        return None
    return min(max(0.0, seconds), _MAX_RETRY_AFTER_S)


class BackendHTTPError(Exception):
    """The server answered with a transient error status (5xx, 408, 429): retried, honouring
    ``Retry-After``. The body is stored redacted (never the key)."""

    def __init__(self, status: int, body: str, retry_after: float | None = None,
                 url: str = "") -> None:
        self.status = status
        self.retry_after = retry_after
        where = f" from {url}" if url else ""
        super().__init__(f"HTTP {status}{where}: {body[:300]}")

    @property
    def retryable(self) -> bool:
        return self.status >= 500 or self.status in (408, 429)


class HTTPRedirect(Exception):
    """The native client's answer to a 3xx: redirects are never followed (the API key would
    go along to wherever ``Location`` points); the backend makes it a
    :class:`~pytest_quantagent.errors.ConfigurationError`."""

    def __init__(self, status: int, location: str | None) -> None:
        self.status = status
        self.location = location
        super().__init__(f"HTTP {status} redirect to {location!r}")


def redirect_cause(status: int, location: str | None, path: str,
                   secrets: Sequence[SecretStr | None] = ()) -> str:
    """Why a 3xx answer to ``path`` (``/chat/completions``, ``/models``) is a configuration
    problem, naming the ``Location`` (credentials redacted) and the base URL it suggests."""
    if not location:
        return (f"HTTP {status} redirect without a Location header; redirects are not followed: "
                "check base_url")
    shown = redact(without_userinfo(location), secrets)[:300]
    hint = ""
    if shown.rstrip("/").endswith(path):
        hint = f" (base_url {shown.rstrip('/')[:-len(path)]!r}?)"
    return (f"HTTP {status} redirect to {shown!r}; redirects are not followed (the API key would "
            f"go with them): set base_url to the address the server answers at{hint}")


#: Largest response head (status line and headers) and body the native client reads; past
#: either the connection is closed and the request fails as an infrastructure error.
MAX_RESPONSE_HEAD = 64 * 1024
MAX_RESPONSE_BODY = 16 * 1024 * 1024


#: Longest chunk-size line (hex size and extensions) of a chunked body.
_MAX_CHUNK_LINE = 1024
# Chunked-body parser states (``_HTTPConnection._left`` when not a byte count).
_SIZE_LINE, _TRAILER, _CRLF = -1, -2, -3


class _HTTPConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: writes a request, frames the response.

    A plain :class:`asyncio.Protocol` rather than streams: the response is parsed straight
    from the bytes the loop hands over (``Content-Length`` or chunked, or up to EOF when
    neither is given), which costs about half the CPU of ``StreamReader`` per request.

    Parsing is incremental and linear: each piece the loop hands over is looked at once (the
    end of the head is searched from where the last search stopped, a chunked body is
    de-chunked as it arrives, its framing dropped), and memory is bounded by
    :data:`MAX_RESPONSE_HEAD` and :data:`MAX_RESPONSE_BODY`: past either the request fails
    (``ValueError``, which :meth:`NativeHTTPClient.post` makes a retryable
    ``ConnectionError``) and the connection is closed.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        """Bytes received and not yet parsed: the head, then a chunked body's framing."""
        self.body = bytearray()
        """The response body so far (de-chunked)."""
        self.waiter: asyncio.Future[tuple[int, bool, bytes]] | None = None
        self.lost = False
        self.retry_after: str | None = None
        """The ``Retry-After`` header of the last response, if any."""
        self.location: str | None = None
        """The ``Location`` header of the last response, if any (a 3xx is refused with it)."""
        self._head: tuple[int, bool, int | None, bool] | None = None
        """(status, keep-alive, content length, chunked) once the head is in."""
        self._scan = 0
        """Where the search for the end of the head resumes."""
        self._left = _SIZE_LINE
        """Chunked body: bytes of the current chunk still to come, or a parser state."""
        self._trailer = 0
        """Chunked body: bytes of trailer lines read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's does not subclass asyncio.Transport).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        w = self.waiter
        if w is None or w.done():
            # Bytes nobody asked for (after a complete response, or after a failure): the
            # connection is out of step with the server; it is not used again.
            self.lost = True
            self.buf.clear()
            self.body.clear()
            if self.transport is not None:
                self.transport.close()
            return
        try:
            self._feed(data)
        except ValueError as e:
            w.set_exception(e)
            self.buf.clear()
            self.body.clear()

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        w = self.waiter
        if w is not None and not w.done():
            head = self._head
            if head is not None and head[2] is None and not head[3]:
                # Neither Content-Length nor chunked: the body runs to EOF.
                self._resolve(False)
            else:
                w.set_exception(ConnectionError(
                    f"connection closed before the response was complete ({exc or 'EOF'})"))

    def usable(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def request(self, payload: bytes) -> asyncio.Future[tuple[int, bool, bytes]]:
        """Send ``payload``; the future resolves to (status, keep-alive, body)."""
        assert self.transport is not None
        self.buf.clear()
        self.body = bytearray()
        self._head = None
        self._scan = 0
        self._left = _SIZE_LINE
        self._trailer = 0
        self.retry_after = None
        self.location = None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(payload)
        return self.waiter

    def _resolve(self, keep: bool) -> None:
        assert self._head is not None and self.waiter is not None
        body, self.body = bytes(self.body), bytearray()
        self.waiter.set_result((self._head[0], keep, body))

    def _feed(self, data: bytes) -> None:
        """Parse ``data``, the next bytes of the response; resolve the waiter when the
        response is complete. ``ValueError``: a malformed response or one over a cap."""
        if self._head is None:
            buf = self.buf
            buf += data
            end = buf.find(b"\r\n\r\n", max(0, self._scan - 3))
            if end < 0 or end > MAX_RESPONSE_HEAD:
                if len(buf) > MAX_RESPONSE_HEAD:
                    raise ValueError(f"response head over {MAX_RESPONSE_HEAD} bytes")
                self._scan = len(buf)
                return
            self._parse_head(bytes(buf[:end]))
            data = bytes(buf[end + 4:])
            buf.clear()
        assert self._head is not None
        _, keep, length, chunked = self._head
        if chunked:
            if self._dechunk(data):
                self._resolve(keep and not self.buf)
            return
        body = self.body
        body += data
        if length is None:
            if len(body) > MAX_RESPONSE_BODY:
                raise ValueError(f"response body over {MAX_RESPONSE_BODY} bytes")
            return
        if len(body) >= length:
            extra = len(body) > length
            if extra:
                del body[length:]
            self._resolve(keep and not extra)

    def _parse_head(self, raw: bytes) -> None:
        lines = raw.decode("latin-1").split("\r\n")
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
                if length < 0:
                    raise ValueError(f"bad Content-Length {value.strip()[:40]!r}")
                if length > MAX_RESPONSE_BODY:
                    raise ValueError(f"response body over {MAX_RESPONSE_BODY} bytes "
                                     f"(Content-Length {length})")
            elif name == "transfer-encoding":
                chunked = "chunked" in value.lower()
            elif name == "retry-after":
                self.retry_after = value.strip()
            elif name == "location":
                self.location = value.strip()
            elif name == "connection":
                v = value.strip().lower()
                keep = v == "keep-alive" or (keep and v != "close")
        self._head = (status, keep, length, chunked)

    def _dechunk(self, data: bytes) -> bool:
        """Append the data of the chunks in ``data`` (and what was left over) to the body;
        True once the last chunk and the trailer are in. Framing is consumed as it is read,
        so each byte is looked at once and ``buf`` holds at most one partial line."""
        buf = self.buf
        buf += data
        body = self.body
        pos, n = 0, len(buf)
        done = False
        while pos < n:
            left = self._left
            if left > 0:
                take = min(left, n - pos)
                body += buf[pos:pos + take]
                pos += take
                self._left = left - take or _CRLF
            elif left == _CRLF:
                if n - pos < 2:
                    break
                if buf[pos:pos + 2] != b"\r\n":
                    raise ValueError("bad chunked encoding (no CRLF after a chunk)")
                pos += 2
                self._left = _SIZE_LINE
            else:
                eol = buf.find(b"\r\n", pos)
                limit = _MAX_CHUNK_LINE if left == _SIZE_LINE else MAX_RESPONSE_HEAD - self._trailer
                if eol < 0 or eol - pos > limit:
                    if n - pos > limit:
                        raise ValueError("bad chunked encoding (a line over the limit)")
                    break
                if left == _TRAILER:
                    empty = eol == pos
                    self._trailer += eol - pos + 2
                    pos = eol + 2
                    if empty:  # the blank line that ends the trailer: the body is complete
                        done = True
                        break
                    continue
                size = int(bytes(buf[pos:eol]).split(b";")[0].strip() or b"x", 16)
                if size < 0:
                    raise ValueError("bad chunked encoding (negative chunk size)")
                pos = eol + 2
                if size == 0:
                    self._left = _TRAILER
                elif len(body) + size > MAX_RESPONSE_BODY:
                    raise ValueError(f"response body over {MAX_RESPONSE_BODY} bytes")
                else:
                    self._left = size
        del buf[:pos]
        return done


async def httpx_request(client: httpx.AsyncClient, method: str, path: str, *,
                        content: bytes | None = None, timeout_s: float | None = None,
                        ) -> tuple[int, bytes, httpx.Headers]:
    """``client.request`` with the native client's limits: the body is streamed and refused
    past :data:`MAX_RESPONSE_BODY` bytes (decoded, so a compressed bomb stops there too) as a
    retryable ``ConnectionError``; the head is bounded by h11's own limit (a
    ``RemoteProtocolError``). Returns (status, body, headers)."""
    kwargs: dict[str, Any] = {} if timeout_s is None else {"timeout": timeout_s}
    async with client.stream(method, path, content=content, **kwargs) as resp:
        length = resp.headers.get("content-length")
        if length is not None and length.strip().isdigit() and int(length) > MAX_RESPONSE_BODY:
            raise ConnectionError(f"response body over {MAX_RESPONSE_BODY} bytes "
                                  f"(Content-Length {int(length)})")
        body = bytearray()
        async for piece in resp.aiter_bytes():
            body += piece
            if len(body) > MAX_RESPONSE_BODY:
                body.clear()  # not kept alive by the traceback while the request is retried
                raise ConnectionError(f"response body over {MAX_RESPONSE_BODY} bytes")
        return resp.status_code, bytes(body), resp.headers


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
            raise ValueError(f"native HTTP client needs an http:// URL, got {without_userinfo(base_url)!r}")
        self.host = u.hostname
        self.port = u.port or 80
        self.prefix = u.path.rstrip("/")
        host_header = self.host if u.port is None else f"{self.host}:{u.port}"
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self._head_tail = f"Host: {host_header}\r\n{extra}Connection: keep-alive\r\n".encode()
        basic = basic_authorization(base_url)  # user:password@ → Basic (backends.secrets' rule)
        self._auth = b"" if basic is None else f"Authorization: {basic}\r\n".encode()
        self.timeout_s = timeout_s
        self._idle: list[_HTTPConnection] = []
        self._slots = Slots(max_connections)

    async def _connect(self) -> _HTTPConnection:
        loop = asyncio.get_running_loop()
        transport, conn = await loop.create_connection(_HTTPConnection, self.host, self.port)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    async def post(self, path: str, body: bytes | list[bytes], *, method: str = "POST",
                   timeout_s: float | None = None) -> tuple[int, bytes, str | None]:
        """POST ``body`` (JSON, or the pieces of it) to ``path`` (or another ``method``: the
        health probe's GET); returns (status, response body, Retry-After). A 3xx raises
        :class:`HTTPRedirect` (never followed)."""
        parts = body if isinstance(body, list) else [body]
        head = (f"{method} {self.prefix}{path} HTTP/1.1\r\nContent-Length: {sum(map(len, parts))}\r\n"
                "Content-Type: application/json\r\n").encode() + self._head_tail + self._auth + b"\r\n"
        timeout = self.timeout_s if timeout_s is None else timeout_s
        slots = self._slots
        if not slots.try_take():
            await slots.wait()
        conn: _HTTPConnection | None = None
        try:
            while self._idle:
                c = self._idle.pop()
                if c.usable():
                    conn = c
                    break
                c.close()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            if conn is None:
                conn = await with_timeout(self._connect(), timeout)
            # The response future expires by itself at the deadline: no task
            # cancellation machinery on the path every request takes.
            fut = conn.request(b"".join([head, *parts]))
            timer = loop.call_at(deadline, _expire, fut, timeout)
            try:
                status, keep, data = await fut
            finally:
                timer.cancel()
        except TimeoutError:
            if conn is not None:
                conn.close()
            raise TimeoutError(f"no response within {timeout} s") from None
        except (OSError, ValueError) as e:
            if conn is not None:
                conn.close()
            raise ConnectionError(f"{type(e).__name__}: {e}") from e
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        finally:
            slots.give()
        retry_after, location = conn.retry_after, conn.location
        if keep and conn.usable():
            self._idle.append(conn)
        else:
            conn.close()
        if 300 <= status < 400:
            raise HTTPRedirect(status, location)
        return status, data, retry_after

    def set_key(self, api_key: SecretStr) -> None:
        """Send ``Authorization: Bearer <key>`` with every request."""
        self._auth = b"Authorization: Bearer " + api_key.get_secret_value().encode() + b"\r\n"

    async def aclose(self) -> None:
        while self._idle:
            self._idle.pop().close()


def set_bearer(headers: httpx.Headers, api_key: SecretStr) -> None:
    """Send ``Authorization: Bearer <key>`` with every request of an httpx client."""
    headers["Authorization"] = "Bearer " + api_key.get_secret_value()

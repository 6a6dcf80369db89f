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
import math
import os
import re
import socket
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, cast
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr

from pytest_quantagent.backends.base import (
    Backend,
    BackendOptions,
    GenerateRequest,
    Generation,
    RawToolCall,
    nearest_rank_ms,
)
from pytest_quantagent.backends.secrets import (
    basic_authorization,
    credentials_conflict,
    redact,
    without_userinfo,
)
from pytest_quantagent.backends.spec import BackendSpec
from pytest_quantagent.backends.wrapper import Slots, with_timeout
from pytest_quantagent.errors import ConfigurationError, ContextOverflowError
from pytest_quantagent.vocab.limits import MAX_JSON_DEPTH, JSONDepthError, depth_exceeds
from pytest_quantagent.vocab.messages import Decision

_ALLOWED_OPTIONS = frozenset(
    {"constrained", "logprobs", "timeout_s", "max_connections", "extra_body", "http_client",
     "max_output_chars"}
)
HTTP_CLIENTS: tuple[str, ...] = ("auto", "native", "httpx")


_without_userinfo = without_userinfo

#: Model outputs (text, tool-call arguments) longer than this many characters are truncated
#: with a marker and the call classified as malformed (arm option ``max_output_chars``).
DEFAULT_MAX_OUTPUT_CHARS = 32_768
TRUNCATION_MARKER = "…[truncated by quantagent: {n} characters in all]"

_CONTEXT_RE = re.compile(r"(?i)(maximum context length|context length|context window|too many tokens|"
                         r"prompt is too long|max_model_len)")
_MAX_RETRY_AFTER_S = 120.0


def _std_dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _std_loads(data: bytes) -> Any:
    try:
        return json.loads(data)
    except RecursionError:  # nested past the interpreter's stack: the server's garbage
        raise JSONDepthError("response nested too deep for the JSON parser") from None

_orjson: Any = None
try:  # optional (extra "fast"): less harness CPU per model call, see docs/GPU.md
    import importlib

    _orjson = importlib.import_module("orjson")
except ImportError:  # pragma: no cover - depends on the environment
    pass


def _fast_dumps(obj: Any) -> bytes:
    try:
        return cast(bytes, _orjson.dumps(obj))
    except TypeError:  # a lone surrogate, a non-string key, a huge int: json's rules
        return _std_dumps(obj)


def _fast_loads(data: bytes) -> Any:
    try:
        return _orjson.loads(data)
    except ValueError:  # e.g. a lone surrogate escape, which json reads (and we flag)
        return _std_loads(data)


def use_json(name: str) -> None:
    """Pick the request/response JSON codec: ``"orjson"`` (when installed) or ``"std"``.
    The default is orjson when it imports; ``QUANTAGENT_JSON=std`` in the environment keeps
    the standard library's. Both produce the same JSON text up to float formatting."""
    global _dumps, _loads
    if name not in ("orjson", "std"):
        raise ValueError(f"JSON codec {name!r} must be 'orjson' or 'std'")
    if name == "orjson" and _orjson is not None:
        _dumps, _loads = _fast_dumps, _fast_loads
    else:
        _dumps, _loads = _std_dumps, _std_loads


_dumps = _std_dumps
_loads: Any = _std_loads
use_json(os.environ.get("QUANTAGENT_JSON", "orjson"))


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


class BadResponseError(Exception):
    """The server's answer was not a chat completion (truncated or garbled body): retried."""


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


#: Responses at least this long are decoded in a worker thread, not on the event loop.
PARSE_IN_THREAD_BYTES = 1 << 20


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


@dataclass
class _Prefix:
    """The encoded messages of one conversation's last request (see ``encode_body``)."""

    messages: list[dict[str, Any]]
    """The messages encoded (a copy of the request's list; holds them alive, so the key, the
    first one's id, stays theirs)."""
    pieces: list[bytes]
    """Encoded messages with ``b","`` between them."""


#: Consecutive infrastructure failures after which an endpoint is taken out (a refused
#: connection takes it out at once).
EJECT_AFTER = 3
EJECT_BASE_S = 1.0
EJECT_MAX_S = 30.0
#: The health probe's own deadline (``GET /models`` of an ejected endpoint).
PROBE_TIMEOUT_S = 5.0


def _refused(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a refused or failed connection attempt."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, (ConnectionRefusedError, httpx.ConnectError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class Endpoint:
    """One server of an arm: its transport, load, health and figures.

    Health is outlier ejection with an active probe: :data:`EJECT_AFTER` infrastructure
    failures in a row, or one refused connection, take the endpoint out; ``EJECT_BASE_S *
    2**(n-1)`` seconds later (n-th ejection in a row, at most :data:`EJECT_MAX_S`) the backend
    probes it with ``GET {base}/models`` (:meth:`probe`). No live request goes to an endpoint
    that is out while another is up. A probe answered (any HTTP status below 500) lets it back
    in on probation: one live request at a time until one succeeds (back in, backoff reset)
    or fails (out again, for twice as long). A probe not answered keeps it out for twice as
    long, until the next probe.
    """

    __slots__ = (
        "ejected_count",
        "ejected_until",
        "ejections",
        "failures",
        "failures_in_row",
        "inflight",
        "latencies",
        "out",
        "probation",
        "probe_failures",
        "probes",
        "requests",
        "shown",
        "transport",
        "url",
        "weight",
    )

    def __init__(self, url: str, weight: float, transport: NativeHTTPClient | httpx.AsyncClient) -> None:
        self.url = url
        self.shown = without_userinfo(url)
        self.weight = weight
        self.transport = transport
        self.inflight = 0
        self.failures_in_row = 0
        self.ejections = 0
        """Ejections since the last success (the backoff exponent)."""
        self.ejected_until = 0.0
        """When the current ejection's backoff ends (the next probe is due)."""
        self.out = False
        """Ejected and not yet let back in by a probe (or a live success)."""
        self.probation = False
        self.probes = 0
        self.probe_failures = 0
        self.requests = 0
        self.failures = 0
        self.ejected_count = 0
        self.latencies = array("d")
        """Seconds of each successful request (8 bytes each)."""

    def reset_figures(self) -> None:
        """Zero the figures (requests, failures, ejections, latencies); health is kept."""
        self.requests = self.failures = self.ejected_count = 0
        self.probes = self.probe_failures = 0
        self.latencies = array("d")

    def available(self) -> bool:
        """Whether a live request may go here now: not ejected (an ejected endpoint comes back
        only through its health probe), and not on probation with a request in flight."""
        return not self.out and not (self.probation and self.inflight > 0)

    def succeeded(self, seconds: float) -> None:
        self.requests += 1
        self.latencies.append(seconds)
        if self.failures_in_row or self.probation or self.out:
            self.failures_in_row = 0
            self.ejections = 0
            self.probation = False
            self.out = False

    def _eject(self, now: float) -> None:
        self.ejections += 1
        self.ejected_until = now + min(EJECT_MAX_S, EJECT_BASE_S * 2 ** (self.ejections - 1))
        self.out = True
        self.probation = False

    def failed(self, now: float, *, refused: bool = False) -> bool:
        """Count an infrastructure failure; True when it took the endpoint out (the caller
        schedules the probe at ``ejected_until``)."""
        self.requests += 1
        self.failures += 1
        self.failures_in_row += 1
        if self.out:
            return False  # a request sent before the ejection (or with all out): out already
        if refused or self.probation or self.failures_in_row >= EJECT_AFTER:
            self.ejected_count += 1
            self._eject(now)
            return True
        return False

    def probed(self, now: float, answered: bool) -> None:
        """The probe's outcome: answered → back in on probation; not → out for twice as
        long (the next probe at ``ejected_until``)."""
        self.probes += 1
        if not self.out:
            return  # a live request succeeded meanwhile
        if answered:
            self.out = False
            self.probation = True
        else:
            self.probe_failures += 1
            self._eject(now)

    async def probe(self, timeout_s: float) -> bool:
        """``GET {base}/models``: whether the server answers HTTP (any status below 500; a
        server without the route is up all the same)."""
        transport = self.transport
        try:
            if isinstance(transport, NativeHTTPClient):
                status, _, _ = await transport.post("/models", b"", method="GET", timeout_s=timeout_s)
            else:
                status = (await httpx_request(transport, "GET", "/models", timeout_s=timeout_s))[0]
        except HTTPRedirect:
            return True  # the server answers (the next request stops the run with the cause)
        except Exception:
            return False
        return status < 500

    def stats(self) -> dict[str, Any]:
        """Requests (attempts), failures, ejections and latency p50/p95 (ms, successful
        requests; nearest-rank percentiles)."""
        lat = sorted(self.latencies)
        return {"url": self.shown, "weight": self.weight, "requests": self.requests,
                "failures": self.failures, "ejections": self.ejected_count,
                "probes": self.probes, "probe_failures": self.probe_failures,
                "p50_ms": nearest_rank_ms(lat, 0.5), "p95_ms": nearest_rank_ms(lat, 0.95)}


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
        self.endpoints = [
            Endpoint(url.rstrip("/"), float(weight),
                     self._transport(url.rstrip("/"), use_native, concurrency, timeout_s, api_key))
            for url, weight in pairs
        ]
        self._single = self.endpoints[0] if len(self.endpoints) == 1 else None
        self._failed_on: dict[int, Endpoint] = {}
        """Request (by id) → the endpoint it last failed on, for its retry to go elsewhere."""
        self._probe_timers: dict[int, asyncio.TimerHandle] = {}
        """Ejected endpoint (by id) → the timer of its next health probe."""
        self._probe_tasks: set[asyncio.Task[None]] = set()
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
            _set_bearer(hx.headers, api_key)
        return hx

    def __repr__(self) -> str:
        if self._single is None:
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
        if self._single is not None:
            return {"url": self.shown_url, "served_model": served}
        return {"urls": sorted(e.shown for e in self.endpoints), "served_model": served}

    def endpoint_stats(self) -> list[dict[str, Any]]:
        return [e.stats() for e in self.endpoints]

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
            **({} if self._single is not None else {"endpoints": [e.shown for e in self.endpoints]}),
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
        rest = _dumps(body)
        return [
            b'{"messages":[', *pieces, b"]",
            *((b',"tools":', self._encoded(tools)) if tools is not None else ()),
            b"," + rest[1:] if len(rest) > 2 else b"}",
        ]

    async def generate(self, request: GenerateRequest) -> Generation:
        parts = self.encode_body_parts(request)
        ep = self._single or self._pick(self._failed_on.pop(id(request), None))
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
                if ep.failed(loop.time(), refused=_refused(exc)) and self._single is None:
                    self._schedule_probe(ep, loop)
                if self._single is None and any(e is not ep and e.available()
                                                for e in self.endpoints):
                    # The wrapper retries this at once (no backoff) and the retry goes to
                    # another endpoint (the wrapper retries the same request object).
                    exc.failover = True  # type: ignore[attr-defined]
                    if len(self._failed_on) >= 4096:
                        self._failed_on.clear()
                    self._failed_on[id(request)] = ep
            raise
        ep.inflight -= 1
        ep.succeeded(loop.time() - t0)
        return gen

    def _schedule_probe(self, ep: Endpoint, loop: asyncio.AbstractEventLoop) -> None:
        """Probe ``ep`` when its backoff ends (see :class:`Endpoint`)."""
        old = self._probe_timers.pop(id(ep), None)
        if old is not None:
            old.cancel()
        self._probe_timers[id(ep)] = loop.call_at(ep.ejected_until, self._start_probe, ep)

    def _start_probe(self, ep: Endpoint) -> None:
        self._probe_timers.pop(id(ep), None)
        task = asyncio.ensure_future(self._probe(ep))
        self._probe_tasks.add(task)
        task.add_done_callback(self._probe_tasks.discard)

    async def _probe(self, ep: Endpoint) -> None:
        if not ep.out:
            return  # back in already (a live request succeeded with every endpoint out)
        answered = await ep.probe(min(PROBE_TIMEOUT_S, self.timeout_s))
        loop = asyncio.get_running_loop()
        ep.probed(loop.time(), answered)
        if ep.out:
            self._schedule_probe(ep, loop)

    def _pick(self, avoid: Endpoint | None = None) -> Endpoint:
        """The healthy endpoint with the least load per weight (ties: fewer failures in a
        row, then the order given), other than ``avoid`` (where this request just failed)
        when another is up; with all of them ejected, the one whose ejection ends first."""
        best: Endpoint | None = None
        best_key: tuple[float, int] | None = None
        for e in self.endpoints:
            if e is avoid or not e.available():
                continue
            key = ((e.inflight + 1) / e.weight, e.failures_in_row)
            if best_key is None or key < best_key:
                best, best_key = e, key
        if best is None:
            if avoid is not None and avoid.available():
                return avoid
            best = min(self.endpoints, key=lambda e: e.ejected_until)
        return best

    def _parse(self, content: bytes, ep: Endpoint) -> Generation:
        try:
            data = _loads(content)
            choice = data["choices"][0]
            message = choice["message"]
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
            if depth_exceeds(message):
                raise JSONDepthError(f"message nested deeper than {MAX_JSON_DEPTH} levels")
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise BadResponseError(
                f"not a chat completion from {ep.shown}: {self.redact(repr(content[:200]))}"
            ) from e
        logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
        usage = data.get("usage") if isinstance(data, dict) else None
        finish = choice.get("finish_reason") if isinstance(choice, dict) else None
        return parse_completion(message, logprobs if isinstance(logprobs, dict) else None,
                                usage if isinstance(usage, dict) else None,
                                max_chars=self.max_output_chars,
                                finish_reason=finish if isinstance(finish, str) else None)

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
        for timer in self._probe_timers.values():
            timer.cancel()
        self._probe_timers.clear()
        for task in list(self._probe_tasks):
            task.cancel()
        if self._probe_tasks:
            await asyncio.gather(*self._probe_tasks, return_exceptions=True)
        for e in self.endpoints:
            await e.transport.aclose()


_CALL_MARKUP = "<tool_call>"


def _set_bearer(headers: httpx.Headers, api_key: SecretStr) -> None:
    headers["Authorization"] = "Bearer " + api_key.get_secret_value()


def _cap(text: str, max_chars: int) -> tuple[str, bool]:
    """``text`` cut to ``max_chars`` with a marker saying how long it was."""
    if len(text) <= max_chars:
        return text, False
    return text[:max_chars] + TRUNCATION_MARKER.format(n=len(text)), True


def _content_text(content: Any) -> str | None:
    """Message content as text: a string, or the OpenAI content-part form (a list of
    ``{"type": "text", "text": ...}``), joined; anything else as its JSON."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                parts.append(json.dumps(part, ensure_ascii=False))
        return "".join(parts)
    return json.dumps(content, ensure_ascii=False)


def _raw_call(tc: Any, i: int) -> RawToolCall:
    """One entry of ``tool_calls`` as the model (or the server's parser) wrote it. A shape
    that names no function is kept as a call without a name, its JSON as the arguments, so
    the agent records a ``malformed_call`` with the raw text."""
    if isinstance(tc, dict) and isinstance(tc.get("function"), dict):
        fn = tc["function"]
        args = fn.get("arguments")
        if not isinstance(args, str):
            # Some servers send arguments already decoded; keep the call, re-encode.
            args = "" if args is None else json.dumps(args, ensure_ascii=False)
        name = fn.get("name")
        return RawToolCall(id=str(tc.get("id") or f"call_{i}"),
                           name=name if isinstance(name, str) else "", arguments=args)
    call_id = tc.get("id") if isinstance(tc, dict) else None
    return RawToolCall(id=str(call_id or f"call_{i}"), name="",
                       arguments=json.dumps(tc, ensure_ascii=False))


def parse_completion(
    message: dict[str, Any], logprobs: dict[str, Any] | None, usage: dict[str, Any] | None,
    *, max_chars: int = DEFAULT_MAX_OUTPUT_CHARS, finish_reason: str | None = None,
) -> Generation:
    """A chat-completion ``message`` (+ optional ``logprobs``/``usage``) → :class:`Generation`.

    Whatever shape the server gives the model's output, it stays model output: odd
    ``tool_calls`` entries become nameless calls (``malformed_call``, raw text kept), content
    parts are joined, and any text over ``max_chars`` is cut with a marker
    (``Generation.truncated``). ``finish_reason`` is the choice's (kept as given, at most 32
    characters); the reasoning's length comes from ``reasoning_content`` (or ``reasoning``) and
    ``usage.completion_tokens_details.reasoning_tokens`` where the server sends them."""
    truncated = False
    calls: list[RawToolCall] = []
    raw_calls = message.get("tool_calls")
    if raw_calls is not None and not isinstance(raw_calls, list):
        raw_calls = [raw_calls]
    for i, tc in enumerate(raw_calls or ()):
        call = _raw_call(tc, i)
        args, cut = _cap(call.arguments, max_chars)
        name, cut_name = _cap(call.name, 256)
        if cut or cut_name:
            truncated = True
            call = RawToolCall(id=call.id[:256], name="" if cut_name else name, arguments=args)
        calls.append(call)
    content = original = _content_text(message.get("content"))
    if content is not None:
        content, cut = _cap(content, max_chars)
        truncated = truncated or cut
        original = content
    if not calls and isinstance(content, str) and _CALL_MARKUP in content:
        # The server's tool parser gave up (e.g. vLLM's hermes parser on broken JSON) and
        # returned the model's tool-call markup as text. It is still a call, a malformed one:
        # read it with our own parser so the engine records malformed_call, not a message.
        from pytest_quantagent.bundled.chat import parse_tool_calls

        turn = parse_tool_calls(content)
        calls = [RawToolCall(id=f"call_{i}", name=c.name, arguments=c.arguments)
                 for i, c in enumerate(turn.calls)]
        content = turn.content
    lp = (logprobs or {}).get("content")
    tokens = [t for t in lp if isinstance(t, dict)] if isinstance(lp, list) else []
    try:
        decisions = tool_name_decisions(tokens, [c.name for c in calls]) if tokens and calls else []
    except (KeyError, TypeError, ValueError, IndexError):
        decisions = []  # logprobs of an odd shape: no margins, the output stands
    raw_text = "".join(str(t.get("token", "")) for t in tokens) if tokens else original
    if raw_text is not None:
        raw_text, cut = _cap(raw_text, max_chars)
        truncated = truncated or cut
    usage = usage or {}
    pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
    details = usage.get("completion_tokens_details")
    rt = details.get("reasoning_tokens") if isinstance(details, dict) else None
    reasoning = message.get("reasoning_content")
    if not isinstance(reasoning, str):
        reasoning = message.get("reasoning")
    return Generation(
        content=content,
        tool_calls=calls,
        raw_text=raw_text,
        decisions=decisions,
        prompt_tokens=pt if isinstance(pt, int) and not isinstance(pt, bool) else None,
        completion_tokens=_count(ct),
        truncated=truncated,
        finish_reason=finish_reason[:32] if finish_reason else None,
        reasoning_tokens=_count(rt),
        reasoning_chars=len(reasoning) if isinstance(reasoning, str) and reasoning else None,
    )


def _count(v: Any) -> int | None:
    """A token count from the server's ``usage``: a non-negative int, else None (unknown)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


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

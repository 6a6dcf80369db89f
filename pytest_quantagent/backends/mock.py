"""A deterministic, scripted backend: every runner and plugin test runs on it.

Two ways to script it:

- ``rule``: a function ``(GenerateRequest) -> Generation | dict | str`` (in TOML, a
  ``"module:function"`` string). A ``str`` is plain content; a ``dict`` is a response as
  below.
- ``responses``: a list of responses. The response for a request is chosen by the number of
  model turns already in ``request.messages`` (turn 0, 1, 2, ...; assistant messages
  before the first user message, such as the episode's fixed greeting, do not count), so it depends on the
  conversation only, never on timing or on other episodes running concurrently. Past the
  end of the list the last response repeats (or the list cycles with ``cycle = true``).

A response dict has ``content`` (str), ``tool_calls`` (list of ``{name, arguments}`` where
``arguments`` is a dict, or a string sent verbatim, e.g. broken JSON) and optional
``raw_text``. In TOML::

    [arms.int4]
    backend = "mock"
    model = "scripted"
    responses = [
      {tool_calls = [{name = "find_user_id_by_email", arguments = {email = "a@b.c"}}]},
      {content = "Done. ###STOP###"},
    ]

``latency_s`` makes every call sleep (async) that long.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_quantagent.backends.base import (
    Backend,
    BackendOptions,
    GenerateRequest,
    Generation,
    RawToolCall,
    nearest_rank_ms,
)
from pytest_quantagent.backends.spec import BackendSpec

MockRule = Callable[[GenerateRequest], "Generation | Mapping[str, Any] | str"]

_DEFAULT_RESPONSES: tuple[Mapping[str, Any], ...] = ({"content": "How can I help you? ###STOP###"},)


def response_to_generation(response: Generation | Mapping[str, Any] | str, turn: int) -> Generation:
    """Turn a scripted response into a :class:`Generation` with deterministic call ids."""
    if isinstance(response, Generation):
        return response
    if isinstance(response, str):
        return Generation(content=response, raw_text=response)
    if not isinstance(response, Mapping):
        raise TypeError(f"mock response must be a str, dict or Generation, got {type(response).__name__}")
    unknown = set(response) - {"content", "tool_calls", "raw_text"}
    if unknown:
        raise ValueError(
            f"mock response has unknown keys {sorted(unknown)}; allowed: content, raw_text, tool_calls"
        )
    calls = []
    for j, tc in enumerate(response.get("tool_calls") or ()):
        args = tc.get("arguments", {})
        text = args if isinstance(args, str) else json.dumps(args)
        calls.append(RawToolCall(id=f"call_{turn}_{j}", name=str(tc.get("name", "")), arguments=text))
    content = response.get("content")
    return Generation(content=content, tool_calls=calls, raw_text=response.get("raw_text", content))


def _count_assistant_turns(messages: Sequence[Mapping[str, Any]]) -> int:
    """Assistant messages after the first user message: the model's own earlier turns (an
    episode opens with a fixed agent greeting that the model did not write)."""
    n = 0
    seen_user = False
    for m in messages:
        role = m.get("role")
        if role == "user":
            seen_user = True
        elif role == "assistant" and seen_user:
            n += 1
    return n


class MockBackend(Backend):
    """Scripted responses; see the module docstring."""

    name = "mock"

    def __init__(
        self,
        *,
        responses: Sequence[Generation | Mapping[str, Any] | str] | None = None,
        rule: MockRule | None = None,
        cycle: bool = False,
        latency_s: float = 0.0,
    ) -> None:
        if responses is not None and rule is not None:
            raise ValueError("mock backend: give either 'responses' or 'rule', not both")
        if responses is not None and len(responses) == 0:
            raise ValueError("mock backend: 'responses' must not be empty")
        if latency_s < 0:
            raise ValueError(f"mock backend: latency_s ({latency_s}) must be >= 0")
        self.responses = list(responses) if responses is not None else list(_DEFAULT_RESPONSES)
        self.rule = rule
        self.cycle = cycle
        self.latency_s = latency_s
        self.calls = 0

    async def generate(self, request: GenerateRequest) -> Generation:
        self.calls += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        turn = _count_assistant_turns(request.messages)
        if self.rule is not None:
            return response_to_generation(self.rule(request), turn)
        n = len(self.responses)
        idx = turn % n if self.cycle else min(turn, n - 1)
        return response_to_generation(self.responses[idx], turn)


def _load_rule(target: str) -> MockRule:
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"mock backend: rule {target!r} must look like 'package.module:function'")
    rule: MockRule = getattr(importlib.import_module(module), attr)
    return rule


def create_backend(spec: BackendSpec, options: BackendOptions) -> MockBackend:
    """Factory for ``backend = "mock"``; options: ``responses``, ``rule``, ``cycle``,
    ``latency_s``."""
    opts = dict(spec.options)
    allowed = {"responses", "rule", "cycle", "latency_s"}
    unknown = set(opts) - allowed
    if unknown:
        raise ValueError(
            f"arm {spec.label!r}: unknown mock option(s) {', '.join(sorted(unknown))}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )
    rule = opts.get("rule")
    if isinstance(rule, str):
        rule = _load_rule(rule)
    return MockBackend(
        responses=opts.get("responses"),
        rule=rule,
        cycle=bool(opts.get("cycle", False)),
        latency_s=float(opts.get("latency_s", 0.0)),
    )


# -- A loopback fake OpenAI-compatible server ---------------------------------------------
#
# Used by the backend tests (faults on chosen requests) and by benchmarks/runner_throughput.py
# (fixed latency). It speaks just enough HTTP/1.1 (keep-alive, Content-Length) and answers
# each request with a single write: a response split into header and body writes would meet
# Nagle + delayed ACK on loopback and add ~40 ms per request.

FAULTS: tuple[str, ...] = ("500", "hang", "drop", "garbage")


_LATE_KEEP = 1_000_000
"""At most this many answer timings are kept between two stats requests."""


class FakeOpenAIServer:
    """Answers ``POST /v1/chat/completions`` after ``latency_s`` with scripted responses.

    ``responses`` are chosen like :class:`MockBackend`'s (by assistant turns in the request).
    ``faults`` maps a 1-based request number to one of :data:`FAULTS`: ``500`` (HTTP 500),
    ``hang`` (no answer for ``hang_s``), ``drop`` (close the connection without answering),
    ``garbage`` (HTTP 200 with a truncated JSON body). The server stops by itself after
    ``lifetime_s``.

    It keeps how late each answer left, past its deadline (``latency_s`` after the request
    was in): ``GET .../_fake/stats`` returns the figures since the last such call and starts
    them afresh, so a benchmark can tell the stand-in's own lateness (its event loop's timers
    fire up to a millisecond after their deadline) from the client's overhead.
    """

    def __init__(
        self,
        responses: Sequence[Mapping[str, Any] | str],
        *,
        latency_s: float = 0.0,
        faults: Mapping[int, str] | None = None,
        hang_s: float = 30.0,
        lifetime_s: float = 600.0,
        cycle: bool = False,
    ) -> None:
        for n, f in (faults or {}).items():
            if f not in FAULTS:
                raise ValueError(f"fault {f!r} for request {n} must be one of {', '.join(FAULTS)}")
        self.responses = list(responses)
        self.latency_s = latency_s
        self.faults = dict(faults or {})
        self.hang_s = hang_s
        self.lifetime_s = lifetime_s
        self.cycle = cycle
        self.requests = 0
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._messages: dict[tuple[int, int], str] = {}
        # Subclasses that choose responses per request (overriding ``_answer``) are not cached.
        self._cache_answers = type(self)._answer is FakeOpenAIServer._answer
        self._thread: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._late: list[float] = []
        """Seconds past its deadline each answer left at, since the last stats request."""

    def _answered(self, deadline: float) -> None:
        if len(self._late) < _LATE_KEEP:
            self._late.append(asyncio.get_running_loop().time() - deadline)

    def _get(self, head: bytes) -> bytes:
        """The answer to a GET: the stats (``.../_fake/stats``) or, for any other path, the
        pre-flight's ``/models`` (an empty list: any model name passes)."""
        if b"/_fake/stats " not in head[:head.find(b"\r\n")]:
            return self._http("200 OK", b'{"object": "list", "data": []}')
        late, self._late = sorted(self._late), []
        stats = {"answered": len(late), "latency_ms": 1000 * self.latency_s,
                 "late_ms": {"mean": round(1000 * sum(late) / len(late), 4) if late else None,
                             **{k: nearest_rank_ms(late, q, 4)
                                for k, q in (("p50", 0.5), ("p95", 0.95), ("max", 1.0))}}}
        return self._http("200 OK", json.dumps(stats).encode())

    @staticmethod
    def _turn_of(body: bytes) -> int:
        # Fast path for compact JSON (what our OpenAI backend sends): count assistant
        # messages after the first user message without decoding the whole request, so the
        # stand-in server spends little CPU and the benchmark measures the harness.
        first_user = body.find(b'{"role":"user"')
        if first_user >= 0:
            return body.count(b'{"role":"assistant"', first_user)
        req = json.loads(body)
        return _count_assistant_turns(req.get("messages", []))

    def _answer(self, body: bytes) -> bytes:
        turn = self._turn_of(body)
        n = len(self.responses)
        idx = turn % n if self.cycle else min(turn, n - 1)
        key = (idx, turn)
        message = self._messages.get(key) if self._cache_answers else None
        if message is None:
            gen = response_to_generation(self.responses[idx], turn)
            msg: dict[str, Any] = {"role": "assistant", "content": gen.content}
            if gen.tool_calls:
                msg["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in gen.tool_calls
                ]
            message = json.dumps(msg)
            if self._cache_answers and len(self._messages) < 4096:
                self._messages[key] = message
        # The same text as json.dumps of the whole payload, with the scripted message encoded
        # once per (response, turn): the server's CPU per request stays small.
        return (f'{{"id": "chatcmpl-{self.requests}", "object": "chat.completion", "model": "fake", '
                f'"choices": [{{"index": 0, "message": {message}, "finish_reason": "stop"}}], '
                f'"usage": {{"prompt_tokens": {len(body) // 4}, "completion_tokens": 10}}}}').encode()

    @staticmethod
    def _http(status: str, body: bytes) -> bytes:
        return (
            f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
        ).encode() + body

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._serve_connection(reader, writer)
        except asyncio.CancelledError:
            # Server shutting down with a request still hanging: end quietly.
            pass
        finally:
            if not writer.is_closing():
                writer.close()

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            body = await reader.readexactly(length)
            if head.startswith(b"GET "):
                writer.write(self._get(head))
                await writer.drain()
                continue
            # The answer leaves ``latency_s`` after the request arrived: the server's own
            # work is done inside that time, so a burst of requests does not queue behind
            # it and a benchmark measures the client, not this stand-in.
            deadline = asyncio.get_running_loop().time() + self.latency_s
            self.requests += 1
            fault = self.faults.get(self.requests)
            reply: bytes | None = None
            if fault == "500":
                reply = self._http("500 Internal Server Error", b'{"error": "boom"}')
            elif fault == "garbage":
                reply = self._http("200 OK", b'{"choices": [{"mess')
            elif fault is None:
                reply = self._http("200 OK", self._answer(body))
            if self.latency_s:
                await asyncio.sleep(max(0.0, deadline - asyncio.get_running_loop().time()))
            if fault == "drop":
                writer.close()
                return
            if fault == "hang":
                await asyncio.sleep(self.hang_s)
                writer.close()
                return
            assert reply is not None
            writer.write(reply)
            self._answered(deadline)
            await writer.drain()

    def _lean(self) -> bool:
        """Whether requests can take the lean path (:class:`_LeanConnection`): no faults and
        the connection handling not overridden by a subclass."""
        return not self.faults and type(self)._serve_connection is FakeOpenAIServer._serve_connection

    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Serve until ``lifetime_s`` elapses (or :meth:`stop`)."""
        self._loop = asyncio.get_running_loop()
        if self._lean():
            self._server = await self._loop.create_server(lambda: _LeanConnection(self), host, port)
        else:
            self._server = await asyncio.start_server(self._handle, host, port)
        sock = self._server.sockets[0]
        import socket

        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port = sock.getsockname()[1]
        try:
            async with self._server:
                await asyncio.wait_for(self._server.serve_forever(), self.lifetime_s)
        except (asyncio.CancelledError, TimeoutError):
            pass

    def start_in_thread(self) -> str:
        """Serve from a daemon thread; returns the base URL (``http://127.0.0.1:PORT/v1``)."""
        import threading

        ready = threading.Event()

        def target() -> None:
            async def main() -> None:
                task = asyncio.ensure_future(self.serve())
                while not self.port and not task.done():
                    await asyncio.sleep(0.005)
                ready.set()
                await task

            asyncio.run(main())

        self._thread = threading.Thread(target=target, daemon=True, name="fake-openai")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fake OpenAI server did not start within 10 s")
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        """Stop a server started with :meth:`start_in_thread`."""
        if self._loop is not None and self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
        if self._thread is not None:
            self._thread.join(5)


class _LeanConnection(asyncio.Protocol):
    """:class:`FakeOpenAIServer`'s connection without faults: the same answers as its stream
    handler, framed from the bytes the loop hands over and sent by a timer at the request's
    deadline (no task, no stream reader per request). The benchmark's server is a measuring
    instrument: the less CPU it takes from the machine, the more of it the harness gets."""

    def __init__(self, server: FakeOpenAIServer) -> None:
        self.server = server
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end + 4])
            length = 0
            at = head.lower().find(b"\r\ncontent-length:")
            if at >= 0:
                length = int(head[at + 17:head.index(b"\r\n", at + 2)])
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4:end + 4 + length])
            del self.buf[:end + 4 + length]
            self._handle(head, body)

    def _handle(self, head: bytes, body: bytes) -> None:
        server = self.server
        if head.startswith(b"GET "):
            self._send(server._get(head))
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + server.latency_s
        server.requests += 1
        reply = server._http("200 OK", server._answer(body))
        if server.latency_s:
            loop.call_at(deadline, self._send, reply, deadline)
        else:
            self._send(reply, deadline)

    def _send(self, reply: bytes, deadline: float | None = None) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(reply)
            if deadline is not None:
                self.server._answered(deadline)

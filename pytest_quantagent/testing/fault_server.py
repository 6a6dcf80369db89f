"""A loopback OpenAI-compatible server that injects every fault of issue 28, for tests.

:class:`FaultServer` extends the backend tests' :class:`~pytest_quantagent.backends.mock.FakeOpenAIServer`
(scripted replies chosen by assistant turn, single-write HTTP/1.1 keep-alive) with:

- ``GET /v1/models`` (the pre-flight check) listing ``served_models``, or refused with
  ``models_status`` (a body echoing the request's key);
- faults by request number (``faults={3: "429"}``) or drawn at random for a share of
  requests (``fault_rate=0.2, fault_mix=("500", "hang", "drop")``, seeded), each one of
  :data:`FAULT_KINDS`:

  * transient: ``500``, ``503``, ``429`` (both with ``Retry-After: retry_after_s``), ``hang``
    (no answer for ``hang_s``), ``drop`` (connection closed), ``garbage`` (truncated JSON);
  * configuration: ``400``, ``401``, ``403``, ``404``, ``echo_key`` (a 401 whose body echoes
    the request's ``Authorization`` header, as some proxies do), ``context`` (a 400
    "maximum context length"), ``307`` (a redirect to ``redirect_location``; with
    ``models_status=307`` the pre-flight's ``GET /models`` is redirected too);
  * odd shapes (HTTP 200): ``message_null``, ``tool_call_null`` (``tool_calls: [null]``),
    ``function_str`` (``function: "str"``), ``tool_calls_str``, ``content_parts`` (the
    content-part list form), ``surrogate`` (``"broken \\ud83d text"``, valid JSON), ``huge``
    (tool arguments of ``huge_chars`` characters).

``model_fields``: more fields of every served model's entry (``max_model_len``,
``chat_template``, ``tool_call_parser``...), as a server that exposes its serving settings;
``version``: the answer of ``GET /version`` (``{"version": ...}``; 404 when None).
``completion_tokens``: the usage every answer reports (default 10), ``finish_reason`` its
finish reason; ``empty_every``: every N-th chat request is answered with an empty message
(no text, no tool call).

``model_root``: reported as every served model's ``root`` (as vLLM does: the checkpoint
behind a served name). ``require_key``: every request without ``Authorization: Bearer <key>`` gets a 401 echoing
what it sent. Counters: ``requests`` (chat requests), ``model_requests`` (GETs), ``injected``
(faults by kind), ``refused`` (wrong key), ``authorizations`` (the ``Authorization`` headers
received, by value). Nothing here is used by the harness itself.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_quantagent.backends.mock import FakeOpenAIServer

TRANSIENT = ("500", "503", "429", "hang", "drop", "garbage")
CONFIG = ("400", "401", "403", "404", "echo_key", "context", "307")
SHAPES = ("message_null", "tool_call_null", "function_str", "tool_calls_str", "content_parts",
          "surrogate", "huge")
FAULT_KINDS: tuple[str, ...] = TRANSIENT + CONFIG + SHAPES

_REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable",
            307: "Temporary Redirect"}


class FaultServer(FakeOpenAIServer):
    """See the module docstring."""

    def __init__(
        self,
        responses: Sequence[Mapping[str, Any] | str] = ("###STOP###",),
        *,
        faults: Mapping[int, str] | None = None,
        fault_rate: float = 0.0,
        fault_mix: Sequence[str] = ("500", "hang", "drop"),
        seed: int = 0,
        served_models: Sequence[str] = ("m",),
        retry_after_s: float | None = None,
        hang_s: float = 30.0,
        huge_chars: int = 1_000_000,
        latency_s: float = 0.0,
        lifetime_s: float = 600.0,
        cycle: bool = False,
        models_status: int = 200,
        require_key: str | None = None,
        model_root: str | None = None,
        redirect_location: str = "https://127.0.0.1:1/v1/chat/completions",
        model_fields: Mapping[str, Any] | None = None,
        version: str | None = None,
        completion_tokens: int = 10,
        finish_reason: str = "stop",
        empty_every: int = 0,
    ) -> None:
        for kind in [*(faults or {}).values(), *fault_mix]:
            if kind not in FAULT_KINDS:
                raise ValueError(f"fault {kind!r} must be one of {', '.join(FAULT_KINDS)}")
        super().__init__(responses, latency_s=latency_s, hang_s=hang_s, lifetime_s=lifetime_s,
                         cycle=cycle)
        self.faults = dict(faults or {})
        self.fault_rate = fault_rate
        self.fault_mix = tuple(fault_mix)
        self._rng = random.Random(seed)
        self.served_models = list(served_models)
        self.retry_after_s = retry_after_s
        self.huge_chars = huge_chars
        self.models_status = models_status
        self.require_key = require_key
        self.model_root = model_root
        self.redirect_location = redirect_location
        """Reported as each served model's ``root`` (vLLM: the checkpoint behind the name)."""
        self.refused = 0
        """Requests refused for a missing or wrong key (``require_key``)."""
        self.model_requests = 0
        self.injected: Counter[str] = Counter()
        self.model_fields = dict(model_fields or {})
        self.version = version
        self.completion_tokens = completion_tokens
        self.finish_reason = finish_reason
        self.empty_every = empty_every
        self.authorizations: Counter[str] = Counter()
        """The ``Authorization`` header of every request (``""``: none), by value."""
        self.arrivals: list[float] = []
        """Loop time of each chat request (to check retry spacing)."""

    def _pick(self) -> str | None:
        fault = self.faults.get(self.requests)
        if fault is None and self.fault_rate and self._rng.random() < self.fault_rate:
            fault = self._rng.choice(self.fault_mix)
        if fault is not None:
            self.injected[fault] += 1
        return fault

    def _status(self, code: int, body: Any, extra: str = "") -> bytes:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return (f"HTTP/1.1 {code} {_REASONS.get(code, 'X')}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n{extra}Connection: keep-alive\r\n\r\n").encode() + data

    def _completion(self, message: Any) -> bytes:
        payload = {"id": f"chatcmpl-{self.requests}", "object": "chat.completion", "model": "fake",
                   "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 10}}
        # ensure_ascii keeps a lone surrogate as the escape "\ud83d": valid JSON text.
        return self._status(200, json.dumps(payload, ensure_ascii=True).encode())

    def _scripted(self, body: bytes) -> bytes:
        """The scripted answer, with the usage and finish reason asked for; every
        ``empty_every``-th request an empty message."""
        if not self.empty_every and self.completion_tokens == 10 and self.finish_reason == "stop":
            return self._answer(body)  # the stand-in's fast path, as before
        if self.empty_every and self.requests % self.empty_every == 0:
            message: Any = {"role": "assistant", "content": ""}
        else:
            message = json.loads(self._answer(body))["choices"][0]["message"]
        payload = {"id": f"chatcmpl-{self.requests}", "object": "chat.completion", "model": "fake",
                   "choices": [{"index": 0, "message": message,
                                "finish_reason": self.finish_reason}],
                   "usage": {"prompt_tokens": len(body) // 4,
                             "completion_tokens": self.completion_tokens}}
        return json.dumps(payload, ensure_ascii=True).encode()

    def _faulty(self, fault: str, head: bytes) -> bytes | None:
        retry = (f"Retry-After: {self.retry_after_s:g}\r\n"
                 if self.retry_after_s is not None else "")
        if fault in ("500", "503", "429"):
            return self._status(int(fault), {"error": {"message": "try later"}}, retry)
        if fault == "garbage":
            return self._status(200, b'{"choices": [{"mess')
        if fault in ("400", "401", "403", "404"):
            return self._status(int(fault), {"error": {"message": f"refused ({fault})"}})
        if fault == "echo_key":
            auth = next((line.split(b":", 1)[1].strip().decode() for line in head.split(b"\r\n")
                         if line.lower().startswith(b"authorization:")), "")
            return self._status(401, {"error": {"message": f"Incorrect API key provided: {auth}"}})
        if fault == "307":
            return self._status(307, b"", f"Location: {self.redirect_location}\r\n")
        if fault == "context":
            return self._status(400, {"error": {"message": "This model's maximum context length "
                                                "is 4096 tokens. However, you requested 5000."}})
        shapes: dict[str, Any] = {
            "message_null": None,
            "tool_call_null": {"role": "assistant", "content": None, "tool_calls": [None]},
            "function_str": {"role": "assistant", "content": None,
                             "tool_calls": [{"id": "c1", "type": "function", "function": "str"}]},
            "tool_calls_str": {"role": "assistant", "content": None, "tool_calls": "str"},
            "content_parts": {"role": "assistant",
                              "content": [{"type": "text", "text": "done "}, {"type": "text", "text": "###STOP###"}]},
            "surrogate": {"role": "assistant", "content": "broken \ud83d text"},
            "huge": {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "find", "arguments": '{"q": "' + "x" * self.huge_chars + '"}'}}]},
        }
        if fault in shapes:
            return self._completion(shapes[fault])
        return None  # hang / drop: handled by the caller

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                return
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            body = await reader.readexactly(length) if length else b""
            self.authorizations[next((line.split(b":", 1)[1].strip().decode("latin-1")
                                      for line in head.split(b"\r\n")
                                      if line.lower().startswith(b"authorization:")), "")] += 1
            if self.require_key is not None and (
                    f"authorization: bearer {self.require_key.lower()}\r\n".encode() not in head.lower() + b"\r\n"):
                self.refused += 1
                writer.write(self._faulty("echo_key", head) or b"")
                await writer.drain()
                continue
            if head.startswith(b"GET ") and b"/models" in head.split(b"\r\n", 1)[0]:
                self.model_requests += 1
                if self.models_status == 200:
                    writer.write(self._status(200, {"object": "list", "data": [
                        {"id": m, "object": "model",
                         **({"root": self.model_root} if self.model_root else {}),
                         **self.model_fields}
                        for m in self.served_models]}))
                elif 300 <= self.models_status < 400:
                    location = self.redirect_location.replace("/chat/completions", "/models")
                    writer.write(self._status(self.models_status, b"", f"Location: {location}\r\n"))
                else:  # refused, echoing the key as some proxies do
                    refusal = self._faulty("echo_key", head) or b""
                    writer.write(refusal.replace(
                        b"401 Unauthorized", f"{self.models_status} X".encode(), 1))
                await writer.drain()
                continue
            if head.startswith(b"GET ") and b"/version" in head.split(b"\r\n", 1)[0]:
                writer.write(self._status(200, {"version": self.version}) if self.version
                             else self._status(404, {"detail": "Not Found"}))
                await writer.drain()
                continue
            self.requests += 1
            self.arrivals.append(loop.time())
            fault = self._pick()
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            if fault == "drop":
                writer.close()
                return
            if fault == "hang":
                await asyncio.sleep(self.hang_s)
                writer.close()
                return
            reply = self._faulty(fault, head) if fault else self._http("200 OK", self._scripted(body))
            assert reply is not None
            writer.write(reply)
            await writer.drain()

"""The OpenAI-compatible backend against a loopback fake server, through the retry wrapper."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from pytest_quantagent.backends.base import BackendOptions, GenerateRequest
from pytest_quantagent.backends.http_client import BackendHTTPError
from pytest_quantagent.backends.mock import FakeOpenAIServer
from pytest_quantagent.backends.openai_compat import OpenAICompatBackend, create_backend
from pytest_quantagent.backends.openai_parse import parse_completion, tool_name_decisions
from pytest_quantagent.backends.wrapper import ModelClient, RetryPolicy, bind_episode_usage
from pytest_quantagent.errors import InfrastructureError
from pytest_quantagent.quant.arms import ArmSpec

FAST = RetryPolicy(max_retries=3, base_delay_s=0.001, max_delay_s=0.01)
CALL = {"tool_calls": [{"name": "get_user", "arguments": {"user_id": "u1"}}]}
REQ = GenerateRequest(messages=[{"role": "system", "content": "policy"}, {"role": "user", "content": "hi"}],
                      tools=[{"type": "function", "function": {"name": "get_user", "parameters": {}}}], seed=1)


def _serve(**kw: object) -> tuple[FakeOpenAIServer, str]:
    server = FakeOpenAIServer([CALL], **kw)  # type: ignore[arg-type]
    return server, server.start_in_thread()


def _client(url: str, timeout_s: float = 5.0, retry: RetryPolicy = FAST, http: str = "native") -> ModelClient:
    arm = ArmSpec(label="bf16", backend="openai", model="m", base_url=url,
                  options={"timeout_s": timeout_s, "http_client": http})
    return ModelClient(create_backend(arm, BackendOptions(concurrency=4)), concurrency=4, retry=retry)


HTTP_CLIENTS = ["native", "httpx"]


@pytest.mark.parametrize("http", HTTP_CLIENTS)
@pytest.mark.parametrize("fault", ["500", "drop", "garbage"])
def test_fault_is_retried_and_counted(fault: str, http: str) -> None:
    # Fault on the 2nd request: the first opened a keep-alive connection that is reused.
    server, url = _serve(faults={2: fault})

    async def main() -> tuple[object, int]:
        client = _client(url, http=http)
        await client.generate(REQ)
        usage = bind_episode_usage()
        try:
            gen = await client.generate(REQ)
        finally:
            await client.aclose()
        return gen, usage.retries

    try:
        gen, retries = asyncio.run(main())
    finally:
        server.stop()
    assert retries == 1
    assert server.requests == 3
    assert [(c.name, json.loads(c.arguments)) for c in gen.tool_calls] == [("get_user", {"user_id": "u1"})]  # type: ignore[attr-defined]


@pytest.mark.parametrize("http", HTTP_CLIENTS)
def test_timeout_is_retried(http: str) -> None:
    server, url = _serve(faults={1: "hang"}, hang_s=3.0)

    async def main() -> int:
        client = _client(url, timeout_s=0.3, http=http)
        usage = bind_episode_usage()
        try:
            await client.generate(REQ)
        finally:
            await client.aclose()
        return usage.retries

    try:
        assert asyncio.run(main()) == 1
    finally:
        server.stop()


def test_retries_exhausted_raise_infrastructure_error() -> None:
    server, url = _serve(faults={i: "500" for i in range(1, 10)})

    async def main() -> None:
        client = _client(url, retry=RetryPolicy(max_retries=2, base_delay_s=0.001))
        try:
            await client.generate(REQ)
        finally:
            await client.aclose()

    try:
        with pytest.raises(InfrastructureError, match=r"giving up after 3 attempts.*HTTP 500"):
            asyncio.run(main())
    finally:
        server.stop()
    assert server.requests == 3


def test_client_error_is_not_retried() -> None:
    backend = OpenAICompatBackend(base_url="http://127.0.0.1:1/v1", model="m")
    assert not backend.is_retryable(BackendHTTPError(400, "bad request"))
    assert backend.is_retryable(BackendHTTPError(503, "overloaded"))
    assert backend.is_retryable(BackendHTTPError(429, "slow down"))


def test_request_body_defaults_and_constrained_option() -> None:
    plain = OpenAICompatBackend(base_url="http://x/v1", model="m")
    body = plain.build_body(REQ)
    assert body["tool_choice"] == "auto"
    assert "strict" not in body["tools"][0]["function"]
    assert body["logprobs"] is True and body["top_logprobs"] == 2
    strict = OpenAICompatBackend(base_url="http://x/v1", model="m", constrained=True)
    assert strict.build_body(REQ)["tools"][0]["function"]["strict"] is True
    assert REQ.tools[0]["function"].get("strict") is None  # the shared schema is not mutated


def test_api_key_read_from_env_and_never_described(monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk-test-DO-NOT-LEAK-123"
    monkeypatch.setenv("QA_TEST_KEY", secret)
    arm = ArmSpec(label="bf16", backend="openai", model="m", base_url="http://x/v1", api_key_env="QA_TEST_KEY")
    caplog.set_level(logging.DEBUG)
    backend = create_backend(arm, BackendOptions())
    assert f"Authorization: Bearer {secret}".encode() in backend._native._auth  # type: ignore[union-attr]
    assert secret not in repr(backend) and secret not in repr(vars(backend))
    assert secret not in json.dumps(backend.describe())
    assert secret not in repr(arm) and secret not in json.dumps(arm.cache_fields())
    assert secret not in caplog.text
    asyncio.run(backend.aclose())


def test_credentials_in_url_are_not_described() -> None:
    b = OpenAICompatBackend(base_url="http://bob:hunter2@10.0.0.1:8000/v1", model="m", http_client="httpx")
    assert b.describe()["base_url"] == "http://10.0.0.1:8000/v1"
    asyncio.run(b.aclose())


def test_missing_api_key_env_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QA_ABSENT_KEY", raising=False)
    arm = ArmSpec(label="bf16", backend="openai", model="m", base_url="http://x/v1", api_key_env="QA_ABSENT_KEY")
    with pytest.raises(ValueError, match=r"'QA_ABSENT_KEY'.*not set"):
        create_backend(arm, BackendOptions())


def test_unknown_option_is_refused_with_allowed_list() -> None:
    arm = ArmSpec(label="bf16", backend="openai", model="m", base_url="http://x/v1", options={"strcit": True})
    with pytest.raises(ValueError, match=r"unknown openai option 'strcit'; did you mean 'strict'\?|unknown openai option 'strcit'.*allowed: constrained"):
        create_backend(arm, BackendOptions())


def test_logprobs_give_tool_name_decisions() -> None:
    # vLLM-style: the generated text holds the tool-call markup; the name starts at "get".
    tokens = [
        {"token": '<tool_call>{"name": "', "logprob": -0.01, "top_logprobs": []},
        {"token": "get", "logprob": -0.2, "top_logprobs": [{"token": "get", "logprob": -0.2},
                                                            {"token": "find", "logprob": -1.9}]},
        {"token": "_user", "logprob": -0.01, "top_logprobs": [{"token": "_user", "logprob": -0.01},
                                                               {"token": "_order", "logprob": -5.0}]},
        {"token": '"}', "logprob": 0.0, "top_logprobs": []},
    ]
    (d,) = tool_name_decisions(tokens, ["get_user"])
    assert (d.top1, d.top2, d.chosen) == ("get", "find", "get_user")
    assert d.margin == pytest.approx(1.7)
    gen = parse_completion(
        {"content": None, "tool_calls": [{"id": "c1", "function": {"name": "get_user", "arguments": "{}"}}]},
        {"content": tokens}, {"prompt_tokens": 100, "completion_tokens": 7},
    )
    assert len(gen.decisions) == 1 and gen.prompt_tokens == 100 and gen.raw_text is not None
    assert tool_name_decisions(tokens, ["absent_tool"]) == []


@pytest.mark.parametrize("constrained", [False, True])
def test_encoded_body_equals_plain_json_encoding(constrained: bool) -> None:
    backend = OpenAICompatBackend(base_url="http://x/v1", model="m", constrained=constrained,
                                  extra_body={"top_k": 1})
    history = [*REQ.messages, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "get_user", "arguments": "{\"a\": \"é\"}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"}]
    for req in (REQ, GenerateRequest(messages=history, tools=REQ.tools, seed=3, want_margins=False),
                GenerateRequest(messages=history, tools=[], seed=3)):
        for _ in range(2):  # second time from the cache
            assert json.loads(backend.encode_body(req)) == json.loads(json.dumps(backend.build_body(req)))


def test_encoded_prefix_is_reused_only_for_the_same_message_objects() -> None:
    backend = OpenAICompatBackend(base_url="http://x/v1", model="m")
    system = {"role": "system", "content": "policy"}
    a, b, c = ({"role": "user", "content": t} for t in ("a", "b", "c"))

    def check(msgs: list[dict[str, object]]) -> None:
        req = GenerateRequest(messages=msgs, tools=REQ.tools, seed=1)
        assert json.loads(backend.encode_body(req)) == json.loads(json.dumps(backend.build_body(req)))

    check([system, a])
    check([system, a, b])          # grows: the prefix [system, a] is reused
    check([system, c, b])          # same first and last object, different middle
    check([system])                # shrinks
    check([system, a, b, c])
    d = {"role": "user", "content": "a"}
    check([system, d, b, c, a])    # an equal but different object in the prefix
    check([system, d, b, c, a, b])  # grows twice in a row (the entry extended in place)
    check([system, d, b, c, a, b, c])
    check([system, d, b])           # back to a shorter prefix of it
    check([system, a, c])           # two conversations sharing the first message, in turns
    check([system, d, b, a])
    check([system, a, c, b])
    check([])


def test_fake_server_turn_fast_path_matches_full_decoding() -> None:
    backend = OpenAICompatBackend(base_url="http://x/v1", model="m")
    msgs = [{"role": "system", "content": "p"}, {"role": "assistant", "content": "Hi!"}]
    for n in range(4):
        msgs += [{"role": "user", "content": f"u{n}"}]
        body = backend.encode_body(GenerateRequest(messages=list(msgs), tools=REQ.tools, seed=0))
        assert FakeOpenAIServer._turn_of(body) == n
        assert FakeOpenAIServer._turn_of(json.dumps(json.loads(body), indent=1).encode()) == n
        msgs += [{"role": "assistant", "content": None, "tool_calls": []}, {"role": "tool", "tool_call_id": "c", "content": "x"}]


def test_tool_call_markup_left_as_content_is_a_malformed_call() -> None:
    # vLLM's hermes parser returns the raw text as content when the JSON inside the markup
    # is broken; that is a malformed call, not a message to the user.
    from pytest_quantagent.backends.openai_parse import parse_completion
    from pytest_quantagent.runner.agent import generation_to_message

    gen = parse_completion({"content": '<tool_call>{"name": "get_user_details", "argu'}, None, None)
    assert gen.raw_text == '<tool_call>{"name": "get_user_details", "argu'
    msg = generation_to_message(gen, turn=0)
    assert msg.content is None
    assert msg.tool_calls is not None and msg.tool_calls[0].parse_error
    assert msg.raw == '<tool_call>{"name": "get_user_details", "argu'
    # A well-formed call in markup is a call too.
    ok = parse_completion({"content": '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'}, None, None)
    assert [(c.name, c.arguments) for c in ok.tool_calls] == [("f", '{"a": 1}')]
    assert ok.content is None


class _OneShotServer:
    """A loopback server running ``handler`` on each connection; on exit it waits for the
    handlers to finish (they end when the client hangs up) and closes everything."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler
        self.tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.tasks.append(asyncio.current_task())  # type: ignore[arg-type]
            try:
                await self.handler(reader, writer)
                await reader.read()  # until the client hangs up
            finally:
                writer.close()
                await writer.wait_closed()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), 5)
        self.server.close()
        await self.server.wait_closed()


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        # Content-Length, arriving in pieces.
        ([b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello", b" world"], (200, b"hello world")),
        # Chunked, split inside a chunk and inside the size line.
        ([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", b"lo\r\n6\r", b"\n world\r\n0\r\n\r\n"],
         (200, b"hello world")),
        # Neither: the body runs to the end of the connection.
        ([b"HTTP/1.0 503 Service Unavailable\r\n\r\nbusy", b" now", None], (503, b"busy now")),
    ],
)
def test_native_client_frames_responses(reply: list[bytes | None], expected: tuple[int, bytes]) -> None:
    from pytest_quantagent.backends.http_client import NativeHTTPClient

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        assert await reader.readexactly(length) == b'{"x": 1}'
        for piece in reply:
            if piece is None:
                writer.close()
                return
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.01)

    async def main() -> tuple[int, bytes, str | None]:
        async with _OneShotServer(handler) as url:
            client = NativeHTTPClient(url, {}, max_connections=1, timeout_s=5)
            try:
                return await client.post("/chat/completions", b'{"x": 1}')
            finally:
                await client.aclose()

    assert asyncio.run(main())[:2] == expected


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\ntruncated", "closed before the response was complete"),
        (b"SMTP ready\r\n\r\n", "bad status line"),
    ],
)
def test_native_client_refuses_broken_responses(answer: bytes, error: str) -> None:
    from pytest_quantagent.backends.http_client import NativeHTTPClient

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    async def main() -> None:
        async with _OneShotServer(handler) as url:
            client = NativeHTTPClient(url, {}, max_connections=1, timeout_s=5)
            try:
                with pytest.raises(ConnectionError, match=error):
                    await client.post("/chat/completions", b"{}")
            finally:
                await client.aclose()

    asyncio.run(main())


def test_key_not_in_traceback_locals_when_building_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 28 finding 4: a bad http_client made `pytest -l` print the key from frame locals.
    import traceback

    secret = "sk-planted-LOCALS-5151"
    monkeypatch.setenv("QA_TEST_KEY", secret)
    for options in ({"http_client": "curl"}, {"max_connections": 0}, {"timeout_s": float("nan")}):
        arm = ArmSpec(label="int4", backend="openai", model="m", base_url="http://bob:pw-PLANTED@x/v1",
                      api_key_env="QA_TEST_KEY", options=options)
        with pytest.raises(ValueError) as e:
            create_backend(arm, BackendOptions())
        # Every frame below this test's own (which holds the planted key on purpose).
        tb = "".join(traceback.TracebackException(type(e.value), e.value, e.tb.tb_next,
                                                  capture_locals=True).format())
        assert "create_backend" in tb
        assert "arm 'int4'" in str(e.value)
        assert secret not in tb and "pw-PLANTED" not in str(e.value)
    backend = create_backend(ArmSpec(label="int4", backend="openai", model="m", base_url="http://x/v1",
                                     api_key_env="QA_TEST_KEY"), BackendOptions())
    assert secret not in repr(vars(backend)) and "**********" in repr(backend._api_key)
    asyncio.run(backend.aclose())


def test_server_error_text_is_redacted() -> None:
    from pydantic import SecretStr

    from pytest_quantagent.backends.secrets import redact

    text = ('{"error": "Incorrect API key provided: sk-abc123456. Authorization: Bearer sk-zzz999999, '
            'api_key=hunter2hunter, proxy http://u:pw1234@h/v1"}')
    out = redact(text, (SecretStr("sk-abc123456"),))
    for s in ("sk-abc123456", "sk-zzz999999", "hunter2hunter", "pw1234"):
        assert s not in out
    assert out.count("[REDACTED]") == 4


def test_fake_server_answer_is_json_dumps_of_its_payload_also_when_cached() -> None:
    # The fake server writes its reply by hand around a cached message (issue 25: its CPU
    # per request is part of what the benchmark measures); the text must still be exactly
    # json.dumps of the payload it stands for, on the first answer and on cached ones.
    import json as _json

    from pytest_quantagent.backends.mock import FakeOpenAIServer

    server = FakeOpenAIServer([{"tool_calls": [{"name": "get_order", "arguments": {"order_id": "#W1"}}]},
                               {"content": 'Done: "quoted" \u00e9 ###STOP###'}])
    first = _json.dumps({"messages": [{"role": "user", "content": "hi"}]}, separators=(",", ":")).encode()
    second = _json.dumps({"messages": [{"role": "user", "content": "hi"},
                                       {"role": "assistant", "content": "x"}]}, separators=(",", ":")).encode()
    seen = []
    for body in (first, second, first, second):
        server.requests += 1
        text = server._answer(body).decode()
        payload = _json.loads(text)
        assert text == _json.dumps(payload)
        assert payload["id"] == f"chatcmpl-{server.requests}"
        assert payload["usage"] == {"prompt_tokens": len(body) // 4, "completion_tokens": 10}
        seen.append(payload["choices"][0]["message"])
    assert seen[0] == seen[2] and seen[1] == seen[3]
    assert seen[0]["tool_calls"][0]["function"]["name"] == "get_order"
    assert seen[1]["content"] == 'Done: "quoted" \u00e9 ###STOP###'


@pytest.mark.parametrize("faults", [None, {99: "500"}], ids=["lean", "stream"])
def test_fake_server_reports_how_late_its_answers_left(faults: dict[int, str] | None) -> None:
    # The benchmark's instrument reports its own lateness past each answer's deadline, on
    # both of its paths (lean when no fault is scripted, streams otherwise), and each stats
    # request starts the figures afresh. An answer never leaves before its deadline.
    import httpx

    server, url = _serve(latency_s=0.02, faults=faults)
    try:
        client = _client(url)
        with httpx.Client() as http:
            assert http.get(f"{url}/_fake/stats").json()["answered"] == 0
            async def three() -> None:
                try:
                    for _ in range(3):
                        await client.generate(REQ)
                finally:
                    await client.aclose()

            asyncio.run(three())
            stats = http.get(f"{url}/_fake/stats").json()
            assert stats["answered"] == 3 and stats["latency_ms"] == 20.0
            late = stats["late_ms"]
            assert -1e-3 <= late["p50"] <= late["p95"] <= late["max"] < 1000
            assert late["mean"] >= -1e-3
            assert http.get(f"{url}/_fake/stats").json() == {
                "answered": 0, "latency_ms": 20.0,
                "late_ms": {"mean": None, "p50": None, "p95": None, "max": None}}
            assert http.get(f"{url}/models").json() == {"object": "list", "data": []}
    finally:
        server.stop()


def test_parse_completion_reads_finish_reason_and_reasoning() -> None:
    # issue 38: the answer-level figures come from the server's response as it gives them
    from pytest_quantagent.backends.openai_parse import parse_completion

    g = parse_completion({"role": "assistant", "content": "hi", "reasoning_content": "abcde"},
                         None, {"prompt_tokens": 3, "completion_tokens": 40,
                                "completion_tokens_details": {"reasoning_tokens": 31}},
                         finish_reason="length")
    assert (g.completion_tokens, g.finish_reason, g.reasoning_tokens, g.reasoning_chars) == (
        40, "length", 31, 5)
    # vLLM's newer field name; odd values are unknown, never zero
    g = parse_completion({"role": "assistant", "content": None, "reasoning": "xy"}, None,
                         {"completion_tokens": True, "completion_tokens_details": None})
    assert (g.completion_tokens, g.finish_reason, g.reasoning_tokens, g.reasoning_chars) == (
        None, None, None, 2)

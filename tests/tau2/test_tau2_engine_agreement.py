"""Channels read from τ²-bench error *text* agree with the channels our engine assigns
*when the failure happens* (by exception class, ``env/environment.py``) to the same calls.

The engine is the reference: its domains reproduce τ²-bench's tool results byte for byte
(``quantagent fidelity``), and it classifies a failure from the exception a tool raises, not
from the text. Skips when a domain cannot be loaded.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.tau2 import read_results
from pytest_quantagent.tau2.classify import ToolNames, classify_error
from pytest_quantagent.vocab.channels import Channel
from pytest_quantagent.vocab.messages import Requestor, ToolCall

RESULTS = "results/gpt-4.1_retail_1trial_feature-gym.json"


def _domain(name: str, tau2_data: Path | None = None) -> Any:
    from pytest_quantagent.env.registry import get_domain

    try:
        return get_domain(name, tau2_data=tau2_data)
    except Exception as e:  # another area's domain not loadable here: nothing to compare
        pytest.skip(f"domain {name!r} unavailable: {type(e).__name__}: {e}")


def test_real_file_failures_match_the_engine(tau2_data: Path) -> None:
    import json

    path = tau2_data / RESULTS
    if not path.is_file():
        pytest.skip(f"{path} not present")
    domain = _domain("retail", tau2_data)
    run = read_results(path)
    raw = json.loads(path.read_text())
    compared = 0
    for sim, record in zip(raw["simulations"], run.records, strict=True):
        env = domain.make_environment(domain.task(str(sim["task_id"])))
        pending: deque[dict[str, Any]] = deque()
        engine: list[tuple[str, bool, Channel | None]] = []
        for m in sim["messages"]:
            if m["role"] in ("assistant", "user"):
                pending.extend(m.get("tool_calls") or [])
            elif m["role"] == "tool":
                tc = pending.popleft()
                call = ToolCall(
                    id=tc["id"],
                    name=tc["name"],
                    arguments=tc["arguments"],
                    requestor=tc.get("requestor", "assistant"),
                )
                msg = env.get_response(call)
                assert msg.error == m["error"], (sim["task_id"], tc["name"], msg.content)
                engine.append((tc["name"], msg.error, msg.channel))
        ours = [
            (c.name, c.error, c.channel)
            for c in record.calls
            if c.channel != Channel.MALFORMED_CALL
        ]
        assert ours == engine, sim["task_id"]
        compared += sum(e for _, e, _ in engine)
    assert compared == 12  # every failed call of the file was compared


# Calls that fail in each domain, one or more per channel (arguments chosen to fail on the
# domain's first task; the engine's channel is the expectation).
RETAIL_CALLS: list[tuple[Requestor, str, dict[str, Any]]] = [
    ("assistant", "get_order_details", {"order_id": "#W0000000"}),
    ("assistant", "find_user_id_by_email", {"email": "nobody@example.com"}),
    ("assistant", "get_product_details", {"product_id": "0"}),
    ("assistant", "get_order_details", {"order": "#W0000000"}),
    ("assistant", "get_order_details", {}),
    ("assistant", "get_order_details", {"order_id": 5}),
    ("assistant", "calculate", {"expression": "2 +* x"}),
    ("assistant", "calculate", {"expression": "1 / 0"}),
    ("assistant", "get_customer_details", {}),
]
TELECOM_CALLS: list[tuple[Requestor, str, dict[str, Any]]] = [
    ("assistant", "get_customer_by_id", {"customer_id": "C999"}),
    ("assistant", "get_details_by_id", {"id": "X1"}),
    ("assistant", "toggle_airplane_mode", {}),
    ("user", "suspend_line", {"customer_id": "C1001", "line_id": "L1001", "reason": "x"}),
    ("user", "make_payment", {}),
    ("user", "set_network_mode_preference", {"mode": "bogus"}),
    ("user", "toggle_wifi", {"on": True}),
    ("user", "reboot_phone", {}),
]


@pytest.mark.parametrize(
    ("domain_name", "calls"), [("retail", RETAIL_CALLS), ("telecom", TELECOM_CALLS)]
)
def test_crafted_failures_match_the_engine(
    domain_name: str, calls: list[tuple[Requestor, str, dict[str, Any]]]
) -> None:
    domain = _domain(domain_name)
    env = domain.make_environment(domain.tasks[0])
    names = ToolNames.of(domain.agent_tool_names, domain.user_tool_names)
    seen: set[Channel] = set()
    for i, (requestor, name, args) in enumerate(calls):
        msg = env.get_response(ToolCall(id=f"c{i}", name=name, arguments=args, requestor=requestor))
        assert msg.error, (name, args, msg.content)
        ours = classify_error(
            msg.content, tool_name=name, requestor=requestor, tools=names, arguments=args
        )
        assert ours.channel == msg.channel, (name, msg.content)
        assert msg.channel is not None
        seen.add(msg.channel)
    # the lists reach every channel a τ²-bench tool message can carry in this domain
    expected = {Channel.UNKNOWN_TOOL, Channel.BAD_ARGUMENTS, Channel.WRONG_ENTITY}
    if domain_name == "telecom":
        expected |= {Channel.CROSS_ROLE_TOOL, Channel.USER_TOOL_ERROR}
    assert expected <= seen

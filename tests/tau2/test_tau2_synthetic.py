"""The reader on small τ²-format files written by the tests: every channel, trimmed files,
the directory format, honesty flags, streaming."""

from __future__ import annotations

import json
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tau2_builders import (
    AGENT_TOOLS,
    USER_TOOLS,
    Conversation,
    results,
    simulation,
    trim,
    write_dir,
    write_json,
)

from pytest_quantagent.tau2 import ToolNames, read_results
from pytest_quantagent.vocab.channels import Channel, TerminationReason

UNREGISTERED = "no-such-domain-for-tests"


def every_channel() -> dict[str, Any]:
    """Task 1: one failure of each channel that τ²-bench records as a tool error, plus a
    retried malformed turn; task 2: a clean success; task 3: success after 2 errors."""
    c1 = (
        Conversation()
        .say("assistant", "Hi! How can I help you today?")
        .say("user", "My phone has no data.")
        .call("get_customer_details", "Error: Tool 'get_customer_details' not found.", error=True)
        .call("toggle_airplane_mode", "Error: Tool 'toggle_airplane_mode' not found.", error=True)
        .call(
            "get_customer_by_id",
            "Error: TelecomTools.get_customer_by_id() got an unexpected keyword argument 'id'",
            error=True,
            arguments={"id": "C1"},
        )
        .call(
            "get_customer_by_id",
            "Error: Customer with ID C9 not found",
            error=True,
            arguments={"customer_id": "C9"},
        )
        .call(
            "cancel_pending_order",
            "Error: Non-pending order cannot be cancelled",
            error=True,
            arguments={"order_id": "#W1"},
        )
        .call("check_network_status", "Error: Device is powered off", error=True, requestor="user")
        .call("get_customer_by_id", '{"customer_id": "C1"}', arguments={"customer_id": "C1"})
        .say(
            "assistant",
            "Done.",
            errors=[
                "Invalid message format. Original message: "
                "AssistantMessage\nToolCalls\nToolCall (from "
                "assistant)\nid: x\nname: get_order_details\n"
                "Error: both text content and tool calls"
            ],
        )
        .say("user", "Thanks ###STOP###")
    )
    c2 = (
        Conversation()
        .say("assistant", "Hi")
        .call("get_order_details", '{"status": "ok"}')
        .say("user", "###STOP###")
    )
    c3 = (
        Conversation()
        .call(
            "get_order_details",
            "Error: Order not found",
            error=True,
            arguments={"order_id": "#W404"},
        )
        .call(
            "get_order_details",
            "Error: Order not found",
            error=True,
            arguments={"order_id": "#W405"},
        )
        .call("get_order_details", '{"status": "delivered"}', arguments={"order_id": "#W1"})
        .say("user", "###STOP###")
    )
    return results(
        [
            simulation("1", c1.messages, reward=0.0),
            simulation("2", c2.messages, reward=1.0),
            simulation("3", c3.messages, reward=1.0),
        ]
    )


EXPECTED_FAILURES = [
    ("get_customer_details", "assistant", Channel.UNKNOWN_TOOL, "get_customer_details"),
    ("toggle_airplane_mode", "assistant", Channel.CROSS_ROLE_TOOL, "toggle_airplane_mode"),
    ("get_customer_by_id", "assistant", Channel.BAD_ARGUMENTS, None),
    ("get_customer_by_id", "assistant", Channel.WRONG_ENTITY, "C9"),
    ("cancel_pending_order", "assistant", Channel.POLICY_VIOLATION, None),
    ("check_network_status", "user", Channel.USER_TOOL_ERROR, None),
    ("get_order_details", "assistant", Channel.MALFORMED_CALL, None),
]


def _failures(path: Path, **kw: Any) -> list[tuple[str, str, Channel | None, str | None]]:
    run = read_results(path, **kw)
    first = run.records[0]
    return [(c.name, c.requestor, c.channel, c.entity) for c in first.calls if c.error]


def test_every_channel(tmp_path: Path) -> None:
    p = write_json(tmp_path / "int4.json", every_channel())
    run = read_results(p)
    assert _failures(p) == EXPECTED_FAILURES
    first, second, third = run.records
    # τ²-bench's counter: the 6 error tool messages; the retried malformed turn is not in it
    assert (first.n_errors, second.n_errors, third.n_errors) == (6, 0, 2)
    assert [len(r.calls) for r in run.records] == [8, 1, 3]
    assert [r.success for r in run.records] == [False, True, True]
    assert [r.success_at_budget(k) for k in (1, 2, 3) for r in [third]] == [False, False, True]
    assert all(
        c.detail and c.detail.startswith(("Error:", "Invalid message"))
        for c in first.calls
        if c.error
    )
    assert run.flags.hidden_malformed == 1
    assert run.flags.tool_names_source in ("domain+file", "file", "tool_defs")


def test_trimmed_file_reads_the_same(tmp_path: Path) -> None:
    data = every_channel()
    full = read_results(write_json(tmp_path / "full.json", data))
    trimmed = read_results(write_json(tmp_path / "trimmed.json", trim(data)))
    assert trimmed.flags.trimmed and not full.flags.trimmed
    assert [r.n_errors for r in trimmed.records] == [r.n_errors for r in full.records]
    for a, b in zip(full.records, trimmed.records, strict=True):
        assert [(c.step, c.name, c.requestor, c.error, c.channel, c.entity) for c in a.calls] == [
            (c.step, c.name, c.requestor, c.error, c.channel, c.entity) for c in b.calls
        ]


def test_trimmed_tool_results_pair_in_order(tmp_path: Path) -> None:
    # one assistant message with two calls: without ids, results answer calls in order
    msgs: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"name": "get_order_details", "arguments": {"order_id": "#W1"}},
                {"name": "get_customer_by_id", "arguments": {"customer_id": "C404"}},
            ],
        },
        {"role": "tool", "content": '{"status": "ok"}'},
        {"role": "tool", "content": "Error: Customer with ID C404 not found"},
    ]
    run = read_results(write_json(tmp_path / "t.json", results([simulation("1", msgs)])))
    calls = run.records[0].calls
    assert [(c.name, c.error, c.channel) for c in calls] == [
        ("get_order_details", False, None),
        ("get_customer_by_id", True, Channel.WRONG_ENTITY),
    ]
    assert calls[1].entity == "C404"


def test_bundled_tool_messages_are_read_one_by_one(tmp_path: Path) -> None:
    msgs: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "name": "get_order_details", "arguments": {}, "requestor": "assistant"},
                {"id": "b", "name": "get_order_status", "arguments": {}, "requestor": "assistant"},
            ],
        },
        {
            "role": "tool",
            "tool_messages": [
                {
                    "role": "tool",
                    "id": "a",
                    "content": "{}",
                    "requestor": "assistant",
                    "error": False,
                },
                {
                    "role": "tool",
                    "id": "b",
                    "content": "Error: Tool 'get_order_status' not found.",
                    "requestor": "assistant",
                    "error": True,
                },
            ],
        },
    ]
    run = read_results(write_json(tmp_path / "m.json", results([simulation("1", msgs)])))
    rec = run.records[0]
    assert rec.n_errors == 1
    assert [(c.name, c.channel) for c in rec.calls] == [
        ("get_order_details", None),
        ("get_order_status", Channel.UNKNOWN_TOOL),
    ]


@pytest.mark.parametrize("give", ["folder", "results.json"])
def test_directory_format(tmp_path: Path, give: str) -> None:
    data = every_channel()
    folder = write_dir(tmp_path / "int4_run", data)
    mono = read_results(write_json(tmp_path / "mono.json", data))
    run = read_results(folder if give == "folder" else folder / "results.json")
    assert run.format == "dir"
    assert run.label == "int4_run"
    assert [(r.task_id, r.trial, r.n_errors, r.success) for r in run.records] == [
        (r.task_id, r.trial, r.n_errors, r.success) for r in mono.records
    ]
    assert [[c.channel for c in r.calls] for r in run.records] == [
        [c.channel for c in r.calls] for r in mono.records
    ]


def test_directory_format_without_index(tmp_path: Path) -> None:
    folder = write_dir(tmp_path / "run", every_channel(), with_index=False)
    run = read_results(folder)
    assert sorted(r.task_id for r in run.records) == ["1", "2", "3"]


def test_flags_infrastructure_premature_and_success_rule(tmp_path: Path) -> None:
    ok = Conversation().call("get_order_details", '{"status": "ok"}').messages
    sims = [
        simulation("1", ok, termination="infrastructure_error"),
        simulation("2", ok, termination="context_window_exceeded", reward=0.0),
        simulation("3", ok, termination="max_steps", reward=1.0),  # reward 1 but not a stop
        simulation("4", ok, termination="too_many_errors", reward=0.0),
        simulation("5", ok, termination="agent_stop", reward=1.0),
        simulation("6", ok, termination="unexpected_error", reward=0.0),
    ]
    run = read_results(write_json(tmp_path / "r.json", results(sims)))
    f = run.flags
    assert f.episodes == 6
    assert f.infrastructure_errors == 2
    assert f.infrastructure_episodes == [("1", 0), ("2", 0)]
    assert f.premature == Counter({"max_steps": 1, "too_many_errors": 1, "unexpected_error": 1})
    terms = [r.termination for r in run.records]
    assert terms == [
        TerminationReason.INFRASTRUCTURE_ERROR,
        TerminationReason.INFRASTRUCTURE_ERROR,
        TerminationReason.MAX_STEPS,
        TerminationReason.TOO_MANY_ERRORS,
        TerminationReason.AGENT_STOP,
        TerminationReason.AGENT_ERROR,
    ]
    assert [r.scored for r in run.records] == [False, False, True, True, True, True]
    assert [r.success for r in run.records] == [False, False, False, False, True, False]
    assert run.records[1].error_message == "tau2-bench termination: context_window_exceeded"
    text = "\n".join(f.lines())
    assert "2 of 6 episodes recorded as infrastructure errors" in text
    assert "3 premature terminations" in text


@pytest.mark.parametrize(
    ("version", "drops"),
    [
        ("1.0.0", True),
        ("1.0.0.post1", True),
        ("v1.0.0", True),
        ("1.0.1", False),
        ("1.1.0", False),
        ("0.2.0", False),
        (None, False),
    ],
)
def test_version_flag(tmp_path: Path, version: str | None, drops: bool) -> None:
    extra = {} if version is None else {"tau2_version": version}
    ok = Conversation().call("get_order_details", '{"status": "ok"}').messages
    run = read_results(write_json(tmp_path / "r.json", results([simulation("1", ok)], **extra)))
    assert run.flags.tau2_version == version
    assert run.flags.drops_hallucinated is drops
    assert any("hallucinated" in line for line in run.flags.lines()) is drops


def test_version_under_methodology_and_unknown_version_note(tmp_path: Path) -> None:
    ok = Conversation().call("get_order_details", '{"status": "ok"}').messages
    sims = [simulation("1", ok, termination="infrastructure_error"), simulation("2", ok)]
    p = write_json(tmp_path / "r.json", results(sims, methodology={"tau2_version": "1.0.0"}))
    assert read_results(p).flags.drops_hallucinated
    unknown = read_results(write_json(tmp_path / "u.json", results(sims))).flags
    assert unknown.tau2_version is None and not unknown.drops_hallucinated
    assert any("does not record its tau2-bench version" in line for line in unknown.lines())
    clean = read_results(write_json(tmp_path / "c.json", results(sims[1:]))).flags
    assert not any("version" in line or "infrastructure" in line for line in clean.lines())


def test_duplicate_keys_flagged_and_reward_info_slimmed(tmp_path: Path) -> None:
    ok = Conversation().call("get_order_details", '{"status": "ok"}').messages
    a, b = simulation("1", ok, sim_id="a"), simulation("1", ok, sim_id="b")
    a["reward_info"]["action_checks"] = [
        {"action": {"name": "x", "arguments": {"k": "v"}}, "action_match": True},
        {"action": {"name": "y"}, "action_match": False},
    ]
    p = write_json(tmp_path / "r.json", results([a, b]))
    run = read_results(p)
    assert run.flags.duplicate_keys == 1
    assert run.records[0].reward_info["action_checks"] == {"n": 2, "passed": 1}
    assert run.records[0].reward_info["reward"] == 1.0
    full = read_results(p, keep_messages=True).records[0].reward_info
    assert full["action_checks"][0]["action"]["arguments"] == {"k": "v"}


def test_tick_only_simulations_are_flagged(tmp_path: Path) -> None:
    sim = simulation("1", [])
    sim["messages"] = None
    sim["ticks"] = [{"tick_id": 0}]
    run = read_results(write_json(tmp_path / "voice.json", results([sim])))
    assert run.records[0].calls == []
    assert run.flags.tick_only == 1
    assert any("ticks, not messages" in line for line in run.flags.lines())


def test_missing_trial_numbers_repeats_per_task(tmp_path: Path) -> None:
    ok = Conversation().call("get_order_details", '{"status": "ok"}').messages
    sims = [
        simulation("1", ok, trial=None, sim_id="a"),
        simulation("2", ok, trial=None, sim_id="b"),
        simulation("1", ok, trial=None, sim_id="c"),
    ]
    run = read_results(write_json(tmp_path / "r.json", results(sims)))
    assert [(r.task_id, r.trial) for r in run.records] == [("1", 0), ("2", 0), ("1", 1)]
    assert len({r.key for r in run.records}) == 3


def test_cross_role_judged_from_names_seen_later_in_the_file(tmp_path: Path) -> None:
    # No tool lists anywhere (info without tool_defs, domain not registered): the agent's
    # failed call to toggle_airplane_mode is cross-role only because the user calls that
    # tool successfully in a *later* simulation.
    failing = (
        Conversation()
        .call("toggle_airplane_mode", "Error: Tool 'toggle_airplane_mode' not found.", error=True)
        .messages
    )
    later = (
        Conversation()
        .call("toggle_airplane_mode", "Airplane Mode is now OFF.", requestor="user")
        .messages
    )
    data = results([simulation("1", failing), simulation("2", later)], domain=UNREGISTERED)
    data["info"]["environment_info"].pop("tool_defs")
    data["info"]["environment_info"].pop("user_tool_defs")
    run = read_results(write_json(tmp_path / "r.json", data))
    assert run.flags.tool_names_source == "file"
    assert any("tool lists unavailable" in n for n in run.flags.notes)
    assert run.records[0].calls[0].channel == Channel.CROSS_ROLE_TOOL


def test_given_tool_names_take_part(tmp_path: Path) -> None:
    failing = (
        Conversation()
        .call("reboot_device", "Error: Tool 'reboot_device' not found.", error=True)
        .messages
    )
    data = results([simulation("1", failing)], domain=UNREGISTERED)
    p = write_json(tmp_path / "r.json", data)
    assert read_results(p).records[0].calls[0].channel == Channel.UNKNOWN_TOOL
    given = ToolNames.of(agent=AGENT_TOOLS, user=[*USER_TOOLS, "reboot_device"])
    run = read_results(p, tools=given)
    assert run.flags.tool_names_source == "given"
    assert run.records[0].calls[0].channel == Channel.CROSS_ROLE_TOOL


def test_label_backend_and_messages(tmp_path: Path) -> None:
    p = write_json(tmp_path / "qwen-int4.json", every_channel())
    run = read_results(p, label="int4", backend="replay", keep_messages=True)
    r = run.records[0]
    assert (run.label, r.arm, r.backend, r.model, r.domain) == (
        "int4",
        "int4",
        "replay",
        "test-model",
        "telecom",
    )
    assert r.seed == 1001 and r.max_steps == 200 and r.user_sim == "user_simulator"
    roles = Counter(m.role for m in r.messages)
    assert roles == Counter({"assistant": 8, "user": 3, "tool": 7})
    assert sum(m.error for m in r.messages if m.role == "tool") == 6
    assert read_results(p).label == "qwen-int4"


def test_streams_without_holding_the_file(tmp_path: Path) -> None:
    # 200 simulations of ~25 kB each (~5 MB): json.load alone would hold more than the file
    # size in Python objects; the streaming reader keeps one simulation at a time plus the
    # small converted records.
    filler = "x" * 25_000
    sims = []
    for i in range(200):
        msgs = (
            Conversation()
            .say("user", filler)
            .call(
                "get_order_details",
                "Error: Order not found",
                error=True,
                arguments={"order_id": f"#W{i}"},
            )
            .messages
        )
        sims.append(simulation(str(i), msgs))
    p = write_json(tmp_path / "big.json", results(sims))
    size = p.stat().st_size
    assert size > 5_000_000
    tracemalloc.start()
    try:
        # tool names given: loading a domain (its DB, once per process) is not the file
        run = read_results(p, tools=ToolNames())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(run.records) == 200
    assert sum(r.n_errors for r in run.records) == 200
    assert peak < size / 2, f"peak {peak} B for a {size} B file"


def test_reference_json_load_would_exceed_the_bound(tmp_path: Path) -> None:
    # Calibrates the bound above: the same kind of file loaded whole takes more than its
    # size (so the streaming bound of size/2 cannot be met by reading the file whole).
    filler = "x" * 25_000
    sims = [simulation(str(i), Conversation().say("user", filler).messages) for i in range(40)]
    p = write_json(tmp_path / "big.json", results(sims))
    size = p.stat().st_size
    tracemalloc.start()
    try:
        data = json.loads(p.read_text())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(data["simulations"]) == 40
    assert peak > size

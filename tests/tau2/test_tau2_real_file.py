"""The reader against a real τ²-bench results file (gpt-4.1, 40 retail tasks, 1 trial).

Every expected figure is recounted here by a plain walk over ``json.load`` of the file,
with τ²-bench's definitions written out: an episode is one simulation; a tool call is one
entry of a message's ``tool_calls``; a failed call is a tool message with ``error: true``
(τ²-bench's error counter); a success is reward >= 1 with a user/agent stop; success at
budget K is success with fewer than K failed calls.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.tau2 import read_results
from pytest_quantagent.vocab.channels import Channel, TerminationReason

RESULTS = "results/gpt-4.1_retail_1trial_feature-gym.json"

# Channel of every distinct error text in this file, labelled by hand after the taxonomy
# our engine applies to the same texts (domains/retail/tools.py raises EntityNotFoundError,
# PolicyViolationError or ArgumentError for them): missing ids or users, business rules,
# and argument values the tool refuses.
EXPECTED_CHANNEL = {
    "Error: Order not found": Channel.WRONG_ENTITY,
    "Error: User not found": Channel.WRONG_ENTITY,
    "Error: Non-delivered order cannot be returned": Channel.POLICY_VIOLATION,
    "Error: The number of items to be exchanged should match": Channel.BAD_ARGUMENTS,
    "Error: The new item id should be different from the old item id": Channel.BAD_ARGUMENTS,
}


@pytest.fixture(scope="module")
def path(tau2_data: Path) -> Path:
    p = tau2_data / RESULTS
    if not p.is_file():
        pytest.skip(f"{p} not present")
    return p


@pytest.fixture(scope="module")
def raw(path: Path) -> dict[str, Any]:
    with path.open() as f:
        data: dict[str, Any] = json.load(f)
    return data


def _independent(raw: dict[str, Any]) -> dict[str, Any]:
    episodes = raw["simulations"]
    tool_calls = 0
    failed = 0
    retried_turns = 0
    per_episode_errors = []
    successes = []
    for sim in episodes:
        errors = 0
        for m in sim["messages"]:
            tool_calls += len(m.get("tool_calls") or [])
            retried_turns += len(m.get("errors") or [])
            if m["role"] == "tool" and m["error"]:
                errors += 1
        failed += errors
        per_episode_errors.append(errors)
        ok = sim["reward_info"]["reward"] >= 1.0 and sim["termination_reason"] in (
            "user_stop",
            "agent_stop",
        )
        successes.append(ok)
    at_k = {
        k: sum(s and e < k for s, e in zip(successes, per_episode_errors, strict=True))
        for k in (1, 2, 3)
    }
    return {
        "episodes": len(episodes),
        "tool_calls": tool_calls,
        "failed": failed,
        "successes": sum(successes),
        "at_k": at_k,
        "retried": retried_turns,
        "terminations": Counter(s["termination_reason"] for s in episodes),
    }


def test_counts_match_an_independent_walk(path: Path, raw: dict[str, Any]) -> None:
    expected = _independent(raw)
    run = read_results(path)
    recs = run.records
    assert len(recs) == expected["episodes"] == 40
    malformed = [c for r in recs for c in r.calls if c.channel == Channel.MALFORMED_CALL]
    assert len(malformed) == expected["retried"]
    assert sum(len(r.calls) for r in recs) - len(malformed) == expected["tool_calls"]
    assert sum(r.n_errors for r in recs) == expected["failed"]
    tool_failures = [
        c for r in recs for c in r.calls if c.error and c.channel != Channel.MALFORMED_CALL
    ]
    assert len(tool_failures) == expected["failed"]
    assert sum(r.success for r in recs) == expected["successes"]
    for k, n in expected["at_k"].items():
        assert sum(r.success_at_budget(k) for r in recs) == n, f"K={k}"
    assert Counter(r.termination.value for r in recs) == expected["terminations"]


def test_pinned_figures(path: Path) -> None:
    # The same figures as numbers, so a change in the file or the reader is visible in
    # review (recounted by the walk above; this file is fixed upstream).
    run = read_results(path)
    recs = run.records
    assert sum(len(r.calls) for r in recs) == 300  # 299 tool calls + 1 retried turn
    assert sum(r.n_errors for r in recs) == 12
    assert sum(r.success for r in recs) == 34
    assert [sum(r.success_at_budget(k) for r in recs) for k in (1, 2, 3)] == [29, 32, 34]


def test_metadata_and_flags(path: Path) -> None:
    run = read_results(path)
    assert run.domain == "retail"
    assert run.model == "gpt-4.1"
    assert run.label == "gpt-4.1_retail_1trial_feature-gym"
    assert run.format == "json"
    assert run.max_errors == 10
    assert {r.max_errors for r in run.records} == {10}
    assert all(r.termination == TerminationReason.USER_STOP for r in run.records)
    assert run.flags.infrastructure_errors == 0
    assert run.flags.n_premature == 0
    assert run.flags.hidden_malformed == 1
    assert not run.flags.drops_hallucinated
    assert not run.flags.trimmed
    assert len(run.keys()) == 40  # (task_id, trial) unique: pairable


def test_channels_of_every_failure(path: Path, raw: dict[str, Any]) -> None:
    run = read_results(path)
    failures = [
        c for r in run.records for c in r.calls if c.error and c.channel != Channel.MALFORMED_CALL
    ]
    texts = Counter(
        m["content"]
        for s in raw["simulations"]
        for m in s["messages"]
        if m["role"] == "tool" and m["error"]
    )
    assert Counter(c.detail for c in failures) == texts  # raw message kept for each
    for c in failures:
        assert c.detail in EXPECTED_CHANNEL, c.detail
        assert c.channel == EXPECTED_CHANNEL[c.detail], c.detail
    malformed = [c for r in run.records for c in r.calls if c.channel == Channel.MALFORMED_CALL]
    assert [c.name for c in malformed] == ["get_product_details"]
    assert "both text content and tool calls" in (malformed[0].detail or "")


def test_wrong_entity_names_the_id(path: Path) -> None:
    run = read_results(path)
    entities = {
        c.entity
        for r in run.records
        for c in r.calls
        if c.channel == Channel.WRONG_ENTITY and c.name == "get_order_details"
    }
    assert entities == {"#9502127"}


def test_messages_kept_on_request(path: Path, raw: dict[str, Any]) -> None:
    run = read_results(path, keep_messages=True)
    first = run.records[0]
    assert len(first.messages) == len(raw["simulations"][0]["messages"])
    tool_msgs = [m for r in run.records for m in r.messages if m.role == "tool"]
    assert sum(m.error for m in tool_msgs) == 12

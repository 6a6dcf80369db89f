"""Fidelity to τ²-bench on its own files (skipped when ``../shared/tau2`` is absent): every
tool call of a real gpt-4.1 retail run reproduces byte for byte, and the oracle solves the
114 official tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.runner.oracle import run_oracle
from pytest_quantagent.vocab.messages import ToolCall

RESULTS = "results/gpt-4.1_retail_1trial_feature-gym.json"


@pytest.fixture(scope="module")
def official(tau2_data: Path) -> Any:
    return get_domain("retail", tau2_data=tau2_data)


@pytest.mark.tau2data
def test_official_db_and_tasks_load(official: Any) -> None:
    assert len(official.db.users) == 500 and len(official.db.orders) == 1000
    assert len(official.db.products) == 50 and len(official.tasks) == 114
    assert official.official and {"train", "test", "base"} <= set(official.splits)


@pytest.mark.tau2data
def test_every_gpt41_call_reproduces(official: Any, tau2_data: Path) -> None:
    run = json.loads((tau2_data / RESULTS).read_text(encoding="utf-8"))
    tasks = {t["id"]: t for t in run["tasks"]}
    calls = 0
    mismatches: list[tuple[str, str, str, str]] = []
    for sim in run["simulations"]:
        env = official.make_environment(official.task(str(sim["task_id"])))
        assert not tasks[sim["task_id"]].get("initial_state")
        recorded = {m["id"]: m for m in sim["messages"] if m["role"] == "tool"}
        for m in sim["messages"]:
            for tc in (m.get("tool_calls") or []) if m["role"] == "assistant" else []:
                calls += 1
                ours = env.get_response(
                    ToolCall(id=tc["id"], name=tc["name"], arguments=tc["arguments"], requestor="assistant")
                )
                theirs = recorded[tc["id"]]
                if (ours.content, ours.error) != (theirs["content"], theirs["error"]):
                    mismatches.append((sim["task_id"], tc["name"], ours.content[:200], theirs["content"][:200]))
    assert calls == 299
    assert mismatches == []


@pytest.mark.tau2data
def test_oracle_solves_the_official_tasks(official: Any) -> None:
    results = run_oracle(official)
    failed = [(r.task_id, r.reason) for r in results if not r.success]
    assert failed == []

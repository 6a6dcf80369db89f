"""Builders of small τ²-bench-format results files for the tests (schema of τ²-bench's
``Results``/``SimulationRun``/messages, written from scratch here)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

AGENT_TOOLS = [
    "get_order_details",
    "find_user_id_by_email",
    "cancel_pending_order",
    "get_customer_by_id",
]
USER_TOOLS = ["toggle_airplane_mode", "check_network_status"]


def info(domain: str = "telecom", **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "git_commit": "0" * 40,
        "num_trials": 1,
        "max_steps": 200,
        "max_errors": 10,
        "user_info": {
            "implementation": "user_simulator",
            "llm": "gpt-4.1",
            "llm_args": {"temperature": 0.0},
        },
        "agent_info": {
            "implementation": "llm_agent",
            "llm": "test-model",
            "llm_args": {"temperature": 0.0},
        },
        "environment_info": {
            "domain_name": domain,
            "policy": "policy text",
            "tool_defs": {n: {"name": n, "doc": ""} for n in AGENT_TOOLS},
            "user_tool_defs": {n: {"name": n, "doc": ""} for n in USER_TOOLS},
        },
        "seed": 300,
    }
    out.update(extra)
    return out


class Conversation:
    """Appends τ²-format messages; ``call`` adds a call message and its tool result."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._n = 0

    def say(self, role: str, content: str, **extra: Any) -> Conversation:
        self.messages.append(
            {
                "role": role,
                "content": content,
                "tool_calls": None,
                "turn_idx": len(self.messages),
                **extra,
            }
        )
        return self

    def call(
        self,
        name: str,
        result: str,
        *,
        error: bool = False,
        requestor: str = "assistant",
        arguments: dict[str, Any] | None = None,
    ) -> Conversation:
        self._n += 1
        cid = f"call_{self._n}"
        self.messages.append(
            {
                "role": requestor,
                "content": None,
                "turn_idx": len(self.messages),
                "tool_calls": [
                    {"id": cid, "name": name, "arguments": arguments or {}, "requestor": requestor}
                ],
            }
        )
        self.messages.append(
            {
                "id": cid,
                "role": "tool",
                "content": result,
                "requestor": requestor,
                "error": error,
                "turn_idx": len(self.messages),
            }
        )
        return self


def simulation(
    task_id: str,
    messages: list[dict[str, Any]],
    *,
    reward: float = 1.0,
    termination: str = "user_stop",
    trial: int | None = 0,
    sim_id: str | None = None,
) -> dict[str, Any]:
    sim: dict[str, Any] = {
        "id": sim_id or f"sim-{task_id}-{trial}",
        "task_id": task_id,
        "timestamp": "2025-08-01T00:00:00",
        "start_time": "2025-08-01T00:00:00",
        "end_time": "2025-08-01T00:00:10",
        "duration": 10.0,
        "termination_reason": termination,
        "agent_cost": 0.01,
        "user_cost": 0.01,
        "reward_info": None
        if termination == "infrastructure_error"
        else {
            "reward": reward,
            "db_check": {"db_match": reward >= 1, "db_reward": reward},
            "reward_basis": ["DB"],
        },
        "messages": messages,
        "seed": 1000 + int(task_id) if task_id.isdigit() else 7,
    }
    if trial is not None:
        sim["trial"] = trial
    return sim


def results(simulations: list[dict[str, Any]], **info_extra: Any) -> dict[str, Any]:
    return {
        "timestamp": "2025-08-01T00:00:00",
        "info": info(**info_extra),
        "tasks": [],
        "simulations": simulations,
    }


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def trim(data: dict[str, Any]) -> dict[str, Any]:
    """Leaderboard-style trimming: messages lose ``error``, ``requestor`` and ``id``."""
    out = copy.deepcopy(data)
    for sim in out["simulations"]:
        for m in sim["messages"]:
            for key in ("error", "requestor", "id"):
                m.pop(key, None)
            for tc in m.get("tool_calls") or []:
                tc.pop("id", None)
                tc.pop("requestor", None)
    return out


def write_dir(folder: Path, data: dict[str, Any], *, with_index: bool = True) -> Path:
    """τ²-bench's directory format: results.json (no simulations) + simulations/<id>.json."""
    sims_dir = folder / "simulations"
    sims_dir.mkdir(parents=True)
    meta = {k: v for k, v in data.items() if k != "simulations"}
    meta["format_version"] = 1
    if with_index:
        meta["simulation_index"] = [
            {
                "id": s["id"],
                "task_id": s["task_id"],
                "trial": s.get("trial"),
                "reward": (s["reward_info"] or {}).get("reward"),
                "termination_reason": s["termination_reason"],
            }
            for s in data["simulations"]
        ]
    write_json(folder / "results.json", meta)
    for s in data["simulations"]:
        write_json(sims_dir / f"{s['id']}.json", s)
    return folder

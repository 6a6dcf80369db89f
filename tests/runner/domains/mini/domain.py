"""A tiny domain for the runner's tests: users with emails; change one.

Loaded through the real domain registry (``QUANTAGENT_DOMAINS_DIR=tests/runner/domains``),
so ``quantagent run --domain mini`` works in a subprocess too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_quantagent.env.db import DB
from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.tasks import Task
from pytest_quantagent.env.toolkit import EntityNotFoundError, Toolkit, ToolType, is_tool


class MiniDB(DB):
    emails: dict[str, str]


class MiniTools(Toolkit):
    db: MiniDB

    @is_tool(ToolType.READ)
    def get_user(self, user_id: str) -> str:
        """Look up a user's email.

        Args:
            user_id: The user's id, e.g. 'u1'.
        """
        if user_id not in self.db.emails:
            raise EntityNotFoundError(f"User {user_id} not found", entity=user_id)
        return self.db.emails[user_id]

    @is_tool(ToolType.WRITE)
    def set_email(self, user_id: str, email: str) -> str:
        """Change a user's email.

        Args:
            user_id: The user's id.
            email: The new email address.
        """
        if user_id not in self.db.emails:
            raise EntityNotFoundError(f"User {user_id} not found", entity=user_id)
        self.db.emails[user_id] = email
        return "ok"


def _task(i: int) -> dict[str, Any]:
    uid = f"u{i}"
    return {
        "id": f"t{i}",
        "user_scenario": {
            "instructions": f"Change the email of {uid} to new{i}@x.org",
            "script": {
                "requests": [f"Please change my email to new{i}@x.org"],
                "identity": {"user_id": uid},
                "closing": "Thanks, bye.",
            },
        },
        "evaluation_criteria": {
            "actions": [{"action_id": "a0", "name": "set_email",
                         "arguments": {"user_id": uid, "email": f"new{i}@x.org"}}],
            "reward_basis": ["DB"],
        },
    }


def make_mini_domain(n_tasks: int = 4) -> Domain:
    db = MiniDB(emails={f"u{i}": f"old{i}@x.org" for i in range(n_tasks)})
    tasks = [Task.model_validate(_task(i)) for i in range(n_tasks)]
    return Domain(name="mini", policy="Help users change their email.", db=db, tasks=tasks,
                  agent_toolkit=MiniTools, splits={"test": [t.id for t in tasks]})



def make_domain(data_dir: Path, tasks_file: str | None, official: bool) -> Domain:
    import os

    return make_mini_domain(int(os.environ.get("QUANTAGENT_MINI_TASKS", "4")))

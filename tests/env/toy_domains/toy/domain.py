"""Toy domain entry point (loaded by the registry in tests)."""

from __future__ import annotations

from pathlib import Path

from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.tasks import load_tasks
from pytest_quantagent.env.user import DeviceIntent

from .tools import Account, PhoneDB, PhoneTools, ToyDB, ToyTools, classify_error

INTENTS = (
    DeviceIntent(
        tool="toggle_wifi",
        keywords=(("toggle", "wifi"), ("turn", "wifi"), ("switch", "wi-fi")),
        phrase="Could you please turn your wifi on?",
    ),
    DeviceIntent(tool="check_wifi", keywords=(("check", "wifi"), ("wifi", "icon")),
                 phrase="Please check your wifi icon."),
)


def make_db() -> ToyDB:
    return ToyDB(accounts={
        "a1": Account(account_id="a1", name="Ada", balance=10.0),
        "a2": Account(account_id="a2", name="Bob", balance=0.0),
        "a3": Account(account_id="a3", name="Cy", balance=5.0, frozen=True),
    })


def make_domain(data_dir: Path, tasks_file: str | None, official: bool) -> Domain:
    tasks = load_tasks(Path(data_dir) / (tasks_file or "tasks.json"))
    return Domain(
        name="toy", policy="Be nice.", db=make_db(), tasks=tasks,
        agent_toolkit=ToyTools, user_toolkit=PhoneTools, user_db=PhoneDB(),
        classify_error=classify_error, device_intents=INTENTS, official=official,
        splits={"base": [t.id for t in tasks]},
    )

"""The telecom domain: agent tools, device tools, dual-control sync, tasks and policy.

``make_domain`` builds it from our files (``db.json``, ``user_db.json``, ``policy.md``,
``tasks.json``, ``split_tasks.json``) or, with ``official=True``, from a τ²-bench checkout's
``domains/telecom/`` (``db.toml``, ``user_db.toml``, ``main_policy.md`` +
``tech_support_manual.md``, the chosen task file and its ``split_<stem>.json`` if present).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.tasks import Task, load_splits, load_tasks
from pytest_quantagent.env.user import ScriptedUser, script_for_task
from pytest_quantagent.errors import DataFileError

from .data_model import TelecomDB
from .environment import TelecomEnvironment
from .tools import TelecomTools
from .troubleshooting import TroubleshootingPlan
from .user_data_model import TelecomUserDB
from .user_sim import DEVICE_INTENTS, TelecomUser
from .user_tools import Tau2TelecomUserTools, TelecomUserTools


class TelecomDomain(Domain):
    """Domain whose scripted user understands device requests sentence by sentence."""

    def make_user(self, task: Task, seed: int) -> ScriptedUser:
        """The telecom scripted user for ``task`` (deterministic given ``seed``)."""
        # The user's private view of its own phone (see TelecomUser): the device after the
        # task's user-side initialization. Switch states depend on user-side actions only,
        # so the agent side (and the sync) is not needed here.
        phone = TelecomUserTools(self._user_db_copy())
        ist = task.initial_state
        if (
            ist is not None
            and ist.initialization_data is not None
            and ist.initialization_data.user_data
        ):
            phone.db.update_device(ist.initialization_data.user_data.get("device", {}))
        for action in (ist.initialization_actions or []) if ist is not None else []:
            if action.env_type == "user":
                getattr(phone, action.func_name)(**action.arguments)
        return TelecomUser(
            script_for_task(task),
            seed=seed,
            intents=self.device_intents,
            user_tool_names=self.user_tool_names,
            phone=phone,
        )

    def _user_db_copy(self) -> TelecomUserDB:
        if not isinstance(self.user_db, TelecomUserDB):
            raise TypeError(f"telecom user DB expected, got {type(self.user_db).__name__}")
        return self.user_db.copy_fresh()

    def generate_tasks(self, seed: int, n: int, kinds: Sequence[str] | None = None) -> list[Task]:
        """``n`` fresh tasks over this domain's DB (see :func:`generate.generate_tasks`),
        never a scenario of this domain's ``test`` split. They are not added to
        ``self.tasks``."""
        from .generate import generate_tasks

        if not isinstance(self.db, TelecomDB):
            raise TypeError(f"telecom DB expected, got {type(self.db).__name__}")
        test_ids = set(self.splits.get("test", []))
        test = [t for t in self.tasks if t.id in test_ids]
        return generate_tasks(self.db, seed, n, kinds, exclude=test)


    def scenario_key(self, task: Task) -> tuple[str, ...]:
        """What makes two tasks the same scenario (see :func:`generate.scenario_key`)."""
        from .generate import scenario_key

        return scenario_key(task)


def _first_existing(data_dir: Path, names: tuple[str, ...]) -> Path:
    for name in names:
        path = data_dir / name
        if path.is_file():
            return path
    raise DataFileError(
        data_dir / names[0], "", f"file not found (also tried: {', '.join(names[1:])})"
    )


def _read(path: Path) -> str:
    if not path.is_file():
        raise DataFileError(path, "", "telecom policy file not found")
    return path.read_text(encoding="utf-8")


def _load_db(cls: type[TelecomDB] | type[TelecomUserDB], path: Path) -> TelecomDB | TelecomUserDB:
    from pydantic import ValidationError

    try:
        return cls.load(path)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise DataFileError(path, f"field {loc!r}", first["msg"]) from None
    except json.JSONDecodeError as e:
        raise DataFileError(
            path, f"line {e.lineno} column {e.colno}", f"invalid JSON: {e.msg}"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise DataFileError(path, "", f"invalid TOML: {e}") from None


def _contained_splits(path: Path, ids: list[str]) -> dict[str, list[str]]:
    """The splits of ``path`` whose every id is one of ``ids`` (τ²-bench's
    ``split_tasks.json`` also describes ``tasks_base_*.json``: its base/train/test/small)."""
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataFileError(
            path, f"line {e.lineno} column {e.colno}", f"invalid JSON: {e.msg}"
        ) from None
    known = set(ids)
    if not isinstance(raw, dict):
        return {}
    return {
        name: [str(x) for x in members]
        for name, members in raw.items()
        if isinstance(members, list) and members and {str(x) for x in members} <= known
    }


def make_domain(data_dir: Path, tasks_file: str | None, official: bool) -> Domain:
    """Build the telecom domain from ``data_dir`` (ours, or τ²-bench's when ``official``)."""
    data_dir = Path(data_dir)
    db = _load_db(TelecomDB, _first_existing(data_dir, ("db.json", "db.toml")))
    user_db = _load_db(TelecomUserDB, _first_existing(data_dir, ("user_db.json", "user_db.toml")))
    if official:
        policy = (
            "<main_policy>\n"
            + _read(data_dir / "main_policy.md")
            + "\n</main_policy>\n<tech_support_policy>\n"
            + _read(data_dir / "tech_support_manual.md")
            + "\n</tech_support_policy>"
        )
    else:
        policy = _read(data_dir / "policy.md")
    tasks_path = data_dir / (tasks_file or "tasks.json")
    tasks = load_tasks(tasks_path)
    # τ²-bench's convention: tasks_X.json has its splits in split_X.json.
    split_path = tasks_path.with_name(f"split_{tasks_path.stem}.json")
    ids = [t.id for t in tasks]
    if split_path.is_file():
        splits = load_splits(split_path, ids)
    else:
        splits = _contained_splits(data_dir / "split_tasks.json", ids)
    return TelecomDomain(
        name="telecom",
        policy=policy,
        db=db,
        tasks=tasks,
        agent_toolkit=TelecomTools,
        # τ²-bench's own tasks: its error semantics for device tools (see user_tools.py).
        user_toolkit=Tau2TelecomUserTools if official else TelecomUserTools,
        user_db=user_db,
        splits=splits,
        environment_cls=TelecomEnvironment,
        device_intents=DEVICE_INTENTS,
        gold_plan=TroubleshootingPlan,
        official=official,
    )

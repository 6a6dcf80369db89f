"""The retail domain: our generated data, or τ²-bench's official files with the same tools.

Loaded by :func:`pytest_quantagent.env.registry.get_domain` (``get_domain("retail")``,
``get_domain("retail", tau2_data=DIR)``). Besides the engine's :class:`Domain` interface,
:class:`RetailDomain` offers :meth:`RetailDomain.generate_tasks` (extra tasks for training
without writing files) and :meth:`RetailDomain.id_pool` (every id-like string episodes can
show, for a domain tokenizer).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.tasks import Task, load_splits, load_tasks
from pytest_quantagent.env.user import script_for_task
from pytest_quantagent.errors import DataFileError

from . import generate
from .data_model import CANCEL_REASONS, RetailDB
from .tools import RetailTools
from .user import RetailUser

DEFAULT_TASKS_FILE = "tasks.json"


class RetailDomain(Domain):
    """The retail :class:`Domain` plus task generation over its DB."""

    db: RetailDB

    def make_user(self, task: Task, seed: int) -> RetailUser:
        """The retail scripted user for ``task`` (deterministic given ``seed``)."""
        notes = task.description.notes if task.description is not None else None
        kind = notes.removeprefix("kind=") if notes and notes.startswith("kind=") else ""
        return RetailUser(
            script_for_task(task),
            seed=seed,
            intents=self.device_intents,
            user_tool_names=self.user_tool_names,
            expect_refusal=kind.startswith("refuse_"),
            options=self._options(),
        )

    def _options(self) -> dict[str, set[str]]:
        """Every value each product option takes in the DB ("color": black, blue, ...), what
        the customer tells a wrong option from (computed once per domain)."""
        cached: dict[str, set[str]] | None = getattr(self, "_option_values", None)
        if cached is None:
            cached = {}
            for product in self.db.products.values():
                for variant in product.variants.values():
                    for key, value in variant.options.items():
                        cached.setdefault(key, set()).add(str(value))
            self._option_values = cached
        return cached

    def generate_tasks(self, seed: int, n: int, kinds: Sequence[str] | None = None) -> list[Task]:
        """``n`` fresh tasks over this domain's DB (see :func:`generate.generate_tasks`),
        ``kinds`` from :data:`generate.TASK_KINDS`, never a scenario of this domain's
        ``test`` split. They are not added to ``self.tasks``."""
        test_ids = set(self.splits.get("test", []))
        test = [t for t in self.tasks if t.id in test_ids]
        return generate.generate_tasks(self.db, seed, n, kinds, exclude=test)

    def scenario_key(self, task: Task) -> str:
        """What makes two tasks the same scenario (see :func:`generate._task_key`)."""
        return generate._task_key(task)

    def id_pool(self) -> set[str]:
        """Every id-like string episodes over this DB can contain (see :func:`generate.id_pool`)."""
        return generate.id_pool(self.db)


def make_domain(data_dir: Path, tasks_file: str | None, official: bool) -> RetailDomain:
    """Build the retail domain from ``data_dir`` (``db.json``, ``policy.md``, the task file
    and, when present, its ``split_<stem>.json``)."""
    data_dir = Path(data_dir)
    db_path = data_dir / "db.json"
    if not db_path.is_file():
        raise DataFileError(db_path, "", "retail DB file not found")
    db = RetailDB.load(db_path)
    policy_path = data_dir / "policy.md"
    if not policy_path.is_file():
        raise DataFileError(policy_path, "", "retail policy file not found")
    tasks_name = tasks_file or DEFAULT_TASKS_FILE
    tasks = load_tasks(data_dir / tasks_name)
    split_path = data_dir / f"split_{Path(tasks_name).stem}.json"
    splits = load_splits(split_path, [t.id for t in tasks]) if split_path.is_file() else {}
    return RetailDomain(
        name="retail",
        policy=policy_path.read_text(encoding="utf-8"),
        db=db,
        tasks=tasks,
        agent_toolkit=RetailTools,
        splits=splits,
        # The tool checks the reason itself; its schema says only "string".
        checked_values={("cancel_pending_order", "reason"): CANCEL_REASONS},
        official=official,
    )

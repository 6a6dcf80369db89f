"""Which tasks of a domain a run plays: one :class:`TaskSelection`, one grammar.

pytest spells it ``--quant-tasks`` (``all``, ``N``, ``A:B``, ``split:NAME``, ``ids:ID,...``;
parsed by :func:`pytest_quantagent.options.parse_tasks`); the ``quantagent`` commands spell
the same selections ``--num-tasks N``, ``--tasks ID,...`` and ``--split NAME``
(:meth:`TaskSelection.from_flags`). Both resolve through :meth:`TaskSelection.task_ids`, so a
pytest cell, the screen and ``quantagent run`` with the same selection play the same tasks
(and compute the same episode keys).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pytest_quantagent.env.domain import Domain
    from pytest_quantagent.quant.arms import ArmSpec


@dataclass(frozen=True)
class TaskSelection:
    """Which tasks of each domain to run.

    - ``all``: every task of the pool.
    - ``first``: the first ``count`` tasks of the pool (``--quant-tasks=20``, ``--num-tasks 20``).
    - ``slice``: tasks ``start`` to ``stop`` of the pool (``--quant-tasks=10:30``, Python
      slice rules).
    - ``split``: a named split of the domain (``--quant-tasks=split:test``, ``--split test``).
    - ``ids``: explicit task ids (``--quant-tasks=ids:3,7,12``, ``--tasks 3,7,12``).

    The pool of ``all``/``first``/``slice`` is ``split`` when it is set (``--split test
    --num-tasks 5``), else the default pool of the run's arms (:func:`default_pool`).
    """

    kind: Literal["all", "first", "slice", "split", "ids", "fresh"]
    count: int | None = None
    start: int | None = None
    stop: int | None = None
    split: str | None = None
    ids: tuple[str, ...] = ()
    pool_seed: int = 0
    """``fresh``: the fresh pool's seed (``fresh:N@SEED``)."""

    @classmethod
    def from_flags(cls, num_tasks: int | None = None, tasks: str | None = None,
                   split: str | None = None) -> TaskSelection:
        """The CLI's spellings: ``--num-tasks N`` / ``--tasks ID,...`` / ``--split NAME``."""
        if tasks is not None and num_tasks is not None:
            raise ValueError("give either task ids or a number of tasks, not both")
        if tasks is not None and tasks.strip().startswith("fresh:"):
            return parse_fresh(tasks, "--tasks")
        if tasks is not None:
            ids = tuple(t.strip() for t in tasks.split(",") if t.strip())
            if not ids:
                raise ValueError("the list of task ids is empty")
            return cls("ids", ids=ids, split=split)
        if num_tasks is not None:
            if num_tasks < 1:
                raise ValueError(f"number of tasks ({num_tasks}) must be >= 1")
            return cls("first", count=num_tasks, split=split)
        return cls("split", split=split) if split is not None else cls("all")

    def __str__(self) -> str:
        pool = "" if self.split is None or self.kind == "split" else f" of split:{self.split}"
        if self.kind == "first":
            return f"{self.count}{pool}"
        if self.kind == "slice":
            return f"{'' if self.start is None else self.start}:{'' if self.stop is None else self.stop}{pool}"
        if self.kind == "split":
            return f"split:{self.split}"
        if self.kind == "ids":
            return "ids:" + ",".join(self.ids)
        if self.kind == "fresh":
            return f"fresh:{self.count}" + (f"@{self.pool_seed}" if self.pool_seed else "")
        return f"all{pool}"

    @property
    def growable(self) -> bool:
        """Whether a bigger run of the same kind plays more tasks (``N`` and ``fresh:N``)."""
        return self.kind in ("first", "fresh")

    def with_count(self, n: int) -> TaskSelection:
        """This selection with ``n`` tasks (``N`` → ``n``, ``fresh:N@S`` → ``fresh:n@S``): its
        first tasks are this one's, in order, so a bigger look resumes a smaller one."""
        if not self.growable:
            raise ValueError(f"--quant-tasks={self}: a fixed selection cannot grow to {n} tasks")
        from dataclasses import replace

        return replace(self, count=n)

    def select(
        self, task_ids: list[str], splits: dict[str, list[str]] | None = None, domain: str = ""
    ) -> list[str]:
        """Apply the selection to a pool of ordered task ids (ids are checked against it).

        Raises
        ------
        ValueError
            For an unknown split (listing the known ones) or task id (naming the closest).
        """
        from pytest_quantagent.env.tasksets import check_split, check_task_ids

        name = domain or "domain's"
        if self.kind == "ids":
            check_task_ids(name, self.ids, task_ids)
            return list(dict.fromkeys(self.ids))
        if self.split is not None:
            splits = splits or {}
            check_split(name, self.split, splits)
            task_ids = list(splits[self.split])
        if self.kind == "first":
            assert self.count is not None
            if self.count > len(task_ids):
                raise ValueError(self._too_many(name, len(task_ids)))
            return list(task_ids[: self.count])
        if self.kind == "slice":
            return list(task_ids[self.start : self.stop])
        return list(task_ids)

    def _too_many(self, name: str, held: int) -> str:
        """A count above the pool is refused, not silently cut to the pool (issue 33 item 3)."""
        from pytest_quantagent.env.fresh import FRESH_CAP

        pool = f"split {self.split!r}" if self.split is not None else "pool"
        fresh = (f", or fresh:N for up to {FRESH_CAP[name]} tasks outside the bundled files"
                 if name in FRESH_CAP else "")
        return (f"{self.count} tasks asked, but the {name} {pool} holds {held}; allowed: 1 to "
                f"{held}, all{fresh}")

    def task_ids(self, domain: Domain, arms: Sequence[ArmSpec]) -> list[str]:
        """The task ids this selection plays on ``domain`` for a run of ``arms`` (every arm
        of the run, not only those run now: the pool must not depend on which cell asks)."""
        if self.kind == "fresh":
            from pytest_quantagent.env.fresh import fresh_tasks

            assert self.count is not None
            return [t.id for t in fresh_tasks(domain, self.count, self.pool_seed)]
        pool = ([t.id for t in domain.tasks] if self.kind == "ids" or self.split is not None
                else default_pool(domain, arms))
        return self.select(pool, domain.splits, domain=domain.name)


FRESH_MAX = 2000
_FRESH_ALLOWED = f"fresh:N or fresh:N@SEED with N from 1 to {FRESH_MAX} and SEED >= 0"


def parse_fresh(value: str, option: str) -> TaskSelection:
    """``fresh:N`` / ``fresh:N@SEED``; a bad spelling raises one ValueError line."""
    import re

    m = re.fullmatch(r"fresh:(\d+)(?:@(\d+))?", value.strip())
    if not m or not 1 <= int(m.group(1)) <= FRESH_MAX:
        raise ValueError(f"{option}: invalid value {value!r}; allowed: {_FRESH_ALLOWED}")
    return TaskSelection("fresh", count=int(m.group(1)), pool_seed=int(m.group(2) or 0))


def pool_size(domain: Domain, selection: TaskSelection, arms: Sequence[ArmSpec] = ()) -> int:
    """How many tasks ``selection`` plays on ``domain`` (a fresh pool is checked against the
    domain's cap without drawing it)."""
    if selection.kind == "fresh":
        from pytest_quantagent.env.fresh import check_fresh

        assert selection.count is not None
        check_fresh(domain, selection.count)
        return selection.count
    return len(selection.task_ids(domain, arms))


class PoolSize(int):
    """How many tasks a run's pool holds (an ``int`` for every caller that wants a count),
    and what the design advice may ask of it: ``label`` names the pool ("the telecom test
    split"), ``fresh_cap`` is how many fresh tasks the domain can generate (None: it has no
    generator, e.g. τ²-bench data), ``fresh`` whether the run already plays a fresh pool."""

    label: str
    fresh_cap: int | None
    fresh: bool

    def __new__(cls, n: int, label: str = "the pool", fresh_cap: int | None = None,
                fresh: bool = False) -> PoolSize:
        out = super().__new__(cls, n)
        out.label, out.fresh_cap, out.fresh = label, fresh_cap, fresh
        return out

    def __reduce__(self) -> tuple[object, ...]:
        return (PoolSize, (int(self), self.label, self.fresh_cap, self.fresh))


def pool_capacity(domain: Domain, selection: TaskSelection, arms: Sequence[ArmSpec] = ()
                  ) -> PoolSize:
    """How many tasks the pool behind ``selection`` holds: the most a bigger run of the same
    kind could play (the design advice's cap). ``fresh:N``: the domain's fresh cap; a split:
    its size; ``ids:``: every task of the domain; else the default pool. The result also
    says whether the domain can generate fresh tasks (:class:`PoolSize`)."""
    from pytest_quantagent.env.fresh import FRESH_CAP, fresh_cap

    cap = fresh_cap(domain)
    name = domain.name
    if selection.kind == "fresh":
        n = FRESH_CAP.get(name, selection.count or 0)
        return PoolSize(n, f"the {name} fresh pool", cap if cap is not None else n, True)
    if selection.kind == "ids":
        return PoolSize(len(domain.tasks), f"the {name} tasks", cap)
    if selection.split is not None:
        return PoolSize(len(domain.splits.get(selection.split, ())),
                        f"the {name} {selection.split} split", cap)
    pool = default_pool(domain, arms)
    test = domain.splits.get("test")
    label = (f"the {name} test split" if test and len(pool) == len(test) and pool == list(test)
             else f"the {name} tasks")
    return PoolSize(len(pool), label, cap)


def default_pool(domain: Domain, arms: Sequence[ArmSpec]) -> list[str]:
    """The task ids ``all``, ``N`` and ``A:B`` select from: the domain's test split when
    every arm is a bundled model (it was trained on the other splits), else every task."""
    from pytest_quantagent.quant.bundled import BUNDLED_SPECS

    test = domain.splits.get("test")
    if test and all(s.backend == "transformers" and s.model in BUNDLED_SPECS for s in arms):
        return list(test)
    return [t.id for t in domain.tasks]

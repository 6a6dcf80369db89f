"""Fresh test tasks: generated tasks no bundled model was trained on.

A fresh pool of a bundled domain is drawn by the domain's own generator from seeds
``FRESH_SEED_BASE + 10_000 * seed + batch`` (far from the training corpus's seeds) and keeps
only tasks whose scenario (the domain's ``scenario_key``) is in none of the bundled task files
(train and test split) nor the generated tasks of the bundled models' training corpus
(:data:`TRAINING_DRAWS`, from ``scripts/train_reference.py corpus`` with its defaults), and
no two tasks of a pool share a scenario. Ids are ``fresh-<seed>-<index>-<kind>``; the first
N tasks of a pool are the same whatever size is asked for, and whatever sizes were asked for
before in the same process.

Telecom's scenario space is small (about 2,000 scenarios, ~540 outside the training corpus,
all troubleshooting kinds), hence :data:`FRESH_CAP`.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.tasks import Task

FRESH_PREFIX = "fresh-"
FRESH_SEED_BASE = 1_000_000_000
#: (generator seed, number of tasks) the bundled models' training corpus drew per domain:
#: seed ``1000 * domain index + {mixed 0, robust 1, prone 2}``, n = episodes // repeats.
TRAINING_DRAWS: dict[str, tuple[tuple[int, int], ...]] = {
    "retail": ((0, 2666), (1, 833), (2, 833)),
    "telecom": ((1000, 2666), (1001, 833), (1002, 833)),
}
#: The largest fresh pool per domain (measured: telecom offers ~540 novel scenarios).
FRESH_CAP: dict[str, int] = {"retail": 2000, "telecom": 500}
_BATCH = 1000
_MAX_BATCHES = 200

_lock = threading.Lock()
_trained: dict[int, set[Hashable]] = {}
_pools: dict[tuple[int, int], tuple[list[Task], list[int]]] = {}


def _key_fn(domain: Domain) -> Any:
    fn = getattr(domain, "scenario_key", None)
    gen = getattr(domain, "generate_tasks", None)
    if domain.official or not callable(fn) or not callable(gen) or domain.name not in FRESH_CAP:
        raise ValueError(f"domain {domain.name!r} cannot generate fresh tasks; allowed: bundled "
                         f"domains {', '.join(sorted(FRESH_CAP))} (not --tau2-data)")
    return fn


def _trained_keys(domain: Domain) -> set[Hashable]:
    key = _key_fn(domain)
    got = _trained.get(id(domain))
    if got is None:
        got = {key(t) for t in domain.tasks}
        for seed, n in TRAINING_DRAWS.get(domain.name, ()):
            got |= {key(t) for t in domain.generate_tasks(seed, n)}  # type: ignore[attr-defined]
        _trained[id(domain)] = got
    return got


def fresh_cap(domain: Domain) -> int | None:
    """How many fresh tasks ``domain`` can generate (:data:`FRESH_CAP`), or None when it
    has no generator (τ²-bench data, a domain without ``generate_tasks``); never raises."""
    try:
        _key_fn(domain)
    except ValueError:
        return None
    return FRESH_CAP[domain.name]


def check_fresh(domain: Domain, n: int) -> None:
    """Refuse a pool size above the domain's cap (one line naming the allowed values)."""
    _key_fn(domain)
    cap = FRESH_CAP[domain.name]
    if not 1 <= n <= cap:
        raise ValueError(f"fresh:{n}: {domain.name} offers 1 to {cap} fresh tasks")


def fresh_tasks(domain: Domain, n: int, seed: int = 0) -> list[Task]:
    """The first ``n`` tasks of the fresh pool ``seed`` of ``domain`` (deterministic)."""
    check_fresh(domain, n)
    key = _key_fn(domain)
    with _lock:
        banned = _trained_keys(domain)
        tasks, state = _pools.setdefault((id(domain), seed), ([], [0]))
        seen = {key(t) for t in tasks}
        while len(tasks) < n:
            if state[0] >= _MAX_BATCHES:
                raise ValueError(f"fresh:{n}: only {len(tasks)} fresh {domain.name} scenarios found")
            gen_seed = FRESH_SEED_BASE + 10_000 * seed + state[0]
            state[0] += 1
            for t in domain.generate_tasks(gen_seed, _BATCH):  # type: ignore[attr-defined]
                k = key(t)
                if k in banned or k in seen:
                    continue
                seen.add(k)
                kind = (t.description.notes or "").removeprefix("kind=") if t.description else ""
                kind = kind or t.id.rsplit("_", 2)[0]
                # the whole batch is kept (never cut at n): the pool's tasks must not depend
                # on the sizes asked for before (the waves of a run until decided ask 40, 80,
                # 160, ...; a fixed run asks its size once)
                tasks.append(t.model_copy(update={"id": f"{FRESH_PREFIX}{seed}-{len(tasks):04d}-{kind}"}))
        out = tasks[:n]
    domain.add_tasks(out)
    return out

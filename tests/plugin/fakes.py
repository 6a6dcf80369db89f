"""Deterministic fake episode records for plugin tests (no model, no engine).

``FAKE_CONFTEST`` is the text of a ``conftest.py`` that answers the plugin's
``pytest_quantagent_run_cell`` hook with records built here, so tests exercise the pytest
surface (grid, fixtures, markers, assertions, reports) in milliseconds.
"""

from __future__ import annotations

FAKE_CONFTEST = '''
import os

from pytest_quantagent.session import CellEpisodes
from pytest_quantagent.store.records import CallRecord, EpisodeRecord

# Per arm: success pattern over tasks and unknown_tool failures per episode.
PROFILES = {
    "bf16": {"fail_every": 5, "unknown": 1},
    "int4": {"fail_every": 5, "unknown": int(os.environ.get("FAKE_INT4_UNKNOWN", "3"))},
    "fp8": {"fail_every": 5, "unknown": 1},
    "int8": {"fail_every": 2, "unknown": 1},
}
N_TASKS = int(os.environ.get("FAKE_TASKS", "60"))
CALLS = []


def _episodes(domain, arm, budget):
    prof = PROFILES[arm]
    out = []
    for t in range(N_TASKS):
        ok = t % prof["fail_every"] != 0
        n_unknown = prof["unknown"] if t % 3 == 0 else 0
        prefix = os.environ.get("FAKE_INT4_PREFIX", "get_thing") if arm == "int4" else "get_thing"
        calls = [CallRecord(step=i + 1, requestor="assistant", name=f"{prefix}_{i % 2}",
                            error=True, channel="unknown_tool", entity=f"{prefix}_{i % 2}")
                 for i in range(n_unknown)]
        calls += [CallRecord(step=10 + i, requestor="assistant", name="get_details", error=False)
                  for i in range(8)]
        out.append(EpisodeRecord(
            key=f"{domain}-{arm}-{t}", model="fake", arm=arm, backend="fake", domain=domain,
            task_id=str(t), trial=0, seed=t, max_errors=budget, max_steps=200,
            termination="user_stop", reward=1.0 if ok else 0.0, success=ok,
            n_errors=n_unknown, steps=20, calls=calls))
    return out


def pytest_quantagent_run_cell(config, cell):
    CALLS.append(cell.id)
    budget = config.stash[__import__("pytest_quantagent.fixtures").fixtures.SESSION_KEY].qc.error_budget
    return CellEpisodes(arm=_episodes(cell.domain, cell.arm, budget),
                        reference=_episodes(cell.domain, cell.reference, budget))
'''

"""How the NL assertions of a run's records were scored (judged, not evaluated, judge
errors): the report's ``run.nl_assertions``. Pure over the records; the judge itself is
``runner/judge.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_quantagent.env.tasks import RewardType
from pytest_quantagent.store.records import EpisodeRecord


def nl_basis_summary(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """How the NL_ASSERTION part of the reward basis was scored over ``records``: episodes
    with assertions to decide (a basis listing NL_ASSERTION without any scores 1 on it and is
    not counted), judged ones (and by which judge), ones not evaluated (no judge), and
    judge errors (episodes with an assertion the judge could not decide, scored not met)."""
    nl = judged = not_eval = errors = 0
    judges: set[str] = set()
    for r in records:
        ri = r.reward_info or {}
        basis = ri.get("reward_basis") or []
        if RewardType.NL_ASSERTION.value not in basis:
            continue
        if ri.get("judge"):
            nl += 1
            judged += 1
            judges.add(str(ri["judge"]))
            if any(isinstance(v, dict) and v.get("met") is None for v in ri.get("nl_assertions") or []):
                errors += 1
        elif RewardType.NL_ASSERTION.value in (ri.get("not_evaluated") or []):
            nl += 1
            not_eval += 1
    out: dict[str, Any] = {"episodes": nl, "judged": judged, "not_evaluated": not_eval,
                           "judge_errors": errors, "judges": sorted(judges)}
    if not_eval:
        out["note"] = (f"NL_ASSERTION not evaluated in {not_eval} episode(s) (no judge): their "
                       "reward uses the rest of the basis, so success is not τ²-bench's")
    return out

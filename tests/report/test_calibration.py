"""Calibration on synthetic episodes with a known true rate ratio on the same names.

For r in {1, 1.5, 2.5} (unknown_tool per-call rate of the candidate = r × reference's, same
name distribution, same task difficulties so the score is flat), 200 simulated cells of
40 tasks × 3 trials each: the 95% CI of the ratio must cover r in 90–99% of runs; at r = 1
MASKED_DAMAGE or DEGRADED must come out in ≤ 6% of runs; at r = 2.5 MASKED_DAMAGE in ≥ 95%.
"""

from __future__ import annotations

import numpy as np
import pytest

from pytest_quantagent.metrics import summarize_arm
from pytest_quantagent.metrics.synthetic import make_tasks, synthetic_episodes
from pytest_quantagent.report.model import CellInput, analyze
from pytest_quantagent.vocab.channels import Channel

RUNS = 200


def simulate(r: float, runs: int = RUNS, seed: int = 20261130) -> tuple[float, dict[str, int]]:
    """Coverage of the unknown_tool ratio CI and the verdict counts over ``runs`` cells."""
    rng = np.random.default_rng([seed, int(r * 100)])
    covered = 0
    verdicts: dict[str, int] = {}
    for _ in range(runs):
        tasks = make_tasks(rng, 40)
        ref = summarize_arm(synthetic_episodes(rng, tasks, arm="bf16", trials=3), "retail", "bf16")
        arm = synthetic_episodes(rng, tasks, arm="int4", trials=3,
                                 ratio={Channel.UNKNOWN_TOOL: r})
        cell = analyze([CellInput("retail", "int4", arm, "bf16", ref)]).cells[0]
        ci = cell.channels["unknown_tool"].ratio_ci
        assert ci is not None and ci[0] is not None and ci[1] is not None
        covered += ci[0] <= r <= ci[1]
        verdicts[str(cell.verdict)] = verdicts.get(str(cell.verdict), 0) + 1
    return covered / runs, verdicts


@pytest.mark.slow
@pytest.mark.parametrize("r", [1.0, 1.5, 2.5])
def test_ratio_ci_coverage_and_verdicts(r: float) -> None:
    coverage, verdicts = simulate(r)
    print(f"\ncalibration r={r}: coverage={coverage:.3f} verdicts={verdicts}")
    assert 0.90 <= coverage <= 0.99, (coverage, verdicts)
    damage = verdicts.get("MASKED_DAMAGE", 0) + verdicts.get("DEGRADED", 0)
    if r == 1.0:
        assert damage / RUNS <= 0.06, verdicts
    if r == 2.5:
        assert verdicts.get("MASKED_DAMAGE", 0) / RUNS >= 0.95, verdicts


def test_calibration_smoke() -> None:
    # a fast look at the same simulation (20 runs) so the default suite exercises it
    coverage, verdicts = simulate(2.5, runs=20, seed=7)
    assert coverage >= 0.8 and verdicts.get("MASKED_DAMAGE", 0) >= 16, (coverage, verdicts)

"""The full-precision risk screen's thresholds and levels."""

from __future__ import annotations

import pytest

from pytest_quantagent.env.channels import Channel, TerminationReason
from pytest_quantagent.report.screen import ScreenConfig, screen
from pytest_quantagent.store.records import CallRecord, EpisodeRecord


def _episode(i: int, n_calls: int, failures: dict[Channel, int], success: bool = True) -> EpisodeRecord:
    calls = []
    for ch, k in failures.items():
        calls += [CallRecord(step=len(calls), requestor="assistant", name="x", error=True, channel=ch) for _ in range(k)]
    calls += [CallRecord(step=len(calls), requestor="assistant", name="ok", error=False)
              for _ in range(n_calls - len(calls))]
    return EpisodeRecord(
        key=f"k{i}", model="m", arm="bf16", backend="mock", domain="retail", task_id=str(i),
        trial=0, seed=i, max_errors=10, max_steps=200, termination=TerminationReason.USER_STOP,
        reward=1.0 if success else 0.0, success=success, n_errors=sum(failures.values()),
        steps=2 * n_calls, calls=calls,
    )


def test_clean_model_is_low_risk_everywhere() -> None:
    recs = [_episode(i, 10, {}) for i in range(200)]
    rep = screen(recs)
    assert rep.level == "low"
    assert set(rep.channels) == {c.value for c in Channel}
    assert all(c.level == "low" and c.count == 0 for c in rep.channels.values())
    assert rep.tool_calls == 2000
    assert rep.advice == ["every channel is below 2% of calls at full precision: low quantization risk"]


def test_prone_channel_is_high_and_predicts_amplification() -> None:
    # 20% of calls name a non-existent tool in every episode: clearly above 2%.
    recs = [_episode(i, 10, {Channel.UNKNOWN_TOOL: 2}) for i in range(100)]
    rep = screen(recs, ScreenConfig(threshold=0.02, amplification=2.0))
    ch = rep.channels["unknown_tool"]
    assert ch.level == "high"
    assert ch.rate == pytest.approx(0.2)
    assert ch.ci[0] >= 0.02
    assert ch.predicted_int4_rate == pytest.approx((0.2, 0.4))
    assert rep.level == "high"
    assert any("unknown_tool" in a and "40.0%" in a for a in rep.advice)


def test_few_episodes_with_a_rare_failure_is_elevated() -> None:
    # 1 failure in 10 episodes of 10 calls: 1% observed, but the CI reaches above 2%.
    recs = [_episode(i, 10, {Channel.WRONG_ENTITY: 1} if i == 0 else {}) for i in range(10)]
    rep = screen(recs)
    ch = rep.channels["wrong_entity"]
    assert ch.level == "elevated"
    assert ch.ci[0] < 0.02 <= ch.ci[1]
    assert any("run more episodes" in a for a in rep.advice)


def test_threshold_moves_the_level() -> None:
    recs = [_episode(i, 10, {Channel.BAD_ARGUMENTS: 1}) for i in range(200)]  # 10% of calls
    assert screen(recs, ScreenConfig(threshold=0.02)).channels["bad_arguments"].level == "high"
    assert screen(recs, ScreenConfig(threshold=0.5)).channels["bad_arguments"].level == "low"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"threshold": 0.0}, "threshold must be in"), ({"amplification": 0.5}, "amplification must be >= 1")],
)
def test_bad_config(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ScreenConfig(**kwargs)


def test_mixed_arms_refused() -> None:
    a = _episode(0, 5, {})
    b = _episode(1, 5, {}).model_copy(update={"arm": "int4"})
    with pytest.raises(ValueError, match="one domain and one arm at a time"):
        screen([a, b])

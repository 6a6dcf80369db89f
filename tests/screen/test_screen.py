"""The full-precision risk screen's thresholds and levels."""

from __future__ import annotations

import pytest

from pytest_quantagent.report.screen import ScreenConfig, screen
from pytest_quantagent.store.records import CallRecord, EpisodeRecord
from pytest_quantagent.vocab.channels import Channel, TerminationReason


def _episode(i: int, n_calls: int, failures: dict[Channel, int], success: bool = True,
             task: str | None = None, trial: int = 0) -> EpisodeRecord:
    calls = []
    for ch, k in failures.items():
        calls += [CallRecord(step=len(calls), requestor="assistant", name="x", error=True, channel=ch) for _ in range(k)]
    calls += [CallRecord(step=len(calls), requestor="assistant", name="ok", error=False)
              for _ in range(n_calls - len(calls))]
    return EpisodeRecord(
        key=f"k{i}", model="m", arm="bf16", backend="mock", domain="retail",
        task_id=str(i) if task is None else task, trial=trial, seed=i, max_errors=10, max_steps=200, termination=TerminationReason.USER_STOP,
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
    [({"threshold": 0.0}, r"threshold must be a failure rate per tool call in \(0, 1\), got 0.0"),
     ({"threshold": float("nan")}, "got nan"),
     ({"amplification": 0.5}, "amplification must be a finite number >= 1, got 0.5"),
     ({"confidence": 1.0}, r"confidence must be in \(0.5, 1\), got 1.0")],
)
def test_bad_config(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ScreenConfig(**kwargs)


def test_mixed_arms_refused() -> None:
    a = _episode(0, 5, {})
    b = _episode(1, 5, {}).model_copy(update={"arm": "int4"})
    with pytest.raises(ValueError, match="one domain and one arm at a time"):
        screen([a, b])


def test_trials_of_a_task_are_one_cluster() -> None:
    # Two trials per task with identical failure counts: clustering by task (what the screen
    # does) must give rate_ci over per-task sums, not over episodes.
    from pytest_quantagent.stats.ratio import rate_ci

    fails = [0, 1, 0, 3, 0, 2, 0, 0, 1, 0]
    recs = [_episode(10 * t + k, 10, {Channel.UNKNOWN_TOOL: f} if f else {}, task=f"t{t}", trial=k)
            for t, f in enumerate(fails) for k in range(2)]
    rep = screen(recs)
    ch = rep.channels["unknown_tool"]
    assert (rep.episodes, rep.tasks, rep.tool_calls) == (20, 10, 200)
    assert ch.count == 14 and ch.episodes_with == 8
    by_task = rate_ci([2 * f for f in fails], [20] * 10)
    by_episode = rate_ci([f for f in fails for _ in range(2)], [10] * 20)
    assert ch.ci == pytest.approx((by_task.low, by_task.high), rel=1e-12)
    # Per-episode clusters would pretend to twice the information: a narrower interval.
    assert by_episode.high - by_episode.low < by_task.high - by_task.low


def test_at_threshold_rejudges_from_the_stored_intervals() -> None:
    recs = [_episode(i, 10, {Channel.BAD_ARGUMENTS: 1}) for i in range(200)]  # 10% of calls
    rep = screen(recs, ScreenConfig(threshold=0.02))
    loose = rep.at_threshold(0.5)
    assert loose.channels["bad_arguments"].level == "low" and loose.level == "low"
    assert loose.channels["bad_arguments"].ci == rep.channels["bad_arguments"].ci
    assert loose.channels["bad_arguments"].predicted_int4_rate == pytest.approx((0.1, 0.1))
    assert loose.threshold == 0.5 and "low quantization risk" in loose.advice[0]
    assert rep.channels["bad_arguments"].level == "high"  # the original is unchanged
    with pytest.raises(ValueError, match="threshold must be a failure rate"):
        rep.at_threshold(2.0)


def test_infrastructure_errors_are_left_out_and_counted() -> None:
    recs = [_episode(i, 10, {}) for i in range(5)]
    recs.append(_episode(9, 0, {}).model_copy(update={"termination": TerminationReason.INFRASTRUCTURE_ERROR}))
    rep = screen(recs)
    assert rep.episodes == 5 and rep.infrastructure_errors == 1
    with pytest.raises(ValueError, match="got none of 1"):
        screen(recs[-1:])


def test_identical_tasks_do_not_collapse_the_interval() -> None:
    # Every task fails on exactly 1 of 3 calls: the cluster-robust variance is 0 and its
    # interval a point; the screen falls back on Wilson over the 30 calls (10 of 30).
    from pytest_quantagent.stats.intervals import wilson_interval
    from pytest_quantagent.stats.ratio import rate_ci

    recs = [_episode(i, 3, {Channel.UNKNOWN_TOOL: 1}) for i in range(10)]
    cr = rate_ci([1] * 10, [3] * 10)
    assert cr.high - cr.low == pytest.approx(0.0, abs=1e-12)
    w = wilson_interval(10, 30).ci
    # statsmodels 0.14 proportion_confint(10, 30, method="wilson") = (0.19230, 0.51220).
    assert (w.low, w.high) == pytest.approx((0.1923, 0.5122), abs=1e-4)
    ch = screen(recs, ScreenConfig(threshold=0.25)).channels["unknown_tool"]
    assert ch.ci == pytest.approx((w.low, w.high), rel=1e-12)
    assert ch.level == "elevated"  # a point interval at 33% would have said "high"

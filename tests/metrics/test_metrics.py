"""Per-episode metrics: recovery, budget counterfactuals, pass^k, margins, accumulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_quantagent.metrics import (
    ArmAccumulator,
    budget_curve,
    channel_counts,
    episode_metrics,
    failure_profile,
    flip_rates,
    margin_histogram,
    pass_hat_k,
    pass_k_curve,
    recovery_events,
    success_at_budgets,
)
from pytest_quantagent.store.records import CallRecord, EpisodeRecord
from pytest_quantagent.vocab.channels import Channel, TerminationReason
from pytest_quantagent.vocab.messages import Decision


def call(name: str, channel: Channel | None = None, requestor: str = "assistant",
         entity: str | None = None) -> CallRecord:
    return CallRecord(step=0, requestor=requestor, name=name, error=channel is not None,  # type: ignore[arg-type]
                      channel=channel, entity=entity)


def record(task: str = "t1", trial: int = 0, *, success: bool = True, calls: list[CallRecord] | None = None,
           termination: TerminationReason = TerminationReason.USER_STOP, arm: str = "int4",
           decisions: list[Decision] | None = None) -> EpisodeRecord:
    calls = calls or []
    n_err = sum(c.error for c in calls)
    return EpisodeRecord(key=f"{task}:{trial}", model="m", arm=arm, backend="mock", domain="retail",
                         task_id=task, trial=trial, seed=1, max_errors=10, max_steps=200,
                         termination=termination, reward=float(success), success=success,
                         n_errors=n_err, steps=7, calls=calls, decisions=decisions or [])


def test_recovery_same_tool_for_argument_failures() -> None:
    calls = [
        call("get_order", Channel.WRONG_ENTITY),      # recovered by the later get_order
        call("get_user"),
        call("get_order"),
        call("cancel", Channel.POLICY_VIOLATION),     # never retried successfully
        call("cancel", Channel.BAD_ARGUMENTS),        # same: later cancel also fails
    ]
    assert recovery_events(calls) == recovery_events(calls)
    rc = recovery_events(calls)
    assert (rc.failures, rc.recovered) == (3, 1)


def test_recovery_unknown_name_needs_next_call_ok() -> None:
    calls = [
        call("find_user", Channel.UNKNOWN_TOOL),      # next agent call ok -> recovered
        call("toggle_airplane", None, requestor="user"),
        call("get_user"),
        call("lookup", Channel.UNKNOWN_TOOL),         # next agent call fails -> not recovered
        call("", Channel.MALFORMED_CALL),             # next agent call ok -> recovered
        call("get_user"),
        call("check_status", Channel.CROSS_ROLE_TOOL),  # last call: not recovered
    ]
    rc = recovery_events(calls)
    assert (rc.failures, rc.recovered) == (4, 2)


def test_recovery_is_per_requestor() -> None:
    # the user's successful call right after does not repair the agent's unknown name
    calls = [call("nope", Channel.UNKNOWN_TOOL), call("reboot", requestor="user")]
    assert recovery_events(calls).recovered == 0


def test_budget_counterfactual_definition() -> None:
    # success at K = success and n_errors < K (DESIGN.md)
    success = [True, True, False, True]
    errors = [0, 2, 0, 5]
    m = success_at_budgets(success, errors, 10)
    assert m[:, 0].tolist() == [False] * 4
    assert m[:, 1].tolist() == [True, False, False, False]
    assert m[:, 3].tolist() == [True, True, False, False]
    curve = budget_curve(success, errors, 10)
    assert curve[10] == pytest.approx(0.75)
    assert curve[6] == pytest.approx(0.75) and curve[5] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="max_k=-1"):
        success_at_budgets(success, errors, -1)


def test_budget_matches_record_counterfactual() -> None:
    r = record(calls=[call("x", Channel.BAD_ARGUMENTS), call("x")])
    m = success_at_budgets([r.success], [r.n_errors], 10)
    assert [bool(v) for v in m[0]] == [r.success_at_budget(k) for k in range(11)]


def test_pass_hat_k_textbook() -> None:
    # τ-bench (arXiv:2406.12045) pass^k = C(c,k)/C(n,k): n=4, c=3 -> k=2: 3/6, k=3: 1/4
    assert pass_hat_k(4, 3, 2) == pytest.approx(0.5)
    assert pass_hat_k(4, 3, 3) == pytest.approx(0.25)
    assert pass_hat_k(4, 3, 4) == 0.0
    curve = pass_k_curve(["a"] * 4 + ["b"] * 4, [1, 1, 1, 0, 1, 1, 1, 1])
    assert curve[1] == pytest.approx((0.75 + 1) / 2)
    assert curve[2] == pytest.approx((0.5 + 1) / 2)
    with pytest.raises(ValueError, match="num_trials=2 is less than k=3"):
        pass_hat_k(2, 1, 3)


def test_margin_histogram_and_flips() -> None:
    h = margin_histogram([0.1, 0.6, 0.7, 3.0, 50.0], bins=(0.0, 0.5, 1.0, 2.0))
    assert h["hist"] == [1, 2, 0, 2] and h["count"] == 5 and h["median"] == pytest.approx(0.7)
    fr = flip_rates(
        [(["a", "b", "c"], [0.2, 3.0, 0.1], ["a", "x", "c"]),  # flips at the 2nd decision
         (["a"], [0.3], ["b"])],
        bins=(0.0, 1.0),
    )
    # decisions compared: (0.2 same), (3.0 flip) then stop; (0.3 flip)
    assert fr.n == (2, 1) and fr.flips == (1, 1)
    assert fr.rates == [0.5, 1.0]


def test_episode_metrics_and_accumulator() -> None:
    recs = [
        record("t1", 0, calls=[call("nope", Channel.UNKNOWN_TOOL, entity="nope"), call("get")]),
        record("t1", 1, success=False, calls=[call("nope", Channel.UNKNOWN_TOOL, entity="nope")]),
        record("t2", 0, termination=TerminationReason.INFRASTRUCTURE_ERROR, success=False),
        record("t1", 0),  # duplicate key: ignored
        record("t3", 0, calls=[call("get_order", Channel.WRONG_ENTITY, entity="#W9")],
               decisions=[Decision(top1="get_order", top2="get_user", margin=1.5)]),
    ]
    m = episode_metrics(recs[0])
    assert m.tool_calls == 2 and m.channel_counts[0] == 1 and m.recovered == 1
    acc = ArmAccumulator("retail", "int4")
    data = acc.extend(recs).finish()
    assert data.n == 3 and data.infrastructure_errors == 1 and data.duplicates == 1
    assert data.names[Channel.UNKNOWN_TOOL] == {"nope": 2}
    assert data.names[Channel.WRONG_ENTITY] == {"#W9": 1}
    assert data.margins.tolist() == [1.5]
    assert data.terminations == {"user_stop": 3}
    counts, calls, episodes = channel_counts(recs[:3])
    assert counts[Channel.UNKNOWN_TOOL] == 2 and calls == 3 and episodes == 2
    assert failure_profile(recs, Channel.WRONG_ENTITY) == {"#W9": 1}
    with pytest.raises(ValueError, match="arm='bf16'"):
        acc.add(record(arm="bf16"))
    with pytest.raises(ValueError, match="carries no names"):
        failure_profile(recs, Channel.BAD_ARGUMENTS)


def test_empty_arm_is_safe() -> None:
    data = ArmAccumulator("retail", "int4").finish()
    assert data.n == 0 and data.channel_counts.shape == (0, 7)
    assert math.isnan(budget_curve(data.success, data.n_errors, 3)[0])
    assert np.asarray(data.tokens).size == 0


def test_raw_store_path_equals_record_path() -> None:
    # the fast JSON path (LEAN_RECORD + add_raw) must give the same arrays as add(record)
    from pytest_quantagent.metrics.episode import LEAN_RECORD
    from pytest_quantagent.metrics.synthetic import make_tasks, synthetic_episodes

    rng = np.random.default_rng(0)
    recs = list(synthetic_episodes(rng, make_tasks(rng, 8), arm="int4", decisions=True))
    recs.append(record("t9", 0, arm="int4", calls=[call("x", Channel.CROSS_ROLE_TOOL, requestor="user")]))
    recs.append(record("t9", 1, arm="int4", termination=TerminationReason.INFRASTRUCTURE_ERROR, success=False))
    slow = ArmAccumulator("retail", "int4").extend(recs).finish()
    fast_acc = ArmAccumulator("retail", "int4")
    for r in recs:
        fast_acc.add_raw(LEAN_RECORD.validate_json(r.model_dump_json()))
    fast = fast_acc.finish()
    for name in ("success", "n_errors", "steps", "tool_calls", "channel_counts", "failures",
                 "recovered", "margins", "agent_calls", "user_calls", "user_failed"):
        assert np.array_equal(getattr(slow, name), getattr(fast, name)), name
    assert slow.names == fast.names and slow.decisions == fast.decisions
    assert slow.terminations == fast.terminations and slow.infrastructure_errors == 1


def test_raw_recovery_matches_reference_on_random_sequences() -> None:
    # the one-pass recovery of add_raw against recovery_events on random call sequences
    from pytest_quantagent.metrics.episode import LEAN_RECORD

    rng = np.random.default_rng(5)
    chans = [None, None, None, *list(Channel)]
    for i in range(200):
        calls = []
        for _ in range(int(rng.integers(0, 12))):
            ch = chans[int(rng.integers(len(chans)))]
            calls.append(call(str(rng.choice(["a", "b", "c"])), ch,
                              requestor=str(rng.choice(["assistant", "user"]))))
        rec = record(f"t{i}", calls=calls)
        acc = ArmAccumulator("retail", "int4")
        acc.add_raw(LEAN_RECORD.validate_json(rec.model_dump_json()))
        data = acc.finish()
        expected = recovery_events(calls)
        assert (int(data.failures[0]), int(data.recovered[0])) == (expected.failures, expected.recovered)


def test_user_events_are_counted_per_episode_on_both_store_paths() -> None:
    # issue 35 item 4: EpisodeRecord.user_events reach ArmData per kind and episode, the same
    # through the full record and the lean store path
    from pytest_quantagent.metrics.episode import LEAN_RECORD, ArmAccumulator
    from pytest_quantagent.store.records import EpisodeRecord

    def rec(task: int, events: dict[str, int]) -> EpisodeRecord:
        return EpisodeRecord(key=f"k{task}", model="m", arm="int4", backend="mock",
                             domain="telecom", task_id=str(task), trial=0, seed=task,
                             max_errors=10, max_steps=50, termination="user_stop", reward=1.0,
                             success=True, n_errors=0, steps=4, user_events=events)

    records = [rec(0, {"not_understood": 2}), rec(1, {}),
               rec(2, {"not_understood": 1, "premature_transfer": 1})]
    full = ArmAccumulator("telecom", "int4").extend(records).finish()
    lean = ArmAccumulator("telecom", "int4")
    for r in records:
        lean.add_raw(LEAN_RECORD.validate_json(r.model_dump_json()))
    fast = lean.finish()
    assert full.user_events == fast.user_events == {"not_understood": 3, "premature_transfer": 1}
    assert full.user_event_counts["not_understood"].tolist() == [2, 0, 1]
    assert fast.user_event_counts["premature_transfer"].tolist() == [0, 0, 1]

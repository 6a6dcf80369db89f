"""Reward semantics (τ²-bench's evaluator)."""

from __future__ import annotations

from pathlib import Path

from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.evaluate import communicate_checks, evaluate
from pytest_quantagent.vocab.channels import TerminationReason
from pytest_quantagent.vocab.messages import AssistantMessage, ToolCall, ToolMessage, UserMessage


def _run(toy: Domain, task_id: str, calls: list[ToolCall], said: str = "") -> tuple[object, list]:
    task = toy.task(task_id)
    env = toy.make_environment(task)
    msgs: list = [AssistantMessage(content="Hi! How can I help you today?")]
    for c in calls:
        msgs.append(AssistantMessage(tool_calls=[c]))
        msgs.append(env.get_response(c))
    if said:
        msgs.append(AssistantMessage(content=said))
    return env, msgs


def dep(amount: float, account: str = "a1") -> ToolCall:
    return ToolCall(id="x", name="deposit", arguments={"account_id": account, "amount": amount})


def test_db_and_communicate(toy: Domain) -> None:
    task = toy.task("deposit")
    env, msgs = _run(toy, "deposit", [dep(5)], said="Your balance is now 15.")
    info = evaluate(toy, task, msgs, TerminationReason.USER_STOP, env)
    assert info.reward == 1.0 and info.db_match is True
    assert info.reward_breakdown == {"DB": 1.0, "COMMUNICATE": 1.0}
    # Wrong amount: DB differs.
    env, msgs = _run(toy, "deposit", [dep(4)], said="Your balance is now 15.")
    info = evaluate(toy, task, msgs, TerminationReason.USER_STOP, env)
    assert info.reward == 0.0 and info.db_match is False
    # Right DB, info never said.
    env, msgs = _run(toy, "deposit", [dep(5)], said="Done!")
    assert evaluate(toy, task, msgs, TerminationReason.AGENT_STOP, env).reward == 0.0


def test_rebuilds_env_from_messages_when_not_given(toy: Domain) -> None:
    _, msgs = _run(toy, "deposit", [dep(5)], said="balance 15")
    assert evaluate(toy, toy.task("deposit"), msgs, TerminationReason.USER_STOP).reward == 1.0


def test_any_other_termination_scores_zero(toy: Domain) -> None:
    env, msgs = _run(toy, "deposit", [dep(5)], said="15")
    for term in (TerminationReason.TOO_MANY_ERRORS, TerminationReason.MAX_STEPS, TerminationReason.AGENT_ERROR):
        info = evaluate(toy, toy.task("deposit"), msgs, term, env)
        assert info.reward == 0.0 and term.value in (info.note or "")


def test_env_assertion_basis_with_user_side_action(toy: Domain) -> None:
    task = toy.task("wifi")
    env = toy.make_environment(task)
    msgs: list = []
    info = evaluate(toy, task, msgs, TerminationReason.USER_STOP, env)
    assert info.reward == 0.0 and info.env_assertions[0]["met"] is False
    c = ToolCall(id="u", name="toggle_wifi", requestor="user")
    msgs = [UserMessage(tool_calls=[c]), env.get_response(c)]
    info = evaluate(toy, task, msgs, TerminationReason.USER_STOP, env)
    assert info.reward == 1.0 and info.reward_breakdown == {"ENV_ASSERTION": 1.0}


def test_action_check_and_nl_assertion_not_evaluated(toy: Domain) -> None:
    task = toy.task("transfer")
    good = ToolCall(id="t", name="transfer_to_human_agents", arguments={"summary": "wants a human"})
    env, msgs = _run(toy, "transfer", [good])
    info = evaluate(toy, task, msgs, TerminationReason.USER_STOP, env)
    assert info.reward == 1.0
    assert info.not_evaluated == ["NL_ASSERTION"] and "NL_ASSERTION not evaluated" in (info.note or "")
    bad = ToolCall(id="t", name="transfer_to_human_agents", arguments={"summary": "other"})
    env, msgs = _run(toy, "transfer", [bad])
    info = evaluate(toy, task, msgs, TerminationReason.USER_STOP, env)
    assert info.reward == 0.0 and info.action_checks == [{"action_id": "t0", "name": "transfer_to_human_agents", "met": False}]


def test_communicate_rule_is_case_insensitive_and_drops_commas() -> None:
    msgs = [AssistantMessage(content="Your refund of $1,234.50 is ON its way"),
            UserMessage(content="1234.50 said by the user does not count"),
            ToolMessage(id="x", content="secret")]
    checks = communicate_checks(msgs, ["1234.50", "on its way", "secret"])
    assert [c["met"] for c in checks] == [True, True, False]


def test_gold_state_is_cached(toy: Domain) -> None:
    t = toy.task("deposit")
    assert toy.gold_state(t) is toy.gold_state(t)
    assert toy.gold_state(t).db_hash != toy.db.get_hash()


def test_db_shortcut_agrees_with_hashing(toy: Domain) -> None:
    task = toy.task("deposit")
    cases = {
        "gold calls": ([dep(5)], True),
        "same end state, other calls": ([dep(2), dep(3)], True),
        "refused write then gold": ([dep(1, "a3"), dep(5)], True),
        "wrong amount": ([dep(6)], False),
    }
    for name, (calls, expected) in cases.items():
        env, msgs = _run(toy, "deposit", calls, said="15")
        fast = evaluate(toy, task, msgs, TerminationReason.USER_STOP, env)
        slow = evaluate(toy, task, msgs, TerminationReason.USER_STOP, env, db_shortcut=False)
        assert fast.db_match is slow.db_match is expected, name


def test_db_shortcut_agrees_on_official_retail(tau2_data: Path) -> None:
    from pytest_quantagent.env import registry
    from pytest_quantagent.runner.oracle import run_oracle

    registry.clear_cache()
    domain = registry.get_domain("retail", tau2_data=tau2_data)
    for r in run_oracle(domain, domain.tasks[:40]):
        o = r.outcome
        slow = evaluate(domain, domain.task(r.task_id), o.messages, o.termination, o.env, db_shortcut=False)
        assert (slow.reward, slow.db_match) == (o.reward, o.reward_info.db_match), r.task_id


def test_gold_state_not_shared_with_a_modified_copy(toy: Domain) -> None:
    t = toy.task("deposit")
    ec = t.evaluation_criteria
    assert ec is not None and ec.actions is not None
    changed = [a.model_copy(update={"arguments": {**a.arguments, "amount": 7.0}}) if a.name == "deposit" else a for a in ec.actions]
    t2 = t.model_copy(update={"evaluation_criteria": ec.model_copy(update={"actions": changed})})
    assert toy.gold_state(t2).db_hash != toy.gold_state(t).db_hash

"""Telecom's troubleshooting plan (domains/telecom/troubleshooting.py): the domain's
``gold_plan`` hook, which the careful gold agent (the training expert) walks."""

from __future__ import annotations

from typing import Any

import pytest
from telecom_helpers import telecom_module

from pytest_quantagent.env.domain import LOOKUP
from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.env.tasks import Action
from pytest_quantagent.vocab.messages import UserMessage

ts = telecom_module("troubleshooting")


@pytest.fixture(scope="module")
def domain() -> Any:
    return get_domain("telecom")


def test_every_task_plan_keeps_the_gold_actions_and_adds_only_checks_and_the_lookup(domain: Any) -> None:
    checks = {name for name in domain.user_tool_names if name.startswith("check_")}
    planned = 0
    for task in domain.tasks:
        plan = domain.gold_plan(task)
        assert isinstance(plan, ts.TroubleshootingPlan)
        gold = task.gold_actions
        kept = [a for a in plan.actions if a in gold]
        added = [a for a in plan.actions if a not in gold]
        assert sorted(a.action_id for a in kept) == sorted(a.action_id for a in gold), task.id
        checklist = ts.CHECKLISTS.get(ts.complaint_kind(task))
        if checklist is None:
            assert plan.actions == gold, task.id
            continue
        planned += 1
        assert added and all(
            (a.requestor == "user" and a.name in checks) or (a.name == LOOKUP and a.requestor == "assistant")
            for a in added
        ), task.id
        order = [a.name for a in plan.actions]
        for check, covers in checklist:
            if check == LOOKUP and check not in order:
                continue  # no line found for the task's phone
            for fix in covers:
                if fix in order:
                    assert order.index(check) < order.index(fix), (task.id, check, fix)
        if "reboot_device" in order:
            assert order.index("reboot_device") > max(
                (order.index(a.name) for a in gold if a.name != "reboot_device"), default=-1)
    assert planned > 100  # most bundled tasks are troubleshooting tasks


def test_lookup_finds_the_customer_by_phone_then_reads_lines_up_to_the_one_asked_about(domain: Any) -> None:
    task = next(t for t in domain.tasks if t.id.startswith("service_") and ts.task_ids(t, domain.db))
    cid, lid = ts.task_ids(task, domain.db)
    customer = next(c for c in domain.db.customers if c.customer_id == cid)
    phone = next(line.phone_number for line in domain.db.lines if line.line_id == lid)
    plan = domain.gold_plan(task)
    [lookup] = [a for a in plan.actions if a.name == LOOKUP]
    assert lookup.arguments == {"customer_id": cid, "line_id": lid}

    assert plan.before(lookup, [], "", set()) == ts.PHONE_QUESTION
    assert plan.before(lookup, [], "", {ts.PHONE_QUESTION}) is None  # asked once, not again

    view = [UserMessage(content=f"It is {phone}.")]
    read = plan.before(lookup, view, view[0].content or "", set())
    assert isinstance(read, Action) and (read.name, read.arguments) == ("get_customer_by_phone", {"phone_number": phone})
    lines = ",".join(f'"{x}"' for x in customer.line_ids)
    visible = f'{{"customer_id": "{cid}", "line_ids": [{lines}]}}'
    reads = []
    while (step := plan.before(lookup, view, visible, set())) is not None:
        assert isinstance(step, Action)
        reads.append((step.name, step.arguments))
    upto = customer.line_ids[: customer.line_ids.index(lid) + 1]
    assert reads == [("get_details_by_id", {"id": x}) for x in upto]

    bill_call = Action(action_id="pay", name="make_payment", arguments={"customer_id": cid, "bill_id": "B1"})
    assert plan.before(bill_call, view, visible, set()) == Action(
        action_id="read_get_bills_for_customer", name="get_bills_for_customer", arguments={"customer_id": cid})
    assert plan.before(bill_call, view, visible, set()) is None  # bills are listed once


def test_official_telecom_tasks_get_the_plan_hook_too(tau2_data: Any) -> None:
    dom = get_domain("telecom", tau2_data=tau2_data, tasks_file="tasks_base_2025-06-10.json")
    plans = [dom.gold_plan(t) for t in dom.tasks]
    assert all(isinstance(p, ts.TroubleshootingPlan) for p in plans)
    # τ²-bench's task ids name no checklist kind: the route is the gold actions.
    assert all(p.actions == t.gold_actions for p, t in zip(plans, dom.tasks, strict=True))

"""The 13 telecom agent tools: results, state changes and each error with its channel."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from telecom_helpers import small_db, telecom_module

from pytest_quantagent.env.toolkit import (
    ArgumentError,
    EntityNotFoundError,
    PolicyViolationError,
)
from pytest_quantagent.vocab.channels import Channel

tools_mod = telecom_module("tools")

TAU2_AGENT_TOOLS = {
    "get_customer_by_phone",
    "get_customer_by_id",
    "get_customer_by_name",
    "get_details_by_id",
    "suspend_line",
    "resume_line",
    "get_bills_for_customer",
    "send_payment_request",
    "get_data_usage",
    "enable_roaming",
    "disable_roaming",
    "refuel_data",
    "transfer_to_human_agents",
}


@pytest.fixture
def tools() -> Any:
    return tools_mod.TelecomTools(small_db())


def _line(tools: Any, line_id: Any) -> Any:
    return next(ln for ln in tools.db.lines if ln.line_id == line_id)


def _bill(tools: Any, bill_id: Any) -> Any:
    return next(b for b in tools.db.bills if b.bill_id == bill_id)


def test_tool_names_and_arguments_are_tau2s() -> None:
    specs = tools_mod.TelecomTools.specs()
    assert set(specs) == TAU2_AGENT_TOOLS
    assert specs["suspend_line"].required == ("customer_id", "line_id", "reason")
    assert specs["refuel_data"].required == ("customer_id", "line_id", "gb_amount")
    assert specs["get_customer_by_name"].required == ("full_name", "dob")
    assert specs["get_bills_for_customer"].required == ("customer_id",)
    assert specs["get_details_by_id"].required == ("id",)


def test_customer_by_phone_matches_contact_and_line_numbers_in_any_format(tools: Any) -> None:
    assert tools.get_customer_by_phone("555-0001").customer_id == "C1"
    assert tools.get_customer_by_phone("5550002").customer_id == "C1"  # a line, no dash
    assert tools.get_customer_by_phone("555 0003").customer_id == "C2"
    with pytest.raises(EntityNotFoundError, match="Customer with phone number 555-4242 not found"):
        tools.get_customer_by_phone("555-4242")
    with pytest.raises(EntityNotFoundError):
        tools.get_customer_by_phone("no digits")


def test_customer_by_id_and_name(tools: Any) -> None:
    assert tools.get_customer_by_id("C2").full_name == "Ben Park"
    with pytest.raises(EntityNotFoundError, match="Customer with ID C9 not found"):
        tools.get_customer_by_id("C9")
    assert [c.customer_id for c in tools.get_customer_by_name("ana  COSTA", "1990-01-02")] == ["C1"]
    assert tools.get_customer_by_name("Ana Costa", "1990-01-03") == []
    assert [c.customer_id for c in tools.get_customer_by_name("Ána  Cósta", "1990-01-02")] == ["C1"]


@pytest.mark.parametrize(
    ("obj_id", "attr", "value"),
    [
        ("L2", "status", "Suspended"),
        ("D1", "model", "X"),
        ("B2", "status", "Overdue"),
        ("C1", "full_name", "Ana Costa"),
        ("P2", "name", "Plus"),
    ],
)
def test_details_by_id_dispatches_on_the_prefix(
    tools: Any, obj_id: Any, attr: Any, value: Any
) -> None:
    got = getattr(tools.get_details_by_id(obj_id), attr)
    assert (got.value if hasattr(got, "value") else got) == value


@pytest.mark.parametrize(
    ("obj_id", "message"),
    [
        ("X1", "Unknown ID format or type: X1"),
        ("", "Unknown ID format or type: "),
        ("L9", "Line with ID L9 not found"),
        ("B9", "Bill with ID B9 not found"),
        ("P9", "Plan with ID P9 not found"),
        ("D9", "Device with ID D9 not found"),
    ],
)
def test_details_by_id_unknown(tools: Any, obj_id: Any, message: Any) -> None:
    with pytest.raises(EntityNotFoundError) as e:
        tools.get_details_by_id(obj_id)
    assert str(e.value) == message
    assert e.value.channel == Channel.WRONG_ENTITY


def test_suspend_line(tools: Any) -> None:
    out = tools.suspend_line("C1", "L1", "travel")
    assert out["message"].startswith("Line suspended successfully")
    assert _line(tools, "L1").status.value == "Suspended"
    assert _line(tools, "L1").suspension_start_date == datetime.date(2025, 2, 25)
    with pytest.raises(PolicyViolationError, match="Line must be active to suspend"):
        tools.suspend_line("C1", "L2", "travel")
    with pytest.raises(EntityNotFoundError, match="Line L3 not found for customer C1"):
        tools.suspend_line("C1", "L3", "travel")
    with pytest.raises(EntityNotFoundError, match="Customer with ID C7 not found"):
        tools.suspend_line("C7", "L1", "travel")


def test_resume_line(tools: Any) -> None:
    assert tools.resume_line("C1", "L2")["message"] == "Line resumed successfully"
    assert _line(tools, "L2").status.value == "Active"
    assert _line(tools, "L2").suspension_start_date is None
    with pytest.raises(PolicyViolationError, match="Line must be suspended to resume"):
        tools.resume_line("C1", "L1")
    with pytest.raises(EntityNotFoundError):
        tools.resume_line("C2", "L2")


def test_bills_newest_first_with_limit(tools: Any) -> None:
    assert [b.bill_id for b in tools.get_bills_for_customer("C1")] == ["B3", "B2", "B1"]
    assert [b.bill_id for b in tools.get_bills_for_customer("C1", limit=1)] == ["B3"]
    with pytest.raises(EntityNotFoundError):
        tools.get_bills_for_customer("C3")


def test_send_payment_request(tools: Any) -> None:
    with pytest.raises(EntityNotFoundError, match="Bill B4 not found for customer C1"):
        tools.send_payment_request("C1", "B4")
    assert (
        tools.send_payment_request("C1", "B2") == "Payment request sent to the customer for bill B2"
    )
    assert _bill(tools, "B2").status.value == "Awaiting Payment"
    with pytest.raises(PolicyViolationError, match="already awaiting payment"):
        tools.send_payment_request("C1", "B1")


def test_data_usage(tools: Any) -> None:
    assert tools.get_data_usage("C1", "L1") == {
        "line_id": "L1",
        "data_used_gb": 1.0,
        "data_limit_gb": 5.0,
        "data_refueling_gb": 0.0,
        "cycle_end_date": "2025-02-28",
    }
    with pytest.raises(EntityNotFoundError):
        tools.get_data_usage("C2", "L1")


def test_roaming_on_and_off(tools: Any) -> None:
    assert tools.enable_roaming("C1", "L1") == "Roaming enabled successfully"
    assert _line(tools, "L1").roaming_enabled is True
    assert tools.enable_roaming("C1", "L1") == "Roaming was already enabled"
    assert tools.disable_roaming("C1", "L1") == "Roaming disabled successfully"
    assert tools.disable_roaming("C1", "L1") == "Roaming was already disabled"
    assert _line(tools, "L1").roaming_enabled is False
    with pytest.raises(EntityNotFoundError):
        tools.enable_roaming("C1", "L9")


def test_transfer(tools: Any) -> None:
    assert tools.transfer_to_human_agents("wants a human") == "Transfer successful"


def test_refuel_charges_the_draft_bill(tools: Any) -> None:
    out = tools.refuel_data("C1", "L1", 2.0)
    assert out["charge"] == pytest.approx(10.0)  # 2 GB at the Basic plan's $5/GB
    assert out["new_data_refueling_gb"] == pytest.approx(2.0)
    draft = _bill(tools, "B3")
    assert draft.total_due == pytest.approx(10.0)
    assert draft.line_items[-1].item_type == "Charge"


def test_refuel_creates_a_deterministic_draft_when_none(tools: Any) -> None:
    tools.refuel_data("C2", "L3", 1.5)
    again = tools_mod.TelecomTools(small_db())
    again.refuel_data("C2", "L3", 1.5)
    new = tools.db.bills[-1]
    assert new.bill_id == "B05" and new.status.value == "Draft"
    assert new.period_start == datetime.date(2025, 3, 1) and new.period_end == datetime.date(
        2025, 3, 31
    )
    assert tools.db.get_hash() == again.db.get_hash()
    assert "B05" in tools.get_customer_by_id("C2").bill_ids


@pytest.mark.parametrize("amount", [0.0, -1.0])
def test_refuel_refuses_non_positive_amounts(tools: Any, amount: Any) -> None:
    with pytest.raises(ArgumentError, match="Refuel amount must be positive") as e:
        tools.refuel_data("C1", "L1", amount)
    assert e.value.channel == Channel.BAD_ARGUMENTS


def test_bad_argument_shapes_are_refused_before_the_tool_runs(tools: Any) -> None:
    with pytest.raises(ArgumentError, match="missing 1 required argument: 'reason'"):
        tools.call("suspend_line", {"customer_id": "C1", "line_id": "L1"})
    with pytest.raises(ArgumentError, match="unexpected keyword argument 'amount'"):
        tools.call("refuel_data", {"customer_id": "C1", "line_id": "L1", "amount": 1})


def test_initialization_helpers(tools: Any) -> None:
    tools.set_data_usage("C1", "L1", 6.5)
    assert _line(tools, "L1").data_used_gb == 6.5
    db = small_db()
    t = tools_mod.TelecomTools(db)
    msg = t.suspend_line_for_overdue_bill("C2", "L3", "B77", contract_ended=True)
    assert msg == "Line L3 suspended for unpaid bill B77. Contract ended: True"
    bill = _bill(t, "B77")
    assert bill.status.value == "Overdue" and bill.total_due == 60.0
    assert bill.period_start == datetime.date(2025, 1, 1)
    assert _line(t, "L3").contract_end_date == datetime.date(2025, 1, 31)
    with pytest.raises(PolicyViolationError, match="active"):
        t.suspend_line_for_overdue_bill("C2", "L3", "B78", contract_ended=False)
    # C1 already has an overdue bill (B2).
    with pytest.raises(PolicyViolationError, match="already has an overdue bill"):
        tools.suspend_line_for_overdue_bill("C1", "L1", "B79", contract_ended=False)


def test_agent_side_assertions(tools: Any) -> None:
    tools.refuel_data("C1", "L1", 2.0)
    assert tools.assert_data_refueling_amount("C1", "L1", 2.0) is True
    assert tools.assert_data_refueling_amount("C1", "L1", 1.0) is False
    assert tools.assert_line_status("C1", "L2", "Suspended") is True
    assert tools.assert_line_roaming("C2", "L3", True) is True
    assert tools.assert_overdue_bill_exists("C1", "B2") is True
    assert tools.assert_no_overdue_bill("B2") is False
    assert tools.assert_no_overdue_bill("B1") is True  # paid
    assert tools.assert_no_overdue_bill("B404") is True  # gone
    with pytest.raises(ValueError, match="Line L3 not found for customer C1"):
        tools.assert_line_status("C1", "L3", "Active")
    with pytest.raises(ValueError, match="is not overdue"):
        tools.assert_overdue_bill_exists("C1", "B1")

"""Telecom troubleshooting: how a careful agent walks a task's gold actions.

Telecom's gold actions are the fixes alone (``toggle_airplane_mode``, ``resume_line(C02,
L02)``, ...), while the faults are hidden device and account state. A careful agent first
runs the checks that show a fault and reads the records that show the ids; so does the
careful gold agent (``runner/gold.py``, which writes the bundled model's training episodes),
through :class:`TroubleshootingPlan`, this domain's ``gold_plan`` hook.
"""

from __future__ import annotations

import re
from collections.abc import Sequence, Set
from typing import Any

from pytest_quantagent.env.domain import LOOKUP, GoldPlan
from pytest_quantagent.env.tasks import Action, Task
from pytest_quantagent.vocab.messages import Message, UserMessage

#: Troubleshooting checklists: complaint kind → (device check, gold tools it covers). The
#: plan walks the checklist in order, asks the user to run each check, and applies the gold
#: fixes the check covers right after it; so a model imitating the agent sees a check's
#: output before every fix *and* checks that show nothing wrong, and learns to read the
#: output (the faults themselves are hidden device state it cannot know otherwise).
#: :data:`~pytest_quantagent.env.domain.LOOKUP` stands for reading the customer's records.
CHECKLISTS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "service": (
        ("check_network_status", ("toggle_airplane_mode",)),
        ("check_sim_status", ("reseat_sim_card",)),
        (LOOKUP, ("send_payment_request", "make_payment", "resume_line")),
        ("check_apn_settings", ("reset_apn_settings",)),
    ),
    "data": (
        ("check_network_status", ("toggle_airplane_mode", "toggle_data", "enable_roaming", "toggle_roaming")),
        ("check_data_restriction_status", ("toggle_data_saver_mode",)),
        ("check_network_mode_preference", ("set_network_mode_preference",)),
        ("check_vpn_status", ("disconnect_vpn",)),
        (LOOKUP, ("refuel_data",)),
    ),
    "mms": (
        ("check_network_status", ("toggle_airplane_mode", "toggle_data")),
        ("check_network_mode_preference", ("set_network_mode_preference",)),
        ("check_apn_settings", ("reset_apn_settings",)),
        ("check_wifi_calling_status", ("toggle_wifi_calling",)),
        ("check_app_permissions", ("grant_app_permission",)),
    ),
}
#: Gold fixes that come last, after every check and the fixes they cover.
LAST = ("reboot_device",)

PHONE_QUESTION = "Could you please provide your phone number?"

_PHONE = re.compile(r"\b\d{3}-\d{3,4}(?:-\d{4})?\b")
_LINE_IDS = re.compile(r'"line_ids":\[([^\]]*)\]')


def complaint_kind(task: Task) -> str:
    """The checklist key of a task (``service``, ``data``, ``mms``; else no checklist)."""
    if task.id.startswith("service_transfer"):
        return "service"
    return task.id.split("_")[0] if "_" in task.id else ""


def task_ids(task: Task, db: Any) -> tuple[str, str] | None:
    """(customer id, line id) of the phone the task's user calls about."""
    phone = None
    for act in task.initial_state.initialization_actions or [] if task.initial_state else []:
        if act.func_name == "set_user_info":
            phone = act.arguments.get("phone_number")
    if phone is None or db is None:
        return None
    for line in db.lines:
        if line.phone_number == phone:
            for c in db.customers:
                if line.line_id in c.line_ids:
                    return c.customer_id, line.line_id
    return None


def plan_actions(task: Task, db: Any = None) -> list[Action]:
    """The gold actions of a troubleshooting task in checklist order, with the device
    checks and the record lookup inserted (other tasks: the gold actions unchanged)."""
    gold = task.gold_actions
    checklist = CHECKLISTS.get(complaint_kind(task))
    if checklist is None:
        return list(gold)
    used: set[int] = set()
    plan: list[Action] = []
    ids = task_ids(task, db)
    for check, covers in checklist:
        if check == LOOKUP:
            if ids is not None:
                plan.append(Action(action_id="lookup", requestor="assistant", name=LOOKUP,
                                   arguments={"customer_id": ids[0], "line_id": ids[1]}))
        elif check:
            args = {"app_name": "messaging"} if check == "check_app_permissions" else {}
            for a in gold:
                if a.name == "grant_app_permission" and check == "check_app_permissions":
                    args = {"app_name": a.arguments.get("app_name", "messaging")}
            plan.append(Action(action_id=f"check_{check}", requestor="user", name=check, arguments=args))
        for i, a in enumerate(gold):
            if i not in used and a.name in covers:
                used.add(i)
                plan.append(a)
    rest = [a for i, a in enumerate(gold) if i not in used and a.name not in LAST]
    last = [a for i, a in enumerate(gold) if i not in used and a.name in LAST]
    return plan + rest + last


def _compact(text: str) -> str:
    return text.replace(" ", "")


def _user_text(view: Sequence[Message]) -> str:
    return "\n".join(m.content for m in view if isinstance(m, UserMessage) and m.content)


def _customer_lines(visible: str) -> list[str]:
    m = _LINE_IDS.search(_compact(visible))
    if m is None:
        return []
    return [x.strip('"') for x in m.group(1).split(",") if x.strip('"')]


def _read(name: str, arguments: dict[str, Any]) -> Action:
    return Action(action_id=f"read_{name}", requestor="assistant", name=name, arguments=arguments)


class TroubleshootingPlan(GoldPlan):
    """Telecom's :class:`~pytest_quantagent.env.domain.GoldPlan`: the checklist route
    (:func:`plan_actions`), and the reads a careful agent makes before a call whose ids it
    has not seen yet: it finds the customer by the phone number (asking for the number
    when the user has not said it), reads the customer's lines until the one the call is
    about, and lists the bills before a call that names one."""

    def __init__(self, task: Task, db: Any) -> None:
        super().__init__(plan_actions(task, db))
        self._done: set[str] = set()

    def before(
        self, action: Action, view: Sequence[Message], visible: str, asked: Set[str]
    ) -> str | Action | None:
        args = action.arguments
        cid = args.get("customer_id")
        if isinstance(cid, str) and f'"customer_id":"{cid}"' not in _compact(visible):
            phone = _PHONE.search(_user_text(view))
            if phone is None:
                return PHONE_QUESTION if PHONE_QUESTION not in asked else None
            if "get_customer_by_phone" not in self._done:
                self._done.add("get_customer_by_phone")
                return _read("get_customer_by_phone", {"phone_number": phone.group(0)})
        lid = args.get("line_id")
        if isinstance(lid, str) and f"line:{lid}" not in self._done:
            for other in _customer_lines(visible):
                if f"line:{other}" not in self._done:
                    self._done.add(f"line:{other}")
                    return _read("get_details_by_id", {"id": other})
                if other == lid:
                    break
        bid = args.get("bill_id")
        if isinstance(bid, str) and isinstance(cid, str) and "bills" not in self._done:
            self._done.add("bills")
            return _read("get_bills_for_customer", {"customer_id": cid})
        return None

"""Seeded generator of our telecom data: the carrier DB, the phone's default state and tasks.

Run ``python domains/telecom/generate.py`` to rewrite ``db.json``, ``user_db.json``,
``tasks.json`` and ``split_tasks.json`` beside this file. :func:`generate_tasks` draws any
number of extra tasks without writing files (the reference-model trainer uses it).

A task combines one to three *faults* of one category, each with the initialization actions
that break things, the gold actions that fix them (agent side and user side, in order) and
the env assertions that check the end state:

- ``service`` (no service): airplane mode, SIM out, broken APN, line suspended for an
  overdue bill; ``locked_sim`` and ``contract_ended`` cannot be fixed → transfer.
- ``data`` (mobile data down or slow): data off, abroad without roaming, data used up →
  refuel, data saver, 3G-only mode, slow VPN.
- ``mms`` (picture messages): 2G-only mode, no MMSC URL, messaging permission revoked,
  MMS over Wi-Fi calling, plus possibly data off.
- ``account`` (agent side only): suspend a line on request, resume a line suspended on
  request, turn roaming off, and ``human`` (an out-of-scope request → transfer).

Ids come from small fixed pools (``C01``, ``L01``, ``B01``, ``P1``, ``D01``) so each can be
one token for the bundled reference model.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # run as a script: make the relative imports work
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "domains.telecom"

from pytest_quantagent.env.tasks import Task

from .data_model import (
    AccountStatus,
    Address,
    Bill,
    BillStatus,
    Customer,
    Device,
    DeviceType,
    Line,
    LineItem,
    LineStatus,
    PaymentMethod,
    PaymentMethodType,
    Plan,
    TelecomDB,
)
from .user_data_model import TelecomUserDB

DEFAULT_SEED = 7
DEFAULT_N_TASKS = 160
DEFAULT_N_TRAIN = 100

_FIRST = (
    "Ana",
    "Ben",
    "Chloe",
    "David",
    "Elena",
    "Farid",
    "Grace",
    "Hugo",
    "Ines",
    "Jonas",
    "Kira",
    "Liam",
    "Maya",
    "Noah",
    "Olga",
    "Pavel",
    "Rosa",
    "Sami",
    "Tara",
    "Victor",
)
_LAST = (
    "Adams",
    "Brooks",
    "Costa",
    "Diaz",
    "Evans",
    "Fischer",
    "Gupta",
    "Hansen",
    "Ito",
    "Jensen",
    "Khan",
    "Lopez",
    "Moreau",
    "Novak",
    "Okafor",
    "Park",
    "Quinn",
    "Rossi",
)
_CITIES = (
    ("Austin", "TX", "73301"),
    ("Denver", "CO", "80201"),
    ("Portland", "OR", "97201"),
    ("Boston", "MA", "02108"),
    ("Miami", "FL", "33101"),
    ("Chicago", "IL", "60601"),
)
_STREETS = ("Oak St", "Pine Ave", "Maple Rd", "Cedar Ln", "Elm St", "Birch Way")
_MODELS = ("Pixel 8", "Galaxy S23", "iPhone 14", "Moto G", "Xperia 5")
_COUNTRIES = ("France", "Japan", "Mexico", "Italy", "Canada", "Spain", "Germany")
_PLANS = (
    Plan(
        plan_id="P1",
        name="Basic",
        data_limit_gb=5.0,
        price_per_month=40.0,
        data_refueling_price_per_gb=5.0,
    ),
    Plan(
        plan_id="P2",
        name="Plus",
        data_limit_gb=15.0,
        price_per_month=60.0,
        data_refueling_price_per_gb=3.0,
    ),
    Plan(
        plan_id="P3",
        name="Max",
        data_limit_gb=50.0,
        price_per_month=80.0,
        data_refueling_price_per_gb=2.0,
    ),
    Plan(
        plan_id="P4",
        name="Family",
        data_limit_gb=25.0,
        price_per_month=110.0,
        data_refueling_price_per_gb=3.0,
    ),
)


def generate_db(seed: int = DEFAULT_SEED, n_customers: int = 16) -> TelecomDB:
    """Our carrier DB: ``n_customers`` customers with 1-2 lines each, all lines active with
    data left, roaming off; each customer has last month's paid bill and most have a draft
    bill for next month."""
    rng = random.Random(seed)
    db = TelecomDB(plans=list(_PLANS))
    names = rng.sample([(f, s) for f in _FIRST for s in _LAST], n_customers)
    n_line = n_bill = 0
    for ci, (first, last) in enumerate(names, start=1):
        cid = f"C{ci:02d}"
        city, state, zip_code = rng.choice(_CITIES)
        line_ids: list[str] = []
        for _ in range(rng.choice((1, 1, 2))):
            n_line += 1
            lid, did = f"L{n_line:02d}", f"D{n_line:02d}"
            plan = rng.choice(_PLANS)
            db.devices.append(
                Device(
                    device_id=did,
                    device_type=DeviceType.PHONE,
                    model=rng.choice(_MODELS),
                    is_esim_capable=rng.random() < 0.5,
                    activated=True,
                    activation_date=datetime.datetime(
                        2024, rng.randint(1, 12), rng.randint(1, 28), 10
                    ),
                )
            )
            db.lines.append(
                Line(
                    line_id=lid,
                    phone_number=f"555-01{n_line:02d}",
                    status=LineStatus.ACTIVE,
                    plan_id=plan.plan_id,
                    device_id=did,
                    data_used_gb=round(rng.uniform(0.1, 0.6) * plan.data_limit_gb, 1),
                    contract_end_date=datetime.date(2026, rng.randint(1, 12), 1),
                )
            )
            line_ids.append(lid)
        bill_ids: list[str] = []
        month_total = sum(
            next(p for p in _PLANS if p.plan_id == ln.plan_id).price_per_month
            for ln in db.lines
            if ln.line_id in line_ids
        )
        n_bill += 1
        paid = Bill(
            bill_id=f"B{n_bill:02d}",
            customer_id=cid,
            period_start=datetime.date(2025, 1, 1),
            period_end=datetime.date(2025, 1, 31),
            issue_date=datetime.date(2025, 1, 1),
            total_due=month_total,
            due_date=datetime.date(2025, 1, 15),
            status=BillStatus.PAID,
            line_items=[
                LineItem(
                    description="Monthly plan charges",
                    amount=month_total,
                    date=datetime.date(2025, 1, 1),
                    item_type="Plan Charge",
                )
            ],
        )
        db.bills.append(paid)
        bill_ids.append(paid.bill_id)
        if rng.random() < 0.75:
            n_bill += 1
            db.bills.append(
                Bill(
                    bill_id=f"B{n_bill:02d}",
                    customer_id=cid,
                    period_start=datetime.date(2025, 3, 1),
                    period_end=datetime.date(2025, 3, 31),
                    issue_date=datetime.date(2025, 3, 1),
                    total_due=0.0,
                    due_date=datetime.date(2025, 3, 15),
                    status=BillStatus.DRAFT,
                )
            )
            bill_ids.append(f"B{n_bill:02d}")
        db.customers.append(
            Customer(
                customer_id=cid,
                full_name=f"{first} {last}",
                date_of_birth=f"{rng.randint(1950, 2003)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                email=f"{first.lower()}.{last.lower()}@example.com",
                phone_number=next(ln.phone_number for ln in db.lines if ln.line_id == line_ids[0]),
                address=Address(
                    street=f"{rng.randint(1, 999)} {rng.choice(_STREETS)}",
                    city=city,
                    state=state,
                    zip_code=zip_code,
                ),
                account_status=AccountStatus.ACTIVE,
                payment_methods=[
                    PaymentMethod(
                        method_type=rng.choice(list(PaymentMethodType)),
                        account_number_last_4=f"{rng.randint(0, 9999):04d}",
                        expiration_date="09/2027",
                    )
                ],
                line_ids=line_ids,
                bill_ids=bill_ids,
                created_at=datetime.datetime(2023, rng.randint(1, 12), rng.randint(1, 28), 9),
            )
        )
    return db


# -- tasks ------------------------------------------------------------------------------------


@dataclass
class _Who:
    """The customer of one task and the line of the phone they call about."""

    customer: Customer
    line: Line
    plan: Plan

    @property
    def ids(self) -> dict[str, str]:
        return {"customer_id": self.customer.customer_id, "line_id": self.line.line_id}


@dataclass
class _Fault:
    """One thing wrong (or one request) and how it is put right."""

    name: str
    init: list[dict[str, Any]] = field(default_factory=list)
    fix: list[dict[str, Any]] = field(default_factory=list)
    """Gold actions: {"requestor", "name", "arguments"} dicts, in order."""
    needs_reboot: bool = False
    asserts: list[dict[str, Any]] = field(default_factory=list)
    transfer: bool = False
    instructions: list[str] = field(default_factory=list)
    answers: list[dict[str, Any]] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)


def _user(func: str, /, **arguments: Any) -> dict[str, Any]:
    return {"env_type": "user", "func_name": func, "arguments": arguments}


def _agent(func: str, /, **arguments: Any) -> dict[str, Any]:
    return {"env_type": "assistant", "func_name": func, "arguments": arguments}


def _do(requestor: str, tool: str, /, **arguments: Any) -> dict[str, Any]:
    return {"requestor": requestor, "name": tool, "arguments": arguments}


def _assert(env_type: str, func: str, /, **arguments: Any) -> dict[str, Any]:
    return {"env_type": env_type, "func_name": func, "arguments": arguments, "assert_value": True}


_Maker = Callable[[_Who, random.Random], _Fault]


def _airplane(w: _Who, rng: random.Random) -> _Fault:
    return _Fault(
        "airplane_mode",
        init=[_user("turn_airplane_mode_on")],
        fix=[_do("user", "toggle_airplane_mode")],
    )


def _sim_out(w: _Who, rng: random.Random) -> _Fault:
    return _Fault(
        "sim_missing", init=[_user("unseat_sim_card")], fix=[_do("user", "reseat_sim_card")]
    )


def _apn_broken(w: _Who, rng: random.Random) -> _Fault:
    return _Fault(
        "apn_broken",
        init=[_user("break_apn_settings")],
        fix=[_do("user", "reset_apn_settings")],
        needs_reboot=True,
    )


def _overdue(w: _Who, rng: random.Random) -> _Fault:
    bill_id = f"B{rng.randint(90, 99)}"
    return _Fault(
        "overdue_bill",
        init=[
            _agent(
                "suspend_line_for_overdue_bill", **w.ids, new_bill_id=bill_id, contract_ended=False
            ),
            _user("simulate_network_search"),
        ],
        fix=[
            _do(
                "assistant",
                "send_payment_request",
                customer_id=w.customer.customer_id,
                bill_id=bill_id,
            ),
            _do("user", "make_payment"),
            _do("assistant", "resume_line", **w.ids),
        ],
        needs_reboot=True,
        asserts=[_assert("assistant", "assert_no_overdue_bill", overdue_bill_id=bill_id)],
        instructions=["If the agent asks you to pay an overdue bill, you agree to pay it in full."],
    )


def _locked_sim(w: _Who, rng: random.Random) -> _Fault:
    mode = rng.choice(("pin", "puk"))
    return _Fault(
        "locked_sim",
        init=[_user("lock_sim_card", mode=mode)],
        transfer=True,
        instructions=["You do not know your SIM's PIN or PUK code."],
        answers=[
            {
                "keywords": [["pin"], ["puk"]],
                "say": "I don't know the PIN or PUK code of my SIM card.",
            }
        ],
    )


def _contract_ended(w: _Who, rng: random.Random) -> _Fault:
    bill_id = f"B{rng.randint(90, 99)}"
    return _Fault(
        "contract_ended",
        init=[
            _agent(
                "suspend_line_for_overdue_bill", **w.ids, new_bill_id=bill_id, contract_ended=True
            ),
            _user("simulate_network_search"),
        ],
        transfer=True,
        instructions=["If the agent asks you to pay an overdue bill, you agree to pay it."],
    )


def _data_off(w: _Who, rng: random.Random) -> _Fault:
    return _Fault("data_off", init=[_user("turn_data_off")], fix=[_do("user", "toggle_data")])


def _roaming(w: _Who, rng: random.Random) -> _Fault:
    country = rng.choice(_COUNTRIES)
    return _Fault(
        "roaming",
        init=[
            _user("set_user_location", abroad=True),
            _user("turn_roaming_off"),
            _agent("disable_roaming", **w.ids),
        ],
        fix=[_do("assistant", "enable_roaming", **w.ids), _do("user", "toggle_roaming")],
        asserts=[_assert("assistant", "assert_line_roaming", **w.ids, expected_status=True)],
        instructions=[f"You are travelling in {country} right now."],
        facts={"location": f"I'm travelling in {country} at the moment."},
    )


def _data_used_up(w: _Who, rng: random.Random) -> _Fault:
    gb = rng.choice((1.0, 2.0))
    over = round(w.plan.data_limit_gb + rng.choice((0.2, 0.5, 0.8)), 1)
    return _Fault(
        "data_used_up",
        init=[_agent("set_data_usage", **w.ids, data_used_gb=over)],
        fix=[_do("assistant", "refuel_data", **w.ids, gb_amount=gb)],
        asserts=[_assert("assistant", "assert_data_refueling_amount", **w.ids, expected_amount=gb)],
        instructions=[
            f"If offered, you want to refuel exactly {gb:g} GB of data; you do not "
            "want to change your plan."
        ],
        answers=[
            {
                "keywords": [["how", "much"], ["how", "many"], ["gb"], ["gigabyte"]],
                "say": f"I'd like {gb:g} GB, please.",
            }
        ],
    )


def _data_saver(w: _Who, rng: random.Random) -> _Fault:
    return _Fault(
        "data_saver",
        init=[_user("turn_data_saver_mode_on")],
        fix=[_do("user", "toggle_data_saver_mode")],
    )


def _slow_mode(w: _Who, rng: random.Random) -> _Fault:
    return _Fault(
        "mode_3g",
        init=[_user("set_network_mode_preference", mode="3g_only")],
        fix=[_do("user", "set_network_mode_preference", mode="4g_5g_preferred")],
    )


def _slow_vpn(w: _Who, rng: random.Random) -> _Fault:
    return _Fault("slow_vpn", init=[_user("break_vpn")], fix=[_do("user", "disconnect_vpn")])


def _mode_2g(w: _Who, rng: random.Random) -> _Fault:
    return _Fault(
        "mode_2g",
        init=[_user("set_network_mode_preference", mode="2g_only")],
        fix=[_do("user", "set_network_mode_preference", mode="4g_5g_preferred")],
    )


def _no_mmsc(w: _Who, rng: random.Random) -> _Fault:
    return _Fault(
        "no_mmsc",
        init=[_user("break_apn_mms_setting")],
        fix=[_do("user", "reset_apn_settings")],
        needs_reboot=True,
    )


def _mms_permission(w: _Who, rng: random.Random) -> _Fault:
    perm = rng.choice(("storage", "sms"))
    return _Fault(
        "mms_permission",
        init=[_user("remove_app_permission", app_name="messaging", permission=perm)],
        fix=[_do("user", "grant_app_permission", app_name="messaging", permission=perm)],
    )


def _wifi_calling(w: _Who, rng: random.Random) -> _Fault:
    return _Fault(
        "wifi_calling_mms",
        init=[_user("set_wifi_calling", enabled=True, mms_over_wifi=True)],
        fix=[_do("user", "toggle_wifi_calling")],
    )


_SERVICE: dict[str, _Maker] = {
    "airplane_mode": _airplane,
    "sim_missing": _sim_out,
    "apn_broken": _apn_broken,
    "overdue_bill": _overdue,
}
_SERVICE_BLOCKERS: dict[str, _Maker] = {
    "locked_sim": _locked_sim,
    "contract_ended": _contract_ended,
}
_DATA: dict[str, _Maker] = {
    "data_off": _data_off,
    "roaming": _roaming,
    "data_used_up": _data_used_up,
    "data_saver": _data_saver,
    "mode_3g": _slow_mode,
    "slow_vpn": _slow_vpn,
}
_MMS: dict[str, _Maker] = {
    "mode_2g": _mode_2g,
    "no_mmsc": _no_mmsc,
    "mms_permission": _mms_permission,
    "wifi_calling_mms": _wifi_calling,
    "data_off": _data_off,
}

#: Task kinds :func:`generate_tasks` can draw, with their relative weights.
KINDS: dict[str, float] = {
    "service": 3.0,
    "service_transfer": 1.0,
    "data": 3.5,
    "mms": 2.5,
    "suspend_request": 0.6,
    "resume_request": 0.6,
    "roaming_off": 0.5,
    "human": 0.4,
}

_OPENINGS = {
    "service": (
        "Hi, my phone says it has no service and I can't make any calls.",
        "Hello. My phone has had no signal at all since this morning.",
        "Hi, I have no service on my phone. Can you help me get it back?",
    ),
    "data": (
        "Hi, mobile data on my phone isn't working properly; it's either off or painfully slow.",
        "Hello, my mobile internet is not working well. I need fast data on my phone.",
        "Hi, I can't browse the internet on my phone over mobile data.",
    ),
    "mms": (
        "Hi, I can't send picture messages from my phone.",
        "Hello, my MMS messages won't go through. Can you fix that?",
        "Hi, sending photos by text message fails on my phone.",
    ),
}


def _who(db: TelecomDB, rng: random.Random) -> _Who:
    customer = rng.choice(db.customers)
    line_id = rng.choice(customer.line_ids)
    line = next(ln for ln in db.lines if ln.line_id == line_id)
    plan = next(p for p in db.plans if p.plan_id == line.plan_id)
    return _Who(customer, line, plan)


def _pick(
    pool: dict[str, _Maker], rng: random.Random, k: int, exclusive: Sequence[set[str]] = ()
) -> list[str]:
    names = list(pool)
    while True:
        chosen = rng.sample(names, k)
        if not any(len(group & set(chosen)) > 1 for group in exclusive):
            return sorted(chosen, key=names.index)


def _troubleshoot(kind: str, db: TelecomDB, rng: random.Random) -> dict[str, Any]:
    w = _who(db, rng)
    k = rng.choice((1, 1, 2, 2, 3))
    if kind == "service":
        names = _pick(_SERVICE, rng, min(k, len(_SERVICE)))
        faults = [_SERVICE[n](w, rng) for n in names]
    elif kind == "service_transfer":
        names = _pick(_SERVICE, rng, k - 1) if k > 1 else []
        blocker = rng.choice(sorted(_SERVICE_BLOCKERS))
        if blocker == "contract_ended":
            names = [n for n in names if n != "overdue_bill"]
        names.append(blocker)
        faults = [(_SERVICE | _SERVICE_BLOCKERS)[n](w, rng) for n in names]
    elif kind == "data":
        names = _pick(_DATA, rng, k)
        faults = [_DATA[n](w, rng) for n in names]
    else:
        names = _pick(_MMS, rng, k)
        faults = [_MMS[n](w, rng) for n in names]
    transfer = any(f.transfer for f in faults)
    init = [_user("set_user_info", name=w.customer.full_name, phone_number=w.line.phone_number)]
    gold: list[dict[str, Any]] = []
    asserts: list[dict[str, Any]] = []
    for f in faults:
        init.extend(f.init)
    if transfer:
        gold = [
            _do(
                "assistant",
                "transfer_to_human_agents",
                summary="The customer's issue cannot be fixed with the available tools.",
            )
        ]
        asserts = [_assert("user", "assert_service_status", expected_status="no_service")]
    else:
        seen: set[tuple[str, str]] = set()
        for f in faults:
            for g in f.fix:
                key = (g["name"], json.dumps(g["arguments"], sort_keys=True))
                if key not in seen:
                    seen.add(key)
                    gold.append(g)
            asserts.extend(f.asserts)
        if any(f.needs_reboot for f in faults):
            gold.append(_do("user", "reboot_device"))
        if kind == "service":
            asserts.insert(0, _assert("user", "assert_service_status", expected_status="connected"))
        elif kind == "data":
            asserts[:0] = [
                _assert("user", "assert_mobile_data_status", expected_status=True),
                _assert(
                    "user", "assert_internet_speed", expected_speed=100.0, expected_desc="excellent"
                ),
            ]
        else:
            asserts.insert(0, _assert("user", "assert_can_send_mms", expected_status=True))
    category = "service" if kind.startswith("service") else kind
    opening = rng.choice(_OPENINGS[category])
    reason = {
        "service": "Your phone shows no service: you cannot call or use data.",
        "data": "Mobile data on your phone does not work or is very slow. You want excellent "
        "speed and will not accept less. You have no Wi-Fi.",
        "mms": "You cannot send MMS (picture messages) from your phone.",
    }[category]
    extra = [s for f in faults for s in f.instructions]
    answers = [a for f in faults for a in f.answers]
    facts = {k2: v for f in faults for k2, v in f.facts.items()}
    return _assemble(
        w,
        kind=kind,
        names=names,
        init=init,
        gold=gold,
        asserts=asserts,
        transfer=transfer,
        opening=opening,
        reason=reason,
        extra=extra,
        answers=answers,
        facts=facts,
    )


def _account(kind: str, db: TelecomDB, rng: random.Random) -> dict[str, Any]:
    w = _who(db, rng)
    init = [_user("set_user_info", name=w.customer.full_name, phone_number=w.line.phone_number)]
    facts: dict[str, str] = {}
    answers: list[dict[str, Any]] = []
    transfer = False
    if kind == "suspend_request":
        months = rng.choice((2, 3, 4))
        opening = (
            f"Hi, I'll be away for {months} months and want to suspend my line "
            f"{w.line.phone_number} while I'm gone."
        )
        reason = f"You want to suspend your line {w.line.phone_number} for {months} months."
        gold = [
            _do("assistant", "suspend_line", **w.ids, reason=f"Customer away for {months} months")
        ]
        asserts = [_assert("assistant", "assert_line_status", **w.ids, expected_status="Suspended")]
        facts["reason"] = f"I'll be away for {months} months."
    elif kind == "resume_request":
        # The phone loses service at its next network search, as it would have by now.
        init += [
            _agent("suspend_line", **w.ids, reason="Customer request"),
            _user("simulate_network_search"),
        ]
        opening = (
            f"Hi, I suspended my line {w.line.phone_number} a while ago and I'm back now. "
            "Please reactivate it."
        )
        reason = "You suspended your line yourself and now want it active again, with service on your phone."
        gold = [_do("assistant", "resume_line", **w.ids), _do("user", "reboot_device")]
        asserts = [
            _assert("assistant", "assert_line_status", **w.ids, expected_status="Active"),
            _assert("user", "assert_service_status", expected_status="connected"),
        ]
    elif kind == "roaming_off":
        init.append(_agent("enable_roaming", **w.ids))
        opening = (
            f"Hi, I'm back from my trip. Please turn off international roaming on my line "
            f"{w.line.phone_number}."
        )
        reason = "You are back home and want roaming turned off on your line."
        gold = [_do("assistant", "disable_roaming", **w.ids)]
        asserts = [_assert("assistant", "assert_line_roaming", **w.ids, expected_status=False)]
    else:  # human
        transfer = True
        plan = rng.choice([p for p in db.plans if p.plan_id != w.plan.plan_id])
        opening = (
            f"Hi, I want to switch my line {w.line.phone_number} to the {plan.name} plan, "
            "and I'd like to talk to a human about it."
        )
        reason = f"You want to change your plan to {plan.name} and insist on a human agent."
        gold = [
            _do(
                "assistant",
                "transfer_to_human_agents",
                summary=f"Customer wants to change plan to {plan.name}.",
            )
        ]
        asserts = []
    return _assemble(
        w,
        kind=kind,
        names=[kind],
        init=init,
        gold=gold,
        asserts=asserts,
        transfer=transfer,
        opening=opening,
        reason=reason,
        extra=[],
        answers=answers,
        facts=facts,
    )


def _assemble(
    w: _Who,
    *,
    kind: str,
    names: list[str],
    init: list[dict[str, Any]],
    gold: list[dict[str, Any]],
    asserts: list[dict[str, Any]],
    transfer: bool,
    opening: str,
    reason: str,
    extra: list[str],
    answers: list[dict[str, Any]],
    facts: dict[str, str],
) -> dict[str, Any]:
    c = w.customer
    first, last = c.full_name.split(" ", 1)
    facts = {"location": "I'm at home in the United States, not travelling.", **facts}
    actions = []
    for i, g in enumerate(gold):
        action: dict[str, Any] = {
            "action_id": f"{g['name']}_{i}",
            "requestor": g["requestor"],
            "name": g["name"],
            "arguments": g["arguments"],
        }
        if g["name"] == "transfer_to_human_agents":
            action["compare_args"] = []
        elif g["name"] == "suspend_line":
            action["compare_args"] = ["customer_id", "line_id"]
        actions.append(action)
    basis = ["ENV_ASSERTION", "ACTION"] if transfer else ["ENV_ASSERTION"]
    if not asserts:
        basis = ["ACTION"]
    end_words = (
        "If the agent transfers you to a human agent, you accept."
        if transfer
        else "You consider the issue solved only when your phone shows it works."
    )
    return {
        "description": {"purpose": f"telecom {kind}: {', '.join(names)}"},
        "user_scenario": {
            "persona": None,
            "instructions": {
                "domain": "telecom",
                "reason_for_call": reason,
                "known_info": f"You are {c.full_name}, date of birth {c.date_of_birth}, with phone "
                f"number {w.line.phone_number}.",
                "unknown_info": "You do not know your customer id or line id.",
                "task_instructions": " ".join(
                    [
                        "Do what the agent asks on your phone and report what it shows.",
                        *extra,
                        end_words,
                    ]
                ),
            },
            "script": {
                "requests": [opening],
                "identity": {
                    "first_name": first,
                    "last_name": last,
                    "name": c.full_name,
                    "phone": w.line.phone_number,
                },
                "facts": facts,
                "answers": [
                    {
                        "keywords": [["date", "birth"], ["dob"], ["birthday"]],
                        "say": f"My date of birth is {c.date_of_birth}.",
                    },
                    *answers,
                ],
                "confirm": True,
                "device_actions": [
                    {"tool": g["name"], "arguments": g["arguments"]}
                    for g in gold
                    if g["requestor"] == "user"
                ],
                "end": "transfer" if transfer else "stop",
            },
        },
        "ticket": f"{c.full_name} ({w.line.phone_number}): {reason}",
        "initial_state": {
            "initialization_data": None,
            "initialization_actions": init,
            "message_history": None,
        },
        "evaluation_criteria": {
            "actions": actions,
            "env_assertions": asserts,
            "communicate_info": [],
            "nl_assertions": None,
            "reward_basis": basis,
        },
    }


def scenario_key(task: Task) -> tuple[str, ...]:
    """What makes two tasks the same scenario: kind and faults, the user's phone, and the
    names of the gold actions (amounts and new bill ids aside)."""
    init = task.initial_state.initialization_actions if task.initial_state else None
    phone = next(
        (
            str(a.arguments.get("phone_number"))
            for a in init or []
            if a.func_name == "set_user_info"
        ),
        "",
    )
    purpose = task.description.purpose if task.description and task.description.purpose else ""
    return (purpose, phone, *(f"{a.requestor}:{a.name}" for a in task.gold_actions))


def generate_tasks(
    db: TelecomDB,
    seed: int,
    n: int,
    kinds: Sequence[str] | None = None,
    *,
    exclude: Sequence[Task] = (),
    distinct: bool = False,
) -> list[Task]:
    """``n`` tasks drawn with ``seed`` over ``db`` (deterministic), optionally restricted to
    some :data:`KINDS`. Ids are ``<kind>_<seed>_<i>``.

    Tasks with the :func:`scenario_key` of a task in ``exclude`` (e.g. the ``test`` split)
    are never returned; with ``distinct`` no two returned tasks share a scenario either.
    """
    chosen = list(KINDS) if kinds is None else list(kinds)
    unknown = sorted(set(chosen) - set(KINDS))
    if unknown:
        raise ValueError(
            f"kinds: unknown task kind(s) {', '.join(map(repr, unknown))}; "
            f"allowed: {', '.join(sorted(KINDS))}"
        )
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    weights = [KINDS[k] for k in chosen]
    banned = {scenario_key(t) for t in exclude}
    tasks: list[Task] = []
    i = 0
    max_draws = 50 * n + 100
    while len(tasks) < n:
        if i >= max_draws:
            raise ValueError(
                f"could only draw {len(tasks)} of n={n} tasks of kinds {chosen} outside the "
                f"excluded scenarios{' and distinct' if distinct else ''}; ask for fewer"
            )
        kind = rng.choices(chosen, weights)[0]
        if kind in ("service", "service_transfer", "data", "mms"):
            raw = _troubleshoot(kind, db, rng)
        else:
            raw = _account(kind, db, rng)
        raw["id"] = f"{kind}_{seed}_{i}"
        i += 1
        task = Task.model_validate(raw)
        key = scenario_key(task)
        if key in banned:
            continue
        if distinct:
            banned.add(key)
        tasks.append(task)
    return tasks


def write_all(
    out_dir: Path,
    seed: int = DEFAULT_SEED,
    n: int = DEFAULT_N_TASKS,
    n_train: int = DEFAULT_N_TRAIN,
) -> None:
    """Write ``db.json``, ``user_db.json``, ``tasks.json`` and ``split_tasks.json``."""
    db = generate_db(seed)
    db.dump(out_dir / "db.json")
    TelecomUserDB().dump(out_dir / "user_db.json")
    tasks = generate_tasks(db, seed, n, distinct=True)
    (out_dir / "tasks.json").write_text(
        json.dumps([t.model_dump(mode="json", exclude_none=True) for t in tasks], indent=1) + "\n",
        encoding="utf-8",
    )
    ids = [t.id for t in tasks]
    order = random.Random(seed + 1).sample(ids, len(ids))
    splits = {
        "base": ids,
        "train": sorted(order[:n_train], key=ids.index),
        "test": sorted(order[n_train:], key=ids.index),
    }
    (out_dir / "split_tasks.json").write_text(json.dumps(splits, indent=1) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--n", type=int, default=DEFAULT_N_TASKS)
    parser.add_argument("--n-train", type=int, default=DEFAULT_N_TRAIN)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args(argv)
    write_all(args.out, args.seed, args.n, args.n_train)
    print(f"wrote {args.n} tasks to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

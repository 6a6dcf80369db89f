"""Small in-memory telecom fixtures shared by the telecom tests."""

from __future__ import annotations

import datetime
import importlib
from types import ModuleType
from typing import Any

from pytest_quantagent.env.registry import get_domain


def telecom_module(name: str) -> ModuleType:
    """A module of the telecom domain package (loaded the way the registry loads it)."""
    get_domain("telecom")
    return importlib.import_module(f"pytest_quantagent_domains.telecom.{name}")


def small_db() -> Any:
    """Two plans, two customers, three lines, four bills (C1 has a draft bill, C2 none)."""
    dm = telecom_module("data_model")
    d = datetime.date
    return dm.TelecomDB(
        plans=[
            dm.Plan(
                plan_id="P1",
                name="Basic",
                data_limit_gb=5.0,
                price_per_month=40.0,
                data_refueling_price_per_gb=5.0,
            ),
            dm.Plan(
                plan_id="P2",
                name="Plus",
                data_limit_gb=15.0,
                price_per_month=60.0,
                data_refueling_price_per_gb=2.0,
            ),
        ],
        devices=[dm.Device(device_id="D1", device_type="phone", model="X", is_esim_capable=True)],
        customers=[
            dm.Customer(
                customer_id="C1",
                full_name="Ana Costa",
                date_of_birth="1990-01-02",
                email="a@x.com",
                phone_number="555-0001",
                address=dm.Address(street="1 A St", city="B", state="CA", zip_code="90000"),
                line_ids=["L1", "L2"],
                bill_ids=["B1", "B2", "B3"],
            ),
            dm.Customer(
                customer_id="C2",
                full_name="Ben Park",
                date_of_birth="1980-05-06",
                email="b@x.com",
                phone_number="555-9999",
                address=dm.Address(street="2 B St", city="C", state="NY", zip_code="10000"),
                line_ids=["L3"],
                bill_ids=["B4"],
            ),
        ],
        lines=[
            dm.Line(
                line_id="L1",
                phone_number="555-0001",
                status="Active",
                plan_id="P1",
                device_id="D1",
                data_used_gb=1.0,
            ),
            dm.Line(
                line_id="L2",
                phone_number="555-0002",
                status="Suspended",
                plan_id="P2",
                suspension_start_date=d(2025, 1, 10),
            ),
            dm.Line(
                line_id="L3",
                phone_number="555-0003",
                status="Active",
                plan_id="P2",
                roaming_enabled=True,
            ),
        ],
        bills=[
            dm.Bill(
                bill_id="B1",
                customer_id="C1",
                period_start=d(2025, 1, 1),
                period_end=d(2025, 1, 31),
                issue_date=d(2025, 1, 1),
                total_due=40.0,
                due_date=d(2025, 1, 15),
                status="Paid",
            ),
            dm.Bill(
                bill_id="B2",
                customer_id="C1",
                period_start=d(2025, 2, 1),
                period_end=d(2025, 2, 28),
                issue_date=d(2025, 2, 1),
                total_due=40.0,
                due_date=d(2025, 2, 15),
                status="Overdue",
            ),
            dm.Bill(
                bill_id="B3",
                customer_id="C1",
                period_start=d(2025, 3, 1),
                period_end=d(2025, 3, 31),
                issue_date=d(2025, 3, 1),
                total_due=0.0,
                due_date=d(2025, 3, 15),
                status="Draft",
            ),
            dm.Bill(
                bill_id="B4",
                customer_id="C2",
                period_start=d(2025, 1, 1),
                period_end=d(2025, 1, 31),
                issue_date=d(2025, 1, 1),
                total_due=60.0,
                due_date=d(2025, 1, 15),
                status="Paid",
            ),
        ],
    )

"""The telecom agent-side database, in τ²-bench's schema (so their ``db.toml`` loads too).

Field names, enum values and defaults follow τ²-bench's telecom data model; the classes are
our own. Every model forbids extra fields, so a misspelt key in a data file is refused.
"""

from __future__ import annotations

import datetime
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from pytest_quantagent.env.db import DB

#: The simulated "today" of the domain (τ²-bench's telecom clock; our data uses it too).
TODAY = datetime.date(2025, 2, 25)

_DEFAULT_CREATED = datetime.datetime(2025, 1, 1)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Address(_Model):
    """A billing address."""

    street: str
    city: str
    state: str
    zip_code: str


class Plan(_Model):
    """A service plan: monthly data allowance and prices."""

    plan_id: str
    name: str
    data_limit_gb: float
    price_per_month: float
    data_refueling_price_per_gb: float


class DeviceType(str, Enum):
    """Category of a registered device."""

    PHONE = "phone"
    ROUTER = "router"
    TABLET = "tablet"
    WATCH = "watch"
    OTHER = "other"


class Device(_Model):
    """A device registered with the carrier."""

    device_id: str
    device_type: DeviceType
    model: str
    imei: str | None = None
    is_esim_capable: bool
    activated: bool = False
    activation_date: datetime.datetime | None = None
    last_esim_transfer_date: datetime.datetime | None = None


class LineStatus(str, Enum):
    """Status of a phone line (τ²-bench's values)."""

    ACTIVE = "Active"
    SUSPENDED = "Suspended"
    PENDING_ACTIVATION = "Pending Activation"
    CLOSED = "Closed"


class Line(_Model):
    """A phone/data line of a customer."""

    line_id: str
    phone_number: str
    status: LineStatus = LineStatus.PENDING_ACTIVATION
    plan_id: str
    device_id: str | None = None
    data_used_gb: float = 0.0
    data_refueling_gb: float = 0.0
    roaming_enabled: bool = False
    contract_end_date: datetime.date | None = None
    last_plan_change_date: datetime.date | None = None
    last_sim_replacement_date: datetime.date | None = None
    suspension_start_date: datetime.date | None = None


class LineItem(_Model):
    """One charge or credit on a bill."""

    description: str
    amount: float
    date: datetime.date
    item_type: str


class BillStatus(str, Enum):
    """Status of a bill (τ²-bench's values)."""

    DRAFT = "Draft"
    ISSUED = "Issued"
    AWAITING_PAYMENT = "Awaiting Payment"
    PAID = "Paid"
    OVERDUE = "Overdue"
    DISPUTED = "Disputed"


class Bill(_Model):
    """A monthly bill."""

    bill_id: str
    customer_id: str
    period_start: datetime.date
    period_end: datetime.date
    issue_date: datetime.date
    total_due: float
    due_date: datetime.date
    line_items: list[LineItem] = Field(default_factory=list)
    status: BillStatus = BillStatus.DRAFT


class AccountStatus(str, Enum):
    """Status of a customer account."""

    ACTIVE = "Active"
    SUSPENDED = "Suspended"
    PENDING_VERIFICATION = "Pending Verification"
    CLOSED = "Closed"


class PaymentMethodType(str, Enum):
    """Kinds of stored payment method."""

    CREDIT_CARD = "Credit Card"
    DEBIT_CARD = "Debit Card"
    PAYPAL = "PayPal"


class PaymentMethod(_Model):
    """A stored payment method."""

    method_type: PaymentMethodType
    account_number_last_4: str
    expiration_date: str


class Customer(_Model):
    """A customer profile."""

    customer_id: str
    full_name: str
    date_of_birth: str
    email: str
    phone_number: str
    address: Address
    account_status: AccountStatus = AccountStatus.PENDING_VERIFICATION
    payment_methods: list[PaymentMethod] = Field(default_factory=list)
    line_ids: list[str] = Field(default_factory=list)
    bill_ids: list[str] = Field(default_factory=list)
    created_at: datetime.datetime = _DEFAULT_CREATED
    last_extension_date: datetime.date | None = None
    goodwill_credit_used_this_year: float = 0.0


class TelecomDB(DB):
    """The carrier's records: plans, customers, lines, bills and devices."""

    plans: list[Plan] = Field(default_factory=list)
    customers: list[Customer] = Field(default_factory=list)
    lines: list[Line] = Field(default_factory=list)
    bills: list[Bill] = Field(default_factory=list)
    devices: list[Device] = Field(default_factory=list)
    phone_number_aliases: dict[str, str] = Field(default_factory=dict)
    """Alternative written forms of a line's number → the canonical number (τ²-bench)."""

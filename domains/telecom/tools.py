"""The telecom agent's 13 tools (τ²-bench's names, arguments and error meanings).

Unknown customer/line/bill/plan/device ids raise :class:`EntityNotFoundError`
(``wrong_entity``); refusals by a business rule raise :class:`PolicyViolationError`;
impossible values (a non-positive refuel amount) raise :class:`ArgumentError`. Messages are
τ²-bench's wording. Non-tool helpers (``set_data_usage``, ``suspend_line_for_overdue_bill``,
``assert_*``) are what task initialization actions and env assertions call by name.
"""

from __future__ import annotations

import datetime
import unicodedata
from collections.abc import Callable
from typing import Any

from pytest_quantagent.env.toolkit import (
    ArgumentError,
    EntityNotFoundError,
    PolicyViolationError,
    Toolkit,
    ToolType,
    is_tool,
)

from .data_model import (
    TODAY,
    Bill,
    BillStatus,
    Customer,
    Device,
    Line,
    LineItem,
    LineStatus,
    Plan,
    TelecomDB,
)


def _digits(phone_number: str) -> str:
    """Digits only: a number written with or without dashes/spaces is the same number."""
    return "".join(ch for ch in phone_number if ch.isdigit())


def _fold(name: str) -> str:
    """Case-, accent- and spacing-insensitive form of a name ('Álvaro  Pérez' = 'alvaro perez'),
    as τ²-bench matches names: the spelling of a spoken name is not part of the task."""
    decomposed = unicodedata.normalize("NFKD", name.casefold())
    return " ".join("".join(ch for ch in decomposed if not unicodedata.combining(ch)).split())


def _first_of_next_month(day: datetime.date) -> datetime.date:
    return (day.replace(day=1) + datetime.timedelta(days=32)).replace(day=1)


class TelecomTools(Toolkit):
    """Agent-side tools over a :class:`TelecomDB`."""

    db: TelecomDB

    def __init__(self, db: TelecomDB) -> None:
        super().__init__(db)

    # -- lookups (helpers raise EntityNotFoundError) ------------------------------------

    def _customer(self, customer_id: str) -> Customer:
        for customer in self.db.customers:
            if customer.customer_id == customer_id:
                return customer
        raise EntityNotFoundError(f"Customer with ID {customer_id} not found", entity=customer_id)

    def _line(self, line_id: str) -> Line:
        for line in self.db.lines:
            if line.line_id == line_id:
                return line
        raise EntityNotFoundError(f"Line with ID {line_id} not found", entity=line_id)

    def _line_by_phone(self, phone_number: str) -> Line:
        for line in self.db.lines:  # the common case, without digit folding (sync runs often)
            if (
                line.phone_number == phone_number
                and phone_number not in self.db.phone_number_aliases
            ):
                return line
        wanted = _digits(phone_number)
        for alias, canonical in self.db.phone_number_aliases.items():
            if _digits(alias) == wanted:
                wanted = _digits(canonical)
                break
        for line in self.db.lines:
            if wanted and _digits(line.phone_number) == wanted:
                return line
        raise EntityNotFoundError(
            f"Line with phone number {phone_number} not found", entity=phone_number
        )

    def _plan(self, plan_id: str) -> Plan:
        for plan in self.db.plans:
            if plan.plan_id == plan_id:
                return plan
        raise EntityNotFoundError(f"Plan with ID {plan_id} not found", entity=plan_id)

    def _device(self, device_id: str) -> Device:
        for device in self.db.devices:
            if device.device_id == device_id:
                return device
        raise EntityNotFoundError(f"Device with ID {device_id} not found", entity=device_id)

    def _bill(self, bill_id: str) -> Bill:
        for bill in self.db.bills:
            if bill.bill_id == bill_id:
                return bill
        raise EntityNotFoundError(f"Bill with ID {bill_id} not found", entity=bill_id)

    def _target_line(self, customer_id: str, line_id: str) -> Line:
        customer = self._customer(customer_id)
        if line_id not in customer.line_ids:
            raise EntityNotFoundError(
                f"Line {line_id} not found for customer {customer_id}", entity=line_id
            )
        return self._line(line_id)

    def _bills_awaiting_payment(self, customer: Customer) -> list[Bill]:
        return [
            bill
            for bill in (self._bill(b) for b in customer.bill_ids)
            if bill.status == BillStatus.AWAITING_PAYMENT
        ]

    def _new_bill_id(self) -> str:
        """The next free id of the ``B<n>`` pool (deterministic, unlike a random suffix, so
        the gold replay and the episode end in the same DB hash)."""
        taken = {b.bill_id for b in self.db.bills}
        n = len(self.db.bills) + 1
        while f"B{n:02d}" in taken:
            n += 1
        return f"B{n:02d}"

    # -- tools ----------------------------------------------------------------------------

    @is_tool(ToolType.READ)
    def get_customer_by_phone(self, phone_number: str) -> Customer:
        """Finds a customer by their primary contact or line phone number.

        Args:
            phone_number: The phone number to search for.
        """
        exact = {line.line_id for line in self.db.lines if line.phone_number == phone_number}
        for customer in self.db.customers:  # exact match first: cheap and the common case
            if customer.phone_number == phone_number or exact.intersection(customer.line_ids):
                return customer
        wanted = _digits(phone_number)
        if wanted:
            lines = {line.line_id: line for line in self.db.lines}
            for customer in self.db.customers:
                if _digits(customer.phone_number) == wanted:
                    return customer
                for line_id in customer.line_ids:
                    line = lines.get(line_id)
                    if line is not None and _digits(line.phone_number) == wanted:
                        return customer
        raise EntityNotFoundError(
            f"Customer with phone number {phone_number} not found", entity=phone_number
        )

    @is_tool(ToolType.READ)
    def get_customer_by_id(self, customer_id: str) -> Customer:
        """Retrieves a customer directly by their unique ID.

        Args:
            customer_id: The unique identifier of the customer.
        """
        return self._customer(customer_id)

    @is_tool(ToolType.READ)
    def get_customer_by_name(self, full_name: str, dob: str) -> list[Customer]:
        """Searches for customers by name and DOB. May return multiple matches if names are
        similar, DOB helps disambiguate.

        Args:
            full_name: The full name of the customer.
            dob: Date of birth for verification, in the format YYYY-MM-DD.
        """
        wanted = _fold(full_name)
        return [
            c for c in self.db.customers if _fold(c.full_name) == wanted and c.date_of_birth == dob
        ]

    @is_tool(ToolType.READ)
    def get_details_by_id(self, id: str) -> Customer | Line | Device | Bill | Plan:
        """Retrieves the details for a given ID. The ID must be a valid ID for a Customer,
        Line, Device, Bill, or Plan.

        Args:
            id: The ID of the object to retrieve.
        """
        lookups: dict[str, Callable[[str], Customer | Line | Device | Bill | Plan]] = {
            "L": self._line,
            "D": self._device,
            "B": self._bill,
            "C": self._customer,
            "P": self._plan,
        }
        lookup = lookups.get(id[:1])
        if lookup is None:
            raise EntityNotFoundError(f"Unknown ID format or type: {id}", entity=id)
        return lookup(id)

    @is_tool(ToolType.WRITE)
    def suspend_line(self, customer_id: str, line_id: str, reason: str) -> dict[str, Any]:
        """Suspends a specific line (max 6 months). Checks: Line status must be Active.
        Logic: Sets line status to Suspended, records suspension_start_date.

        Args:
            customer_id: ID of the customer who owns the line.
            line_id: ID of the line to suspend.
            reason: Reason for suspension.
        """
        line = self._target_line(customer_id, line_id)
        if line.status != LineStatus.ACTIVE:
            raise PolicyViolationError("Line must be active to suspend")
        line.status = LineStatus.SUSPENDED
        line.suspension_start_date = TODAY
        return {
            "message": "Line suspended successfully. $5/month holding fee will apply.",
            "line": line,
        }

    @is_tool(ToolType.WRITE)
    def resume_line(self, customer_id: str, line_id: str) -> dict[str, Any]:
        """Resumes a suspended line. Checks: Line status must be Suspended or Pending
        Activation. Logic: Sets line status to Active, clears suspension_start_date.

        Args:
            customer_id: ID of the customer who owns the line.
            line_id: ID of the line to resume.
        """
        line = self._target_line(customer_id, line_id)
        if line.status not in (LineStatus.SUSPENDED, LineStatus.PENDING_ACTIVATION):
            raise PolicyViolationError("Line must be suspended to resume")
        line.status = LineStatus.ACTIVE
        line.suspension_start_date = None
        return {"message": "Line resumed successfully", "line": line}

    @is_tool(ToolType.READ)
    def get_bills_for_customer(self, customer_id: str, limit: int = 12) -> list[Bill]:
        """Retrieves a list of the customer's bills, most recent first.

        Args:
            customer_id: ID of the customer.
            limit: Maximum number of bills to return.
        """
        customer = self._customer(customer_id)
        bills = sorted(
            (self._bill(b) for b in customer.bill_ids), key=lambda b: b.issue_date, reverse=True
        )
        return bills[:limit]

    @is_tool(ToolType.WRITE)
    def send_payment_request(self, customer_id: str, bill_id: str) -> str:
        """Sends a payment request to the customer for a specific bill. Checks: customer
        exists; bill exists and belongs to the customer; no other bill of the customer is
        already awaiting payment. Logic: sets the bill status to Awaiting Payment and notifies
        the customer. Warning: it does not check whether the bill is already paid; always
        check the bill status first.

        Args:
            customer_id: ID of the customer who owns the bill.
            bill_id: ID of the bill to send payment request for.
        """
        customer = self._customer(customer_id)
        if self._bills_awaiting_payment(customer):
            raise PolicyViolationError("A bill is already awaiting payment for this customer")
        if bill_id not in customer.bill_ids:
            raise EntityNotFoundError(
                f"Bill {bill_id} not found for customer {customer_id}", entity=bill_id
            )
        bill = self._bill(bill_id)
        bill.status = BillStatus.AWAITING_PAYMENT
        return f"Payment request sent to the customer for bill {bill.bill_id}"

    @is_tool(ToolType.READ)
    def get_data_usage(self, customer_id: str, line_id: str) -> dict[str, Any]:
        """Retrieves current billing cycle data usage for a line, including data refueling
        amount, data limit, and cycle end date.

        Args:
            customer_id: ID of the customer who owns the line.
            line_id: ID of the line to check usage for.
        """
        line = self._target_line(customer_id, line_id)
        plan = self._plan(line.plan_id)
        cycle_end = _first_of_next_month(TODAY) - datetime.timedelta(days=1)
        return {
            "line_id": line_id,
            "data_used_gb": line.data_used_gb,
            "data_limit_gb": plan.data_limit_gb,
            "data_refueling_gb": line.data_refueling_gb,
            "cycle_end_date": cycle_end.isoformat(),
        }

    @is_tool(ToolType.WRITE)
    def enable_roaming(self, customer_id: str, line_id: str) -> str:
        """Enables international roaming on a line.

        Args:
            customer_id: ID of the customer who owns the line.
            line_id: ID of the line to enable roaming for.
        """
        line = self._target_line(customer_id, line_id)
        if line.roaming_enabled:
            return "Roaming was already enabled"
        line.roaming_enabled = True
        return "Roaming enabled successfully"

    @is_tool(ToolType.WRITE)
    def disable_roaming(self, customer_id: str, line_id: str) -> str:
        """Disables international roaming on a line.

        Args:
            customer_id: ID of the customer who owns the line.
            line_id: ID of the line to disable roaming for.
        """
        line = self._target_line(customer_id, line_id)
        if not line.roaming_enabled:
            return "Roaming was already disabled"
        line.roaming_enabled = False
        return "Roaming disabled successfully"

    @is_tool(ToolType.GENERIC)
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the user to a human agent, with a summary of the user's issue. Only
        transfer if the user explicitly asks for a human agent, or if, given the policy and
        the available tools, you cannot solve the user's issue.

        Args:
            summary: A summary of the user's issue.
        """
        return "Transfer successful"

    @is_tool(ToolType.WRITE)
    def refuel_data(self, customer_id: str, line_id: str, gb_amount: float) -> dict[str, Any]:
        """Refuels data for a specific line, adding to the customer's bill. Checks: the
        customer owns the line. Logic: adds data to the line and charges the customer at the
        plan's refueling rate.

        Args:
            customer_id: ID of the customer who owns the line.
            line_id: ID of the line to refuel data for.
            gb_amount: Amount of data to add in gigabytes.
        """
        line = self._target_line(customer_id, line_id)
        if gb_amount <= 0:
            raise ArgumentError("Refuel amount must be positive")
        plan = self._plan(line.plan_id)
        charge = gb_amount * plan.data_refueling_price_per_gb
        line.data_refueling_gb += gb_amount
        self._apply_one_time_charge(
            customer_id,
            charge,
            f"Data refueling: {gb_amount} GB at ${plan.data_refueling_price_per_gb}/GB",
        )
        return {
            "message": f"Successfully added {gb_amount} GB of data for line {line_id} "
            f"for ${charge:.2f}",
            "new_data_refueling_gb": line.data_refueling_gb,
            "charge": charge,
        }

    # -- internal helpers used by tools, initialization actions and assertions ------------

    def _apply_one_time_charge(self, customer_id: str, amount: float, description: str) -> None:
        """Add a charge (or a credit, if negative) to the customer's draft bill, creating
        next month's draft bill when there is none."""
        customer = self._customer(customer_id)
        draft = next(
            (
                bill
                for bill in (self._bill(b) for b in customer.bill_ids)
                if bill.status == BillStatus.DRAFT
            ),
            None,
        )
        if draft is None:
            start = _first_of_next_month(TODAY)
            draft = Bill(
                bill_id=self._new_bill_id(),
                customer_id=customer_id,
                period_start=start,
                period_end=_first_of_next_month(start) - datetime.timedelta(days=1),
                issue_date=start,
                total_due=0.0,
                due_date=start + datetime.timedelta(days=14),
                status=BillStatus.DRAFT,
            )
            self.db.bills.append(draft)
            customer.bill_ids.append(draft.bill_id)
        draft.line_items.append(
            LineItem(
                description=description,
                amount=amount,
                date=TODAY,
                item_type="Credit" if amount < 0 else "Charge",
            )
        )
        draft.total_due += amount

    def _set_bill_to_paid(self, bill_id: str) -> str:
        self._bill(bill_id).status = BillStatus.PAID
        return f"Bill {bill_id} set to paid"

    def set_data_usage(self, customer_id: str, line_id: str, data_used_gb: float) -> str:
        """Initialization action: set a line's data used this cycle."""
        self._target_line(customer_id, line_id).data_used_gb = data_used_gb
        return f"Data usage set to {data_used_gb} GB for line {line_id}"

    def suspend_line_for_overdue_bill(
        self, customer_id: str, line_id: str, new_bill_id: str, contract_ended: bool
    ) -> str:
        """Initialization action: add last month's unpaid (overdue) bill for the line's plan
        price and suspend the line; optionally end its contract last month."""
        line = self._line(line_id)
        if line.status != LineStatus.ACTIVE:
            raise PolicyViolationError("Line must be active to suspend for unpaid bill")
        amount = self._plan(line.plan_id).price_per_month
        if amount <= 0:
            raise PolicyViolationError("Amount must be positive for overdue bill")
        customer = self._customer(customer_id)
        if any(self._bill(b).status == BillStatus.OVERDUE for b in customer.bill_ids):
            raise PolicyViolationError("Customer already has an overdue bill")
        last_month_end = TODAY.replace(day=1) - datetime.timedelta(days=1)
        last_month_start = last_month_end.replace(day=1)
        bill = Bill(
            bill_id=new_bill_id,
            customer_id=customer_id,
            period_start=last_month_start,
            period_end=last_month_end,
            issue_date=last_month_start,
            total_due=amount,
            due_date=last_month_start + datetime.timedelta(days=14),
            status=BillStatus.OVERDUE,
            line_items=[
                LineItem(
                    description=f"Charge for line {line.line_id}",
                    amount=amount,
                    date=TODAY,
                    item_type="Charge",
                )
            ],
        )
        self.db.bills.append(bill)
        customer.bill_ids.append(new_bill_id)
        line.status = LineStatus.SUSPENDED
        line.suspension_start_date = TODAY
        if contract_ended:
            line.contract_end_date = last_month_end
        return (
            f"Line {line_id} suspended for unpaid bill {new_bill_id}. "
            f"Contract ended: {contract_ended}"
        )

    # -- env assertions (ENV_ASSERTION, env_type "assistant") ----------------------------
    # They raise ValueError (not ToolError) on unknown ids: the evaluator records a raising
    # assertion as not met, as τ²-bench does.

    def assert_data_refueling_amount(
        self, customer_id: str, line_id: str, expected_amount: float
    ) -> bool:
        """True when the line's refueled data equals ``expected_amount`` GB."""
        line = self._assert_line(customer_id, line_id)
        return abs(line.data_refueling_gb - expected_amount) < 1e-6

    def assert_line_status(self, customer_id: str, line_id: str, expected_status: str) -> bool:
        """True when the line's status is ``expected_status``."""
        return self._assert_line(customer_id, line_id).status == LineStatus(expected_status)

    def assert_line_roaming(self, customer_id: str, line_id: str, expected_status: bool) -> bool:
        """True when roaming on the line is enabled (or not) as expected."""
        return self._assert_line(customer_id, line_id).roaming_enabled == expected_status

    def _assert_line(self, customer_id: str, line_id: str) -> Line:
        try:
            return self._target_line(customer_id, line_id)
        except EntityNotFoundError as e:
            raise ValueError(str(e)) from None

    def assert_overdue_bill_exists(self, customer_id: str, overdue_bill_id: str) -> bool:
        """True when the customer has the bill and it is overdue (raises otherwise, as
        τ²-bench does)."""
        try:
            customer = self._customer(customer_id)
        except EntityNotFoundError as e:
            raise ValueError(str(e)) from None
        if overdue_bill_id not in customer.bill_ids:
            raise ValueError(f"Overdue bill {overdue_bill_id} not found")
        if self._bill(overdue_bill_id).status != BillStatus.OVERDUE:
            raise ValueError(f"Overdue bill {overdue_bill_id} is not overdue")
        return True

    def assert_no_overdue_bill(self, overdue_bill_id: str) -> bool:
        """True when the bill is gone or paid."""
        try:
            bill = self._bill(overdue_bill_id)
        except EntityNotFoundError:
            return True
        return bill.status == BillStatus.PAID

"""Dual control: the telecom environment keeps the phone in step with the carrier's records.

After every successful tool call (agent or user side) and every initialization action,
:meth:`TelecomEnvironment.sync_tools` mirrors the agent DB onto the user's surroundings, as
τ²-bench's telecom environment does:

- the user's line active in the records → the phone may get service;
- roaming enabled on the line → the phone may roam abroad;
- data used ≥ plan limit + refueled data → mobile data is cut;
- a bill the agent set to *Awaiting Payment* → a payment request appears on the phone;
  once the user paid it, the bill becomes *Paid* and the request disappears.
"""

from __future__ import annotations

from pytest_quantagent.env.environment import Environment
from pytest_quantagent.env.toolkit import EntityNotFoundError

from .data_model import LineStatus
from .tools import TelecomTools
from .user_data_model import PaymentRequest
from .user_tools import TelecomUserTools


def sync_device(tools: TelecomTools, user_tools: TelecomUserTools) -> None:
    """Mirror the agent-side records of the user's line onto the user's surroundings."""
    surroundings = user_tools.db.surroundings
    if surroundings.phone_number is None:
        return
    try:
        line = tools._line_by_phone(surroundings.phone_number)
    except EntityNotFoundError:
        # A scenario whose phone is not a line of the DB has nothing to mirror.
        return
    surroundings.line_active = line.status == LineStatus.ACTIVE
    surroundings.roaming_allowed = line.roaming_enabled
    plan = tools._plan(line.plan_id)
    surroundings.mobile_data_usage_exceeded = (
        line.data_used_gb >= plan.data_limit_gb + line.data_refueling_gb
    )
    request = surroundings.payment_request
    if request is not None and request.paid:
        tools._set_bill_to_paid(request.bill_id)
        surroundings.payment_request = None
    if surroundings.payment_request is None:
        try:
            customer = tools.get_customer_by_phone(surroundings.phone_number)
        except EntityNotFoundError:
            return
        awaiting = tools._bills_awaiting_payment(customer)
        if awaiting:
            surroundings.payment_request = PaymentRequest(
                bill_id=awaiting[0].bill_id, amount_due=awaiting[0].total_due
            )


class TelecomEnvironment(Environment):
    """Environment with the device ↔ records sync."""

    tools: TelecomTools
    user_tools: TelecomUserTools

    def sync_tools(self) -> None:
        """Mirror the records onto the phone's surroundings (see module docstring)."""
        if self.user_tools is not None:
            sync_device(self.tools, self.user_tools)

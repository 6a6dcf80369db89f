"""The retail DB: users, products with variant items, and orders, in τ²-bench's JSON schema.

Field names and field *order* follow τ²-bench's ``db.json`` and tool outputs, because a tool
result is the JSON dump of these models and the fidelity replay compares it with τ²-bench's
recorded results. The same classes load τ²-bench's official DB and our generated one.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from pytest_quantagent.env.db import DB

OrderStatus = Literal[
    "processed",
    "pending",
    "pending (item modified)",
    "delivered",
    "cancelled",
    "exchange requested",
    "return requested",
]
"""Every status an order can have (τ²-bench's set)."""

CancelReason = Literal["no longer needed", "ordered by mistake"]
"""The two cancellation reasons the policy accepts."""

CANCEL_REASONS: tuple[str, ...] = ("no longer needed", "ordered by mistake")


class _Strict(BaseModel):
    """Sub-models refuse unknown fields too, so a misspelt key in a data file fails loudly."""

    model_config = ConfigDict(extra="forbid")


class Variant(_Strict):
    """One purchasable item of a product: an option combination with its own id and price."""

    item_id: str
    options: dict[str, str]
    available: bool
    price: float


class Product(_Strict):
    """A product type (e.g. 'Desk Lamp') and its variant items keyed by item id."""

    name: str
    product_id: str
    variants: dict[str, Variant]


class UserName(_Strict):
    first_name: str
    last_name: str


class UserAddress(_Strict):
    address1: str
    address2: str
    city: str
    country: str
    state: str
    zip: str


class CreditCard(_Strict):
    source: Literal["credit_card"]
    id: str
    brand: str
    last_four: str


class Paypal(_Strict):
    source: Literal["paypal"]
    id: str


class GiftCard(_Strict):
    source: Literal["gift_card"]
    id: str
    balance: float


PaymentMethod = Annotated[Union[CreditCard, Paypal, GiftCard], Field(discriminator="source")]
"""A user's payment method, told apart by ``source``."""


class User(_Strict):
    """A customer profile with payment methods (keyed by id) and order ids."""

    user_id: str
    name: UserName
    address: UserAddress
    email: str
    payment_methods: dict[str, PaymentMethod]
    orders: list[str]


class OrderItem(_Strict):
    """An item line of an order (a copy of the variant at purchase time)."""

    name: str
    product_id: str
    item_id: str
    price: float
    options: dict[str, str]


class OrderFulfillment(_Strict):
    tracking_id: list[str]
    item_ids: list[str]


class OrderPayment(_Strict):
    transaction_type: Literal["payment", "refund"]
    amount: float
    payment_method_id: str


class Order(_Strict):
    """An order. The optional fields are filled by cancel / exchange / return requests."""

    order_id: str
    user_id: str
    address: UserAddress
    items: list[OrderItem]
    status: OrderStatus
    fulfillments: list[OrderFulfillment]
    payment_history: list[OrderPayment]
    cancel_reason: CancelReason | None = None
    exchange_items: list[str] | None = None
    exchange_new_items: list[str] | None = None
    exchange_payment_method_id: str | None = None
    exchange_price_difference: float | None = None
    return_items: list[str] | None = None
    return_payment_method_id: str | None = None


class RetailDB(DB):
    """The whole retail database: products, users and orders keyed by their ids."""

    products: dict[str, Product]
    users: dict[str, User]
    orders: dict[str, Order]

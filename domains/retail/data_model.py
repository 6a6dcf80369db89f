"""The retail DB: users, products with variant items, and orders, in τ²-bench's JSON schema.

Field names and field *order* follow τ²-bench's ``db.json`` and tool outputs, because a tool
result is the JSON dump of these models and the fidelity replay compares it with τ²-bench's
recorded results. The same classes load τ²-bench's official DB and our generated one.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

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

CANCEL_REASONS: tuple[CancelReason, ...] = ("no longer needed", "ordered by mistake")


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


PaymentMethod = Annotated[CreditCard | Paypal | GiftCard, Field(discriminator="source")]
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


def _fragment(entity: BaseModel) -> str:
    return json.dumps(entity.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


class RetailDB(DB):
    """The whole retail database: products, users and orders keyed by their ids.

    Episodes need a fresh DB each, and a deep copy of a few hundred orders costs far more
    than the episode itself, so :meth:`copy_fresh` is copy-on-write: the copy shares the
    entity objects of its source and a tool takes its own deep copy of an order or user
    (:meth:`own_order`, :meth:`own_user`) before changing it. Products are never changed.
    :meth:`get_hash` equals :meth:`DB.get_hash` (SHA-256 of the canonical JSON) but reuses
    the JSON of entities still shared with the source.

    The DB a copy was made from must not be changed in place afterwards (the engine only
    ever changes copies).
    """

    products: dict[str, Product]
    users: dict[str, User]
    orders: dict[str, Order]

    _owned: set[tuple[str, str]] | None = PrivateAttr(default=None)
    """In a copy: the (collection, id) entities this copy owns. None: it owns everything."""
    _fragments: dict[tuple[str, str], tuple[BaseModel, str]] | None = PrivateAttr(default=None)
    """Canonical JSON of shared entities, keyed by (collection, id), valid for that object."""

    def copy_fresh(self) -> RetailDB:
        """An independent copy for one episode (copy-on-write, see the class docstring)."""
        owned = self._owned or set()

        def share(kind: str, table: dict[str, Any]) -> dict[str, Any]:
            # Entities this DB owns may still change here: the copy gets its own.
            return {
                k: v.model_copy(deep=True) if (kind, k) in owned else v for k, v in table.items()
            }

        copy = RetailDB.model_construct(
            products=dict(self.products),
            users=share("users", self.users) if owned else dict(self.users),
            orders=share("orders", self.orders) if owned else dict(self.orders),
        )
        copy._owned = set(owned)
        if self._fragments is None:
            self._fragments = {}
        copy._fragments = self._fragments
        return copy

    def own_order(self, order_id: str) -> None:
        """Make this DB's order ``order_id`` its own before changing it (no-op if absent)."""
        self._own("orders", self.orders, order_id)

    def own_user(self, user_id: str) -> None:
        """Make this DB's user ``user_id`` its own before changing it (no-op if absent)."""
        self._own("users", self.users, user_id)

    def _own(self, kind: str, table: dict[str, Any], key: str) -> None:
        if self._owned is None or (kind, key) in self._owned or key not in table:
            return
        table[key] = table[key].model_copy(deep=True)
        self._owned.add((kind, key))

    def canonical_json(self) -> str:
        owned, fragments = self._owned, self._fragments
        if owned is None or fragments is None:
            return super().canonical_json()
        parts: list[str] = []
        for kind, table in (("orders", self.orders), ("products", self.products), ("users", self.users)):
            items: list[str] = []
            for key in sorted(table):
                entity = table[key]
                cached = None if (kind, key) in owned else fragments.get((kind, key))
                if cached is None or cached[0] is not entity:
                    cached = (entity, f"{json.dumps(key)}:{_fragment(entity)}")
                    if (kind, key) not in owned:
                        fragments[(kind, key)] = cached
                items.append(cached[1])
            parts.append(f"{json.dumps(kind)}:{{{','.join(items)}}}")
        return "{" + ",".join(parts) + "}"

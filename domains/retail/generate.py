"""Seeded generator of the bundled retail data: ``db.json``, ``tasks.json``, ``split_tasks.json``.

Run ``python domains/retail/generate.py`` (optionally ``--seed N --tasks N --out DIR``) to
rewrite the three files beside this script. The same seed always gives the same files.

The DB is small and regular on purpose: a tiny from-scratch reference model is trained on
episodes over it, and it can only copy an id that is one token of its domain tokenizer. So
every id-like string (user ids, order ids, item/product ids, payment ids, emails, zips,
street numbers, tracking ids, prices) is drawn from fixed pools (see :func:`id_pool`), and
every price and balance is a whole number of dollars, which keeps sums and differences
inside a small pool too.

:func:`generate_tasks` draws any number of extra tasks over an existing DB without writing
files (the reference-model trainer uses it for training episodes).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # run as a script: make the relative imports work
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "domains.retail"

from pytest_quantagent.env.tasks import Task

from .data_model import (
    CANCEL_REASONS,
    CreditCard,
    GiftCard,
    Order,
    OrderFulfillment,
    OrderItem,
    OrderPayment,
    Paypal,
    Product,
    RetailDB,
    User,
    UserAddress,
    UserName,
    Variant,
)

DEFAULT_SEED = 20261130
DEFAULT_N_USERS = 200
DEFAULT_N_TASKS = 160
TEST_SHARE = 50
"""Number of bundled tasks in the ``test`` split (the rest is ``train``)."""

FIRST_NAMES: tuple[str, ...] = (
    "Ada", "Bruno", "Celia", "Dario", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas",
    "Kira", "Leon", "Maren", "Nikos", "Odette", "Pavel", "Quinn", "Rosa", "Stefan", "Tove",
    "Umar", "Vera", "Wendell", "Ximena", "Yannick", "Zofia", "Anton", "Beatriz", "Cyrus", "Delia",
)  # fmt: skip
LAST_NAMES: tuple[str, ...] = (
    "Abbott", "Brandt", "Castillo", "Dubois", "Eriksen", "Fischer", "Gallo", "Horvat",
    "Ibarra", "Jansen", "Keller", "Lindqvist", "Moreau", "Novak", "Okafor", "Petrov",
    "Quint", "Romero", "Schulz", "Tanaka", "Ueda", "Varga", "Weber", "Yilmaz", "Zeller",
)  # fmt: skip
CITIES: tuple[tuple[str, str, str], ...] = (
    ("Boise", "ID", "837"), ("Tucson", "AZ", "857"), ("Omaha", "NE", "681"),
    ("Portland", "OR", "972"), ("Madison", "WI", "537"), ("Raleigh", "NC", "276"),
    ("Tulsa", "OK", "741"), ("Albany", "NY", "122"), ("Reno", "NV", "895"),
    ("Savannah", "GA", "314"), ("Spokane", "WA", "992"), ("Burlington", "VT", "054"),
)  # fmt: skip
STREETS: tuple[str, ...] = (
    "Harbor Way", "Quarry Road", "Juniper Court", "Orchard Row", "Falcon Street",
    "Willow Bend", "Copper Lane", "Meadow Path", "Granite Avenue", "Lantern Street",
)  # fmt: skip
CARD_BRANDS: tuple[str, ...] = ("visa", "mastercard", "amex")

# Product name -> option name -> values. Two options per product keeps variants few.
PRODUCTS: tuple[tuple[str, dict[str, tuple[str, ...]]], ...] = (
    ("Desk Fan", {"color": ("white", "black"), "speed levels": ("3", "5")}),
    ("Rain Jacket", {"color": ("green", "navy", "red"), "size": ("S", "M", "L")}),
    ("Camping Tent", {"capacity": ("2 person", "4 person"), "color": ("orange", "green")}),
    ("Sleeping Bag", {"rating": ("summer", "winter"), "size": ("regular", "long")}),
    ("Blender", {"color": ("black", "silver"), "capacity": ("1L", "2L")}),
    ("Toaster", {"slots": ("2", "4"), "color": ("white", "red", "silver")}),
    ("Rice Cooker", {"capacity": ("3 cups", "6 cups"), "color": ("white", "black")}),
    ("Cast Iron Pan", {"size": ("8 inch", "10 inch", "12 inch"), "finish": ("plain", "enamel")}),
    ("Chef Knife", {"length": ("6 inch", "8 inch"), "handle": ("wood", "steel")}),
    ("Cutting Board", {"material": ("bamboo", "maple"), "size": ("small", "large")}),
    ("Floor Lamp", {"color": ("black", "brass"), "bulb": ("LED", "halogen")}),
    ("Throw Blanket", {"color": ("grey", "blue", "cream"), "material": ("wool", "fleece")}),
    ("Pillow", {"firmness": ("soft", "firm"), "size": ("standard", "king")}),
    ("Bath Towel", {"color": ("white", "blue", "grey"), "size": ("hand", "bath")}),
    ("Rain Umbrella", {"color": ("black", "yellow"), "type": ("compact", "golf")}),
    ("Wool Scarf", {"color": ("red", "grey", "navy"), "length": ("short", "long")}),
    ("Leather Wallet", {"color": ("brown", "black"), "style": ("bifold", "trifold")}),
    ("Tote Bag", {"material": ("canvas", "leather"), "color": ("beige", "black")}),
    ("Duffel Bag", {"capacity": ("40L", "60L"), "color": ("black", "olive")}),
    ("Travel Mug", {"capacity": ("12 oz", "16 oz"), "color": ("steel", "blue", "red")}),
    ("Lunch Box", {"color": ("green", "pink", "blue"), "type": ("single", "bento")}),
    ("Board Game", {"edition": ("classic", "deluxe"), "language": ("English", "Spanish")}),
    ("Drawing Tablet", {"size": ("small", "medium"), "connection": ("wired", "wireless")}),
    ("Webcam", {"resolution": ("1080p", "4K"), "color": ("black", "white")}),
    ("Microphone", {"type": ("USB", "XLR"), "color": ("black", "silver")}),
    ("USB Hub", {"ports": ("4", "7"), "color": ("grey", "black")}),
    ("Monitor", {"size": ("24 inch", "27 inch"), "resolution": ("1080p", "1440p")}),
    ("Wifi Router", {"band": ("dual", "tri"), "color": ("white", "black")}),
    ("Surge Protector", {"outlets": ("6", "8", "12"), "cord": ("3 ft", "6 ft")}),
    ("Fitness Tracker", {"color": ("black", "teal", "pink"), "band": ("silicone", "nylon")}),
    ("Jump Rope", {"type": ("speed", "weighted"), "color": ("black", "red")}),
    ("Tennis Racket", {"grip": ("2", "3", "4"), "weight": ("light", "standard")}),
    ("Kayak Paddle", {"length": ("220 cm", "230 cm"), "material": ("aluminum", "carbon")}),
    ("Bird Feeder", {"type": ("tube", "house"), "material": ("wood", "plastic")}),
    ("Plant Pot", {"size": ("small", "medium", "large"), "material": ("clay", "ceramic")}),
    ("Watering Can", {"capacity": ("1L", "5L"), "color": ("green", "grey")}),
    ("Picture Frame", {"size": ("5x7", "8x10"), "color": ("black", "white", "oak")}),
    ("Alarm Clock", {"display": ("digital", "analog"), "color": ("white", "black")}),
    ("Hair Dryer", {"power": ("1200W", "1800W"), "color": ("black", "rose")}),
    ("Yoga Block", {"material": ("foam", "cork"), "color": ("purple", "blue")}),
)

TASK_KINDS: tuple[str, ...] = (
    "cancel",
    "modify_address",
    "modify_payment",
    "modify_items",
    "return",
    "exchange",
    "user_address",
    "info_status",
    "info_balance",
    "info_total",
    "refuse_cancel",
    "refuse_return",
    "refuse_exchange",
    "refuse_gift_card",
    "transfer",
)
"""Every scenario kind :func:`generate_tasks` knows."""


# ----------------------------------------------------------------------------- DB


class _Ids:
    """Unique numeric ids of fixed widths drawn from one RNG."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def digits(self, n: int) -> str:
        while True:
            value = str(self.rng.randrange(10 ** (n - 1), 10**n))
            if value not in self.used:
                self.used.add(value)
                return value


def _address(rng: random.Random) -> UserAddress:
    city, state, prefix = rng.choice(CITIES)
    suite = rng.choice(["", f"Apt {rng.randrange(1, 40)}", f"Unit {rng.randrange(1, 20)}"])
    return UserAddress(
        address1=f"{rng.randrange(10, 990)} {rng.choice(STREETS)}",
        address2=suite,
        city=city,
        country="USA",
        state=state,
        zip=f"{prefix}{rng.randrange(10, 100)}",
    )


def generate_db(seed: int = DEFAULT_SEED, n_users: int = DEFAULT_N_USERS) -> RetailDB:
    """Build the retail DB for ``seed``: 40 products with 3-5 items each and ``n_users``
    users with 1-3 orders of 1-3 items."""
    if n_users < 1 or n_users > len(FIRST_NAMES) * len(LAST_NAMES):
        raise ValueError(
            f"n_users={n_users} is out of range: 1 to {len(FIRST_NAMES) * len(LAST_NAMES)}"
        )
    rng = random.Random(seed)
    ids = _Ids(rng)

    products: dict[str, Product] = {}
    for name, options in PRODUCTS:
        keys = list(options)
        combos = [
            {keys[0]: a, keys[1]: b} for a in options[keys[0]] for b in options[keys[1]]
        ]
        rng.shuffle(combos)
        base = rng.randrange(15, 300)
        variants: dict[str, Variant] = {}
        chosen = combos[: rng.randint(3, min(5, len(combos)))]
        for k, opts in enumerate(chosen):
            item_id = ids.digits(10)
            variants[item_id] = Variant(
                item_id=item_id,
                options=opts,
                # The first item is always available so every product can be ordered.
                available=k == 0 or rng.random() > 0.2,
                price=float(base + rng.randrange(-10, 11)),
            )
        pid = ids.digits(10)
        products[pid] = Product(name=name, product_id=pid, variants=variants)

    users: dict[str, User] = {}
    orders: dict[str, Order] = {}
    names = [(f, last) for f in FIRST_NAMES for last in LAST_NAMES]
    rng.shuffle(names)
    product_list = list(products.values())
    for first, last in names[:n_users]:
        user_id = f"{first.lower()}_{last.lower()}_{ids.digits(4)}"
        methods: dict[str, CreditCard | Paypal | GiftCard] = {}
        kinds = rng.sample(["credit_card", "paypal", "gift_card"], rng.randint(1, 3))
        for kind in sorted(kinds):
            pm_id = f"{kind}_{ids.digits(7)}"
            if kind == "credit_card":
                methods[pm_id] = CreditCard(
                    source="credit_card",
                    id=pm_id,
                    brand=rng.choice(CARD_BRANDS),
                    last_four=ids.digits(4),
                )
            elif kind == "paypal":
                methods[pm_id] = Paypal(source="paypal", id=pm_id)
            else:
                methods[pm_id] = GiftCard(
                    source="gift_card", id=pm_id, balance=float(rng.randrange(0, 300))
                )
        user = User(
            user_id=user_id,
            name=UserName(first_name=first, last_name=last),
            address=_address(rng),
            email=f"{first.lower()}.{last.lower()}{ids.digits(4)}@example.com",
            payment_methods=methods,
            orders=[],
        )
        for _ in range(rng.randint(1, 3)):
            order_id = f"#W{ids.digits(7)}"
            lines: list[OrderItem] = []
            for product in rng.sample(product_list, rng.randint(1, 3)):
                variant = rng.choice(list(product.variants.values()))
                lines.append(
                    OrderItem(
                        name=product.name,
                        product_id=product.product_id,
                        item_id=variant.item_id,
                        price=variant.price,
                        options=dict(variant.options),
                    )
                )
            status = rng.choices(
                ["pending", "processed", "delivered", "cancelled"], weights=[4, 1.5, 3.5, 1]
            )[0]
            pay_id = rng.choice(sorted(methods))
            total = round(sum(line.price for line in lines), 2)
            history = [OrderPayment(transaction_type="payment", amount=total, payment_method_id=pay_id)]
            fulfillments: list[OrderFulfillment] = []
            if status in ("processed", "delivered"):
                fulfillments.append(
                    OrderFulfillment(
                        tracking_id=[ids.digits(12)], item_ids=[line.item_id for line in lines]
                    )
                )
            order = Order(
                order_id=order_id,
                user_id=user_id,
                address=user.address.model_copy(),
                items=lines,
                status=status,  # type: ignore[arg-type]
                fulfillments=fulfillments,
                payment_history=history,
            )
            if status == "cancelled":
                order.cancel_reason = rng.choice(CANCEL_REASONS)
                history.append(
                    OrderPayment(transaction_type="refund", amount=total, payment_method_id=pay_id)
                )
            orders[order_id] = order
            user.orders.append(order_id)
        users[user_id] = user
    return RetailDB(products=products, users=users, orders=orders)


# ----------------------------------------------------------------------------- tasks


@dataclass
class _Draft:
    """A task under construction (turned into a τ²-schema :class:`Task` by ``_to_task``)."""

    kind: str
    user: User
    by_email: bool
    request: str
    reason_for_call: str
    actions: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)
    answers: list[dict[str, Any]] = field(default_factory=list)
    communicate: list[str] = field(default_factory=list)
    transfer: bool = False
    purpose: str = ""


def _money(value: float) -> str:
    """A whole-dollar amount as the user and the communicate check see it ('42')."""
    return str(round(value)) if float(value).is_integer() else f"{value:.2f}"


def _describe_method(method: CreditCard | Paypal | GiftCard, whose: str = "my") -> str:
    if isinstance(method, CreditCard):
        return f"{whose} {method.brand} credit card ending in {method.last_four} ({method.id})"
    if isinstance(method, GiftCard):
        return f"{whose} gift card ({method.id})"
    return f"{whose} PayPal account ({method.id})"


def _describe_address(a: UserAddress) -> str:
    line2 = f", {a.address2}" if a.address2 else ""
    return f"{a.address1}{line2}, {a.city}, {a.state} {a.zip}, {a.country}"


def _address_args(a: UserAddress) -> dict[str, Any]:
    return {
        "address1": a.address1,
        "address2": a.address2,
        "city": a.city,
        "state": a.state,
        "country": a.country,
        "zip": a.zip,
    }


def _options_text(options: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in options.items())


class _Index:
    """The DB's entities grouped the way the task builders pick them."""

    def __init__(self, db: RetailDB) -> None:
        self.db = db
        self.users = sorted(db.users.values(), key=lambda u: u.user_id)
        self.orders_by_status: dict[str, list[Order]] = {}
        for order in sorted(db.orders.values(), key=lambda o: o.order_id):
            self.orders_by_status.setdefault(order.status, []).append(order)

    def orders(self, *statuses: str) -> list[Order]:
        return [o for s in statuses for o in self.orders_by_status.get(s, [])]

    def alternatives(self, line: OrderItem) -> list[Variant]:
        """Available items of the same product with other options than ``line``."""
        product = self.db.products[line.product_id]
        return [
            v for v in product.variants.values() if v.available and v.item_id != line.item_id
        ]


def _opening(d: _Draft) -> None:
    """Identification actions every task starts with."""
    u = d.user
    if d.by_email:
        d.actions.append(("find_user_id_by_email", {"email": u.email}))
    else:
        d.actions.append(
            (
                "find_user_id_by_name_zip",
                {"first_name": u.name.first_name, "last_name": u.name.last_name, "zip": u.address.zip},
            )
        )
    d.actions.append(("get_user_details", {"user_id": u.user_id}))


def _order_draft(
    kind: str, order: Order, index: _Index, rng: random.Random, request: str, reason: str
) -> _Draft:
    d = _Draft(
        kind=kind,
        user=index.db.users[order.user_id],
        by_email=rng.random() < 0.5,
        request=request,
        reason_for_call=reason,
    )
    _opening(d)
    d.actions.append(("get_order_details", {"order_id": order.order_id}))
    d.facts["order_id"] = f"The order id is {order.order_id}."
    return d


_Builder = Callable[[_Index, random.Random], "_Draft | None"]


def _cancel(index: _Index, rng: random.Random) -> _Draft | None:
    order = rng.choice(index.orders("pending"))
    reason = rng.choice(CANCEL_REASONS)
    d = _order_draft(
        "cancel", order, index, rng,
        f"I want to cancel my order {order.order_id}.",
        f"You want to cancel your pending order {order.order_id} because it is {reason}.",
    )
    d.facts["reason"] = f"It is {reason}." if reason == "no longer needed" else f"I {reason}."
    d.actions.append(("cancel_pending_order", {"order_id": order.order_id, "reason": reason}))
    d.purpose = "Cancel a pending order with an accepted reason."
    return d


def _modify_address(index: _Index, rng: random.Random) -> _Draft | None:
    order = rng.choice(index.orders("pending"))
    new = _address(rng)
    text = _describe_address(new)
    d = _order_draft(
        "modify_address", order, index, rng,
        f"I need to change the shipping address of my order {order.order_id}.",
        f"You want order {order.order_id} shipped to {text} instead.",
    )
    d.facts["address"] = f"The new address is {text}."
    d.actions.append(("modify_pending_order_address", {"order_id": order.order_id, **_address_args(new)}))
    d.purpose = "Change the shipping address of a pending order."
    return d


def _modify_payment(index: _Index, rng: random.Random) -> _Draft | None:
    candidates = []
    for order in index.orders("pending"):
        methods = index.db.users[order.user_id].payment_methods
        paid = order.payment_history[0]
        for m in methods.values():
            if m.id == paid.payment_method_id:
                continue
            if isinstance(m, GiftCard) and m.balance < paid.amount:
                continue
            candidates.append((order, m))
    if not candidates:
        return None
    order, method = rng.choice(candidates)
    d = _order_draft(
        "modify_payment", order, index, rng,
        f"I'd like to pay for my order {order.order_id} with {_describe_method(method)} instead.",
        f"You want to pay for order {order.order_id} with {_describe_method(method, 'your')} instead.",
    )
    d.facts["payment_method"] = f"Please use {_describe_method(method)}."
    d.actions.append(
        ("modify_pending_order_payment", {"order_id": order.order_id, "payment_method_id": method.id})
    )
    d.purpose = "Change the payment method of a pending order."
    return d


def _pick_lines(
    order: Order, index: _Index, rng: random.Random
) -> list[tuple[OrderItem, Variant]] | None:
    choices = [(line, index.alternatives(line)) for line in order.items]
    choices = [(line, alts) for line, alts in choices if alts]
    if not choices:
        return None
    # Mostly one line; two lines (of different products) now and then.
    k = 2 if len(choices) > 1 and rng.random() < 0.25 else 1
    picked = rng.sample(choices, k)
    return [(line, rng.choice(alts)) for line, alts in picked]


def _diff_method(
    user: User, order: Order, diff: float, rng: random.Random
) -> CreditCard | Paypal | GiftCard | None:
    """A payment method for a price difference: the original one when it can pay, else any
    that can (a gift card must cover a positive difference)."""
    methods = list(user.payment_methods.values())
    original = user.payment_methods.get(order.payment_history[0].payment_method_id)
    ok = [m for m in methods if not (isinstance(m, GiftCard) and m.balance < diff)]
    if original in ok and rng.random() < 0.7:
        return original
    return rng.choice(ok) if ok else None


def _change_items(kind: str, index: _Index, rng: random.Random) -> _Draft | None:
    status = "pending" if kind == "modify_items" else "delivered"
    for _ in range(20):
        order = rng.choice(index.orders(status))
        picked = _pick_lines(order, index, rng)
        if picked is None:
            continue
        user = index.db.users[order.user_id]
        diff = round(sum(new.price - line.price for line, new in picked), 2)
        method = _diff_method(user, order, diff, rng)
        if method is None:
            continue
        wants = " and ".join(
            f"the {line.name} ({_options_text(line.options)}) for the one with {_options_text(new.options)}"
            for line, new in picked
        )
        verb = "change" if kind == "modify_items" else "exchange"
        d = _order_draft(
            kind, order, index, rng,
            f"In my order {order.order_id} I'd like to {verb} {wants}, with "
            f"{_describe_method(method)} for any price difference.",
            f"You want to {verb} {wants} in order {order.order_id}; any price difference "
            f"goes to {_describe_method(method, 'your')}.",
        )
        d.facts["item"] = f"I want to {verb} {wants}."
        d.facts["payment_method"] = f"Please use {_describe_method(method)} for the price difference."
        for line, _ in picked:
            d.actions.append(("get_product_details", {"product_id": line.product_id}))
        tool = "modify_pending_order_items" if kind == "modify_items" else "exchange_delivered_order_items"
        d.actions.append(
            (
                tool,
                {
                    "order_id": order.order_id,
                    "item_ids": [line.item_id for line, _ in picked],
                    "new_item_ids": [new.item_id for _, new in picked],
                    "payment_method_id": method.id,
                },
            )
        )
        d.purpose = f"{verb.capitalize()} items of a {status} order for other options of the same product."
        return d
    return None


def _modify_items(index: _Index, rng: random.Random) -> _Draft | None:
    return _change_items("modify_items", index, rng)


def _exchange(index: _Index, rng: random.Random) -> _Draft | None:
    return _change_items("exchange", index, rng)


def _return(index: _Index, rng: random.Random) -> _Draft | None:
    order = rng.choice(index.orders("delivered"))
    user = index.db.users[order.user_id]
    lines = rng.sample(order.items, rng.randint(1, len(order.items)))
    gift = [m for m in user.payment_methods.values() if isinstance(m, GiftCard)]
    original = user.payment_methods[order.payment_history[0].payment_method_id]
    method = rng.choice(gift) if gift and rng.random() < 0.3 else original
    names = " and ".join(f"the {line.name}" for line in lines)
    d = _order_draft(
        "return", order, index, rng,
        f"I want to return {names} from my order {order.order_id}, with the refund to "
        f"{_describe_method(method)}.",
        f"You want to return {names} from order {order.order_id} and get the refund on "
        f"{_describe_method(method, 'your')}.",
    )
    d.facts["item"] = f"I want to return {names}."
    d.facts["payment_method"] = f"Please refund it to {_describe_method(method)}."
    d.actions.append(
        (
            "return_delivered_order_items",
            {
                "order_id": order.order_id,
                "item_ids": [line.item_id for line in lines],
                "payment_method_id": method.id,
            },
        )
    )
    d.purpose = "Return items of a delivered order."
    return d


def _user_address(index: _Index, rng: random.Random) -> _Draft | None:
    user = rng.choice(index.users)
    new = _address(rng)
    text = _describe_address(new)
    d = _Draft(
        kind="user_address",
        user=user,
        by_email=rng.random() < 0.5,
        request="I moved and need to update the default address on my account.",
        reason_for_call=f"You moved to {text} and want your default address updated.",
    )
    _opening(d)
    d.facts["address"] = f"My new address is {text}."
    d.actions.append(("modify_user_address", {"user_id": user.user_id, **_address_args(new)}))
    d.purpose = "Change the user's default address."
    return d


def _info_status(index: _Index, rng: random.Random) -> _Draft | None:
    order = rng.choice(index.orders("pending", "processed", "delivered", "cancelled"))
    d = _order_draft(
        "info_status", order, index, rng,
        f"What is the status of my order {order.order_id}?",
        f"You want to know the status of your order {order.order_id}.",
    )
    d.communicate.append(order.status)
    d.purpose = "Tell the user the status of an order."
    return d


def _info_balance(index: _Index, rng: random.Random) -> _Draft | None:
    users = [
        u for u in index.users
        if sum(isinstance(m, GiftCard) for m in u.payment_methods.values()) == 1
    ]
    user = rng.choice(users)
    card = next(m for m in user.payment_methods.values() if isinstance(m, GiftCard))
    d = _Draft(
        kind="info_balance",
        user=user,
        by_email=rng.random() < 0.5,
        request="How much money is left on my gift card?",
        reason_for_call="You want to know the balance of your gift card.",
    )
    _opening(d)
    d.communicate.append(_money(card.balance))
    d.purpose = "Tell the user their gift card balance."
    return d


def _info_total(index: _Index, rng: random.Random) -> _Draft | None:
    order = rng.choice(index.orders("pending", "processed", "delivered"))
    d = _order_draft(
        "info_total", order, index, rng,
        f"How much did I pay for my order {order.order_id}?",
        f"You want to know how much you paid in total for order {order.order_id}.",
    )
    d.communicate.append(_money(order.payment_history[0].amount))
    d.purpose = "Tell the user the total paid for an order."
    return d


def _refuse(kind: str, index: _Index, rng: random.Random) -> _Draft | None:
    if kind == "refuse_cancel":
        order = rng.choice(index.orders("processed", "delivered"))
        request = f"Please cancel my order {order.order_id}."
        reason = (
            f"You want to cancel order {order.order_id} because it is no longer needed. "
            "If the agent says it cannot be cancelled, accept that and end the conversation."
        )
        d = _order_draft(kind, order, index, rng, request, reason)
        d.facts["reason"] = "It is no longer needed."
        d.purpose = f"Refuse to cancel an order that is {order.status} (only pending orders can be cancelled)."
    elif kind == "refuse_return":
        order = rng.choice(index.orders("pending", "processed"))
        names = " and ".join(f"the {line.name}" for line in order.items)
        d = _order_draft(
            kind, order, index, rng,
            f"I want to return {names} from my order {order.order_id}.",
            f"You want to return {names} from order {order.order_id}. If the agent says it "
            "cannot be returned, accept that and end the conversation.",
        )
        d.facts["item"] = f"I want to return {names}."
        d.purpose = f"Refuse to return items of an order that is {order.status} (not delivered)."
    elif kind == "refuse_exchange":
        order = rng.choice(index.orders("pending", "processed", "cancelled"))
        line = rng.choice(order.items)
        d = _order_draft(
            kind, order, index, rng,
            f"I want to exchange the {line.name} from my order {order.order_id} for another option.",
            f"You want to exchange the {line.name} of order {order.order_id}. If the agent says "
            "it cannot be exchanged, accept that and end the conversation.",
        )
        d.facts["item"] = f"I want to exchange the {line.name} for another color or size."
        d.purpose = f"Refuse to exchange items of an order that is {order.status} (not delivered)."
    else:  # refuse_gift_card
        candidates = []
        for order in index.orders("pending"):
            paid = order.payment_history[0]
            for m in index.db.users[order.user_id].payment_methods.values():
                if isinstance(m, GiftCard) and m.id != paid.payment_method_id and m.balance < paid.amount:
                    candidates.append((order, m))
        if not candidates:
            return None
        order, card = rng.choice(candidates)
        d = _order_draft(
            kind, order, index, rng,
            f"I want to pay for my order {order.order_id} with my gift card instead.",
            f"You want to pay for order {order.order_id} with your gift card {card.id}. If the "
            "agent says the balance is not enough, accept that and end the conversation.",
        )
        d.facts["payment_method"] = f"Please use my gift card ({card.id})."
        d.purpose = "Refuse a payment change to a gift card whose balance is below the order total."
    return d


def _refuse_cancel(index: _Index, rng: random.Random) -> _Draft | None:
    return _refuse("refuse_cancel", index, rng)


def _refuse_return(index: _Index, rng: random.Random) -> _Draft | None:
    return _refuse("refuse_return", index, rng)


def _refuse_exchange(index: _Index, rng: random.Random) -> _Draft | None:
    return _refuse("refuse_exchange", index, rng)


def _refuse_gift_card(index: _Index, rng: random.Random) -> _Draft | None:
    return _refuse("refuse_gift_card", index, rng)


_TRANSFER_REASONS: tuple[tuple[str, str], ...] = (
    ("arrived damaged", "One item of my order {order} arrived damaged and I want to talk to a human agent about it."),
    ("never arrived", "My order {order} says delivered but it never arrived. I want to speak to a human agent."),
    ("was charged twice", "I think I was charged twice for order {order}. Please transfer me to a human agent."),
)


def _transfer(index: _Index, rng: random.Random) -> _Draft | None:
    order = rng.choice(index.orders("delivered"))
    problem, request = rng.choice(_TRANSFER_REASONS)
    d = _order_draft(
        "transfer", order, index, rng,
        request.format(order=order.order_id),
        f"Your order {order.order_id} {problem}; you insist on talking to a human agent.",
    )
    d.transfer = True
    d.actions.append(
        ("transfer_to_human_agents", {"summary": f"User says order {order.order_id} {problem}; asks for a human agent."})
    )
    d.purpose = "Transfer to a human agent when the user asks for one."
    return d


_BUILDERS: dict[str, _Builder] = {
    "cancel": _cancel,
    "modify_address": _modify_address,
    "modify_payment": _modify_payment,
    "modify_items": _modify_items,
    "return": _return,
    "exchange": _exchange,
    "user_address": _user_address,
    "info_status": _info_status,
    "info_balance": _info_balance,
    "info_total": _info_total,
    "refuse_cancel": _refuse_cancel,
    "refuse_return": _refuse_return,
    "refuse_exchange": _refuse_exchange,
    "refuse_gift_card": _refuse_gift_card,
    "transfer": _transfer,
}
assert tuple(_BUILDERS) == TASK_KINDS


def _identity(d: _Draft) -> tuple[dict[str, str], str, str]:
    """The script's identity facts and τ²-style known / unknown info texts."""
    u = d.user
    ident = {"first_name": u.name.first_name, "last_name": u.name.last_name, "zip": u.address.zip}
    known = f"You are {u.name.first_name} {u.name.last_name} and your zip code is {u.address.zip}."
    if d.by_email:
        ident["email"] = u.email
        return ident, f"{known} Your email is {u.email}.", "You do not know your user id."
    return ident, known, "You do not remember your email address."


def _to_task(d: _Draft, task_id: str) -> Task:
    ident, known, unknown = _identity(d)
    actions = []
    for i, (name, args) in enumerate(d.actions):
        action: dict[str, Any] = {"action_id": f"{task_id}_{i}", "name": name, "arguments": args}
        if name == "transfer_to_human_agents":
            action["compare_args"] = []  # the summary is free text: only the name is checked
        actions.append(action)
    basis = ["DB"]
    if d.communicate:
        basis.append("COMMUNICATE")
    if d.transfer:
        basis.append("ACTION")
    raw = {
        "id": task_id,
        "description": {"purpose": d.purpose, "relevant_policies": None, "notes": f"kind={d.kind}"},
        "user_scenario": {
            "persona": None,
            "instructions": {
                "domain": "retail",
                "reason_for_call": d.reason_for_call,
                "known_info": known,
                "unknown_info": unknown,
                "task_instructions": (
                    "Give information only when the agent asks for it. Confirm with a clear "
                    "yes when the agent summarises exactly what you asked for."
                ),
            },
            "script": {
                "requests": [d.request],
                "identity": ident,
                "facts": d.facts,
                "answers": d.answers,
                "confirm": True,
                "end": "transfer" if d.transfer else "stop",
            },
        },
        "initial_state": None,
        "evaluation_criteria": {
            "actions": actions,
            "communicate_info": d.communicate,
            "nl_assertions": None,
            "reward_basis": basis,
        },
    }
    return Task.model_validate(raw)


def _signature(d: _Draft) -> str:
    return json.dumps([d.kind, d.actions[-1] if d.actions else None, d.communicate], sort_keys=True)


def _scenario_key(last_action: Any, communicate: Sequence[str]) -> str:
    """What makes two tasks the same scenario: their final gold action and the information
    to communicate (the kind is left out on purpose: it over-excludes, never under)."""
    return json.dumps([last_action, list(communicate)], sort_keys=True)


def _draft_key(d: _Draft) -> str:
    name, args = d.actions[-1] if d.actions else (None, None)
    return _scenario_key([name, args], d.communicate)


def _task_key(task: Task) -> str:
    actions = task.gold_actions
    last = [actions[-1].name, actions[-1].arguments] if actions else [None, None]
    ec = task.evaluation_criteria
    return _scenario_key(last, (ec.communicate_info or []) if ec is not None else [])


def bundled_test_tasks(data_dir: Path | None = None) -> list[Task]:
    """The ``test`` split of the bundled task file (empty when the files are absent)."""
    from pytest_quantagent.env.tasks import load_tasks

    d = data_dir or Path(__file__).resolve().parent
    tasks_path, split_path = d / "tasks.json", d / "split_tasks.json"
    if not (tasks_path.is_file() and split_path.is_file()):
        return []
    test_ids = set(json.loads(split_path.read_text(encoding="utf-8")).get("test", []))
    return [t for t in load_tasks(tasks_path) if t.id in test_ids]


def generate_tasks(
    db: RetailDB,
    seed: int,
    n: int,
    kinds: Sequence[str] | None = None,
    *,
    id_prefix: str | None = None,
    exclude: Iterable[Task] | None = None,
) -> list[Task]:
    """Draw ``n`` tasks over ``db`` (deterministic given ``seed``), cycling through ``kinds``
    (default: every kind of :data:`TASK_KINDS`) so each kind gets its share.

    Task ids are ``<id_prefix><kind>_<number>``; the default prefix ``gen<seed>_`` keeps
    them apart from the bundled ids and from other seeds' (the engine caches gold states by
    task id). Scenarios of ``exclude`` (default: the bundled ``test`` split, so training
    data drawn here never contains a test scenario) are never drawn. Within one call tasks
    are distinct as long as the DB offers enough entities; beyond that duplicates are
    allowed rather than looping forever.
    """
    chosen = list(TASK_KINDS if kinds is None else kinds)
    unknown = [k for k in chosen if k not in _BUILDERS]
    if unknown or not chosen:
        raise ValueError(
            f"unknown task kind(s) {unknown or chosen!r}; allowed kinds: {', '.join(TASK_KINDS)}"
        )
    if n < 0:
        raise ValueError(f"n={n} must be >= 0")
    prefix = f"gen{seed}_" if id_prefix is None else id_prefix
    excluded = {_task_key(t) for t in (bundled_test_tasks() if exclude is None else exclude)}
    rng = random.Random(seed)
    index = _Index(db)
    seen: set[str] = set()
    tasks: list[Task] = []
    for i in range(n):
        kind = chosen[i % len(chosen)]
        draft: _Draft | None = None
        fresh = False
        for _attempt in range(30):
            candidate = _BUILDERS[kind](index, rng)
            if candidate is None or _draft_key(candidate) in excluded:
                continue
            draft = candidate
            if _signature(candidate) not in seen:
                fresh = True
                break
        if draft is None:
            raise ValueError(f"the DB has no entity suitable for a {kind!r} task")
        if fresh:
            seen.add(_signature(draft))
        tasks.append(_to_task(draft, f"{prefix}{kind}_{i:03d}"))
    return tasks


def split_tasks(tasks: Sequence[Task], n_test: int = TEST_SHARE) -> dict[str, list[str]]:
    """``train`` / ``test`` / ``base`` splits: every ``len/n_test``-th task of each kind's
    round goes to ``test`` so both splits cover every kind."""
    if not 0 < n_test < len(tasks):
        raise ValueError(f"n_test={n_test} must be between 1 and {len(tasks) - 1}")
    step = len(tasks) / n_test
    test_idx = {int(k * step + (k % 7)) % len(tasks) for k in range(n_test)}
    k = 0
    while len(test_idx) < n_test:  # collisions of the offset: fill deterministically
        if k not in test_idx:
            test_idx.add(k)
        k += 1
    ids = [t.id for t in tasks]
    return {
        "train": [tid for i, tid in enumerate(ids) if i not in test_idx],
        "test": [tid for i, tid in enumerate(ids) if i in test_idx],
        "base": ids,
    }


_NUMBER_RUN = range(0, 2001)


def id_pool(db: RetailDB) -> set[str]:
    """Every id-like string (containing a digit) that episodes over ``db`` can show: the
    DB's ids, emails, zips, street numbers, tracking ids and card digits, every zip and
    street number :func:`generate_tasks` may draw for a new address, and whole-dollar
    amounts (``'42'``, ``'42.0'``) up to 2000 (prices, totals, balances, differences)."""
    pool: set[str] = set()

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                visit(k)
                visit(v)
        elif isinstance(value, list):
            for v in value:
                visit(v)
        elif isinstance(value, str):
            for piece in value.replace(",", " ").split():
                if any(ch.isdigit() for ch in piece):
                    pool.add(piece)
        elif isinstance(value, float) and value.is_integer():
            pool.add(str(value))

    visit(db.model_dump(mode="json"))
    for _, _, prefix in CITIES:
        pool.update(f"{prefix}{k}" for k in range(10, 100))
    for k in _NUMBER_RUN:
        pool.add(str(k))
        pool.add(f"{k}.0")
    return pool


def write_files(out_dir: Path, seed: int = DEFAULT_SEED, n_tasks: int = DEFAULT_N_TASKS) -> None:
    """Write ``db.json``, ``tasks.json`` and ``split_tasks.json`` into ``out_dir``."""
    db = generate_db(seed)
    tasks = generate_tasks(db, seed + 1, n_tasks, id_prefix="", exclude=())
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "db.json").write_text(db.model_dump_json(indent=1, exclude_none=True) + "\n", encoding="utf-8")
    task_json = [t.model_dump(mode="json", exclude_none=True) for t in tasks]
    (out_dir / "tasks.json").write_text(json.dumps(task_json, indent=1) + "\n", encoding="utf-8")
    (out_dir / "split_tasks.json").write_text(
        json.dumps(split_tasks(tasks), indent=1) + "\n", encoding="utf-8"
    )


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--tasks", type=int, default=DEFAULT_N_TASKS, help="number of tasks")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args(list(argv) if argv is not None else None)
    write_files(args.out, args.seed, args.tasks)
    print(f"wrote db.json, tasks.json, split_tasks.json ({args.tasks} tasks) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

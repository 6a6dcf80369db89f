"""The 16 retail tools on a tiny in-memory DB: every success path and every refusal, with
τ²-bench's message texts and our channel classes; copy-on-write DB copies and the hash."""

from __future__ import annotations

import importlib
import json
from types import ModuleType
from typing import Any

import pytest

from pytest_quantagent.env.db import DB
from pytest_quantagent.env.environment import Environment
from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.env.toolkit import (
    ArgumentError,
    EntityNotFoundError,
    PolicyViolationError,
    ToolError,
)
from pytest_quantagent.vocab.channels import Channel
from pytest_quantagent.vocab.messages import ToolCall


def retail_module(name: str) -> ModuleType:
    """A module of the retail domain package, loaded the way the registry loads it."""
    get_domain("retail")
    return importlib.import_module(f"pytest_quantagent_domains.retail.{name}")


dm = retail_module("data_model")
tools_mod = retail_module("tools")

CARD, GIFT, PAYPAL = "credit_card_1000001", "gift_card_1000002", "paypal_1000003"
U2_PAYPAL = "paypal_2000001"
LAMP, LAMP_RED, LAMP_BLUE, LAMP_GOLD = "1111111111", "1000000001", "1000000002", "1000000003"
MUG, MUG_S, MUG_L = "2222222222", "2000000001", "2000000002"


def _address(zip_code: str = "83701") -> dict[str, str]:
    return {"address1": "1 Harbor Way", "address2": "", "city": "Boise", "country": "USA",
            "state": "ID", "zip": zip_code}


def _line(product: str, item: str, price: float, name: str) -> dict[str, Any]:
    return {"name": name, "product_id": product, "item_id": item, "price": price,
            "options": {"color": item[-1]}}


def _order(oid: str, user: str, status: str, lines: list[dict[str, Any]],
           payments: list[tuple[str, float]]) -> dict[str, Any]:
    return {
        "order_id": oid, "user_id": user, "address": _address(), "items": lines,
        "status": status, "fulfillments": [],
        "payment_history": [
            {"transaction_type": "payment", "amount": a, "payment_method_id": m} for m, a in payments
        ],
    }


def small_db() -> Any:
    """Two products, two users and orders in every status the tools care about."""
    lamp = [_line(LAMP, LAMP_RED, 30.0, "Floor Lamp")]
    mug = [_line(MUG, MUG_S, 10.0, "Travel Mug")]
    raw = {
        "products": {
            LAMP: {"name": "Floor Lamp", "product_id": LAMP, "variants": {
                LAMP_RED: {"item_id": LAMP_RED, "options": {"color": "red"}, "available": True, "price": 30.0},
                LAMP_BLUE: {"item_id": LAMP_BLUE, "options": {"color": "blue"}, "available": True, "price": 45.0},
                LAMP_GOLD: {"item_id": LAMP_GOLD, "options": {"color": "gold"}, "available": False, "price": 50.0},
            }},
            MUG: {"name": "Travel Mug", "product_id": MUG, "variants": {
                MUG_S: {"item_id": MUG_S, "options": {"size": "small"}, "available": True, "price": 10.0},
                MUG_L: {"item_id": MUG_L, "options": {"size": "large"}, "available": True, "price": 14.0},
            }},
        },
        "users": {
            "ada_abbott_1234": {
                "user_id": "ada_abbott_1234", "name": {"first_name": "Ada", "last_name": "Abbott"},
                "address": _address("83701"), "email": "ada.abbott1234@example.com",
                "payment_methods": {
                    CARD: {"source": "credit_card", "id": CARD, "brand": "visa", "last_four": "4242"},
                    GIFT: {"source": "gift_card", "id": GIFT, "balance": 20.0},
                    PAYPAL: {"source": "paypal", "id": PAYPAL},
                },
                "orders": ["#W0000001", "#W0000002", "#W0000003", "#W0000004", "#W0000005", "#W0000006"],
            },
            "zoe_mueller_5678": {
                "user_id": "zoe_mueller_5678", "name": {"first_name": "Zoë", "last_name": "Müller"},
                "address": _address("05401"), "email": "zoe.mueller5678@example.com",
                "payment_methods": {U2_PAYPAL: {"source": "paypal", "id": U2_PAYPAL}},
                "orders": ["#W0000007"],
            },
        },
        "orders": {
            "#W0000001": _order("#W0000001", "ada_abbott_1234", "pending", lamp + mug, [(CARD, 40.0)]),
            "#W0000002": _order("#W0000002", "ada_abbott_1234", "delivered", lamp + mug, [(PAYPAL, 40.0)]),
            "#W0000003": _order("#W0000003", "ada_abbott_1234", "processed", mug, [(CARD, 10.0)]),
            "#W0000004": _order("#W0000004", "ada_abbott_1234", "pending", mug, [(GIFT, 10.0)]),
            "#W0000005": _order("#W0000005", "ada_abbott_1234", "pending (item modified)", mug,
                                [(CARD, 10.0), (CARD, 4.0)]),
            "#W0000006": _order("#W0000006", "ada_abbott_1234", "pending", lamp, [(PAYPAL, 30.0)]),
            "#W0000007": _order("#W0000007", "zoe_mueller_5678", "pending", mug, [(U2_PAYPAL, 10.0)]),
        },
    }
    return dm.RetailDB.model_validate(raw)


@pytest.fixture
def db() -> Any:
    return small_db()


@pytest.fixture
def tk(db: Any) -> Any:
    return tools_mod.RetailTools(db)


def refused(tk: Any, cls: type[ToolError], message: str, tool: str, **kwargs: Any) -> None:
    """The call raises exactly ``cls`` with τ²-bench's ``message`` and leaves the DB alone."""
    before = tk.db.get_hash()
    with pytest.raises(ToolError) as info:
        tk.call(tool, kwargs)
    assert type(info.value) is cls
    assert str(info.value) == message
    assert tk.db.get_hash() == before


# --------------------------------------------------------------------------- toolkit


def test_toolkit_has_taus_sixteen_tools() -> None:
    assert tools_mod.RetailTools.tool_names() == {
        "calculate", "cancel_pending_order", "exchange_delivered_order_items",
        "find_user_id_by_email", "find_user_id_by_name_zip", "get_item_details",
        "get_order_details", "get_product_details", "get_user_details", "list_all_product_types",
        "modify_pending_order_address", "modify_pending_order_items",
        "modify_pending_order_payment", "modify_user_address", "return_delivered_order_items",
        "transfer_to_human_agents",
    }


def test_schemas_carry_argument_names_and_descriptions() -> None:
    schemas = {s["function"]["name"]: s["function"] for s in tools_mod.RetailTools.openai_schemas()}
    params = schemas["exchange_delivered_order_items"]["parameters"]
    assert params["required"] == ["order_id", "item_ids", "new_item_ids", "payment_method_id"]
    assert params["properties"]["item_ids"]["type"] == "array"
    assert "#W0000000" in params["properties"]["order_id"]["description"]
    assert schemas["list_all_product_types"]["parameters"]["properties"] == {}


# --------------------------------------------------------------------------- calculate


@pytest.mark.parametrize(
    ("expression", "result"),
    [("2 + 2", "4.0"), ("(1 + 2) * 3 / 4", "2.25"), ("10 / 3", "3.33"), ("-5 + 2.5", "-2.5"),
     ("1166.98 - 481.5", "685.48"), ("466.75+285.66+135.24+46.66+193.38", "1127.69")],
)
def test_calculate(tk: Any, expression: str, result: str) -> None:
    # The last two are real gpt-4.1 calls; their recorded τ²-bench results are the expected ones.
    assert tk.calculate(expression) == result


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "Invalid characters in expression"),
        ("2 ** 3", "Unsupported operation in expression '2 ** 3': only numbers, parentheses and + - * / are allowed"),
        ("7 // 2", "Unsupported operation in expression '7 // 2': only numbers, parentheses and + - * / are allowed"),
        ("1 / (2 - 2)", "division by zero"),
        ("2 +", "Invalid expression: '2 +'"),
        ("", "Invalid expression: ''"),
    ],
)
def test_calculate_refuses_everything_but_arithmetic(tk: Any, expression: str, message: str) -> None:
    refused(tk, ArgumentError, message, "calculate", expression=expression)


def test_calculate_reports_integers_too_large_for_a_float(tk: Any) -> None:
    refused(tk, ArgumentError, "int too large to convert to float", "calculate", expression="9" * 400 + "*2")


def test_calculate_bounds_expression_length(tk: Any) -> None:
    with pytest.raises(ArgumentError, match="Expression too long: 1001 characters"):
        tk.calculate("1" * 1001)


# --------------------------------------------------------------------------- lookups


def test_find_user_by_email_ignores_case(tk: Any) -> None:
    assert tk.find_user_id_by_email("ADA.Abbott1234@example.com") == "ada_abbott_1234"
    refused(tk, EntityNotFoundError, "User not found", "find_user_id_by_email", email="nobody@example.com")


def test_find_user_by_name_zip_ignores_case_and_accents(tk: Any) -> None:
    assert tk.find_user_id_by_name_zip("ada", "ABBOTT", "83701") == "ada_abbott_1234"
    assert tk.find_user_id_by_name_zip("Zoe", "Muller", "05401") == "zoe_mueller_5678"
    refused(tk, EntityNotFoundError, "User not found", "find_user_id_by_name_zip",
            first_name="Ada", last_name="Abbott", zip="05401")


def test_get_details_return_models_and_unknown_ids_are_wrong_entities(tk: Any) -> None:
    assert tk.get_order_details("#W0000001").status == "pending"
    assert tk.get_user_details("ada_abbott_1234").orders[0] == "#W0000001"
    assert set(tk.get_product_details(LAMP).variants) == {LAMP_RED, LAMP_BLUE, LAMP_GOLD}
    assert tk.get_item_details(MUG_L).price == 14.0
    refused(tk, EntityNotFoundError, "Order not found", "get_order_details", order_id="W0000001")
    refused(tk, EntityNotFoundError, "User not found", "get_user_details", user_id="ada")
    refused(tk, EntityNotFoundError, "Product not found", "get_product_details", product_id=LAMP_RED)
    refused(tk, EntityNotFoundError, "Item not found", "get_item_details", item_id=LAMP)


def test_list_all_product_types_is_json_sorted_by_name(tk: Any) -> None:
    out = tk.list_all_product_types()
    assert out == json.dumps({"Floor Lamp": LAMP, "Travel Mug": MUG})
    assert list(json.loads(out)) == ["Floor Lamp", "Travel Mug"]


def test_transfer(tk: Any) -> None:
    assert tk.transfer_to_human_agents("user wants a human") == "Transfer successful"


# --------------------------------------------------------------------------- cancel


def test_cancel_refunds_every_payment_and_gift_cards_at_once(tk: Any) -> None:
    order = tk.cancel_pending_order("#W0000004", "no longer needed")
    assert order.status == "cancelled" and order.cancel_reason == "no longer needed"
    assert [(p.transaction_type, p.amount, p.payment_method_id) for p in order.payment_history] == [
        ("payment", 10.0, GIFT), ("refund", 10.0, GIFT)]
    assert tk.db.users["ada_abbott_1234"].payment_methods[GIFT].balance == 30.0
    tk.cancel_pending_order("#W0000001", "ordered by mistake")
    assert tk.db.orders["#W0000001"].payment_history[-1].payment_method_id == CARD


def test_cancel_refusals(tk: Any) -> None:
    refused(tk, EntityNotFoundError, "Order not found", "cancel_pending_order",
            order_id="#W9999999", reason="no longer needed")
    for oid in ("#W0000002", "#W0000003", "#W0000005"):
        refused(tk, PolicyViolationError, "Non-pending order cannot be cancelled",
                "cancel_pending_order", order_id=oid, reason="no longer needed")
    refused(tk, ArgumentError, "Invalid reason", "cancel_pending_order",
            order_id="#W0000001", reason="found it cheaper")


# --------------------------------------------------------------------------- modify pending


def test_modify_address_accepts_any_pending_status(tk: Any) -> None:
    new = {"address1": "9 Quarry Road", "address2": "Apt 2", "city": "Reno", "state": "NV",
           "country": "USA", "zip": "89501"}
    assert tk.modify_pending_order_address("#W0000005", **new).address.city == "Reno"
    assert tk.modify_pending_order_address("#W0000001", **new).address.zip == "89501"
    refused(tk, PolicyViolationError, "Non-pending order cannot be modified",
            "modify_pending_order_address", order_id="#W0000002", **new)
    refused(tk, EntityNotFoundError, "Order not found", "modify_pending_order_address",
            order_id="#W0", **new)


def test_modify_payment_moves_gift_card_money_both_ways(tk: Any) -> None:
    order = tk.modify_pending_order_payment("#W0000004", CARD)
    assert [(p.transaction_type, p.amount, p.payment_method_id) for p in order.payment_history] == [
        ("payment", 10.0, GIFT), ("payment", 10.0, CARD), ("refund", 10.0, GIFT)]
    assert tk.db.users["ada_abbott_1234"].payment_methods[GIFT].balance == 30.0


def test_modify_payment_to_gift_card_charges_it(tk: Any, db: Any) -> None:
    db.users["ada_abbott_1234"].payment_methods[GIFT].balance = 45.0
    tk.modify_pending_order_payment("#W0000001", GIFT)
    assert db.users["ada_abbott_1234"].payment_methods[GIFT].balance == 5.0


def test_modify_payment_refusals(tk: Any) -> None:
    refused(tk, PolicyViolationError, "Non-pending order cannot be modified",
            "modify_pending_order_payment", order_id="#W0000003", payment_method_id=PAYPAL)
    refused(tk, EntityNotFoundError, "Payment method not found",
            "modify_pending_order_payment", order_id="#W0000001", payment_method_id=U2_PAYPAL)
    refused(tk, PolicyViolationError, "There should be exactly one payment for a pending order",
            "modify_pending_order_payment", order_id="#W0000005", payment_method_id=PAYPAL)
    refused(tk, ArgumentError, "The new payment method should be different from the current one",
            "modify_pending_order_payment", order_id="#W0000001", payment_method_id=CARD)
    refused(tk, PolicyViolationError, "Insufficient gift card balance to pay for the order",
            "modify_pending_order_payment", order_id="#W0000001", payment_method_id=GIFT)


def test_modify_items_charges_the_difference(tk: Any) -> None:
    order = tk.modify_pending_order_items("#W0000004", [MUG_S], [MUG_L], GIFT)
    assert order.status == "pending (item modified)"
    assert (order.items[0].item_id, order.items[0].price, order.items[0].options) == (
        MUG_L, 14.0, {"size": "large"})
    assert order.payment_history[-1].model_dump() == {
        "transaction_type": "payment", "amount": 4.0, "payment_method_id": GIFT}
    assert tk.db.users["ada_abbott_1234"].payment_methods[GIFT].balance == 16.0


def test_modify_items_cheaper_item_is_a_refund(tk: Any, db: Any) -> None:
    db.orders["#W0000006"].items[0].item_id = LAMP_BLUE
    db.orders["#W0000006"].items[0].price = 45.0
    order = tk.modify_pending_order_items("#W0000006", [LAMP_BLUE], [LAMP_RED], PAYPAL)
    assert order.payment_history[-1].model_dump() == {
        "transaction_type": "refund", "amount": 15.0, "payment_method_id": PAYPAL}


def test_modify_items_gives_every_line_the_last_new_items_price_and_options(tk: Any) -> None:
    # τ²-bench's quirk, kept so replays and DB hashes agree with τ²-bench's results.
    order = tk.modify_pending_order_items("#W0000001", [LAMP_RED, MUG_S], [LAMP_BLUE, MUG_L], CARD)
    assert [(i.item_id, i.price, i.options) for i in order.items] == [
        (LAMP_BLUE, 14.0, {"size": "large"}), (MUG_L, 14.0, {"size": "large"})]
    assert order.payment_history[-1].amount == 19.0


def test_modify_items_refusals(tk: Any) -> None:
    base = {"order_id": "#W0000001", "payment_method_id": CARD}
    refused(tk, PolicyViolationError, "Non-pending order cannot be modified",
            "modify_pending_order_items", order_id="#W0000005", item_ids=[MUG_S],
            new_item_ids=[MUG_L], payment_method_id=CARD)
    refused(tk, EntityNotFoundError, f"{MUG_L} not found", "modify_pending_order_items",
            item_ids=[MUG_L], new_item_ids=[MUG_S], **base)
    refused(tk, EntityNotFoundError, f"{MUG_S} not found", "modify_pending_order_items",
            item_ids=[MUG_S, MUG_S], new_item_ids=[MUG_L, MUG_L], **base)
    refused(tk, ArgumentError, "The number of items to be exchanged should match",
            "modify_pending_order_items", item_ids=[MUG_S], new_item_ids=[], **base)
    refused(tk, ArgumentError, "The new item id should be different from the old item id",
            "modify_pending_order_items", item_ids=[MUG_S], new_item_ids=[MUG_S], **base)
    refused(tk, EntityNotFoundError, "Variant not found", "modify_pending_order_items",
            item_ids=[MUG_S], new_item_ids=[LAMP_BLUE], **base)
    refused(tk, PolicyViolationError, f"New item {LAMP_GOLD} not found or available",
            "modify_pending_order_items", item_ids=[LAMP_RED], new_item_ids=[LAMP_GOLD], **base)
    refused(tk, EntityNotFoundError, "Payment method not found", "modify_pending_order_items",
            order_id="#W0000001", item_ids=[MUG_S], new_item_ids=[MUG_L], payment_method_id="gift_card_0")
    refused(tk, EntityNotFoundError, "Order not found", "modify_pending_order_items",
            order_id="#W1", item_ids=[], new_item_ids=[], payment_method_id=CARD)


def test_modify_items_gift_card_must_cover_the_difference(db: Any) -> None:
    db.users["ada_abbott_1234"].payment_methods[GIFT].balance = 14.0
    refused(tools_mod.RetailTools(db), PolicyViolationError,
            "Insufficient gift card balance to pay for the new item", "modify_pending_order_items",
            order_id="#W0000006", item_ids=[LAMP_RED], new_item_ids=[LAMP_BLUE], payment_method_id=GIFT)


def test_modify_user_address(tk: Any) -> None:
    new = {"address1": "5 Copper Lane", "address2": "", "city": "Tulsa", "state": "OK",
           "country": "USA", "zip": "74103"}
    assert tk.modify_user_address("zoe_mueller_5678", **new).address.zip == "74103"
    assert tk.db.orders["#W0000007"].address.zip == "83701"  # orders keep their address
    refused(tk, EntityNotFoundError, "User not found", "modify_user_address", user_id="zoe", **new)


# --------------------------------------------------------------------------- delivered


def test_return_to_original_method_or_gift_card(tk: Any, db: Any) -> None:
    order = tk.return_delivered_order_items("#W0000002", [MUG_S, LAMP_RED], PAYPAL)
    assert order.status == "return requested"
    assert order.return_items == sorted([MUG_S, LAMP_RED])
    assert order.return_payment_method_id == PAYPAL
    fresh = tools_mod.RetailTools(small_db())
    assert fresh.return_delivered_order_items("#W0000002", [MUG_S], GIFT).return_payment_method_id == GIFT


def test_return_refusals(tk: Any) -> None:
    refused(tk, PolicyViolationError, "Non-delivered order cannot be returned",
            "return_delivered_order_items", order_id="#W0000001", item_ids=[MUG_S], payment_method_id=CARD)
    refused(tk, PolicyViolationError, "Payment method should be the original payment method",
            "return_delivered_order_items", order_id="#W0000002", item_ids=[MUG_S], payment_method_id=CARD)
    refused(tk, EntityNotFoundError, "Payment method not found", "return_delivered_order_items",
            order_id="#W0000002", item_ids=[MUG_S], payment_method_id=U2_PAYPAL)
    refused(tk, EntityNotFoundError, "Some item not found", "return_delivered_order_items",
            order_id="#W0000002", item_ids=[MUG_L], payment_method_id=PAYPAL)
    refused(tk, EntityNotFoundError, "Order not found", "return_delivered_order_items",
            order_id="#W0000099", item_ids=[MUG_S], payment_method_id=PAYPAL)


def test_exchange_records_the_request(tk: Any) -> None:
    order = tk.exchange_delivered_order_items("#W0000002", [MUG_S, LAMP_RED], [MUG_L, LAMP_BLUE], GIFT)
    assert order.status == "exchange requested"
    assert order.exchange_items == sorted([MUG_S, LAMP_RED])
    assert order.exchange_new_items == sorted([MUG_L, LAMP_BLUE])
    assert order.exchange_price_difference == 19.0
    assert order.exchange_payment_method_id == GIFT
    # The difference is only recorded; no money moves yet.
    assert tk.db.users["ada_abbott_1234"].payment_methods[GIFT].balance == 20.0


def test_exchange_refusals(tk: Any) -> None:
    base = {"order_id": "#W0000002", "payment_method_id": PAYPAL}
    refused(tk, PolicyViolationError, "Non-delivered order cannot be exchanged",
            "exchange_delivered_order_items", order_id="#W0000003", item_ids=[MUG_S],
            new_item_ids=[MUG_L], payment_method_id=CARD)
    refused(tk, EntityNotFoundError, f"Number of {MUG_L} not found.",
            "exchange_delivered_order_items", item_ids=[MUG_L], new_item_ids=[MUG_S], **base)
    refused(tk, ArgumentError, "The number of items to be exchanged should match.",
            "exchange_delivered_order_items", item_ids=[MUG_S], new_item_ids=[], **base)
    refused(tk, EntityNotFoundError, "Variant not found", "exchange_delivered_order_items",
            item_ids=[MUG_S], new_item_ids=[LAMP_RED], **base)
    refused(tk, PolicyViolationError, f"New item {LAMP_GOLD} not found or available",
            "exchange_delivered_order_items", item_ids=[LAMP_RED], new_item_ids=[LAMP_GOLD], **base)
    refused(tk, EntityNotFoundError, "Payment method not found", "exchange_delivered_order_items",
            order_id="#W0000002", item_ids=[MUG_S], new_item_ids=[MUG_L], payment_method_id="paypal_9")
    refused(tk, EntityNotFoundError, "Order not found", "exchange_delivered_order_items",
            order_id="#W0000000", item_ids=[MUG_S], new_item_ids=[MUG_L], payment_method_id=PAYPAL)


def test_exchange_gift_card_must_cover_the_difference(db: Any) -> None:
    db.users["ada_abbott_1234"].payment_methods[GIFT].balance = 18.0
    tk = tools_mod.RetailTools(db)
    refused(tk, PolicyViolationError, "Insufficient gift card balance to pay for the price difference",
            "exchange_delivered_order_items", order_id="#W0000002", item_ids=[LAMP_RED, MUG_S],
            new_item_ids=[LAMP_BLUE, MUG_L], payment_method_id=GIFT)


# --------------------------------------------------------------------------- engine channels


@pytest.mark.parametrize(
    ("name", "arguments", "channel", "content"),
    [
        ("get_order_details", {"order_id": "#W404"}, Channel.WRONG_ENTITY, "Error: Order not found"),
        ("cancel_pending_order", {"order_id": "#W0000002", "reason": "no longer needed"},
         Channel.POLICY_VIOLATION, "Error: Non-pending order cannot be cancelled"),
        ("cancel_pending_order", {"order_id": "#W0000001", "reason": "meh"},
         Channel.BAD_ARGUMENTS, "Error: Invalid reason"),
        ("get_order_details", {"order": "#W0000001"}, Channel.BAD_ARGUMENTS, None),
        ("cancel_order", {"order_id": "#W0000001"}, Channel.UNKNOWN_TOOL,
         "Error: Tool 'cancel_order' not found."),
    ],
)
def test_engine_classifies_retail_failures(
    db: Any, name: str, arguments: dict[str, Any], channel: Channel, content: str | None
) -> None:
    env = Environment(get_domain("retail"), db)
    d = env.execute(ToolCall(id="c1", name=name, arguments=arguments, requestor="assistant"))
    assert d.channel == channel and d.message.error
    if content is not None:
        assert d.message.content == content


def test_engine_serializes_orders_like_tau2(db: Any) -> None:
    env = Environment(get_domain("retail"), db)
    msg = env.get_response(ToolCall(id="c1", name="get_order_details",
                                    arguments={"order_id": "#W0000003"}, requestor="assistant"))
    data = json.loads(msg.content)
    assert list(data)[-7:] == ["cancel_reason", "exchange_items", "exchange_new_items",
                               "exchange_payment_method_id", "exchange_price_difference",
                               "return_items", "return_payment_method_id"]
    assert data["return_items"] is None and msg.content.startswith('{"order_id": "#W0000003"')


# --------------------------------------------------------------------------- DB copies


WRITES: list[tuple[str, dict[str, Any]]] = [
    ("cancel_pending_order", {"order_id": "#W0000004", "reason": "no longer needed"}),
    ("modify_pending_order_payment", {"order_id": "#W0000004", "payment_method_id": CARD}),
    ("modify_pending_order_items", {"order_id": "#W0000004", "item_ids": [MUG_S],
                                    "new_item_ids": [MUG_L], "payment_method_id": GIFT}),
    ("modify_pending_order_address", {"order_id": "#W0000001", **_address("11111")}),
    ("modify_user_address", {"user_id": "ada_abbott_1234", **_address("22222")}),
    ("return_delivered_order_items", {"order_id": "#W0000002", "item_ids": [MUG_S], "payment_method_id": GIFT}),
    ("exchange_delivered_order_items", {"order_id": "#W0000002", "item_ids": [MUG_S],
                                        "new_item_ids": [MUG_L], "payment_method_id": GIFT}),
]


@pytest.mark.parametrize(("name", "arguments"), WRITES, ids=[w[0] for w in WRITES])
def test_copies_are_independent_and_hash_like_the_base_db(name: str, arguments: dict[str, Any]) -> None:
    source = small_db()
    pristine = source.canonical_json()
    copy = source.copy_fresh()
    assert copy.get_hash() == source.get_hash()
    tools_mod.RetailTools(copy).call(name, arguments)
    assert source.canonical_json() == pristine, "a write through a copy leaked into its source"
    # The cached canonical JSON equals the base class's full serialization.
    assert copy.canonical_json() == DB.canonical_json(copy)
    assert copy.get_hash() != source.get_hash()
    second = copy.copy_fresh()
    assert second.get_hash() == copy.get_hash()
    tools_mod.RetailTools(copy).call("modify_user_address", {"user_id": "ada_abbott_1234", **_address("33333")})
    assert second.users["ada_abbott_1234"].address.zip != "33333"
    assert second.canonical_json() == DB.canonical_json(second)


def test_extra_fields_are_refused_by_name() -> None:
    raw = json.loads(small_db().model_dump_json())
    raw["orders"]["#W0000001"]["gift_wrap"] = True
    with pytest.raises(ValueError, match="gift_wrap"):
        dm.RetailDB.model_validate(raw)

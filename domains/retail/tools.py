"""The 16 retail agent tools, with τ²-bench's names, arguments, results and error texts.

Behaviour (including τ²-bench's quirks) is reproduced on purpose, because the fidelity
replay re-executes real τ²-bench trajectories on this toolkit and compares every result:

- ``modify_pending_order_items`` gives *every* modified line the price and options of the
  last new item in the list, and records the unrounded price difference.
- ``exchange_delivered_order_items`` accepts a new item equal to the old one.
- ``modify_pending_order_address`` / ``modify_pending_order_payment`` accept any status that
  contains "pending"; cancel and item modification require exactly "pending".

Each refusal raises the :mod:`pytest_quantagent.env.toolkit` error class of its channel with
τ²-bench's message: unknown ids → :class:`EntityNotFoundError`, business rules →
:class:`PolicyViolationError`, argument values no call could satisfy → :class:`ArgumentError`.
"""

from __future__ import annotations

import ast
import functools
import json
import operator
import unicodedata
from collections.abc import Callable

from pytest_quantagent.env.toolkit import (
    ArgumentError,
    EntityNotFoundError,
    PolicyViolationError,
    Toolkit,
    ToolType,
    is_tool,
)

from .data_model import (
    CANCEL_REASONS,
    GiftCard,
    Order,
    OrderPayment,
    PaymentMethod,
    Product,
    RetailDB,
    User,
    UserAddress,
    Variant,
)

_Number = int | float
_BINARY_OPS: dict[type[ast.operator], Callable[[_Number, _Number], _Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_UNARY_OPS: dict[type[ast.unaryop], Callable[[_Number], _Number]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_CALC_CHARS = frozenset("0123456789+-*/(). ")
_MAX_EXPRESSION_CHARS = 1000


@functools.lru_cache(maxsize=4096)
def _fold(text: str) -> str:
    """Case- and accent-insensitive form of a name or email, for identification lookups."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


def evaluate_arithmetic(expression: str) -> float:
    """Evaluate ``expression`` made only of numbers, parentheses and ``+ - * /``.

    Walks the parsed syntax tree and refuses every other node, so model output is never
    executed. Raises :class:`ArgumentError` for other characters, bad syntax, operators
    outside the four (``**``, ``//``) and division by zero.
    """
    if not all(ch in _CALC_CHARS for ch in expression):
        raise ArgumentError("Invalid characters in expression")
    if len(expression) > _MAX_EXPRESSION_CHARS:
        raise ArgumentError(
            f"Expression too long: {len(expression)} characters (at most {_MAX_EXPRESSION_CHARS})"
        )
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ArgumentError(f"Invalid expression: {expression!r}") from None

    # Integers stay integers until the end (as in Python arithmetic), so results agree with
    # τ²-bench's to the last digit.
    def walk(node: ast.AST) -> _Number:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            if isinstance(node.value, bool):  # True/False cannot be written with our characters
                raise ArgumentError(f"Invalid expression: {expression!r}")
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ArgumentError("division by zero")
            return _BINARY_OPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
            return _UNARY_OPS[type(node.op)](walk(node.operand))
        raise ArgumentError(
            f"Unsupported operation in expression {expression!r}: only numbers, parentheses "
            "and + - * / are allowed"
        )

    try:
        return float(walk(tree))
    except OverflowError as e:  # an integer too large for a float, as τ²-bench reports it
        raise ArgumentError(str(e)) from None


class RetailTools(Toolkit):
    """The retail agent toolkit bound to one :class:`RetailDB`."""

    db: RetailDB

    def __init__(self, db: RetailDB) -> None:
        super().__init__(db)

    # ------------------------------------------------------------------ lookups

    def _get_order(self, order_id: str) -> Order:
        order = self.db.orders.get(order_id)
        if order is None:
            raise EntityNotFoundError("Order not found", entity=order_id)
        return order

    def _order_for_update(self, order_id: str) -> Order:
        """The order (and its user) as this DB's own copies, ready to be changed."""
        order = self._get_order(order_id)
        self.db.own_order(order_id)
        self.db.own_user(order.user_id)
        return self.db.orders[order_id]

    def _get_user(self, user_id: str) -> User:
        user = self.db.users.get(user_id)
        if user is None:
            raise EntityNotFoundError("User not found", entity=user_id)
        return user

    def _get_product(self, product_id: str) -> Product:
        product = self.db.products.get(product_id)
        if product is None:
            raise EntityNotFoundError("Product not found", entity=product_id)
        return product

    def _get_variant(self, product_id: str, item_id: str) -> Variant:
        variant = self._get_product(product_id).variants.get(item_id)
        if variant is None:
            raise EntityNotFoundError("Variant not found", entity=item_id)
        return variant

    def _get_payment_method(self, user_id: str, payment_method_id: str) -> PaymentMethod:
        method = self._get_user(user_id).payment_methods.get(payment_method_id)
        if method is None:
            raise EntityNotFoundError("Payment method not found", entity=payment_method_id)
        return method

    @staticmethod
    def _first_missing(requested: list[str], order: Order) -> str | None:
        """The first requested item id that occurs more often than in the order, if any."""
        in_order = [line.item_id for line in order.items]
        for item_id in requested:
            if requested.count(item_id) > in_order.count(item_id):
                return item_id
        return None

    # ------------------------------------------------------------------ tools

    @is_tool(ToolType.THINK)
    def calculate(self, expression: str) -> str:
        """Calculate the result of an arithmetic expression.

        Args:
            expression: The expression, such as '2 + 2'. It may contain numbers, the operators + - * /, parentheses and spaces.
        """
        return str(round(evaluate_arithmetic(expression), 2))

    @is_tool(ToolType.WRITE)
    def cancel_pending_order(self, order_id: str, reason: str) -> Order:
        """Cancel a pending order (not one already processed or delivered). Explain the details and get an explicit 'yes' from the user first. Gift card payments are refunded at once, others in 5-7 business days. Returns the order after cancellation.

        Args:
            order_id: The order id, such as '#W0000000' (it starts with '#').
            reason: Why the order is cancelled: either 'no longer needed' or 'ordered by mistake'.
        """
        order = self._order_for_update(order_id)
        if order.status != "pending":
            raise PolicyViolationError("Non-pending order cannot be cancelled", entity=order_id)
        if reason not in CANCEL_REASONS:
            raise ArgumentError("Invalid reason", entity=reason)
        refunds: list[OrderPayment] = []
        for payment in order.payment_history:
            refunds.append(
                OrderPayment(
                    transaction_type="refund",
                    amount=payment.amount,
                    payment_method_id=payment.payment_method_id,
                )
            )
            method = self._get_payment_method(order.user_id, payment.payment_method_id)
            if isinstance(method, GiftCard):
                method.balance = round(method.balance + payment.amount, 2)
        order.status = "cancelled"
        order.cancel_reason = reason
        order.payment_history.extend(refunds)
        return order

    @is_tool(ToolType.WRITE)
    def exchange_delivered_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> Order:
        """Exchange items of a delivered order for other items of the same product. Only one return or exchange per delivered order. Explain the details and get an explicit 'yes' from the user first.

        Args:
            order_id: The order id, such as '#W0000000' (it starts with '#').
            item_ids: The item ids to exchange, each such as '1008292230'. May contain duplicates.
            new_item_ids: The new item ids, each such as '1008292230', in the same positions as item_ids and of the same product. May contain duplicates.
            payment_method_id: The payment method that pays or receives the price difference, such as 'gift_card_0000000' or 'credit_card_0000000' (see the user or order details).
        """
        order = self._order_for_update(order_id)
        if order.status != "delivered":
            raise PolicyViolationError("Non-delivered order cannot be exchanged", entity=order_id)
        missing = self._first_missing(item_ids, order)
        if missing is not None:
            raise EntityNotFoundError(f"Number of {missing} not found.", entity=missing)
        if len(item_ids) != len(new_item_ids):
            raise ArgumentError("The number of items to be exchanged should match.")
        diff_price = 0.0
        for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
            line = next(line for line in order.items if line.item_id == item_id)
            variant = self._get_variant(line.product_id, new_item_id)
            if not variant.available:
                raise PolicyViolationError(
                    f"New item {new_item_id} not found or available", entity=new_item_id
                )
            diff_price += variant.price - line.price
        diff_price = round(diff_price, 2)
        method = self._get_payment_method(order.user_id, payment_method_id)
        if isinstance(method, GiftCard) and method.balance < diff_price:
            raise PolicyViolationError(
                "Insufficient gift card balance to pay for the price difference",
                entity=payment_method_id,
            )
        order.status = "exchange requested"
        order.exchange_items = sorted(item_ids)
        order.exchange_new_items = sorted(new_item_ids)
        order.exchange_payment_method_id = payment_method_id
        order.exchange_price_difference = diff_price
        return order

    @is_tool(ToolType.READ)
    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        """Find a user id by first name, last name and zip code. Prefer find_user_id_by_email; use this only when the user cannot give their email or it is not found.

        Args:
            first_name: The customer's first name, such as 'John'.
            last_name: The customer's last name, such as 'Doe'.
            zip: The customer's zip code, such as '12345'.
        """
        first, last = _fold(first_name), _fold(last_name)
        for user_id, user in self.db.users.items():
            if (
                _fold(user.name.first_name) == first
                and _fold(user.name.last_name) == last
                and user.address.zip == zip
            ):
                return user_id
        raise EntityNotFoundError("User not found", entity=f"{first_name} {last_name} {zip}")

    @is_tool(ToolType.READ)
    def find_user_id_by_email(self, email: str) -> str:
        """Find a user id by email.

        Args:
            email: The user's email, such as 'something@example.com'.
        """
        wanted = _fold(email)
        for user_id, user in self.db.users.items():
            if _fold(user.email) == wanted:
                return user_id
        raise EntityNotFoundError("User not found", entity=email)

    @is_tool(ToolType.READ)
    def get_order_details(self, order_id: str) -> Order:
        """Get the status and details of an order.

        Args:
            order_id: The order id, such as '#W0000000' (it starts with '#').
        """
        return self._get_order(order_id)

    @is_tool(ToolType.READ)
    def get_product_details(self, product_id: str) -> Product:
        """Get the inventory details of a product: its variant items with options, availability and price.

        Args:
            product_id: The product id, such as '6086499569'. A product id is not an item id.
        """
        return self._get_product(product_id)

    @is_tool(ToolType.READ)
    def get_item_details(self, item_id: str) -> Variant:
        """Get the inventory details of one item.

        Args:
            item_id: The item id, such as '6086499569'. An item id is not a product id.
        """
        for product in self.db.products.values():
            variant = product.variants.get(item_id)
            if variant is not None:
                return variant
        raise EntityNotFoundError("Item not found", entity=item_id)

    @is_tool(ToolType.READ)
    def get_user_details(self, user_id: str) -> User:
        """Get the details of a user: address, email, payment methods and order ids.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
        """
        return self._get_user(user_id)

    @is_tool(ToolType.READ)
    def list_all_product_types(self) -> str:
        """List the name and product id of every product type, as a JSON object sorted by name. Each product has several items (variants) with their own item ids and options."""
        names = {product.name: product.product_id for product in self.db.products.values()}
        return json.dumps(names, sort_keys=True)

    @is_tool(ToolType.WRITE)
    def modify_pending_order_address(
        self,
        order_id: str,
        address1: str,
        address2: str,
        city: str,
        state: str,
        country: str,
        zip: str,
    ) -> Order:
        """Change the shipping address of a pending order. Explain the details and get an explicit 'yes' from the user first.

        Args:
            order_id: The order id, such as '#W0000000' (it starts with '#').
            address1: The first address line, such as '123 Main St'.
            address2: The second address line, such as 'Apt 1' or ''.
            city: The city, such as 'San Francisco'.
            state: The state, such as 'CA'.
            country: The country, such as 'USA'.
            zip: The zip code, such as '12345'.
        """
        order = self._order_for_update(order_id)
        if "pending" not in order.status:
            raise PolicyViolationError("Non-pending order cannot be modified", entity=order_id)
        order.address = UserAddress(
            address1=address1, address2=address2, city=city, state=state, country=country, zip=zip
        )
        return order

    @is_tool(ToolType.WRITE)
    def modify_pending_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> Order:
        """Change items of a pending order to other items of the same product. Can be done only once per order. Explain the details and get an explicit 'yes' from the user first.

        Args:
            order_id: The order id, such as '#W0000000' (it starts with '#').
            item_ids: The item ids to change, each such as '1008292230'. May contain duplicates.
            new_item_ids: The new item ids, each such as '1008292230', in the same positions as item_ids and of the same product. May contain duplicates.
            payment_method_id: The payment method that pays or receives the price difference, such as 'gift_card_0000000' or 'credit_card_0000000' (see the user or order details).
        """
        order = self._order_for_update(order_id)
        if order.status != "pending":
            raise PolicyViolationError("Non-pending order cannot be modified", entity=order_id)
        missing = self._first_missing(item_ids, order)
        if missing is not None:
            raise EntityNotFoundError(f"{missing} not found", entity=missing)
        if len(item_ids) != len(new_item_ids):
            raise ArgumentError("The number of items to be exchanged should match")
        diff_price = 0.0
        variant: Variant | None = None
        for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
            if item_id == new_item_id:
                raise ArgumentError(
                    "The new item id should be different from the old item id", entity=item_id
                )
            line = next(line for line in order.items if line.item_id == item_id)
            variant = self._get_variant(line.product_id, new_item_id)
            if not variant.available:
                raise PolicyViolationError(
                    f"New item {new_item_id} not found or available", entity=new_item_id
                )
            diff_price += variant.price - line.price
        method = self._get_payment_method(order.user_id, payment_method_id)
        if isinstance(method, GiftCard) and method.balance < diff_price:
            raise PolicyViolationError(
                "Insufficient gift card balance to pay for the new item", entity=payment_method_id
            )
        order.payment_history.append(
            OrderPayment(
                transaction_type="payment" if diff_price > 0 else "refund",
                amount=abs(diff_price),
                payment_method_id=payment_method_id,
            )
        )
        if isinstance(method, GiftCard):
            method.balance = round(method.balance - diff_price, 2)
        for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
            line = next(line for line in order.items if line.item_id == item_id)
            line.item_id = new_item_id
            # τ²-bench applies the last new item's price and options to every changed line;
            # reproduced so that replayed trajectories give the same results and DB hashes.
            assert variant is not None
            line.price = variant.price
            line.options = dict(variant.options)
        order.status = "pending (item modified)"
        return order

    @is_tool(ToolType.WRITE)
    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> Order:
        """Change the payment method of a pending order. Explain the details and get an explicit 'yes' from the user first.

        Args:
            order_id: The order id, such as '#W0000000' (it starts with '#').
            payment_method_id: The new payment method, such as 'gift_card_0000000' or 'credit_card_0000000' (see the user or order details).
        """
        order = self._order_for_update(order_id)
        if "pending" not in order.status:
            raise PolicyViolationError("Non-pending order cannot be modified", entity=order_id)
        method = self._get_payment_method(order.user_id, payment_method_id)
        history = order.payment_history
        if len(history) != 1 or history[0].transaction_type != "payment":
            raise PolicyViolationError(
                "There should be exactly one payment for a pending order", entity=order_id
            )
        old_id = history[0].payment_method_id
        if old_id == payment_method_id:
            raise ArgumentError(
                "The new payment method should be different from the current one",
                entity=payment_method_id,
            )
        amount = history[0].amount
        if isinstance(method, GiftCard) and method.balance < amount:
            raise PolicyViolationError(
                "Insufficient gift card balance to pay for the order", entity=payment_method_id
            )
        history.append(
            OrderPayment(transaction_type="payment", amount=amount, payment_method_id=payment_method_id)
        )
        history.append(
            OrderPayment(transaction_type="refund", amount=amount, payment_method_id=old_id)
        )
        if isinstance(method, GiftCard):
            method.balance = round(method.balance - amount, 2)
        old_method = self._get_payment_method(order.user_id, old_id)
        if isinstance(old_method, GiftCard):
            old_method.balance = round(old_method.balance + amount, 2)
        return order

    @is_tool(ToolType.WRITE)
    def modify_user_address(
        self,
        user_id: str,
        address1: str,
        address2: str,
        city: str,
        state: str,
        country: str,
        zip: str,
    ) -> User:
        """Change the default address of a user. Explain the details and get an explicit 'yes' from the user first.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
            address1: The first address line, such as '123 Main St'.
            address2: The second address line, such as 'Apt 1' or ''.
            city: The city, such as 'San Francisco'.
            state: The state, such as 'CA'.
            country: The country, such as 'USA'.
            zip: The zip code, such as '12345'.
        """
        self._get_user(user_id)
        self.db.own_user(user_id)
        user = self.db.users[user_id]
        user.address = UserAddress(
            address1=address1, address2=address2, city=city, state=state, country=country, zip=zip
        )
        return user

    @is_tool(ToolType.WRITE)
    def return_delivered_order_items(
        self, order_id: str, item_ids: list[str], payment_method_id: str
    ) -> Order:
        """Request the return of items of a delivered order; its status becomes 'return requested' and the user gets an email on how to send them back. Explain the details and get an explicit 'yes' from the user first.

        Args:
            order_id: The order id, such as '#W0000000' (it starts with '#').
            item_ids: The item ids to return, each such as '1008292230'. May contain duplicates.
            payment_method_id: The payment method that receives the refund: the original payment method or a gift card, such as 'gift_card_0000000' or 'credit_card_0000000'.
        """
        order = self._order_for_update(order_id)
        if order.status != "delivered":
            raise PolicyViolationError("Non-delivered order cannot be returned", entity=order_id)
        method = self._get_payment_method(order.user_id, payment_method_id)
        if (
            not isinstance(method, GiftCard)
            and payment_method_id != order.payment_history[0].payment_method_id
        ):
            raise PolicyViolationError(
                "Payment method should be the original payment method", entity=payment_method_id
            )
        missing = self._first_missing(item_ids, order)
        if missing is not None:
            raise EntityNotFoundError("Some item not found", entity=missing)
        order.status = "return requested"
        order.return_items = sorted(item_ids)
        order.return_payment_method_id = payment_method_id
        return order

    @is_tool(ToolType.GENERIC)
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the user to a human agent with a summary of their issue. Transfer only if the user explicitly asks for a human, or if the policy and the tools do not let you solve the issue.

        Args:
            summary: A summary of the user's issue.
        """
        return "Transfer successful"

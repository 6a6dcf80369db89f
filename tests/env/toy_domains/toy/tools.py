"""A tiny two-role domain for engine tests: accounts (agent side) and a phone (user side)."""

from __future__ import annotations

from pydantic import BaseModel

from pytest_quantagent.env.db import DB
from pytest_quantagent.env.toolkit import (
    ArgumentError,
    EntityNotFoundError,
    PolicyViolationError,
    Toolkit,
    ToolType,
    UserToolError,
    is_tool,
)
from pytest_quantagent.vocab.channels import Channel


class Account(BaseModel):
    account_id: str
    name: str
    balance: float
    frozen: bool = False


class ToyDB(DB):
    accounts: dict[str, Account]


class PhoneDB(DB):
    powered: bool = True
    wifi: bool = False


class ToyTools(Toolkit):
    db: ToyDB

    def _get(self, account_id: str) -> Account:
        acc = self.db.accounts.get(account_id)
        if acc is None:
            raise EntityNotFoundError("Account not found", entity=account_id)
        return acc

    @is_tool(ToolType.READ)
    def get_account(self, account_id: str) -> Account:
        """Get an account.

        Args:
            account_id: The account id, such as 'a1'.
        """
        return self._get(account_id)

    @is_tool(ToolType.READ)
    def find_account(self, name: str) -> str:
        """Find an account id by holder name (raises a plain ValueError like τ²-bench).

        Args:
            name: The holder's name.
        """
        for acc in self.db.accounts.values():
            if acc.name == name:
                return acc.account_id
        raise ValueError("User not found")

    @is_tool(ToolType.WRITE)
    def deposit(self, account_id: str, amount: float) -> Account:
        """Deposit money.

        Args:
            account_id: The account id.
            amount: A positive amount.
        """
        if amount <= 0:
            raise ArgumentError("Amount must be positive")
        acc = self._get(account_id)
        if acc.frozen:
            raise PolicyViolationError("Account is frozen", entity=account_id)
        acc.balance = round(acc.balance + amount, 2)
        return acc

    @is_tool(ToolType.WRITE)
    def close_account(self, account_id: str) -> str:
        """Close an account (refused by rule when money is left: raised as ValueError).

        Args:
            account_id: The account id.
        """
        acc = self._get(account_id)
        if acc.balance > 0:
            raise ValueError("Cannot close an account with a positive balance")
        del self.db.accounts[account_id]
        return "Account closed"

    @is_tool(ToolType.READ)
    def count_accounts(self) -> int:
        """Number of accounts."""
        return len(self.db.accounts)

    @is_tool(ToolType.GENERIC)
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the user to a human agent.

        Args:
            summary: A summary of the issue.
        """
        return "Transfer successful"

    def assert_balance(self, account_id: str, expected: float) -> bool:
        return self._get(account_id).balance == expected


class PhoneTools(Toolkit):
    db: PhoneDB

    @is_tool(ToolType.READ)
    def check_wifi(self) -> str:
        """Look at the wifi icon."""
        return "wifi on" if self.db.wifi else "wifi off"

    @is_tool(ToolType.WRITE)
    def toggle_wifi(self) -> str:
        """Toggle wifi."""
        if not self.db.powered:
            raise UserToolError("The phone is off")
        self.db.wifi = not self.db.wifi
        return self.check_wifi()

    def power_off(self) -> None:
        self.db.powered = False

    def assert_wifi(self, expected: bool) -> bool:
        return self.db.wifi == expected


def classify_error(message: str) -> Channel:
    if "not found" in message:
        return Channel.WRONG_ENTITY
    return Channel.POLICY_VIOLATION

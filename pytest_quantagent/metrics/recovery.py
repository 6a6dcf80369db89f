"""Recovery: does a failed tool call get repaired later in the same episode?

Definition (per failed call, per requestor): a failed call is *recovered* when the same
requestor later makes a successful call that achieves what it attempted:

- ``bad_arguments``, ``wrong_entity``, ``policy_violation``, ``user_tool_error``: a later
  successful call of the *same tool name* by the same requestor (the intent was right, the
  arguments or state were not);
- ``unknown_tool``, ``cross_role_tool``, ``malformed_call``: the *next* call of that requestor
  succeeds (the name itself was the mistake, so any valid tool right after counts; a later
  success after further flailing does not).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_quantagent.env.channels import Channel
from pytest_quantagent.store.records import CallRecord

_NAME_IS_THE_MISTAKE = frozenset(
    {Channel.UNKNOWN_TOOL, Channel.CROSS_ROLE_TOOL, Channel.MALFORMED_CALL}
)


@dataclass(frozen=True)
class RecoveryCount:
    """Failed calls of an episode and how many of them were recovered."""

    failures: int
    recovered: int


def recovery_events(calls: Sequence[CallRecord]) -> RecoveryCount:
    """Count failed calls and recovered failed calls in one episode's ordered calls (O(n))."""
    last_ok: dict[tuple[str, str], int] = {}
    next_ok: list[bool] = [False] * len(calls)
    pending: dict[str, int] = {}
    for i, c in enumerate(calls):
        if not c.error:
            last_ok[(c.requestor, c.name)] = i
        prev = pending.get(c.requestor)
        if prev is not None:
            next_ok[prev] = not c.error
        pending[c.requestor] = i
    failures = recovered = 0
    for i, c in enumerate(calls):
        if not c.error:
            continue
        failures += 1
        if c.channel in _NAME_IS_THE_MISTAKE:
            recovered += next_ok[i]
        elif last_ok.get((c.requestor, c.name), -1) > i:
            recovered += 1
    return RecoveryCount(failures, recovered)

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

from pytest_quantagent.store.records import CallRecord
from pytest_quantagent.vocab.channels import Channel

_NAME_IS_THE_MISTAKE = frozenset(
    {Channel.UNKNOWN_TOOL.value, Channel.CROSS_ROLE_TOOL.value, Channel.MALFORMED_CALL.value}
)


@dataclass(frozen=True)
class RecoveryCount:
    """Failed calls of an episode and how many of them were recovered."""

    failures: int
    recovered: int


def recovery_events(calls: Sequence[CallRecord]) -> RecoveryCount:
    """Count failed calls and recovered failed calls in one episode's ordered calls (O(n))."""
    return count_recoveries(
        [c.requestor for c in calls], [c.name for c in calls], [c.error for c in calls],
        [c.channel.value if c.channel is not None else None for c in calls],
    )


def count_recoveries(
    requestors: Sequence[str], names: Sequence[str], errors: Sequence[bool],
    channels: Sequence[str | None],
) -> RecoveryCount:
    """:func:`recovery_events` over parallel per-call lists (channel as its string value)."""
    n = len(requestors)
    last_ok: dict[tuple[str, str], int] = {}
    next_ok: list[bool] = [False] * n
    pending: dict[str, int] = {}
    for i in range(n):
        req = requestors[i]
        if not errors[i]:
            last_ok[(req, names[i])] = i
        prev = pending.get(req)
        if prev is not None:
            next_ok[prev] = not errors[i]
        pending[req] = i
    failures = recovered = 0
    for i in range(n):
        if not errors[i]:
            continue
        failures += 1
        if channels[i] in _NAME_IS_THE_MISTAKE:
            recovered += next_ok[i]
        elif last_ok.get((requestors[i], names[i]), -1) > i:
            recovered += 1
    return RecoveryCount(failures, recovered)

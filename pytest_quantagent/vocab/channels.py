"""The failure-channel taxonomy and the episode termination reasons.

Both are decided by the engine at the moment something happens (never guessed from text
afterwards, except when reading third-party results files, see ``pytest_quantagent.tau2``).
"""

from __future__ import annotations

from enum import Enum


class Channel(str, Enum):
    """Class of a failed (or malformed) tool call.

    - ``unknown_tool``: the name is in no toolkit of the episode.
    - ``cross_role_tool``: the agent called a user (device) tool, or the user an agent tool.
    - ``malformed_call``: unparseable JSON, non-object arguments, or an empty turn.
      τ²-bench silently retries and drops these; we count them.
    - ``bad_arguments``: missing or unexpected keys, wrong argument types.
    - ``wrong_entity``: an id (user, order, item, line, ...) that does not exist.
    - ``policy_violation``: a business rule refused the action.
    - ``user_tool_error``: a telecom device-side (user tool) failure.
    """

    UNKNOWN_TOOL = "unknown_tool"
    CROSS_ROLE_TOOL = "cross_role_tool"
    MALFORMED_CALL = "malformed_call"
    BAD_ARGUMENTS = "bad_arguments"
    WRONG_ENTITY = "wrong_entity"
    POLICY_VIOLATION = "policy_violation"
    USER_TOOL_ERROR = "user_tool_error"


#: Every channel, in report order. The report always lists all of them (count 0 when absent).
ALL_CHANNELS: tuple[Channel, ...] = tuple(Channel)

#: Channels whose failures carry a name or value whose frequency profile is compared between
#: arms (failure-set invariance).
NAMED_CHANNELS: tuple[Channel, ...] = (
    Channel.UNKNOWN_TOOL,
    Channel.CROSS_ROLE_TOOL,
    Channel.WRONG_ENTITY,
)


class TerminationReason(str, Enum):
    """Why an episode ended. Values are τ²-bench's own strings.

    Only ``user_stop`` and ``agent_stop`` can score above 0. ``infrastructure_error`` is a
    failure of the harness or the server (after retries), never scored as an agent failure:
    such episodes are excluded from statistics and counted apart.
    """

    USER_STOP = "user_stop"
    AGENT_STOP = "agent_stop"
    MAX_STEPS = "max_steps"
    TOO_MANY_ERRORS = "too_many_errors"
    AGENT_ERROR = "agent_error"
    USER_ERROR = "user_error"
    TIMEOUT = "timeout"
    INFRASTRUCTURE_ERROR = "infrastructure_error"
    CONTEXT_OVERFLOW = "context_overflow"
    """The server refused the prompt as longer than the model's context: scored (reward 0,
    the conversation the arm produced got too long) but counted apart from agent errors."""
    TASK_ERROR = "task_error"
    """The episode's setup failed (task data, environment): not the model's; never scored."""


#: Terminations that are not outcomes of the model: excluded from statistics, counted apart.
UNSCORED_TERMINATIONS: frozenset[TerminationReason] = frozenset(
    {TerminationReason.INFRASTRUCTURE_ERROR, TerminationReason.TASK_ERROR}
)

SCORABLE_TERMINATIONS: frozenset[TerminationReason] = frozenset(
    {TerminationReason.USER_STOP, TerminationReason.AGENT_STOP}
)

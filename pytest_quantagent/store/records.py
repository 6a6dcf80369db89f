"""Episode records: the plain data every layer above the runner consumes.

One :class:`EpisodeRecord` per finished episode, appended as one JSON line to the episode
store. Records are plain data (pydantic, ``extra="forbid"``, versioned): the metrics and
statistics layers read ``calls``/``success``/``n_errors`` and never need the engine.

Schema versions: 1, the first; 2 adds ``turns`` (what each model turn of the agent produced:
output tokens, finish reason, empty answer, reasoning length). A version-1 record loads with
``turns=None``: its answer-level figures are unknown (never zero), and its cache key is the
same, so a store of either version resumes.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pytest_quantagent.vocab.channels import UNSCORED_TERMINATIONS, Channel, TerminationReason
from pytest_quantagent.vocab.messages import Decision, Message, Requestor

RECORD_SCHEMA_VERSION = 2
"""The version new records are written with (see the module docstring)."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CallRecord(_Record):
    """One tool call of an episode, in order, with the engine's classification."""

    step: int
    """Index of the message that made the call within the episode's messages."""
    requestor: Requestor
    name: str
    """The tool name as called ("" for a malformed call whose name could not be read)."""
    error: bool
    channel: Channel | None = None
    """None for a successful call; set for every failed or malformed call."""
    detail: str | None = None
    """Error text (truncated), e.g. "Error: Tool 'get_customer' not found."."""
    entity: str | None = None
    """For wrong_entity: the offending value (an id); for unknown/cross-role: the name."""
    arguments: dict[str, Any] | None = None


class AnswerTurn(_Record):
    """One model turn of the agent: what its answer was made of (each field None when the
    backend did not say)."""

    output_tokens: int | None = None
    """Tokens the model generated (the server's ``usage.completion_tokens``, reasoning
    included; the bundled backend counts its own)."""
    finish_reason: str | None = None
    """Why generation stopped (``stop``, ``length``: cut at the token limit, ...)."""
    empty: bool = False
    """Neither text nor a tool call (the engine answers it as a ``malformed_call``)."""
    reasoning_tokens: int | None = None
    """Tokens spent reasoning, where the server reports them."""
    reasoning_chars: int | None = None
    """Characters of reasoning text returned apart from the answer, where there was one."""


class EpisodeRecord(_Record):
    """Everything recorded about one finished episode."""

    schema_version: int = RECORD_SCHEMA_VERSION
    key: str
    """Cache key over everything that changes the outcome (see ``store.keys``)."""
    model: str
    arm: str
    """Arm label, e.g. "bf16", "int4", "int4+repair"."""
    backend: str
    domain: str
    task_id: str
    trial: int
    seed: int
    max_errors: int
    max_steps: int
    user_sim: str = "scripted"
    repair: str = "none"

    termination: TerminationReason
    reward: float
    success: bool
    """reward >= 1 (within float tolerance) and a scorable termination."""
    reward_info: dict[str, Any] = Field(default_factory=dict)
    n_errors: int
    """Failed tool calls counted against the budget (agent- and user-side)."""
    steps: int
    """Message hops, τ²-bench's definition."""
    calls: list[CallRecord] = Field(default_factory=list)
    messages: list[Message] = Field(default_factory=list)
    decisions: list[Decision] = Field(default_factory=list)
    """Every recorded tool-name decision of the agent, in order (may be empty)."""

    tokens: int | None = None
    duration_s: float | None = None
    infra_retries: int = 0
    """Infrastructure retries (HTTP 5xx, timeouts) spent on this episode; never scored."""
    error_message: str | None = None
    """For infrastructure_error / agent_error / task_error terminations: what went wrong
    (server text redacted of keys)."""
    flags: list[str] = Field(default_factory=list)
    """What the store had to change to keep the record: ``lone_surrogates_escaped`` (text
    with unpaired UTF-16 surrogates, written as ``\\udXXX`` escapes), ``output_truncated``
    (model output over the arm's ``max_output_chars``)."""
    turns: list[AnswerTurn] | None = None
    """Each model turn of the agent, in order (schema 2); None when not recorded (a schema-1
    record, or an agent that is not a model): its answer-level figures are unknown."""
    user_events: dict[str, int] = Field(default_factory=dict)
    """What the simulated user did of its own accord, per kind: ``not_understood`` (turns in
    which it found no request or question to act on), ``unrequested_change`` (a state change
    nobody asked for), ``premature_transfer`` (a transfer it was not asked for). Empty for
    users that do not report them."""

    @property
    def scored(self) -> bool:
        """False for infrastructure failures, which statistics exclude."""
        return self.termination not in UNSCORED_TERMINATIONS

    def success_at_budget(self, k: int) -> bool:
        """Counterfactual success had the run's budget been ``k`` (k <= max_errors)."""
        if k > self.max_errors:
            raise ValueError(
                f"budget k={k} is above the run's budget max_errors={self.max_errors}; "
                f"counterfactuals exist only for k in 0..{self.max_errors}"
            )
        return self.success and self.n_errors < k

    def agent_calls(self) -> list[CallRecord]:
        return [c for c in self.calls if c.requestor == "assistant"]

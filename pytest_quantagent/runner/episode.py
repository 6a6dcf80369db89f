"""Layer 1 of the runner: one episode, agent ↔ user ↔ environment, τ²-bench's loop.

Semantics follow τ²-bench's half-duplex orchestrator:

- The episode opens with the agent's fixed greeting ``Hi! How can I help you today?``
  (not a model call), then the user speaks. A task's ``message_history`` replaces it.
- A *step* is one message hop (agent → user/env, user → agent/env, env → requester); a
  message with several tool calls is executed in one step.
- Every tool result with ``error=True`` (agent- or user-side, malformed calls included)
  adds 1 to a cumulative counter that never resets.
- Termination is checked after each step unless a tool call is pending: ``max_steps`` when
  ``steps >= max_steps``, then ``too_many_errors`` when ``n_errors >= max_errors`` (both
  override a stop in the same step, as in τ²-bench).
- The agent stops with ``###STOP###`` in a text message (``agent_stop``); the user with
  ``###STOP###``, ``###TRANSFER###`` or ``###OUT-OF-SCOPE###`` (``user_stop``).
- Views: the agent never sees the user's tool calls/results, the user never sees the
  agent's (τ²-bench).
- An exception from ``agent.act`` is an :class:`InfrastructureError` (propagates to the
  batch layer, which retries), a :class:`ConfigurationError` (propagates: the run stops,
  never an episode), a :class:`ContextOverflowError` (``context_overflow``), or ends the
  episode with ``agent_error``; likewise the user (``user_error``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.environment import Environment
from pytest_quantagent.env.evaluate import RewardInfo, evaluate
from pytest_quantagent.env.tasks import Task
from pytest_quantagent.errors import ConfigurationError, ContextOverflowError, InfrastructureError
from pytest_quantagent.store.records import AnswerTurn, CallRecord
from pytest_quantagent.vocab.channels import TerminationReason
from pytest_quantagent.vocab.messages import (
    USER_STOP_TOKENS,
    AssistantMessage,
    Decision,
    Message,
    ToolMessage,
    UserMessage,
)

GREETING = "Hi! How can I help you today?"
AGENT_STOP_TOKEN = "###STOP###"
_DETAIL_MAX = 300


class Agent(Protocol):
    """Anything that answers the agent's view with the next assistant message.

    ``view`` is the engine's live list of the messages the agent may see (no copy is made
    per turn): read it, never mutate it, and copy it if you keep it past ``act``.
    """

    async def act(self, view: list[Message]) -> AssistantMessage: ...


class User(Protocol):
    """Anything that answers the user's view with the next user message."""

    async def act(self, view: list[Message]) -> UserMessage: ...


@dataclass
class EpisodeOutcome:
    """Everything the batch layer needs to build an ``EpisodeRecord``."""

    messages: list[Message]
    termination: TerminationReason
    reward: float
    reward_info: RewardInfo
    calls: list[CallRecord]
    n_errors: int
    steps: int
    decisions: list[Decision] = field(default_factory=list)
    error_message: str | None = None
    env: Environment | None = field(default=None, repr=False)
    user_events: dict[str, int] = field(default_factory=dict)
    """The user's own count of what it did of its own accord (``EpisodeRecord.user_events``)."""
    turns: list[AnswerTurn] | None = None
    """What each model turn of the agent produced (``EpisodeRecord.turns``); None for an
    agent that does not keep them."""

    @property
    def success(self) -> bool:
        return self.reward >= 1.0 - 1e-6 and self.termination in (
            TerminationReason.USER_STOP,
            TerminationReason.AGENT_STOP,
        )


def is_agent_stop(msg: AssistantMessage) -> bool:
    """τ²-bench: a text (non-tool-call) agent message containing ``###STOP###``."""
    return not msg.tool_calls and msg.content is not None and AGENT_STOP_TOKEN in msg.content


def is_user_stop(msg: UserMessage) -> bool:
    """τ²-bench: a text user message containing a stop, transfer or out-of-scope token."""
    if msg.tool_calls or msg.content is None:
        return False
    return any(tok in msg.content for tok in USER_STOP_TOKENS)


def _visible_to_agent(m: Message) -> bool:
    if isinstance(m, UserMessage):
        return not m.tool_calls
    if isinstance(m, ToolMessage):
        return m.requestor == "assistant"
    return True


def _visible_to_user(m: Message) -> bool:
    if isinstance(m, AssistantMessage):
        return not m.tool_calls
    if isinstance(m, ToolMessage):
        return m.requestor == "user"
    return True


async def run_episode(
    *,
    domain: Domain,
    task: Task,
    agent: Agent,
    user: User,
    max_steps: int = 200,
    max_errors: int = 10,
    env: Environment | None = None,
    evaluate_reward: bool = True,
) -> EpisodeOutcome:
    """Run one episode to its end and score it.

    ``env`` may be given (already in the task's initial state); by default a fresh one is
    made. ``evaluate_reward=False`` skips scoring (reward 0, for replays and benchmarks of
    the loop alone).
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    if max_errors < 1:
        raise ValueError(f"max_errors must be >= 1, got {max_errors}")
    if env is None:
        env = domain.make_environment(task)

    messages: list[Message] = []
    agent_view: list[Message] = []
    user_view: list[Message] = []
    calls: list[CallRecord] = []
    decisions: list[Decision] = []

    def append(m: Message) -> None:
        m.turn_idx = len(messages)
        messages.append(m)
        if _visible_to_agent(m):
            agent_view.append(m)
        if _visible_to_user(m):
            user_view.append(m)

    history = (task.initial_state.message_history if task.initial_state else None) or []
    termination: TerminationReason | None = None
    error_message: str | None = None
    pending: AssistantMessage | UserMessage | None = None
    to_role: str
    if history:
        for m in history:
            append(m.model_copy(deep=True))
        last = messages[-1]
        if isinstance(last, AssistantMessage):
            to_role = "env" if last.tool_calls else "user"
            pending = last
            if is_agent_stop(last):
                termination = TerminationReason.AGENT_STOP
        elif isinstance(last, UserMessage):
            to_role = "env" if last.tool_calls else "agent"
            pending = last
            if is_user_stop(last):
                termination = TerminationReason.USER_STOP
        elif isinstance(last, ToolMessage):
            to_role = "agent" if last.requestor == "assistant" else "user"
        else:
            raise ValueError(f"task {task.id!r}: message_history ends with a {last.role} message")
    else:
        append(AssistantMessage(content=GREETING))
        to_role = "user"

    n_errors = 0
    steps = 0
    while termination is None:
        if to_role == "user":
            try:
                um = await user.act(user_view)
            except InfrastructureError:
                raise
            except ConfigurationError as e:
                if e.role is not None:
                    raise
                # The user simulator's model refused (key, URL, model): not the arm's fault.
                raise ConfigurationError(f"user model: {e}", role="user model") from e
            except ContextOverflowError as e:
                termination, error_message = TerminationReason.CONTEXT_OVERFLOW, f"user: {e}"
                break
            except Exception as e:
                termination, error_message = TerminationReason.USER_ERROR, f"{type(e).__name__}: {e}"
                break
            if not um.tool_calls and not um.content:
                termination, error_message = TerminationReason.USER_ERROR, "user sent an empty message"
                break
            append(um)
            if is_user_stop(um):
                termination = TerminationReason.USER_STOP
            pending = um
            to_role = "env" if um.tool_calls else "agent"
        elif to_role == "agent":
            try:
                am = await agent.act(agent_view)
            except (InfrastructureError, ConfigurationError):
                raise
            except ContextOverflowError as e:
                termination, error_message = TerminationReason.CONTEXT_OVERFLOW, str(e)
                break
            except Exception as e:
                termination, error_message = TerminationReason.AGENT_ERROR, f"{type(e).__name__}: {e}"
                break
            if not am.tool_calls and not am.content:
                termination, error_message = TerminationReason.AGENT_ERROR, "agent sent an empty message"
                break
            append(am)
            if am.decisions:
                decisions.extend(am.decisions)
            if is_agent_stop(am):
                termination = TerminationReason.AGENT_STOP
            pending = am
            to_role = "env" if am.tool_calls else "user"
        else:  # env
            assert pending is not None and pending.tool_calls
            step_idx = len(messages) - 1
            role = "assistant" if isinstance(pending, AssistantMessage) else "user"
            for i, tc in enumerate(pending.tool_calls):
                if tc.requestor != role:
                    # The speaker decides the toolkit, whatever the call object claims.
                    tc = pending.tool_calls[i] = tc.model_copy(update={"requestor": role})
                d = env.execute(tc)
                tm = d.message
                if tm.error:
                    n_errors += 1
                append(tm)
                calls.append(
                    CallRecord(
                        step=step_idx,
                        requestor=tc.requestor,
                        name=tc.name,
                        error=tm.error,
                        channel=d.channel,
                        detail=tm.content[:_DETAIL_MAX] if tm.error else None,
                        entity=d.entity,
                        arguments=tc.arguments,
                    )
                )
            to_role = "agent" if pending.role == "assistant" else "user"
            # τ²-bench syncs after every step; only tool steps change state and sync is a
            # function of the state, so syncing here alone gives the same states.
            env.sync_tools()
        steps += 1
        if to_role != "env":
            if steps >= max_steps:
                termination = TerminationReason.MAX_STEPS
            if n_errors >= max_errors:
                termination = TerminationReason.TOO_MANY_ERRORS

    assert termination is not None
    if evaluate_reward:
        info = evaluate(domain, task, messages, termination, env)
    else:
        info = RewardInfo(reward=0.0, note="not evaluated")
    return EpisodeOutcome(
        messages=messages,
        termination=termination,
        reward=info.reward,
        reward_info=info,
        calls=calls,
        n_errors=n_errors,
        steps=steps,
        decisions=decisions,
        error_message=error_message,
        env=env,
        user_events=user_events(user),
        turns=agent_turns(agent),
    )


def agent_turns(agent: object) -> list[AnswerTurn] | None:
    """The answer-level figures an agent kept of its model turns (its ``turns``, as
    :class:`~pytest_quantagent.runner.agent.LLMAgent` keeps them); None for an agent without
    them (a scripted or gold agent)."""
    turns = getattr(agent, "turns", None)
    if not isinstance(turns, list) or not all(isinstance(t, AnswerTurn) for t in turns):
        return None
    return list(turns)


def user_events(user: object) -> dict[str, int]:
    """What a user reports it did of its own accord (its ``events()``; ``{}`` for a user
    without one, e.g. the LLM user)."""
    events = getattr(user, "events", None)
    if not callable(events):
        return {}
    return {str(k): int(v) for k, v in dict(events()).items()}


def outcome_summary(outcome: EpisodeOutcome) -> dict[str, Any]:
    """A short JSON-able summary (CLI output, debugging)."""
    return {
        "termination": outcome.termination.value,
        "reward": outcome.reward,
        "n_errors": outcome.n_errors,
        "steps": outcome.steps,
        "calls": len(outcome.calls),
    }

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
    episode = _Episode(env)
    episode.open(task)
    while episode.termination is None:
        if episode.to_role == "user":
            hopped = await episode.user_turn(user)
        elif episode.to_role == "agent":
            hopped = await episode.agent_turn(agent)
        else:
            hopped = episode.tool_step()
        if not hopped:
            break  # the user or the agent failed: the episode ends there, the hop uncounted
        episode.end_step(max_steps, max_errors)
    return episode.outcome(domain, task, agent, user, evaluate_reward=evaluate_reward)


class _Episode:
    """The state of one episode and its steps (:func:`run_episode` is the loop over them).

    ``to_role`` is who speaks next (``"user"``, ``"agent"``, or ``"env"``: the tool calls of
    ``pending``, the last message); ``termination`` is set by the step that ends the episode.
    A turn returns False when the speaker failed (the episode ends without counting the hop).
    """

    __slots__ = ("agent_view", "calls", "decisions", "env", "error_message", "messages",
                 "n_errors", "pending", "steps", "termination", "to_role", "user_view")

    def __init__(self, env: Environment) -> None:
        self.env = env
        self.messages: list[Message] = []
        self.agent_view: list[Message] = []
        self.user_view: list[Message] = []
        self.calls: list[CallRecord] = []
        self.decisions: list[Decision] = []
        self.termination: TerminationReason | None = None
        self.error_message: str | None = None
        self.pending: AssistantMessage | UserMessage | None = None
        self.to_role = "user"
        self.n_errors = 0
        self.steps = 0

    def append(self, m: Message) -> None:
        """Add ``m`` to the conversation and to the views that may see it."""
        m.turn_idx = len(self.messages)
        self.messages.append(m)
        if _visible_to_agent(m):
            self.agent_view.append(m)
        if _visible_to_user(m):
            self.user_view.append(m)

    def open(self, task: Task) -> None:
        """The opening: the task's ``message_history`` (who speaks next follows from its last
        message, which may already stop the episode), else the agent's greeting."""
        history = (task.initial_state.message_history if task.initial_state else None) or []
        if not history:
            self.append(AssistantMessage(content=GREETING))
            self.to_role = "user"
            return
        for m in history:
            self.append(m.model_copy(deep=True))
        last = self.messages[-1]
        if isinstance(last, AssistantMessage):
            self.to_role = "env" if last.tool_calls else "user"
            self.pending = last
            if is_agent_stop(last):
                self.termination = TerminationReason.AGENT_STOP
        elif isinstance(last, UserMessage):
            self.to_role = "env" if last.tool_calls else "agent"
            self.pending = last
            if is_user_stop(last):
                self.termination = TerminationReason.USER_STOP
        elif isinstance(last, ToolMessage):
            self.to_role = "agent" if last.requestor == "assistant" else "user"
        else:
            raise ValueError(f"task {task.id!r}: message_history ends with a {last.role} message")

    def fail(self, termination: TerminationReason, message: str) -> bool:
        """End the episode with ``termination`` (a failed turn); False, for the turn to return."""
        self.termination, self.error_message = termination, message
        return False

    async def user_turn(self, user: User) -> bool:
        """The user speaks: a text (may stop the episode) or tool calls for the environment."""
        try:
            um = await user.act(self.user_view)
        except InfrastructureError:
            raise
        except ConfigurationError as e:
            if e.role is not None:
                raise
            # The user simulator's model refused (key, URL, model): not the arm's fault.
            raise ConfigurationError(f"user model: {e}", role="user model") from e
        except ContextOverflowError as e:
            return self.fail(TerminationReason.CONTEXT_OVERFLOW, f"user: {e}")
        except Exception as e:
            return self.fail(TerminationReason.USER_ERROR, f"{type(e).__name__}: {e}")
        if not um.tool_calls and not um.content:
            return self.fail(TerminationReason.USER_ERROR, "user sent an empty message")
        self.append(um)
        if is_user_stop(um):
            self.termination = TerminationReason.USER_STOP
        self.pending = um
        self.to_role = "env" if um.tool_calls else "agent"
        return True

    async def agent_turn(self, agent: Agent) -> bool:
        """The agent speaks: a text (may stop the episode) or tool calls; its decisions kept."""
        try:
            am = await agent.act(self.agent_view)
        except (InfrastructureError, ConfigurationError):
            raise
        except ContextOverflowError as e:
            return self.fail(TerminationReason.CONTEXT_OVERFLOW, str(e))
        except Exception as e:
            return self.fail(TerminationReason.AGENT_ERROR, f"{type(e).__name__}: {e}")
        if not am.tool_calls and not am.content:
            return self.fail(TerminationReason.AGENT_ERROR, "agent sent an empty message")
        self.append(am)
        if am.decisions:
            self.decisions.extend(am.decisions)
        if is_agent_stop(am):
            self.termination = TerminationReason.AGENT_STOP
        self.pending = am
        self.to_role = "env" if am.tool_calls else "user"
        return True

    def tool_step(self) -> bool:
        """The environment runs every tool call of the pending message (one step), counts the
        failed ones and records each call; the turn goes back to whoever called."""
        pending = self.pending
        assert pending is not None and pending.tool_calls
        step_idx = len(self.messages) - 1
        role = "assistant" if isinstance(pending, AssistantMessage) else "user"
        for i, tc in enumerate(pending.tool_calls):
            if tc.requestor != role:
                # The speaker decides the toolkit, whatever the call object claims.
                tc = pending.tool_calls[i] = tc.model_copy(update={"requestor": role})
            d = self.env.execute(tc)
            tm = d.message
            if tm.error:
                self.n_errors += 1
            self.append(tm)
            self.calls.append(
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
        self.to_role = "agent" if pending.role == "assistant" else "user"
        # τ²-bench syncs after every step; only tool steps change state and sync is a
        # function of the state, so syncing here alone gives the same states.
        self.env.sync_tools()
        return True

    def end_step(self, max_steps: int, max_errors: int) -> None:
        """Count the step; unless a tool call is pending, the limits end the episode
        (``max_steps``, then ``too_many_errors``; either overrides a stop in this step)."""
        self.steps += 1
        if self.to_role != "env":
            if self.steps >= max_steps:
                self.termination = TerminationReason.MAX_STEPS
            if self.n_errors >= max_errors:
                self.termination = TerminationReason.TOO_MANY_ERRORS

    def outcome(self, domain: Domain, task: Task, agent: Agent, user: User, *,
                evaluate_reward: bool) -> EpisodeOutcome:
        """Score the ended episode (unless ``evaluate_reward`` is False) into its outcome."""
        termination = self.termination
        assert termination is not None
        if evaluate_reward:
            info = evaluate(domain, task, self.messages, termination, self.env)
        else:
            info = RewardInfo(reward=0.0, note="not evaluated")
        return EpisodeOutcome(
            messages=self.messages,
            termination=termination,
            reward=info.reward,
            reward_info=info,
            calls=self.calls,
            n_errors=self.n_errors,
            steps=self.steps,
            decisions=self.decisions,
            error_message=self.error_message,
            env=self.env,
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

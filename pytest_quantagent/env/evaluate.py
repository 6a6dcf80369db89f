"""Episode evaluation with τ²-bench's reward semantics.

- Any termination other than ``user_stop``/``agent_stop`` scores 0.
- ``DB``: the episode's final agent-side and user-side DB hashes must equal those of a fresh
  environment (same initial state) on which the gold actions were replayed (failing gold
  calls ignored, unknown names skipped). A match against a gold state whose state-changing
  gold calls failed is not certifiable: the DB check is then "not evaluated" (as τ²-bench).
- ``ENV_ASSERTION``: each assertion function, run on the episode's final environment, must
  return its expected value.
- ``ACTION``: each gold action must match some tool call of the episode (name and compared
  arguments); the component is the mean of the per-action results.
- ``COMMUNICATE``: each info string must occur (case-insensitive, commas dropped from the
  message) in some agent text message.
- ``NL_ASSERTION`` needs an LLM judge (:mod:`pytest_quantagent.runner.judge`); a task whose
  basis lists it with no assertions scores 1 on it (τ²-bench). Without a judge it
  is **not evaluated**: the reward is computed on the rest of the basis and
  ``info.not_evaluated`` says so. With one, :func:`apply_nl_verdicts` adds the component: 1
  when every assertion is met, else 0 (τ²-bench's rule); an assertion the judge could not
  decide (a judge error) is not met — a judge error is never a pass.

The final reward is the product of the components in the task's ``reward_basis``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from pytest_quantagent.env.tasks import RewardType, Task
from pytest_quantagent.vocab.channels import SCORABLE_TERMINATIONS, TerminationReason
from pytest_quantagent.vocab.messages import AssistantMessage, Message, ToolCall, UserMessage

if TYPE_CHECKING:
    from pytest_quantagent.env.domain import Domain
    from pytest_quantagent.env.environment import Environment


class RewardInfo(BaseModel):
    """The reward and its breakdown (stored as ``EpisodeRecord.reward_info``)."""

    model_config = ConfigDict(extra="forbid")

    reward: float
    reward_basis: list[RewardType] | None = None
    reward_breakdown: dict[str, float] = Field(default_factory=dict)
    db_match: bool | None = None
    """None when the DB was not checked (DB not in the reward basis, or the gold state is
    incomplete)."""
    env_assertions: list[dict[str, Any]] = Field(default_factory=list)
    action_checks: list[dict[str, Any]] = Field(default_factory=list)
    communicate_checks: list[dict[str, Any]] = Field(default_factory=list)
    not_evaluated: list[str] = Field(default_factory=list)
    """Basis components that were not evaluated (NL_ASSERTION: no LLM judge)."""
    note: str | None = None
    nl_assertions: list[dict[str, Any]] = Field(default_factory=list)
    """Per NL assertion: ``assertion``, ``met`` (None on a judge error), ``reason`` and, on a
    judge error, ``judge_error``."""
    judge: str | None = None
    """Identity of the judge that decided ``nl_assertions`` (None: not judged)."""


_NL_NOTE = "NL_ASSERTION not evaluated (needs an LLM judge); reward computed on the rest of the basis"


def needs_judge(task: Task, info: RewardInfo) -> bool:
    """True when the task's basis has NL_ASSERTION with assertions to judge and the episode
    was scored (premature endings score 0 without evaluation, as in τ²-bench)."""
    ec = task.evaluation_criteria
    return (
        ec is not None
        and RewardType.NL_ASSERTION in ec.reward_basis
        and RewardType.NL_ASSERTION.value in info.not_evaluated
    )


def _drop_note(note: str, part: str) -> str | None:
    """``note`` (parts joined by "; ") without ``part``."""
    rest = note.replace(f"; {part}", "").replace(f"{part}; ", "").replace(part, "")
    return rest or None


def apply_nl_verdicts(info: RewardInfo, verdicts: Sequence[dict[str, Any]], judge: str) -> RewardInfo:
    """``info`` with the NL_ASSERTION component decided by ``verdicts`` (one per assertion,
    from :meth:`pytest_quantagent.runner.judge.JudgeRuntime.judge`): 1.0 when every ``met``
    is True, else 0.0 (a judge error, ``met`` None, is not met). No assertions: 1.0, as
    τ²-bench. The reward is recomputed as the product of the breakdown."""
    out = info.model_copy(deep=True)
    out.not_evaluated = [c for c in out.not_evaluated if c != RewardType.NL_ASSERTION.value]
    if out.note:
        out.note = _drop_note(out.note, _NL_NOTE)
    out.nl_assertions = [dict(v) for v in verdicts]
    out.judge = judge
    nl = 1.0 if all(v.get("met") is True for v in verdicts) else 0.0
    out.reward_breakdown[RewardType.NL_ASSERTION.value] = nl
    reward = 1.0
    for v in out.reward_breakdown.values():
        reward *= v
    out.reward = reward
    errors = sum(1 for v in verdicts if v.get("met") is None)
    if errors:
        msg = f"judge error on {errors} NL assertion(s): scored as not met"
        out.note = f"{out.note}; {msg}" if out.note else msg
    return out


def _tool_calls(messages: Sequence[Message]) -> list[ToolCall]:
    out: list[ToolCall] = []
    for m in messages:
        if isinstance(m, (AssistantMessage, UserMessage)) and m.tool_calls:
            out.extend(tc for tc in m.tool_calls if tc.parse_error is None)
    return out


def communicate_checks(messages: Sequence[Message], infos: Sequence[str]) -> list[dict[str, Any]]:
    """Per info string: was it said in an agent text message (τ²-bench's substring rule)?"""
    texts = [
        m.content.lower().replace(",", "")
        for m in messages
        if isinstance(m, AssistantMessage) and m.content
    ]
    return [{"info": info, "met": any(info.lower() in t for t in texts)} for info in infos]


def evaluate(
    domain: Domain,
    task: Task,
    messages: Sequence[Message],
    termination: TerminationReason,
    env: Environment | None = None,
    *,
    db_shortcut: bool = True,
) -> RewardInfo:
    """Score an episode. ``env`` is the episode's final environment; when None the
    episode's tool calls are replayed on a fresh environment to rebuild it.

    With ``db_shortcut`` the DB check skips hashing when the episode made exactly the gold
    replay's successful state-changing calls (same initial state + same deterministic calls
    ⇒ same state); otherwise, and with ``db_shortcut=False``, the hashes are compared."""
    if termination not in SCORABLE_TERMINATIONS:
        return RewardInfo(
            reward=0.0, note=f"terminated prematurely: {termination.value}"
        )
    ec = task.evaluation_criteria
    if ec is None:
        return RewardInfo(reward=1.0, note="no evaluation criteria")
    if env is None:
        env = domain.make_environment(task)
        for tc in _tool_calls(messages):
            env.execute(tc)
    basis = set(ec.reward_basis)
    info = RewardInfo(reward=1.0, reward_basis=list(ec.reward_basis))
    reward = 1.0

    if basis & {RewardType.DB, RewardType.ENV_ASSERTION}:
        if RewardType.DB not in basis:
            # τ²-bench computes the DB check here too but never uses it; skipping the hash
            # keeps ENV_ASSERTION-only (telecom) scoring cheap.
            db_reward: float | None = None
        elif ec.actions is None and ec.env_assertions is None:
            db_reward = 1.0
            info.db_match = True
        else:
            gold = domain.gold_state(task)
            match = (db_shortcut and tuple(env.write_log) == gold.write_log) or (
                env.get_db_hash() == gold.db_hash
                and env.get_user_db_hash() == gold.user_db_hash
            )
            if match and gold.failed_writes:
                db_reward = None
                info.note = f"gold replay incomplete (failed: {', '.join(gold.failed_writes)}); DB not evaluated"
            else:
                db_reward = 1.0 if match else 0.0
                info.db_match = match
        ea_reward = 1.0
        for a in ec.env_assertions or []:
            try:
                met = env.run_env_assertion(a)
                err = None
            except Exception as e:  # τ²-bench grades a check that raises as 0
                met, err = False, f"{type(e).__name__}: {e}"
            info.env_assertions.append(
                {"env_type": a.env_type, "func_name": a.func_name, "arguments": a.arguments,
                 "met": met, **({"error": err} if err else {})}
            )
            ea_reward *= 1.0 if met else 0.0
        if RewardType.DB in basis and db_reward is not None:
            info.reward_breakdown[RewardType.DB.value] = db_reward
            reward *= db_reward
        if RewardType.ENV_ASSERTION in basis:
            info.reward_breakdown[RewardType.ENV_ASSERTION.value] = ea_reward
            reward *= ea_reward

    if RewardType.ACTION in basis:
        gold_actions = ec.actions or []
        calls = _tool_calls(messages)
        for ga in gold_actions:
            info.action_checks.append(
                {"action_id": ga.action_id, "name": ga.name, "met": any(ga.matches(c) for c in calls)}
            )
        act_reward = (
            sum(1.0 for c in info.action_checks if c["met"]) / len(gold_actions)
            if gold_actions
            else 1.0
        )
        info.reward_breakdown[RewardType.ACTION.value] = act_reward
        reward *= act_reward

    if RewardType.COMMUNICATE in basis:
        info.communicate_checks = communicate_checks(messages, ec.communicate_info or [])
        com_reward = 1.0 if all(c["met"] for c in info.communicate_checks) else 0.0
        info.reward_breakdown[RewardType.COMMUNICATE.value] = com_reward
        reward *= com_reward

    if RewardType.NL_ASSERTION in basis:
        if ec.nl_assertions:
            info.not_evaluated.append(RewardType.NL_ASSERTION.value)
            info.note = f"{info.note}; {_NL_NOTE}" if info.note else _NL_NOTE
        else:  # nothing to judge: the component is 1, as in τ²-bench
            info.reward_breakdown[RewardType.NL_ASSERTION.value] = 1.0

    info.reward = reward
    return info

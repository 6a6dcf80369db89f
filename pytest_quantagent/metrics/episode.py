"""Per-episode quantities, and the compact per-arm arrays the analysis works on.

:class:`ArmAccumulator` reads records one at a time (e.g. straight from a JSONL store) and
keeps only a few numbers per episode, plus per-arm name counters, so a 100k-episode analysis
never holds the records themselves. Infrastructure failures are excluded and counted.

Failed calls of the *user* (``requestor == "user"``, e.g. an LLM user's malformed device call)
are not the agent's: they are counted apart (``ArmData.user_failures``, and per episode
``user_failed``) and left out of the channel counts, ``user_tool_error`` included (a device
failure of a call the user made is simulator-side; see :func:`is_agent_channel_failure`).
They still add to ``n_errors`` (τ²-bench's counter). Channel rates are per *agent* tool call
(``agent_calls``); the user's own calls are counted apart (``user_calls``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import TypeAdapter
from typing_extensions import NotRequired, TypedDict

from pytest_quantagent.metrics.recovery import count_recoveries, recovery_events
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.vocab.channels import (
    ALL_CHANNELS,
    NAMED_CHANNELS,
    Channel,
    TerminationReason,
)

CHANNEL_INDEX: dict[Channel, int] = {c: i for i, c in enumerate(ALL_CHANNELS)}
_CHANNEL_POS: dict[str, int] = {c.value: i for i, c in enumerate(ALL_CHANNELS)}
_CHANNEL_OF: dict[str, Channel] = {c.value: c for c in ALL_CHANNELS}
_NAMED = frozenset(c.value for c in NAMED_CHANNELS)
_WRONG_ENTITY = Channel.WRONG_ENTITY.value
_INFRA = TerminationReason.INFRASTRUCTURE_ERROR.value
#: Not outcomes of the model (infrastructure, task setup): counted, never scored.
_UNSCORED = frozenset({_INFRA, TerminationReason.TASK_ERROR.value})
_USER_TOOL_ERROR = Channel.USER_TOOL_ERROR.value
_NAME_MISTAKE = frozenset(
    {Channel.UNKNOWN_TOOL.value, Channel.CROSS_ROLE_TOOL.value, Channel.MALFORMED_CALL.value}
)

ChannelName = Literal[
    "unknown_tool", "cross_role_tool", "malformed_call", "bad_arguments", "wrong_entity",
    "policy_violation", "user_tool_error",
]
TerminationName = Literal[
    "user_stop", "agent_stop", "max_steps", "too_many_errors", "agent_error", "user_error",
    "timeout", "infrastructure_error", "context_overflow", "task_error",
]


def is_agent_channel_failure(requestor: str, channel: str | None) -> bool:
    """Whether a failed call in ``channel`` counts in the cell's channel rates: every failed
    call of the agent, none of the user's. The user's failures (its device calls that fail,
    malformed or unknown calls) are the simulator's and are reported apart
    (``user_failures``); they still count toward the error budget."""
    del channel
    return requestor != "user"


class LeanCall(TypedDict):
    """The fields of a stored ``CallRecord`` the analysis reads."""

    requestor: Literal["assistant", "user"]
    name: str
    error: bool
    channel: NotRequired[ChannelName | None]
    entity: NotRequired[str | None]


class LeanDecision(TypedDict):
    kind: NotRequired[Literal["tool_name", "argument"]]
    top1: str
    margin: float
    chosen: NotRequired[str | None]


class LeanTurn(TypedDict):
    """The fields of a stored ``AnswerTurn``."""

    output_tokens: NotRequired[int | None]
    finish_reason: NotRequired[str | None]
    empty: NotRequired[bool]
    reasoning_tokens: NotRequired[int | None]
    reasoning_chars: NotRequired[int | None]


class LeanRecord(TypedDict):
    """The fields of a stored ``EpisodeRecord`` the analysis reads (others are ignored, so
    messages are never materialised)."""

    domain: str
    arm: str
    task_id: str
    trial: int
    termination: TerminationName
    success: bool
    n_errors: int
    steps: int
    max_errors: int
    model: NotRequired[str]
    backend: NotRequired[str]
    user_sim: NotRequired[str]
    tokens: NotRequired[int | None]
    duration_s: NotRequired[float | None]
    calls: NotRequired[list[LeanCall]]
    decisions: NotRequired[list[LeanDecision]]
    user_events: NotRequired[dict[str, int]]
    turns: NotRequired[list[LeanTurn] | None]


#: Validates one store line (JSON) into a :class:`LeanRecord` dict — about 2x faster than
#: building the full ``EpisodeRecord`` (no messages, no model instances).
LEAN_RECORD: TypeAdapter[LeanRecord] = TypeAdapter(LeanRecord)


ANSWER_COLUMNS: tuple[str, ...] = (
    "turns", "output_tokens", "length_cut", "empty", "reasoning_tokens", "reasoning_chars",
    "reasoning_turns")
"""Columns of :attr:`ArmData.answers`, per episode: the agent's model turns, their output
tokens, turns cut at the length limit (``finish_reason: length``), empty answers, reasoning
tokens, reasoning characters and turns that returned reasoning text. A whole row is NaN when
the record has no ``turns`` (unknown, never zero); a column is NaN when some turn of the
episode did not say (output tokens, finish reason, reasoning tokens)."""
ANSWER_INDEX: dict[str, int] = {c: i for i, c in enumerate(ANSWER_COLUMNS)}
_UNKNOWN_ANSWERS = (math.nan,) * len(ANSWER_COLUMNS)
_TURN_FIELDS = ("output_tokens", "finish_reason", "empty", "reasoning_tokens", "reasoning_chars")


def answer_row(turns: Iterable[object] | None) -> tuple[float, ...]:
    """One episode's :data:`ANSWER_COLUMNS` from its ``turns`` (``AnswerTurn`` objects or
    their stored dicts); all NaN for None."""
    if turns is None:
        return _UNKNOWN_ANSWERS
    n = 0
    tokens: float = 0.0
    cut: float = 0.0
    empty = 0
    rtok: float = 0.0
    rchars = 0
    rturns = 0
    for t in turns:
        d = t if isinstance(t, dict) else {k: getattr(t, k, None) for k in _TURN_FIELDS}
        n += 1
        ot, fr, rt, rc = (d.get("output_tokens"), d.get("finish_reason"),
                          d.get("reasoning_tokens"), d.get("reasoning_chars"))
        tokens = math.nan if ot is None else tokens + ot
        cut = math.nan if fr is None else cut + (fr == "length")
        rtok = math.nan if rt is None else rtok + rt
        empty += bool(d.get("empty", False))
        if rc:
            rchars += rc
            rturns += 1
    return (float(n), tokens, cut, float(empty), rtok, float(rchars), float(rturns))


@dataclass(frozen=True)
class EpisodeMetrics:
    """What the analysis needs from one episode."""

    task_id: str
    trial: int
    success: bool
    n_errors: int
    steps: int
    termination: str
    tool_calls: int
    channel_counts: tuple[int, ...]
    """Failed calls per channel, in ``ALL_CHANNELS`` order."""
    failures: int
    recovered: int
    tokens: int | None
    duration_s: float | None


def episode_metrics(record: EpisodeRecord) -> EpisodeMetrics:
    """Summarise one episode: success, failed calls by channel, calls, steps, recovery."""
    counts = [0] * len(ALL_CHANNELS)
    for c in record.calls:
        if c.channel is not None and is_agent_channel_failure(c.requestor, c.channel.value):
            counts[CHANNEL_INDEX[c.channel]] += 1
    rec = recovery_events(record.calls)
    return EpisodeMetrics(
        record.task_id, record.trial, record.success, record.n_errors, record.steps,
        record.termination.value, len(record.calls), tuple(counts), rec.failures,
        rec.recovered, record.tokens, record.duration_s,
    )


def failure_names(record: EpisodeRecord, channel: Channel) -> list[str]:
    """The names (unknown/cross-role tools) or values (wrong entities) of an episode's
    failures in ``channel``."""
    out = []
    for c in record.calls:
        if c.channel == channel and is_agent_channel_failure(c.requestor, c.channel.value):
            value = c.entity if channel == Channel.WRONG_ENTITY else (c.entity or c.name)
            if value:
                out.append(value)
    return out


@dataclass
class ArmData:
    """Compact arrays over the scored episodes of one (domain, arm); row i = one episode."""

    domain: str
    arm: str
    task_ids: np.ndarray
    trials: np.ndarray
    success: np.ndarray
    n_errors: np.ndarray
    steps: np.ndarray
    tool_calls: np.ndarray
    channel_counts: np.ndarray
    """Shape (episodes, len(ALL_CHANNELS))."""
    failures: np.ndarray
    recovered: np.ndarray
    tokens: np.ndarray
    """float, nan when unknown."""
    duration_s: np.ndarray
    max_errors: int
    """The run's error budget (the smallest max_errors seen)."""
    terminations: dict[str, int]
    """Counts over scored episodes."""
    infrastructure_errors: int
    duplicates: int
    names: dict[Channel, Counter[str]]
    margins: np.ndarray
    """Every tool-name decision margin of the arm."""
    decisions: dict[tuple[str, int], tuple[tuple[str, ...], tuple[float, ...]]] = field(
        default_factory=dict
    )
    """Per (task, trial): the top-1 choices and margins of its tool-name decisions."""
    models: set[str] = field(default_factory=set)
    backends: set[str] = field(default_factory=set)
    user_sims: set[str] = field(default_factory=set)
    """``user_sim`` of the scored episodes (which user simulator produced them)."""
    user_failures: Counter[str] = field(default_factory=Counter)
    """Failed calls of the user simulator by channel."""
    agent_calls: np.ndarray | None = None
    """Tool calls of the agent per episode (the denominator of channel rates)."""
    user_calls: np.ndarray | None = None
    """Tool calls of the user per episode."""
    user_failed: np.ndarray | None = None
    """Failed tool calls of the user per episode (they count toward the budget)."""
    termination_of: np.ndarray | None = None
    """Per episode: its termination reason (``TerminationReason`` value; object array);
    None when the data did not say (arrays built by hand)."""
    user_event_counts: dict[str, np.ndarray] = field(default_factory=dict)
    """Per kind of user event (``EpisodeRecord.user_events``: ``not_understood``...), its
    count per episode; kinds no episode reported are absent."""
    answers: np.ndarray | None = None
    """Shape (episodes, len(ANSWER_COLUMNS)), float: the answer-level figures per episode
    (NaN: unknown, see :data:`ANSWER_COLUMNS`); None when the data did not say (arrays built
    by hand)."""

    @property
    def user_events(self) -> dict[str, int]:
        """Totals per kind of user event over the arm's scored episodes."""
        return {k: int(v.sum()) for k, v in sorted(self.user_event_counts.items())}

    def __post_init__(self) -> None:
        zeros = np.zeros(self.success.size, dtype=np.int64)
        if self.agent_calls is None:
            self.agent_calls = self.tool_calls.copy()
        if self.user_calls is None:
            self.user_calls = zeros.copy()
        if self.user_failed is None:
            self.user_failed = zeros.copy()

    @property
    def n(self) -> int:
        return int(self.success.size)

    def keys(self) -> list[tuple[str, int]]:
        return list(zip(self.task_ids.tolist(), self.trials.tolist(), strict=False))


class ArmAccumulator:
    """Streaming builder of :class:`ArmData`: call :meth:`add` per record, then
    :meth:`finish`. The first record of a (task, trial) wins; later ones count as
    duplicates."""

    def __init__(self, domain: str, arm: str) -> None:
        self.domain = domain
        self.arm = arm
        self._seen: set[tuple[str, int]] = set()
        self._task: list[str] = []
        self._trial: list[int] = []
        self._ints: list[tuple[int, ...]] = []
        self._tokens: list[float] = []
        self._dur: list[float] = []
        self._max_errors: int | None = None
        self._terms: Counter[str] = Counter()
        self._term_of: list[str] = []
        self._infra = 0
        self._dups = 0
        self._names: dict[Channel, Counter[str]] = {c: Counter() for c in NAMED_CHANNELS}
        self._margins: list[float] = []
        self._decisions: dict[tuple[str, int], tuple[tuple[str, ...], tuple[float, ...]]] = {}
        self._models: set[str] = set()
        self._backends: set[str] = set()
        self._user_sims: set[str] = set()
        self._user_failures: Counter[str] = Counter()
        self._user_events: list[dict[str, int]] = []
        self._answers: list[tuple[float, ...]] = []

    def add(self, record: EpisodeRecord) -> None:
        """Fold one record in (infrastructure errors are only counted)."""
        calls = record.calls
        self._fold(
            record.domain, record.arm, record.termination.value, record.task_id, record.trial,
            record.success, record.n_errors, record.steps, record.max_errors, record.model,
            record.backend, record.tokens, record.duration_s, record.user_sim,
            [c.requestor for c in calls], [c.name for c in calls], [c.error for c in calls],
            [c.channel.value if c.channel is not None else None for c in calls],
            [c.entity for c in calls],
            [(d.chosen or d.top1, d.margin) for d in record.decisions if d.kind == "tool_name"],
            record.user_events, record.turns,
        )

    def add_raw(self, d: LeanRecord) -> None:
        """Fold one record given as the dict of :data:`LEAN_RECORD` (the fast store path).

        Same result as :meth:`add` on the full record (tested), computed in one pass over the
        calls: this loop is where a 100k-episode analysis spends its time.
        """
        if d["domain"] != self.domain or d["arm"] != self.arm:
            raise ValueError(
                f"record of (domain={d['domain']!r}, arm={d['arm']!r}) added to the "
                f"accumulator of (domain={self.domain!r}, arm={self.arm!r})"
            )
        if d["termination"] in _UNSCORED:
            self._infra += 1
            return
        key = (d["task_id"], d["trial"])
        if key in self._seen:
            self._dups += 1
            return
        counts = [0] * len(ALL_CHANNELS)
        failures = recovered = 0
        awaiting_same: dict[tuple[str, str], int] = {}
        awaiting_next: set[str] = set()
        calls = d.get("calls", [])
        user_failures: Counter[str] = Counter()
        n_user = 0
        for c in calls:
            req = c["requestor"]
            n_user += req == "user"
            name = c["name"]
            if req in awaiting_next:
                awaiting_next.discard(req)
                if not c["error"]:
                    recovered += 1
            if c["error"]:
                failures += 1
                ch = c.get("channel")
                if ch is not None and not is_agent_channel_failure(req, ch):
                    user_failures[ch] += 1
                elif ch is not None:
                    counts[_CHANNEL_POS[ch]] += 1
                    if ch in _NAMED:
                        entity = c.get("entity")
                        value = entity if ch == _WRONG_ENTITY else (entity or name)
                        if value:
                            self._names[_CHANNEL_OF[ch]][value] += 1
                if ch in _NAME_MISTAKE:
                    awaiting_next.add(req)
                else:
                    k = (req, name)
                    awaiting_same[k] = awaiting_same.get(k, 0) + 1
            elif awaiting_same:
                recovered += awaiting_same.pop((req, name), 0)
        decisions = [(x.get("chosen") or x["top1"], x["margin"]) for x in d.get("decisions", [])
                     if x.get("kind", "tool_name") == "tool_name"]
        self._append(key, d["success"], d["n_errors"], d["steps"], len(calls), failures,
                     recovered, counts, d.get("tokens"), d.get("duration_s"), d["termination"],
                     d["max_errors"], d.get("model", ""), d.get("backend", ""), decisions,
                     d.get("user_sim", "scripted"), user_failures, n_user,
                     d.get("user_events") or {}, d.get("turns"))

    def _fold(
        self, domain: str, arm: str, termination: str, task_id: str, trial: int,
        success: bool, n_errors: int, steps: int, max_errors: int, model: str, backend: str,
        tokens: int | None, duration_s: float | None, user_sim: str, requestors: list[str],
        names: list[str], errors: list[bool], channels: list[str | None],
        entities: list[str | None], decisions: list[tuple[str, float]],
        user_events: dict[str, int] | None = None, turns: Iterable[object] | None = None,
    ) -> None:
        if domain != self.domain or arm != self.arm:
            raise ValueError(
                f"record of (domain={domain!r}, arm={arm!r}) added to the "
                f"accumulator of (domain={self.domain!r}, arm={self.arm!r})"
            )
        if termination in _UNSCORED:
            self._infra += 1
            return
        key = (task_id, trial)
        if key in self._seen:
            self._dups += 1
            return
        counts = [0] * len(ALL_CHANNELS)
        user_failures: Counter[str] = Counter()
        for i, ch in enumerate(channels):
            if ch is not None and not is_agent_channel_failure(requestors[i], ch):
                user_failures[ch] += 1
            elif ch is not None:
                counts[_CHANNEL_POS[ch]] += 1
                if ch in _NAMED:
                    value = entities[i] if ch == _WRONG_ENTITY else (entities[i] or names[i])
                    if value:
                        self._names[_CHANNEL_OF[ch]][value] += 1
        rec = count_recoveries(requestors, names, errors, channels)
        self._append(key, success, n_errors, steps, len(names), rec.failures, rec.recovered,
                     counts, tokens, duration_s, termination, max_errors, model, backend,
                     decisions, user_sim, user_failures, sum(r == "user" for r in requestors),
                     user_events or {}, turns)

    def _append(
        self, key: tuple[str, int], success: bool, n_errors: int, steps: int, n_calls: int,
        failures: int, recovered: int, counts: list[int], tokens: int | None,
        duration_s: float | None, termination: str, max_errors: int, model: str,
        backend: str, decisions: list[tuple[str, float]], user_sim: str,
        user_failures: Counter[str], n_user: int = 0,
        user_events: dict[str, int] | None = None, turns: Iterable[object] | None = None,
    ) -> None:
        self._seen.add(key)
        self._answers.append(answer_row(turns))
        self._user_events.append(dict(user_events or {}))
        self._user_sims.add(user_sim)
        self._user_failures.update(user_failures)
        self._models.add(model)
        self._backends.add(backend)
        self._task.append(key[0])
        self._trial.append(key[1])
        self._ints.append(
            (int(success), n_errors, steps, n_calls, failures, recovered,
             n_calls - n_user, n_user, sum(user_failures.values()), *counts)
        )
        self._tokens.append(math.nan if tokens is None else float(tokens))
        self._dur.append(math.nan if duration_s is None else float(duration_s))
        self._terms[termination] += 1
        self._term_of.append(str(getattr(termination, "value", termination)))
        self._max_errors = max_errors if self._max_errors is None else min(self._max_errors, max_errors)
        if decisions:
            margins = tuple(float(m) for _, m in decisions)
            self._margins.extend(margins)
            self._decisions[key] = (tuple(c for c, _ in decisions), margins)

    def extend(self, records: Iterable[EpisodeRecord]) -> ArmAccumulator:
        for r in records:
            self.add(r)
        return self

    def finish(self) -> ArmData:
        """The compact arrays (call once)."""
        nch = len(ALL_CHANNELS)
        ints = np.asarray(self._ints, dtype=np.int64).reshape(-1, 9 + nch)
        return ArmData(
            domain=self.domain,
            arm=self.arm,
            task_ids=np.asarray(self._task, dtype=object),
            trials=np.asarray(self._trial, dtype=np.int64),
            success=ints[:, 0].astype(bool),
            n_errors=ints[:, 1],
            steps=ints[:, 2],
            tool_calls=ints[:, 3],
            failures=ints[:, 4],
            recovered=ints[:, 5],
            channel_counts=ints[:, 9:],
            agent_calls=ints[:, 6],
            user_calls=ints[:, 7],
            user_failed=ints[:, 8],
            tokens=np.asarray(self._tokens, dtype=float),
            duration_s=np.asarray(self._dur, dtype=float),
            max_errors=10 if self._max_errors is None else self._max_errors,
            terminations=dict(self._terms),
            termination_of=np.asarray(self._term_of, dtype=object),
            infrastructure_errors=self._infra,
            duplicates=self._dups,
            names=self._names,
            margins=np.asarray(self._margins, dtype=float),
            decisions=self._decisions,
            models=self._models,
            backends=self._backends,
            user_sims=self._user_sims,
            user_failures=self._user_failures,
            user_event_counts={
                k: np.asarray([e.get(k, 0) for e in self._user_events], dtype=np.int64)
                for k in sorted({k for e in self._user_events for k in e})
            },
            answers=np.asarray(self._answers, dtype=float).reshape(-1, len(ANSWER_COLUMNS)),
        )


def summarize_arm(records: Iterable[EpisodeRecord], domain: str, arm: str) -> ArmData:
    """:class:`ArmData` of ``records`` (all of one domain and arm)."""
    return ArmAccumulator(domain, arm).extend(records).finish()

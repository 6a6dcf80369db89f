"""Read τ²-bench ``Results`` files into :class:`~pytest_quantagent.store.records.EpisodeRecord`.

Both storage formats of τ²-bench's ``Results`` (``src/tau2/data_model/simulation.py``) are
read:

- ``json``: one monolithic object ``{"timestamp", "info", "tasks", "simulations": [...]}``;
- ``dir``: ``results.json`` (the same object without simulations, with a
  ``simulation_index``) beside a ``simulations/`` folder of one ``<id>.json`` per
  simulation. Either the folder or its ``results.json`` may be given.

Monolithic files are streamed with ijson: one simulation is parsed, converted and dropped
before the next is read, so a multi-GB file never exists twice in memory. Leaderboard-trimmed
files (messages without ``error``, ``requestor`` and ``id``) are read too: a tool error is
then a tool message whose content starts with ``Error:``, a tool message answers the oldest
unanswered call, and the requestor is the role of the message that made the call.

Counting follows τ²-bench: every tool message with ``error`` (agent- or user-side) adds one
to the episode's error counter (``EpisodeRecord.n_errors``, what its ``max_errors`` budget
saw). Malformed turns that τ²-bench retried silently (a message's ``errors`` list) are
recorded as ``malformed_call`` calls but, as in τ²-bench, are not part of ``n_errors``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_quantagent.errors import DataFileError
from pytest_quantagent.store.records import CallRecord, EpisodeRecord
from pytest_quantagent.tau2.classify import (
    ToolNames,
    as_requestor,
    classify_error,
    is_error_text,
)
from pytest_quantagent.tau2.flags import VERSION_KEYS, Tau2Flags
from pytest_quantagent.tau2.messages import convert_messages
from pytest_quantagent.tau2.source import RESULTS_FILE, SIMULATIONS_DIR, Format, open_results
from pytest_quantagent.tau2.version import Provenance, Signals, detect, tools_of_version
from pytest_quantagent.vocab.channels import SCORABLE_TERMINATIONS, Channel, TerminationReason
from pytest_quantagent.vocab.messages import Requestor

#: τ²-bench termination strings that our taxonomy names differently. Both are scored 0 by
#: τ²-bench; ``context_window_exceeded`` is, like an infrastructure error, excluded from its
#: metric denominators (``NON_EVALUABLE_TERMINATION_REASONS``).
_EXTRA_TERMINATIONS: dict[str, TerminationReason] = {
    "context_window_exceeded": TerminationReason.INFRASTRUCTURE_ERROR,
    "unexpected_error": TerminationReason.AGENT_ERROR,
}
_KNOWN_TERMINATIONS = sorted({t.value for t in TerminationReason} | set(_EXTRA_TERMINATIONS))

#: Reward at or above this counts as a success (τ²-bench rewards are 0/1 products of floats).
SUCCESS_REWARD = 1.0 - 1e-6
#: Longest error text kept per failed call (malformed-turn texts repeat the whole turn).
MAX_DETAIL_CHARS = 4000
#: Longest task id accepted (τ²-bench's longest, telecom's compound ids, are under 300).
MAX_TASK_ID_CHARS = 1024

# τ²-bench's malformed-turn text repeats the rejected message, tool calls included.
_MALFORMED_NAME = re.compile(r"\nname: ([A-Za-z_][\w.-]*)")


@dataclass
class Tau2Run:
    """One τ²-bench results file, converted.

    ``records`` hold one :class:`EpisodeRecord` per simulation, in file order; the pairing
    key between two runs is ``(record.task_id, record.trial)``.
    """

    path: Path
    label: str
    """Arm label: the ``label`` given to :func:`read_results`, else the file name (the
    folder name for the directory format)."""
    domain: str
    """``info.environment_info.domain_name``."""
    model: str
    """``info.agent_info.llm`` ("unknown" when absent)."""
    format: Format
    info: dict[str, Any]
    """``info`` without the long texts (policy, user guidelines, tool definitions)."""
    records: list[EpisodeRecord] = field(default_factory=list)
    flags: Tau2Flags = field(default_factory=Tau2Flags)
    tools: ToolNames = field(default_factory=ToolNames)
    """The tool names failed calls were classified against (the file's version's list)."""

    @property
    def provenance(self) -> Provenance:
        """Producing version, branch and failure accounting (see :mod:`.version`)."""
        f = self.flags
        return Provenance(f.tau2_version, f.branch, f.accounting, tuple(f.evidence))

    @property
    def max_errors(self) -> int:
        return int(self.info.get("max_errors") or 10)

    def scored(self) -> list[EpisodeRecord]:
        """Records τ²-bench scores (infrastructure failures excluded)."""
        return [r for r in self.records if r.scored]

    def keys(self) -> set[tuple[str, int]]:
        """``(task_id, trial)`` of every episode."""
        return {(r.task_id, r.trial) for r in self.records}


def read_results(
    path: str | Path,
    *,
    label: str | None = None,
    backend: str = "tau2",
    tools: ToolNames | None = None,
    keep_messages: bool = False,
) -> Tau2Run:
    """Read a τ²-bench results file (monolithic JSON or directory format).

    Parameters
    ----------
    path
        A monolithic results ``.json``, a directory-format folder, or its ``results.json``.
    label
        Arm label for the records (default: the file name without ``.json``).
    backend
        ``EpisodeRecord.backend`` of the records (``"replay"`` when read as a replay arm).
    tools
        Agent/user tool names used to tell ``unknown_tool`` from ``cross_role_tool``.
        Default: the registered domain's lists (``env.registry.get_domain``) joined with the
        tool names the file itself shows to exist; only the latter when the domain is not
        registered (stated in ``flags.tool_names_source`` and ``flags.notes``).
    keep_messages
        Also convert every message into ``EpisodeRecord.messages`` and keep the full
        ``reward_info`` (costs memory; by default its check lists are reduced to counts).

    Raises
    ------
    DataFileError
        The path is missing, is not a τ²-bench results file, or is truncated/invalid; the
        error names the file and the JSON location (``simulations[3].messages[7]``).
    """
    p = Path(path)
    fmt, meta_path, info, sims = open_results(p)

    domain = _domain_name(meta_path, info)
    flags = Tau2Flags()
    version = _version(info)
    flags.set_version(version)
    names, source, note = _tool_names(domain, info, tools)
    # Classify names against the tool list of the file's version (get_item_details: 1.0.0).
    names = ToolNames.of(tools_of_version(domain, names.agent, version),
                         tools_of_version(domain, names.user, version))
    flags.tool_names_source = source
    if note:
        flags.notes.append(note)

    run_label = label or default_label(p)
    agent = info.get("agent_info") or {}
    model = str(agent.get("llm") or agent.get("implementation") or "unknown")
    ctx = _Context(
        path=meta_path,
        label=run_label,
        model=model,
        backend=backend,
        domain=domain,
        info=info,
        tools=names,
        keep_messages=keep_messages,
        flags=flags,
    )
    records = [ctx.convert(loc, sim) for loc, sim in sims]
    if "file" in source:
        ctx.reclassify_tool_names(records)
    ctx.signals.ok_tool_names = ctx.seen_agent | ctx.seen_user
    prov = detect(version, info, ctx.signals, domain)
    flags.branch, flags.accounting, flags.evidence = prov.branch, prov.accounting, list(prov.evidence)
    if not records:
        flags.notes.append("the file holds no simulations")
    return Tau2Run(
        path=meta_path,
        label=run_label,
        domain=domain,
        model=model,
        format=fmt,
        info=_summary(info),
        records=records,
        flags=flags,
        tools=ctx.tools,
    )


def default_label(path: str | Path) -> str:
    """The arm label of a results path: the file name without ``.json``; for the directory
    format (a folder, or a ``results.json`` beside ``simulations/``) the folder's name."""
    p = Path(path)
    if p.is_dir():
        return p.resolve().name
    if p.name == RESULTS_FILE and (p.parent / SIMULATIONS_DIR).is_dir():
        return p.resolve().parent.name
    return p.stem


# --------------------------------------------------------------------------- info


def _domain_name(path: Path, info: Mapping[str, Any]) -> str:
    env = info.get("environment_info")
    name = env.get("domain_name") if isinstance(env, dict) else None
    if not isinstance(name, str) or not name:
        raise DataFileError(
            path,
            "info.environment_info.domain_name",
            "missing: the domain of a tau2-bench results file comes from here",
        )
    return name


def _version(info: Mapping[str, Any]) -> str | None:
    # Results files have no version field; post-processors and leaderboard submissions
    # record it under one of these keys (a submission under "methodology").
    for where in (info, info.get("methodology")):
        if not isinstance(where, Mapping):
            continue
        for key in VERSION_KEYS:
            v = where.get(key)
            if isinstance(v, str) and v:
                return v
    return None


def _summary(info: Mapping[str, Any]) -> dict[str, Any]:
    keep = ("git_commit", "num_trials", "max_steps", "max_errors", "seed", *VERSION_KEYS)
    out: dict[str, Any] = {k: info[k] for k in keep if k in info}
    for side in ("agent_info", "user_info"):
        part = info.get(side)
        if isinstance(part, dict):
            out[side] = {k: part.get(k) for k in ("implementation", "llm", "llm_args")}
    return out


def _tool_names(
    domain: str, info: Mapping[str, Any], given: ToolNames | None
) -> tuple[ToolNames, str, str | None]:
    env = info.get("environment_info") or {}
    from_info = ToolNames.of(
        agent=(env.get("tool_defs") or {}).keys() if isinstance(env, dict) else (),
        user=(env.get("user_tool_defs") or {}).keys() if isinstance(env, dict) else (),
    )
    if given is not None:
        return given.union(from_info), "given", None
    try:
        from pytest_quantagent.env.registry import get_domain

        d = get_domain(domain)
        names = ToolNames.of(d.agent_tool_names, d.user_tool_names)
    except Exception as e:  # any failure only degrades classification; it is reported
        reason = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        return (
            from_info,
            "file",
            f"domain {domain!r} tool lists unavailable ({reason}); unknown vs cross-role "
            "tool names judged from the tool names the file shows to exist",
        )
    # A file that lists its tools (info.environment_info.tool_defs) is the tool list of its
    # own version: a name the registered domain has but the file's version lacked is a
    # hallucination there.
    if from_info.agent or from_info.user:
        names = ToolNames(from_info.agent or names.agent, from_info.user or names.user)
        return names, "tool_defs", None
    return names, "domain+file", None


# --------------------------------------------------------------------------- conversion


@dataclass
class _PendingCall:
    step: int
    requestor: Requestor
    name: str
    arguments: dict[str, Any] | None
    id: str | None


@dataclass
class _Context:
    path: Path
    label: str
    model: str
    backend: str
    domain: str
    info: Mapping[str, Any]
    tools: ToolNames
    keep_messages: bool
    flags: Tau2Flags
    seen_agent: set[str] = field(default_factory=set)
    seen_user: set[str] = field(default_factory=set)
    trials: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    keys: set[tuple[str, int]] = field(default_factory=set)
    signals: Signals = field(default_factory=Signals)

    def convert(self, loc: str, sim: dict[str, Any]) -> EpisodeRecord:
        task_id = sim.get("task_id")
        if task_id is None:
            raise DataFileError(self.path, f"{loc}.task_id", "missing")
        if isinstance(task_id, bool) or not isinstance(task_id, (str, int)):
            raise DataFileError(self.path, f"{loc}.task_id",
                                f"expected a string, got {type(task_id).__name__}")
        task_id = str(task_id)
        if len(task_id) > MAX_TASK_ID_CHARS:
            raise DataFileError(self.path, f"{loc}.task_id",
                                f"{len(task_id)} characters: task ids are at most "
                                f"{MAX_TASK_ID_CHARS} characters")
        raw_term = sim.get("termination_reason")
        if raw_term not in _KNOWN_TERMINATIONS:
            raise DataFileError(
                self.path,
                f"{loc}.termination_reason",
                f"unknown value {raw_term!r}; known values: " + ", ".join(_KNOWN_TERMINATIONS),
            )
        termination = _EXTRA_TERMINATIONS.get(raw_term) or TerminationReason(raw_term)
        self.signals.terminations.add(str(raw_term))
        trial = sim.get("trial")
        if trial is None:
            # Old files lack ``trial``: number repeats of a task in file order instead.
            trial = self.trials[task_id]
        elif isinstance(trial, bool) or not isinstance(trial, int) or trial < 0:
            raise DataFileError(
                self.path, f"{loc}.trial", f"expected a whole number >= 0, got {trial!r:.60}"
            )
        self.trials[task_id] += 1
        messages = sim.get("messages")
        if messages is None:
            if "ticks" not in sim:
                # Reading this as an episode with no tool calls would count it as clean.
                raise DataFileError(
                    self.path,
                    f"{loc}.messages",
                    "missing (and no voice 'ticks'): a simulation without its messages has no "
                    "tool calls to read; re-export the results with their trajectories",
                )
            self.flags.tick_only += 1
            self.signals.ticks = True
            messages = []
        if not isinstance(messages, list):
            raise DataFileError(
                self.path, f"{loc}.messages", f"expected a list, got {type(messages).__name__}"
            )
        reward_info = sim.get("reward_info")
        if reward_info is not None and not isinstance(reward_info, dict):
            raise DataFileError(
                self.path,
                f"{loc}.reward_info",
                f"expected an object, got {type(reward_info).__name__}",
            )
        reward = _reward(self.path, loc, reward_info)
        messages = _flatten(messages)
        calls, n_errors = self._calls(loc, messages)
        self.flags.count(str(raw_term), task_id, int(trial))
        if (task_id, int(trial)) in self.keys:
            self.flags.duplicate_keys += 1
        self.keys.add((task_id, int(trial)))
        seed = sim.get("seed", self.info.get("seed"))
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            where = f"{loc}.seed" if "seed" in sim else "info.seed"
            raise DataFileError(self.path, where, f"expected a whole number, got {seed!r:.60}")
        sim_id = str(sim.get("id") or f"{task_id}-{trial}")
        record = EpisodeRecord(
            key=_key(self.label, sim_id, task_id, int(trial)),
            model=self.model,
            arm=self.label,
            backend=self.backend,
            domain=self.domain,
            task_id=task_id,
            trial=int(trial),
            seed=int(seed) if seed is not None else 0,
            max_errors=int(self.info.get("max_errors") or 10),
            max_steps=int(self.info.get("max_steps") or 200),
            user_sim=str((self.info.get("user_info") or {}).get("implementation") or "tau2"),
            termination=termination,
            reward=reward,
            success=reward >= SUCCESS_REWARD and termination in SCORABLE_TERMINATIONS,
            reward_info=(reward_info or {}) if self.keep_messages else _slim(reward_info),
            n_errors=n_errors,
            steps=len(messages),
            calls=calls,
            messages=convert_messages(messages) if self.keep_messages else [],
            duration_s=_float_or_none(sim.get("duration")),
            error_message=(
                f"tau2-bench termination: {raw_term}" if raw_term in _EXTRA_TERMINATIONS else None
            ),
        )
        return record

    def _calls(self, loc: str, messages: list[Any]) -> tuple[list[CallRecord], int]:
        calls: list[CallRecord] = []
        pending: deque[_PendingCall] = deque()
        n_errors = 0
        for idx, m in enumerate(messages):
            if not isinstance(m, dict):
                raise DataFileError(
                    self.path,
                    f"{loc}.messages[{idx}]",
                    f"expected a message object, got {type(m).__name__}",
                )
            role = m.get("role")
            if "errors" in m:
                self.signals.message_errors = True
            if role in ("assistant", "user"):
                requestor: Requestor = role
                for err in m.get("errors") or []:
                    self.flags.hidden_malformed += 1
                    name = _MALFORMED_NAME.search(str(err))
                    calls.append(
                        CallRecord(
                            step=idx,
                            requestor=requestor,
                            name=name.group(1) if name else "",
                            error=True,
                            channel=Channel.MALFORMED_CALL,
                            detail=_clip(str(err)),
                        )
                    )
                for j, tc in enumerate(m.get("tool_calls") or []):
                    if not isinstance(tc, dict) or not isinstance(tc.get("name"), str):
                        raise DataFileError(
                            self.path,
                            f"{loc}.messages[{idx}].tool_calls[{j}]",
                            "a tool call needs a string 'name'",
                        )
                    req = as_requestor(tc.get("requestor"), requestor)
                    args = tc.get("arguments")
                    if args is not None and not isinstance(args, (dict, str)):
                        raise DataFileError(
                            self.path, f"{loc}.messages[{idx}].tool_calls[{j}].arguments",
                            f"expected an object, got {type(args).__name__}")
                    pending.append(
                        _PendingCall(
                            idx,
                            req,
                            tc["name"],
                            args if isinstance(args, dict) else None,
                            tc.get("id"),
                        )
                    )
            elif role == "tool":
                if "error" not in m or "requestor" not in m or "id" not in m:
                    self.flags.trimmed = True
                call = _take(pending, m.get("id"))
                content = m.get("content")
                if content is not None and not isinstance(content, str):
                    raise DataFileError(self.path, f"{loc}.messages[{idx}].content",
                                        f"expected a string, got {type(content).__name__}")
                content = content if isinstance(content, str) else json.dumps(content)
                error = bool(m["error"]) if "error" in m else is_error_text(content)
                if call is None:
                    raise DataFileError(
                        self.path, f"{loc}.messages[{idx}]", "tool message answers no tool call"
                    )
                requestor = as_requestor(m.get("requestor"), call.requestor)
                calls.append(self._call(call, requestor, error, content))
                if error:
                    n_errors += 1
            elif role not in ("system",):
                raise DataFileError(
                    self.path,
                    f"{loc}.messages[{idx}].role",
                    f"unknown value {role!r}; known values: assistant, system, tool, user",
                )
        for call in pending:  # calls the episode ended before answering
            calls.append(
                CallRecord(
                    step=call.step,
                    requestor=call.requestor,
                    name=call.name,
                    error=False,
                    arguments=call.arguments,
                    detail="no tool response recorded",
                )
            )
        calls.sort(key=lambda c: c.step)
        return calls, n_errors

    def _call(
        self, call: _PendingCall, requestor: Requestor, error: bool, content: str
    ) -> CallRecord:
        if not error:
            (self.seen_agent if requestor == "assistant" else self.seen_user).add(call.name)
            return CallRecord(
                step=call.step,
                requestor=requestor,
                name=call.name,
                error=False,
                arguments=call.arguments,
            )
        c = classify_error(
            content,
            tool_name=call.name,
            requestor=requestor,
            tools=self.tools,
            arguments=call.arguments,
        )
        return CallRecord(
            step=call.step,
            requestor=requestor,
            name=call.name,
            error=True,
            channel=c.channel,
            entity=c.entity,
            detail=_clip(content),
            arguments=call.arguments,
        )

    def reclassify_tool_names(self, records: list[EpisodeRecord]) -> None:
        """Unknown vs cross-role needs every tool name the file shows to exist; those are
        known only once the whole file has been read."""
        names = self.tools.union(ToolNames.of(self.seen_agent, self.seen_user))
        for r in records:
            for c in r.calls:
                if c.channel in (Channel.UNKNOWN_TOOL, Channel.CROSS_ROLE_TOOL) and c.detail:
                    new = classify_error(
                        c.detail,
                        tool_name=c.name,
                        requestor=c.requestor,
                        tools=names,
                        arguments=c.arguments,
                    )
                    c.channel, c.entity = new.channel, new.entity


_CHECK_LISTS = ("env_assertions", "action_checks", "nl_assertions", "communicate_checks")


def _slim(reward_info: dict[str, Any] | None) -> dict[str, Any]:
    """The reward and its basis, with each list of checks reduced to counts: the full
    checks repeat every gold action's arguments and would dominate a large run's memory."""
    if not reward_info:
        return {}
    keep = ("reward", "db_check", "reward_basis", "reward_breakdown")
    out: dict[str, Any] = {k: reward_info[k] for k in keep if k in reward_info}
    for key in _CHECK_LISTS:
        checks = reward_info.get(key)
        if isinstance(checks, list):
            passed = sum(
                1 for c in checks if isinstance(c, dict) and (c.get("action_match") or c.get("met"))
            )
            out[key] = {"n": len(checks), "passed": passed}
    return out


def _flatten(messages: list[Any]) -> list[Any]:
    # τ²-bench's MultiToolMessage (role "tool", ``tool_messages``) bundles the results of
    # one turn's parallel calls; trajectories normally store them one by one.
    if not any(isinstance(m, dict) and "tool_messages" in m for m in messages):
        return messages
    out: list[Any] = []
    for m in messages:
        if isinstance(m, dict) and isinstance(m.get("tool_messages"), list):
            out.extend(m["tool_messages"])
        else:
            out.append(m)
    return out


def _take(pending: deque[_PendingCall], call_id: Any) -> _PendingCall | None:
    if call_id is not None:
        for call in pending:
            if call.id == call_id:
                pending.remove(call)
                return call
    return pending.popleft() if pending else None


def _key(label: str, sim_id: str, task_id: str, trial: int) -> str:
    digest = hashlib.sha256(f"{label}\0{sim_id}\0{task_id}\0{trial}".encode()).hexdigest()
    return f"tau2-{digest[:32]}"


def _clip(text: str) -> str:
    return text if len(text) <= MAX_DETAIL_CHARS else text[:MAX_DETAIL_CHARS] + " ..."


def _reward(path: Path, loc: str, reward_info: dict[str, Any] | None) -> float:
    """``reward_info.reward`` as a float in [0, 1] (absent or null: 0, as τ²-bench)."""
    v = (reward_info or {}).get("reward")
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.0:
        raise DataFileError(
            path, f"{loc}.reward_info.reward", f"expected a number from 0 to 1, got {v!r:.60}"
        )
    return float(v)


def _float_or_none(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) else None

"""Plays one fidelity-corpus case against the domain's scripted user and the real environment.

A case (one JSONL line of ``tests/user/fidelity/*.jsonl``) is a short conversation context —
a bundled task (its scenario and initial state), optional ``device`` attributes of the phone,
optional ``setup`` environment calls (e.g. an agent-side ``send_payment_request``), optional
earlier agent messages (``before``) — and one agent message with the expected reaction:

``calls``   the user's device calls in order (names; ``args`` pins arguments of some);
``say`` / ``not_say``  substrings (case-insensitive) of the user's final text;
``answer``  "yes" / "no": the reply starts by agreeing or declining;
``end``     "continue" (default), "stop" or "transfer": the token the reply ends with.

A case with ``"tau2": true`` names an official τ²-bench task (its ``task`` is the official id):
it is played on the official data (``$QUANTAGENT_TAU2_DATA`` or ``../shared/tau2`` beside the
repository), and skipped when that data is absent (:func:`tau2_root`, :func:`playable`).

``alt`` lists other acceptable reactions (see :func:`_judge`). A state-changing device call
that the expected reaction does not have is a *spurious state change*.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.registry import get_domain, get_domain_for_split
from pytest_quantagent.env.tasks import EnvFunctionCall
from pytest_quantagent.env.toolkit import ToolError
from pytest_quantagent.vocab.messages import (
    OUT_OF_SCOPE_TOKEN,
    STOP_TOKEN,
    TRANSFER_TOKEN,
    AssistantMessage,
    Message,
    ToolMessage,
)

CORPUS = Path(__file__).parent / "fidelity"
GREETING = "Hi! How can I help you today?"
_YES = re.compile(r"^\W*(?:yes|yeah|yep|sure|ok|okay|please do|go ahead|that's (?:right|correct))\b", re.I)
_NO = re.compile(r"^\W*(?:no|nope|please don't|i don't want)\b", re.I)


@dataclass
class Result:
    case: dict[str, Any]
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    text: str = ""
    problems: list[str] = field(default_factory=list)
    spurious_writes: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not self.problems


def load(pattern: str = "*.jsonl") -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for path in sorted(CORPUS.glob(pattern)):
        domain = path.name.split("_")[0]
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                case = json.loads(line)
                case.setdefault("domain", domain)
                case["_where"] = f"{path.name}:{n}"
                cases.append(case)
    return cases


def tau2_root() -> Path | None:
    """The τ²-bench data folder (``$QUANTAGENT_TAU2_DATA``, else ``../shared/tau2`` beside the
    repository), or None when absent."""
    env = os.environ.get("QUANTAGENT_TAU2_DATA")
    here = Path(__file__).resolve().parents[2]
    for c in ([Path(env)] if env else []) + [here.parent / "shared" / "tau2", here.parents[1] / "shared" / "tau2"]:
        if (c / "domains").is_dir():
            return c
    return None


def playable(case: dict[str, Any]) -> bool:
    """False for an official-task case when the τ²-bench data is absent."""
    return not case.get("tau2") or tau2_root() is not None


@cache
def _domain(name: str, official: bool = False) -> Domain:
    if official:
        root = tau2_root()
        assert root is not None, "official-task case without τ²-bench data (check playable())"
        return get_domain_for_split(name, tau2_data=root, split="base")
    return get_domain(name)


def play(case: dict[str, Any]) -> Result:
    domain = _domain(case["domain"], bool(case.get("tau2")))
    task = next(t for t in domain.tasks if t.id == case["task"])
    env = domain.make_environment(task)
    user: Any = domain.make_user(task, seed=case.get("seed", 0))
    device = case.get("device")
    if device:
        assert env.user_tools is not None
        env.user_tools.db.update_device(device)
        if getattr(user, "phone", None) is not None:
            user.phone.db.update_device(device)
    for call in case.get("setup", []):
        env.run_env_function_call(EnvFunctionCall.model_validate(call))
        phone = getattr(user, "phone", None)
        if call.get("env_type") == "user" and phone is not None:
            # The user's copy of its phone starts from the task's initial state and follows
            # its own calls (in an episode only the user changes the phone): a user-side
            # setup call is the user's, so its copy follows it too.
            try:
                getattr(phone, call["func_name"])(**call.get("arguments", {}))
            except ToolError:
                pass  # as TelecomUser._call: what agent-side setup made possible is not on the copy
    env.sync_tools()
    view: list[Message] = [AssistantMessage(content=GREETING)]
    result = Result(case)


    def turn(text: str, record: bool) -> str:
        view.append(AssistantMessage(content=text))
        for _ in range(20):
            um = user.respond(view)
            view.append(um)
            if not um.tool_calls:
                return um.content or ""
            for tc in um.tool_calls:
                tc = tc.model_copy(update={"requestor": "user"})
                tm = env.get_response(tc)
                env.sync_tools()
                if record:
                    result.calls.append((tc.name, dict(tc.arguments)))
                view.append(ToolMessage(id=tc.id, content=tm.content, requestor="user", error=tm.error))
        raise AssertionError("the user kept calling tools")

    view.append(user.respond(view))  # the opening request
    for earlier in case.get("before", []):
        turn(earlier, record=False)
    result.text = turn(case["agent"], record=True)
    _judge(domain, result)
    return result


def _judge(domain: Domain, r: Result) -> None:
    """Problems against ``expect``; an ``alt`` list holds other acceptable reactions
    (each overrides some keys of ``expect``: a state question may be answered from what the
    phone shows or by reading it with its check tool)."""
    problems = _problems(domain, r, r.case["expect"])
    for alt in r.case.get("alt", []):
        if problems:
            other = _problems(domain, r, {**r.case["expect"], **alt})
            problems = other if not other else problems
    r.problems = problems
    exp = r.case["expect"]
    want = list(exp.get("calls", []))
    for alt in r.case.get("alt", []):
        if not problems and "calls" in alt and [n for n, _ in r.calls] == alt["calls"]:
            want = list(alt["calls"])
    got = [name for name, _ in r.calls]
    for name in got:
        if domain.tool_type(name).value == "write" and got.count(name) > want.count(name):
            r.spurious_writes.append(name)
    r.spurious_writes = sorted(set(r.spurious_writes))


def _problems(domain: Domain, r: Result, exp: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    text, low = r.text, r.text.lower()
    want = list(exp.get("calls", []))
    got = [name for name, _ in r.calls]
    if got != want:
        problems.append(f"calls {got} != expected {want}")
    for name, args in exp.get("args", {}).items():
        for n, a in r.calls:
            if n == name and {k: a.get(k) for k in args} != args:
                problems.append(f"{name} arguments {a} do not have {args}")
    for s in exp.get("say", []):
        if s.lower() not in low:
            problems.append(f"reply lacks {s!r}")
    for s in exp.get("not_say", []):
        if s.lower() in low:
            problems.append(f"reply says {s!r}")
    answer = exp.get("answer")
    if answer == "yes" and not _YES.search(text):
        problems.append("reply does not agree")
    if answer == "no" and not _NO.search(text):
        problems.append("reply does not decline")
    end = exp.get("end", "continue")
    ended = (
        "transfer" if TRANSFER_TOKEN in text else "stop" if STOP_TOKEN in text
        else "out_of_scope" if OUT_OF_SCOPE_TOKEN in text else "continue"
    )
    if ended != end:
        problems.append(f"ended {ended!r}, expected {end!r}")
    return problems


def report(results: list[Result]) -> dict[str, Any]:
    """Exact-reaction rates overall and per domain, spurious state changes, misses."""
    out: dict[str, Any] = {"cases": len(results)}
    out["exact"] = sum(r.exact for r in results) / max(1, len(results))
    for d in sorted({r.case["domain"] for r in results}):
        rs = [r for r in results if r.case["domain"] == d]
        out[f"exact_{d}"] = sum(r.exact for r in rs) / len(rs)
        out[f"cases_{d}"] = len(rs)
    out["spurious_state_changes"] = sum(len(r.spurious_writes) for r in results)
    out["misses"] = [
        f"{r.case['_where']} {r.case['id']}: {'; '.join(r.problems)} | said: {r.text[:160]!r}"
        for r in results if not r.exact
    ]
    return out


if __name__ == "__main__":  # python3 -m tests.user.fidelity_harness [GLOB], from the repo root
    import sys

    res = [play(c) for c in load(sys.argv[1] if len(sys.argv) > 1 else "*.jsonl") if playable(c)]
    rep = report(res)
    for m in rep.pop("misses"):
        print("MISS", m)
    print(json.dumps(rep, indent=1))

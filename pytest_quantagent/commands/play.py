"""``quantagent play``: you are the agent, against the scripted user and the real environment.

Type what the agent says, or ``/call NAME {json}`` to call one of the agent's tools. The
user's replies, its own device actions and every tool result are printed; at the end the
reward and its breakdown. Lines come from the terminal or from a script piped on stdin
(one agent turn per line), so the same command probes the simulator by hand and in tests.

A ``\\n`` in a typed line is a line break, so a markdown list fits on one line.
Commands: ``/call NAME {json}``, ``/tools`` (the agent's tools), ``/stop`` (end the
conversation as the agent), ``/help``. End of input ends the conversation too. A bad
``/call`` (unknown tool, bad JSON) is reported and the game goes on.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from pytest_quantagent.errors import EXIT_INTERRUPTED, EXIT_USAGE, QuantAgentError

HELP = (
    "Type the agent's message (\\n in it is a line break), or:\n"
    "  /call NAME {json}   call an agent tool (arguments as a JSON object; {} if none)\n"
    "  /tools              list the agent's tools\n"
    "  /stop               end the conversation (the agent's ###STOP###)\n"
    "  /help               this text"
)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "play",
        help="play the agent yourself against the scripted user and the real environment",
        description="Play the agent against a task's scripted user and the real environment: "
        "type text or '/call NAME {json}' (or pipe a script on stdin, one turn per line); the "
        "user's replies and the tool results are printed, then the reward and its breakdown.",
    )
    p.add_argument("--domain", required=True, help="domain name (see `quantagent domains`)")
    p.add_argument("--task", default=None, metavar="ID",
                   help="task id (default: the first task of the test split, else the first task)")
    p.add_argument("--tau2-data", type=Path, default=None, metavar="DIR",
                   help="a tau2-bench data dir laid out as DIR/domains/<domain>/ (official tasks and DB)")
    p.add_argument("--tau2-tasks", default=None, metavar="FILE",
                   help="task file name inside the domain dir (default: tasks.json)")
    p.add_argument("--seed", type=int, default=0, help="scripted-user seed (default 0)")
    p.add_argument("--max-errors", type=int, default=10, metavar="K",
                   help="end at the K-th failed tool call (default 10, as tau2-bench)")
    p.add_argument("--max-steps", type=int, default=200, metavar="N", help="step limit (default 200)")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="save the episode to this episode store (arm 'human')")


class BadCall(ValueError):
    """A ``/call`` line that cannot be executed (the message says why)."""


def parse_call(line: str, tools: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """``/call NAME {json}`` → (name, arguments); :class:`BadCall` naming what is wrong."""
    rest = line[len("/call"):].strip()
    if not rest:
        raise BadCall("usage: /call NAME {json}")
    name, _, raw = rest.partition(" ")
    if name not in tools:
        raise BadCall(f"unknown tool {name!r}; the agent's tools are: {', '.join(sorted(tools))}")
    raw = raw.strip() or "{}"
    try:
        args = json.loads(raw)
    except json.JSONDecodeError as e:
        raise BadCall(f"bad JSON arguments for {name}: {e.msg} at column {e.colno} in {raw!r}") from None
    if not isinstance(args, dict):
        raise BadCall(f"arguments for {name} must be a JSON object, got {type(args).__name__}")
    return name, args


class _Console:
    def __init__(self, out: IO[str]) -> None:
        self.out = out

    def say(self, who: str, text: str) -> None:
        lines = text.splitlines() or [""]
        self.out.write(f"{who}: {lines[0]}\n")
        for line in lines[1:]:
            self.out.write(f"{' ' * (len(who) + 2)}{line}\n")
        self.out.flush()


class HumanAgent:
    """The runner's ``Agent`` protocol, answered by lines of ``stream``."""

    def __init__(self, tools: Sequence[str], stream: IO[str], console: _Console,
                 prompt: str = "agent> ") -> None:
        self.tools = list(tools)
        self.stream = stream
        self.console = console
        self.prompt = prompt
        self._seen = 0
        self._n = 0
        isatty = getattr(stream, "isatty", None)
        self._echo = not (callable(isatty) and isatty())  # a piped script: show its lines

    async def act(self, view: list[Any]) -> Any:
        from pytest_quantagent.vocab.messages import STOP_TOKEN as AGENT_STOP_TOKEN
        from pytest_quantagent.vocab.messages import (
            AssistantMessage,
            ToolCall,
            ToolMessage,
            UserMessage,
        )

        for m in view[self._seen:]:
            if isinstance(m, UserMessage) and m.content:
                self.console.say("user", m.content)
            elif isinstance(m, ToolMessage):
                self.console.say("tool" + (" ERROR" if m.error else ""), m.content)
        self._seen = len(view) + 1  # + the message returned now
        while True:
            self.console.out.write(self.prompt)
            self.console.out.flush()
            line = self.stream.readline()
            if not line:  # end of input
                self.console.out.write("\n")
                return AssistantMessage(content=AGENT_STOP_TOKEN)
            line = line.strip()
            if self._echo:
                self.console.out.write(line + "\n")
            if not line:
                continue
            if line in ("/help", "/?"):
                self.console.say("help", HELP)
                continue
            if line == "/tools":
                self.console.say("tools", ", ".join(sorted(self.tools)))
                continue
            if line in ("/stop", "/quit", "/exit"):
                return AssistantMessage(content=AGENT_STOP_TOKEN)
            if line.startswith("/call"):
                try:
                    name, args = parse_call(line, self.tools)
                except BadCall as e:
                    self.console.say("error", str(e))
                    continue
                self._n += 1
                call = ToolCall(id=f"play_{self._n}", name=name, arguments=args, requestor="assistant")
                return AssistantMessage(tool_calls=[call])
            if line.startswith("/"):
                self.console.say("error", f"unknown command {line.split()[0]!r}; /help lists them")
                continue
            # "\n" in a typed line is a line break (markdown lists fit on one input line).
            return AssistantMessage(content=line.replace("\\n", "\n"))


class ShownUser:
    """Wraps the scripted user so its own device actions and their results are shown."""

    def __init__(self, user: Any, console: _Console) -> None:
        self.user = user
        self.console = console

    async def act(self, view: list[Any]) -> Any:
        from pytest_quantagent.vocab.messages import ToolMessage

        if view and isinstance(view[-1], ToolMessage):
            m = view[-1]
            self.console.say("  device" + (" ERROR" if m.error else ""), m.content)
        msg = await self.user.act(view)
        for tc in msg.tool_calls or []:
            self.console.say("  user calls", f"{tc.name} {json.dumps(tc.arguments, sort_keys=True)}")
        return msg


def _breakdown(outcome: Any) -> list[str]:
    info = outcome.reward_info
    lines = [f"termination: {outcome.termination.value}", f"reward: {info.reward:g}",
             f"failed tool calls: {outcome.n_errors} "
             f"(agent {sum(1 for c in outcome.calls if c.error and c.requestor == 'assistant')}, "
             f"user {sum(1 for c in outcome.calls if c.error and c.requestor == 'user')})"]
    if info.db_match is not None:
        lines.append(f"DB matches the gold replay: {'yes' if info.db_match else 'NO'}")
    for a in info.env_assertions:
        lines.append(f"env assertion {a['func_name']}: {'met' if a['met'] else 'NOT met'}")
    for a in info.action_checks:
        lines.append(f"action {a['action_id']}: {'done' if a['met'] else 'NOT done'}")
    for c in info.communicate_checks:
        lines.append(f"communicated {c['info']!r}: {'yes' if c['met'] else 'NO'}")
    if info.not_evaluated:
        lines.append(f"not evaluated: {', '.join(info.not_evaluated)}")
    if info.note:
        lines.append(f"note: {info.note}")
    if outcome.error_message:
        lines.append(f"error: {outcome.error_message}")
    return lines


def _save(out_dir: Path, domain: str, task_id: str, seed: int, max_errors: int, max_steps: int,
          outcome: Any) -> str:
    from pytest_quantagent.store.jsonl import EpisodeStore
    from pytest_quantagent.store.records import EpisodeRecord
    from pytest_quantagent.vocab.channels import TerminationReason

    body = json.dumps([m.model_dump(mode="json") for m in outcome.messages], sort_keys=True)
    key = "play-" + hashlib.sha256(f"{domain}\0{task_id}\0{seed}\0{body}".encode()).hexdigest()[:24]
    termination = TerminationReason(outcome.termination)
    record = EpisodeRecord(
        key=key, model="human", arm="human", backend="play", domain=domain, task_id=task_id,
        trial=0, seed=seed, max_errors=max_errors, max_steps=max_steps, user_sim="scripted",
        termination=termination, reward=float(outcome.reward),
        success=float(outcome.reward) >= 1 - 1e-6 and termination.value not in (
            "infrastructure_error", "agent_error", "user_error"),
        reward_info=outcome.reward_info.model_dump(mode="json")
        if hasattr(outcome.reward_info, "model_dump") else dict(vars(outcome.reward_info)),
        n_errors=outcome.n_errors, steps=outcome.steps, calls=list(outcome.calls),
        messages=list(outcome.messages), error_message=outcome.error_message,
    )
    store = EpisodeStore(out_dir)
    try:
        store.append(record)
    finally:
        store.close()
    return key


def play(domain_name: str, task_id: str | None, stream: IO[str], out: IO[str], *,
         tau2_data: Path | None = None, tasks_file: str | None = None, seed: int = 0,
         max_errors: int = 10, max_steps: int = 200, save_to: Path | None = None) -> Any:
    """Play one episode with lines of ``stream`` as the agent; returns the outcome."""
    from pytest_quantagent.env.registry import get_domain
    from pytest_quantagent.env.tasks import select_tasks
    from pytest_quantagent.runner.episode import run_episode

    if max_errors < 1:
        raise QuantAgentError(f"--max-errors must be >= 1, got {max_errors}")
    if max_steps < 1:
        raise QuantAgentError(f"--max-steps must be >= 1, got {max_steps}")
    domain = get_domain(domain_name, tau2_data=tau2_data, tasks_file=tasks_file)
    if task_id is not None:
        (task,) = select_tasks(domain.tasks, [task_id])
    else:
        test = domain.splits.get("test") or [t.id for t in domain.tasks]
        (task,) = select_tasks(domain.tasks, [test[0]])
    console = _Console(out)
    tools = sorted(domain.agent_tool_names)
    console.say("task", f"{task.id} ({domain.name}); /help for commands, /tools for the tools")
    ins = task.structured_instructions
    if ins is not None:
        console.say("scenario", ins.reason_for_call)
    env = domain.make_environment(task)
    outcome = asyncio.run(run_episode(
        domain=domain, task=task, agent=HumanAgent(tools, stream, console),
        user=ShownUser(domain.make_user(task, seed), console),
        max_steps=max_steps, max_errors=max_errors, env=env,
    ))
    last = outcome.messages[-1] if outcome.messages else None
    said = getattr(last, "content", None) if last is not None and last.role == "user" else None
    if isinstance(said, str) and said:
        console.say("user", said)
    console.say("result", "\n".join(_breakdown(outcome)))
    if save_to is not None:
        key = _save(save_to, domain.name, task.id, seed, max_errors, max_steps, outcome)
        console.say("saved", f"{save_to} (key {key})")
    return outcome


def run(args: argparse.Namespace) -> int:
    try:
        play(args.domain, args.task, sys.stdin, sys.stdout, tau2_data=args.tau2_data,
             tasks_file=args.tau2_tasks, seed=args.seed, max_errors=args.max_errors,
             max_steps=args.max_steps, save_to=args.out)
    except QuantAgentError as e:
        print(f"quantagent play: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\nquantagent play: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0

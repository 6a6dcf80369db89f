"""``quantagent fidelity``: re-execute a τ²-bench results file's tool calls on our engine.

Every episode of the results file is replayed in order on a fresh environment built from
the official DB and the task's initial state; each tool call (agent- and user-side) is
executed and its result compared with the recorded tool message, as parsed JSON (plain
text when not JSON) and by error status. A perfect match means our tools reproduce
τ²-bench's, byte for byte up to JSON formatting.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from pathlib import Path
from typing import Any

from pytest_quantagent.env.tasks import Task, parse_tasks
from pytest_quantagent.env.tasksets import tau2_data_arg
from pytest_quantagent.errors import EXIT_USAGE, DataFileError, QuantAgentError
from pytest_quantagent.vocab.messages import ToolCall, ToolMessage


def add_parser(subparsers: Any, name: str = "fidelity",
               help: str = "re-execute the tool calls of a tau2-bench results file") -> None:
    p = subparsers.add_parser(
        name, help=help,
        description="Re-execute every tool call of a tau2-bench results file on our engine "
        "(official DB, each task's initial state) and compare each result with the recorded one.",
    )
    p.add_argument("--tau2-results", type=Path, required=True, metavar="FILE",
                   help="a tau2-bench results JSON file")
    p.add_argument("--tau2-data", type=tau2_data_arg("--tau2-data"), required=True, metavar="DIR",
                   help="a tau2-bench checkout or its data/tau2 folder (DIR/domains/<domain>/)")
    p.add_argument("--domain", default=None, help="domain (default: from the results file)")
    p.add_argument("--tau2-tasks", default=None, metavar="FILE",
                   help="task file name inside the domain dir (default: tasks.json)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _parsed(content: Any) -> Any:
    if not isinstance(content, str):
        return content
    try:
        return json.loads(content)
    except json.JSONDecodeError:
        return content


def _load_results(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataFileError(path, "", "file not found") from None
    except json.JSONDecodeError as e:
        raise DataFileError(path, f"line {e.lineno} column {e.colno}", f"invalid JSON: {e.msg}") from None
    if not isinstance(data, dict) or not isinstance(data.get("simulations"), list):
        raise DataFileError(path, "", "not a tau2-bench results file (no 'simulations' list)")
    return data


def replay_results(results_file: Path, tau2_data: Path, domain_name: str | None = None,
                   tasks_file: str | None = None) -> dict[str, Any]:
    """Replay every tool call of ``results_file``; the summary printed by the command."""
    from pytest_quantagent.env.registry import get_domain, get_domain_for_split
    from pytest_quantagent.tau2.reader import _version
    from pytest_quantagent.tau2.version import tools_of_version

    data = _load_results(results_file)
    if domain_name is None:
        env_info = (data.get("info") or {}).get("environment_info") or {}
        domain_name = env_info.get("domain_name")
        if not domain_name:
            raise DataFileError(results_file, "info.environment_info.domain_name",
                                "missing; pass --domain")
    if tasks_file is None:
        domain = get_domain_for_split(domain_name, tau2_data, None)
    else:
        domain = get_domain(domain_name, tau2_data=tau2_data, tasks_file=tasks_file)
    # Tools the file's τ²-bench version did not have yet (retail get_item_details before
    # 1.0.0): there a call to one is an unknown tool, whatever our engine would answer.
    raw_info = data.get("info")
    version = _version(raw_info) if isinstance(raw_info, dict) else None
    names = domain.agent_tool_names | domain.user_tool_names
    not_yet = names - tools_of_version(domain_name, names, version)
    embedded: dict[str, Task] = {}
    if isinstance(data.get("tasks"), list):
        embedded = {t.id: t for t in parse_tasks(data["tasks"], f"{results_file}: tasks")}

    episodes = calls = matched = 0
    mismatches: list[dict[str, Any]] = []
    for si, sim in enumerate(data["simulations"]):
        tid = str(sim.get("task_id"))
        try:
            task = domain.task(tid)
        except QuantAgentError:
            if tid not in embedded:
                raise DataFileError(results_file, f"simulations[{si}].task_id",
                                    f"task {tid!r} is neither in the data dir nor in the file") from None
            task = embedded[tid]
        env = domain.make_environment(task)
        episodes += 1
        waiting: deque[tuple[int, dict[str, Any]]] = deque()
        by_id: dict[str, tuple[int, dict[str, Any]]] = {}
        for mi, m in enumerate(sim.get("messages") or []):
            role = m.get("role")
            if role in ("assistant", "user") and m.get("tool_calls"):
                for tc in m["tool_calls"]:
                    tc = {**tc, "requestor": tc.get("requestor") or role}
                    waiting.append((mi, tc))
                    if tc.get("id"):
                        by_id[tc["id"]] = (mi, tc)
            elif role == "tool":
                mid = m.get("id")
                if mid and mid in by_id:
                    entry = by_id.pop(mid)
                    waiting.remove(entry)
                elif waiting:
                    entry = waiting.popleft()
                    by_id.pop(entry[1].get("id") or "", None)
                else:
                    raise DataFileError(results_file, f"simulations[{si}].messages[{mi}]",
                                        "tool message without a preceding tool call")
                _, tc = entry
                args = tc.get("arguments")
                call = ToolCall(
                    id=str(tc.get("id") or f"replay_{mi}"), name=str(tc.get("name")),
                    arguments=args if isinstance(args, dict) else {},
                    requestor=tc["requestor"],
                )
                theirs_error = bool(m.get("error", str(m.get("content", "")).startswith("Error:")))
                calls += 1
                if call.name in not_yet:
                    ours = ToolMessage(id=call.id, content=f"Error: Tool '{call.name}' not found "
                                       f"(not a tool of tau2-bench {version})", error=True)
                    if theirs_error:
                        matched += 1
                        continue
                else:
                    ours = env.execute(call).message
                if _parsed(ours.content) == _parsed(m.get("content")) and ours.error == theirs_error:
                    matched += 1
                else:
                    mismatches.append({
                        "task_id": tid,
                        "call": {"index": mi, "name": call.name, "arguments": call.arguments,
                                 "requestor": call.requestor},
                        "ours": {"content": ours.content, "error": ours.error},
                        "theirs": {"content": m.get("content"), "error": theirs_error},
                    })
    return {"episodes": episodes, "calls": calls, "matched": matched, "mismatches": mismatches}


def run(args: argparse.Namespace) -> int:
    try:
        out = replay_results(args.tau2_results, args.tau2_data, args.domain, args.tau2_tasks)
    except QuantAgentError as e:
        print(f"quantagent {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{out['episodes']} episodes, {out['calls']} tool calls, {out['matched']} matched, "
              f"{len(out['mismatches'])} mismatches")
        for mm in out["mismatches"][:50]:
            print(f"  task {mm['task_id']} {mm['call']['name']}({json.dumps(mm['call']['arguments'])}):"
                  f"\n    ours:   {mm['ours']['content'][:200]}\n    theirs: {str(mm['theirs']['content'])[:200]}")
    return 0 if out["matched"] == out["calls"] else 1

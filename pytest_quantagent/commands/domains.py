"""``quantagent domains``: list the domains, their agent and user tools and task counts."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pytest_quantagent.env.tasksets import tau2_data_arg
from pytest_quantagent.errors import EXIT_USAGE, QuantAgentError


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("domains", help="list domains, their tools and task counts")
    p.add_argument("--tau2-data", type=tau2_data_arg("--tau2-data"), default=None, metavar="DIR",
                   help="describe the official tau2-bench data in DIR/domains/<domain>/ instead")
    p.add_argument("--json", action="store_true", help="print the listing as JSON")


def describe_domains(tau2_data: Path | None = None) -> list[dict[str, Any]]:
    """One entry per available domain: name, tools, task and split counts. With
    ``tau2_data``, every ``tasks*.json`` of the official domain dir is counted
    (``task_files``) and the domain is described from ``tasks.json`` or, when absent, the
    first of them."""
    from pytest_quantagent.env.registry import get_domain, list_domains
    from pytest_quantagent.env.tasks import load_tasks

    out = []
    for name in list_domains():
        entry: dict[str, Any] = {"domain": name}
        tasks_file: str | None = None
        if tau2_data is not None:
            data_dir = Path(tau2_data) / "domains" / name
            if not data_dir.is_dir():
                continue
            files = sorted(p.name for p in data_dir.glob("tasks*.json"))
            entry["task_files"] = {f: len(load_tasks(data_dir / f)) for f in files}
            if "tasks.json" not in files and files:
                tasks_file = files[0]
        d = get_domain(name, tau2_data=tau2_data, tasks_file=tasks_file)
        entry.update({
            "official": d.official,
            "agent_tools": sorted(d.agent_tool_names),
            "user_tools": sorted(d.user_tool_names),
            "tasks": len(d.tasks),
            "splits": {k: len(v) for k, v in sorted(d.splits.items())},
        })
        out.append(entry)
    return out


def run(args: argparse.Namespace) -> int:
    try:
        listing = describe_domains(args.tau2_data)
    except QuantAgentError as e:
        print(f"quantagent domains: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps({"domains": listing}, indent=2))
        return 0
    for d in listing:
        print(f"{d['domain']}: {d['tasks']} tasks "
              f"({', '.join(f'{k} {v}' for k, v in d['splits'].items()) or 'no splits'})")
        print(f"  agent tools ({len(d['agent_tools'])}): {', '.join(d['agent_tools'])}")
        print(f"  user tools ({len(d['user_tools'])}): {', '.join(d['user_tools']) or '-'}")
        if "task_files" in d:
            print("  task files: " + ", ".join(f"{f} ({n})" for f, n in d["task_files"].items()))
    return 0

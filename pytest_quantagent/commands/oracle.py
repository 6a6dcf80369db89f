"""``quantagent oracle``: run every task with the gold-action oracle agent (a data check)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Literal

from pytest_quantagent.env.tasksets import tau2_data_arg
from pytest_quantagent.errors import EXIT_USAGE, QuantAgentError


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "oracle",
        help="replay each task's gold actions through the engine (a data check)",
        description="Run every task of a domain with an agent that performs the gold actions "
        "(agent-side itself, user-side by asking the scripted user). Every task should score 1.",
    )
    p.add_argument("--domain", required=True, help="domain name (see `quantagent domains`)")
    p.add_argument("--tau2-data", type=tau2_data_arg("--tau2-data"), default=None, metavar="DIR",
                   help="a tau2-bench checkout or its data/tau2 folder (DIR/domains/<domain>/: "
                   "official tasks and DB)")
    p.add_argument("--tau2-tasks", default=None, metavar="FILE",
                   help="task file name inside the domain dir (default: tasks.json, or the file "
                   "holding --split)")
    p.add_argument("--split", default=None, metavar="NAME",
                   help="only the tasks of this split (tau2-bench: base, train, test; telecom "
                   "also small, full)")
    p.add_argument("--tasks", default=None, metavar="IDS", help="comma-separated task ids, or fresh:N[@SEED] (default: all)")
    p.add_argument("--seed", type=int, default=0, help="scripted-user and oracle seed (default 0)")
    p.add_argument("--style", choices=("direct", "conversational"), default="direct",
                   help="direct: only the gold actions; conversational: also asks for identity "
                   "and confirmations and varies its wording (checks the scripted user)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def oracle_summary(domain_name: str, tau2_data: Path | None = None, tasks_file: str | None = None,
                   task_ids: list[str] | None = None, seed: int = 0,
                   style: Literal["direct", "conversational"] = "direct",
                   split: str | None = None) -> dict[str, Any]:
    """The oracle's result over a domain's tasks, as printed by the command."""
    from pytest_quantagent.env.registry import get_domain, get_domain_for_split
    from pytest_quantagent.env.tasks import select_tasks
    from pytest_quantagent.env.tasksets import check_split, check_task_ids
    from pytest_quantagent.runner.oracle import run_oracle

    if tasks_file is None:
        domain = get_domain_for_split(domain_name, tau2_data, split)
    else:
        domain = get_domain(domain_name, tau2_data=tau2_data, tasks_file=tasks_file)
    ids = [t.id for t in domain.tasks]
    if split is not None:
        check_split(domain_name, split, domain.splits)
        ids = list(domain.splits[split])
    if task_ids and not task_ids[0].startswith("fresh:"):
        check_task_ids(domain_name, task_ids, ids)
        ids = list(task_ids)
    if task_ids and len(task_ids) == 1 and task_ids[0].startswith("fresh:"):
        from pytest_quantagent.env.fresh import fresh_tasks
        from pytest_quantagent.runner.selection import parse_fresh

        sel = parse_fresh(task_ids[0], "--tasks")
        assert sel.count is not None
        tasks = fresh_tasks(domain, sel.count, sel.pool_seed)
    else:
        tasks = select_tasks(domain.tasks, ids)
    results = run_oracle(domain, tasks, seed=seed, style=style)
    ok = sum(r.success for r in results)
    nl = sum(1 for r in results if "NL_ASSERTION" in r.outcome.reward_info.not_evaluated)
    out: dict[str, Any] = {
        "domain": domain_name,
        "tasks": len(results),
        "succeeded": ok,
        "success_rate": ok / len(results) if results else 0.0,
        "failed": [{"task_id": r.task_id, "reason": r.reason} for r in results if not r.success],
    }
    if nl:
        out["note"] = (f"NL_ASSERTION not evaluated on {nl} task(s) (needs an LLM judge); "
                       "their reward uses the rest of the reward basis")
    return out


def run(args: argparse.Namespace) -> int:
    try:
        ids = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else None
        out = oracle_summary(args.domain, args.tau2_data, args.tau2_tasks, ids, args.seed, args.style,
                             split=args.split)
    except (QuantAgentError, ValueError) as e:
        print(f"quantagent oracle: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{out['domain']}: {out['succeeded']}/{out['tasks']} tasks succeeded "
              f"({out['success_rate']:.1%})")
        for f in out["failed"]:
            print(f"  FAILED {f['task_id']}: {f['reason']}")
        if "note" in out:
            print(f"  note: {out['note']}")
    return 0 if out["succeeded"] == out["tasks"] else 1

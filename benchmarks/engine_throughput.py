"""Engine throughput: oracle episodes per second on one core, per domain.

Rates are per CPU second of this process (one core; the wall-clock rate is shown too).
Each episode is a full τ²-style episode (scripted user, the oracle agent performing the gold
actions, dispatch, evaluation with the DB hash). The domain (DB parse, schemas, gold hashes)
is loaded once, as in a real run; the first pass warms the per-task gold-state cache and is
not timed.

    OMP_NUM_THREADS=1 taskset -c 0 python3 benchmarks/engine_throughput.py [--domain retail] [--tau2-data DIR] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

# This checkout's package, not whichever one is installed (an editable install of another
# worktree would otherwise be measured).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_quantagent.env.registry import get_domain, list_domains
from pytest_quantagent.runner.episode import run_episode
from pytest_quantagent.runner.oracle import run_oracle_task
from pytest_quantagent.vocab.messages import AssistantMessage, Message, UserMessage


def measure(name: str, tau2_data: Path | None, tasks_file: str | None, min_seconds: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    domain = get_domain(name, tau2_data=tau2_data, tasks_file=tasks_file)
    load_s = time.perf_counter() - t0

    async def one_pass() -> tuple[int, int, int]:
        ok = steps = calls = 0
        for task in domain.tasks:
            r = await run_oracle_task(domain, task)
            ok += r.success
            steps += r.outcome.steps
            calls += len(r.outcome.calls)
        return ok, steps, calls

    ok, steps, calls = asyncio.run(one_pass())  # warm-up (gold states cached)
    episodes = 0
    passes = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while True:
        asyncio.run(one_pass())
        passes += 1
        episodes += len(domain.tasks)
        wall = time.perf_counter() - t0
        if wall >= min_seconds:
            break
    # CPU time of this process: on a shared machine the wall clock also counts time the
    # core spent on other processes; CPU seconds are what one core needs.
    elapsed = time.process_time() - c0
    return {
        "domain": name,
        "official": tau2_data is not None,
        "tasks": len(domain.tasks),
        "oracle_success": ok / len(domain.tasks) if domain.tasks else 0.0,
        "load_s": round(load_s, 3),
        "episodes": episodes,
        "cpu_seconds": round(elapsed, 3),
        "wall_seconds": round(wall, 3),
        "episodes_per_s": round(episodes / elapsed, 1),
        "episodes_per_wall_s": round(episodes / wall, 1),
        "ms_per_step": round(1000 * elapsed / (passes * steps), 4) if steps else None,
        "ms_per_tool_call": round(1000 * elapsed / (passes * calls), 4) if calls else None,
    }


class _Talker:
    """Agent and user that only talk (no tools): isolates the loop's own cost per hop."""

    def __init__(self, role: str) -> None:
        self.role = role

    async def act(self, view: list[Message]) -> Any:
        if self.role == "assistant":
            return AssistantMessage(content="Could you tell me more about the issue?")
        return UserMessage(content="It still does not work.")


def loop_overhead(name: str, hops: int = 200, rounds: int = 30) -> dict[str, Any]:
    """Harness CPU per message hop, tools excluded (what the runner pays per model call)."""
    domain = get_domain(name)
    task = domain.tasks[0]

    async def go() -> None:
        for _ in range(rounds):
            await run_episode(domain=domain, task=task, agent=_Talker("assistant"),
                              user=_Talker("user"), max_steps=hops, evaluate_reward=False)

    c0 = time.process_time()
    asyncio.run(go())
    elapsed = time.process_time() - c0
    return {"domain": name, "hops": hops * rounds,
            "us_per_hop_incl_env_copy": round(1e6 * elapsed / (hops * rounds), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", action="append", help="domain(s) (default: all)")
    ap.add_argument("--tau2-data", type=Path, default=None)
    ap.add_argument("--tau2-tasks", default=None)
    ap.add_argument("--min-seconds", type=float, default=3.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rows = []
    for name in args.domain or list_domains():
        tasks_file = args.tau2_tasks
        if args.tau2_data is not None and name == "telecom" and tasks_file is None:
            tasks_file = "tasks_base_2025-06-10.json"
        rows.append(measure(name, args.tau2_data, tasks_file, args.min_seconds))
    overhead = [loop_overhead(name) for name in (args.domain or list_domains())]
    if args.json:
        print(json.dumps({"throughput": rows, "loop_overhead": overhead}, indent=2))
    else:
        for r in rows:
            print(f"{r['domain']:8s} official={r['official']!s:5s} tasks={r['tasks']:4d} "
                  f"oracle={r['oracle_success']:.3f} {r['episodes_per_s']:8.1f} episodes/CPU-s "
                  f"({r['episodes_per_wall_s']} /wall-s) "
                  f"({r['ms_per_step']} ms/step, {r['ms_per_tool_call']} ms/tool call, load {r['load_s']} s)")
        for o in overhead:
            print(f"{o['domain']:8s} loop overhead {o['us_per_hop_incl_env_copy']} µs per message hop "
                  f"(no tools; includes one environment copy per {o['hops'] // 30} hops)")


if __name__ == "__main__":
    main()

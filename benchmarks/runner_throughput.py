"""Runner throughput against a loopback fake OpenAI-compatible server.

A server process (loopback only, stops by itself) answers every chat completion after a
fixed latency with scripted tool calls: ``--calls - 1`` valid read-tool calls, then a
``###STOP###`` message. The same episode runs at concurrency 1, 8 and 64 through the real
stack (OpenAI backend on httpx, retry wrapper, LLMAgent, episode loop, environment,
evaluation, fsynced episode store). Printed per concurrency: episodes/s, the ideal
``concurrency / (model calls × latency)``, their ratio (efficiency) and the harness CPU time
per step (this process's user + system CPU, all threads, from getrusage; the server runs in
another process). Loopback TCP is processed in the sender's system time, so ``sys`` includes
the kernel's share of talking to the server.

``--domain synthetic`` (default) uses a small in-file domain with retail-sized prompts
(policy + 16 tool schemas) to measure the harness itself; ``--domain retail`` (or any
registered domain) uses that domain's first task and its read-only gold calls, so it also
measures that domain's per-episode DB copy and hashing.

    python benchmarks/runner_throughput.py [--json] [--domain retail] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from pytest_quantagent.env.db import DB
from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.tasks import Task
from pytest_quantagent.env.toolkit import Toolkit, ToolType, is_tool

STOP = {"content": "Thank you, your request is complete. ###STOP###"}


# -- a small synthetic domain with retail-sized prompts ------------------------------------

class BenchDB(DB):
    records: dict[str, dict[str, str]]


def _make_tool(i: int) -> Any:
    def tool(self: Toolkit, record_id: str, detail_level: str = "full") -> str:
        rec = self.db.records.get(record_id)
        if rec is None:
            from pytest_quantagent.env.toolkit import EntityNotFoundError

            raise EntityNotFoundError(f"Record {record_id} not found", entity=record_id)
        return json.dumps(rec)

    tool.__name__ = f"get_record_{i:02d}"
    tool.__doc__ = (
        f"Look up a record of kind {i} by its id and return its details, including its status, "
        "the items it contains, the payment history and the shipping address.\n\n"
        "Args:\n    record_id: The record id, such as 'r0001'. Be careful to use the exact id.\n"
        "    detail_level: How much detail to return: 'full' or 'summary'.\n"
    )
    return is_tool(ToolType.READ)(tool)


BenchTools = type("BenchTools", (Toolkit,), {f"get_record_{i:02d}": _make_tool(i) for i in range(16)})

_POLICY = (
    "# Bench agent policy\n\nAs a bench agent you help users look up their records. "
    "Authenticate the user first, then answer one request at a time. "
    "Before any action that changes a record, list the details and obtain explicit confirmation. "
    "Do not make up information or procedures. Transfer to a human only when the request "
    "cannot be handled within the scope of your actions.\n\n"
) * 8


def synthetic_domain() -> Domain:
    db = BenchDB(records={f"r{i:04d}": {"id": f"r{i:04d}", "status": "pending", "total": str(i)}
                          for i in range(20)})
    task = Task.model_validate({
        "id": "bench-0",
        "user_scenario": {"instructions": "Look up record r0001.",
                          "script": {"requests": ["Please look up my record r0001."]}},
        "evaluation_criteria": {"actions": [], "reward_basis": ["DB"]},
    })
    return Domain(name="synthetic", policy=_POLICY, db=db, tasks=[task], agent_toolkit=BenchTools)


def synthetic_script(n_calls: int) -> list[dict[str, Any]]:
    calls = [{"tool_calls": [{"name": f"get_record_{i % 16:02d}",
                              "arguments": {"record_id": f"r{i % 20:04d}"}}]} for i in range(n_calls - 1)]
    return [*calls, STOP]


def _read_calls(domain: Domain, task: Task) -> list[tuple[str, dict[str, Any]]]:
    """Valid read-only agent calls for ``task``: its read gold calls, else read tools whose
    required arguments all appear (same names) in one of its gold calls, e.g.
    ``get_customer_by_id(customer_id)`` from ``resume_line(customer_id, line_id)``."""
    reads = [(a.name, a.arguments) for a in task.gold_actions
             if a.requestor == "assistant" and domain.tool_type(a.name) == ToolType.READ]
    if reads:
        return reads
    out = []
    for schema in domain.agent_tool_schemas():
        fn = schema["function"]
        if domain.tool_type(fn["name"]) != ToolType.READ:
            continue
        required = fn.get("parameters", {}).get("required", [])
        for a in task.gold_actions:
            if required and all(k in a.arguments for k in required):
                out.append((fn["name"], {k: a.arguments[k] for k in required}))
                break
    return out


def domain_script(domain: Domain, n_calls: int) -> tuple[str, list[dict[str, Any]]]:
    """The first task with valid read-only agent calls (checked against a fresh
    environment), and a script cycling them."""
    from pytest_quantagent.vocab.messages import ToolCall

    for task in domain.tasks:
        env = domain.make_environment(task)
        calls = [(n, a) for n, a in _read_calls(domain, task)
                 if not env.execute(ToolCall(id="probe", name=n, arguments=a)).message.error]
        if calls:
            script = [{"tool_calls": [{"name": calls[i % len(calls)][0], "arguments": calls[i % len(calls)][1]}]}
                      for i in range(n_calls - 1)]
            return task.id, [*script, STOP]
    raise SystemExit(f"domain {domain.name!r}: no task with valid read-only agent calls to script")


# -- the server process ---------------------------------------------------------------------

def _serve(responses: list[dict[str, Any]], latency_s: float, lifetime_s: float, q: Any) -> None:
    from pytest_quantagent.backends.mock import FakeOpenAIServer

    server = FakeOpenAIServer(responses, latency_s=latency_s, lifetime_s=lifetime_s)

    async def main() -> None:
        task = asyncio.ensure_future(server.serve())
        while not server.port and not task.done():
            await asyncio.sleep(0.005)
        q.put(server.port)
        await task

    asyncio.run(main())


# -- the measurement ------------------------------------------------------------------------

async def _run_level(domain: Domain, task_id: str, url: str, concurrency: int, episodes: int,
                     store_dir: Path) -> dict[str, Any]:
    from pytest_quantagent.quant.arms import ArmSpec
    from pytest_quantagent.runner.batch import PlannedEpisode, RunSettings, run_arm
    from pytest_quantagent.runner.build import build_arm
    from pytest_quantagent.store.jsonl import EpisodeStore

    arm = ArmSpec(label=f"c{concurrency}", backend="openai", model="fake", base_url=url,
                  options={"logprobs": False})
    rt = build_arm(arm, concurrency=concurrency)
    plan = [PlannedEpisode(task_id, trial, trial) for trial in range(episodes)]
    settings = RunSettings(concurrency=concurrency, max_steps=400, episode_timeout_s=120)
    store = EpisodeStore(store_dir / f"c{concurrency}")
    try:
        # One untimed episode first: lazy imports and first connections are not steady state.
        await run_arm(domain=domain, runtime=rt, plan=[PlannedEpisode(task_id, -1, 0)], settings=settings)
        rt.client.total.calls = 0
        ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        recs = await run_arm(domain=domain, runtime=rt, plan=plan, settings=settings, store=store)
        wall, ru1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
        user, sys_ = ru1.ru_utime - ru0.ru_utime, ru1.ru_stime - ru0.ru_stime
        cpu = user + sys_
    finally:
        await rt.aclose()
    bad = [r for r in recs if not r.scored or r.n_errors]
    if bad:
        raise SystemExit(f"benchmark episode went wrong: {bad[0].termination} {bad[0].error_message} "
                         f"{[c.detail for c in bad[0].calls if c.error][:2]}")
    steps = sum(r.steps for r in recs)
    calls = rt.client.total.calls
    return {"concurrency": concurrency, "episodes": len(recs), "wall_s": round(wall, 3),
            "model_calls": calls, "steps": steps, "cpu_s": round(cpu, 3),
            "cpu_user_s": round(user, 3), "cpu_sys_s": round(sys_, 3),
            "cpu_ms_per_call": round(1000 * cpu / calls, 4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--domain", default="synthetic", help="synthetic (default) or a registered domain")
    ap.add_argument("--latency", type=float, default=0.05, help="server latency per request (s)")
    ap.add_argument("--calls", type=int, default=16, help="model calls per episode")
    ap.add_argument("--concurrency", default="1,8,64", help="comma-separated levels")
    ap.add_argument("--rounds", type=int, default=3, help="episodes per level = rounds × concurrency (min 4)")
    args = ap.parse_args(argv)
    levels = [int(x) for x in args.concurrency.split(",")]
    if args.calls < 2 or args.latency <= 0 or args.rounds < 1 or min(levels) < 1:
        ap.error("--calls >= 2, --latency > 0, --rounds >= 1 and concurrency levels >= 1")

    if args.domain == "synthetic":
        domain, task_id, script = synthetic_domain(), "bench-0", synthetic_script(args.calls)
    else:
        from pytest_quantagent.env.registry import get_domain

        domain = get_domain(args.domain)
        task_id, script = domain_script(domain, args.calls)

    episodes = {c: max(4, args.rounds * c) for c in levels}
    budget = sum(episodes[c] * args.calls * args.latency / c for c in levels)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    server = ctx.Process(target=_serve, args=(script, args.latency, 60 + 10 * budget, q), daemon=True)
    server.start()
    try:
        port = q.get(timeout=30)
        url = f"http://127.0.0.1:{port}/v1"
        results = []
        with tempfile.TemporaryDirectory(prefix="qa-bench-") as tmp:
            for c in levels:
                r = asyncio.run(_run_level(domain, task_id, url, c, episodes[c], Path(tmp)))
                calls_per_ep = r["model_calls"] / r["episodes"]
                eps = r["episodes"] / r["wall_s"]
                ideal = c / (calls_per_ep * args.latency)
                r.update(episodes_per_s=round(eps, 3), ideal_per_s=round(ideal, 3),
                         efficiency=round(eps / ideal, 3),
                         cpu_ms_per_step=round(1000 * r["cpu_s"] / r["steps"], 4))
                results.append(r)
    finally:
        server.terminate()
        server.join(5)

    out = {"latency_s": args.latency, "domain": domain.name, "model_calls_per_episode": args.calls,
           "cpu_count": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
           "results": results}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"domain {domain.name}, latency {args.latency * 1000:.0f} ms, {args.calls} model calls/episode, "
              f"load avg {out['load_avg_1m']} on {out['cpu_count']} CPUs")
        print(f"{'conc':>5} {'episodes':>8} {'eps/s':>8} {'ideal':>8} {'eff':>6} {'cpu ms/step':>12} "
              f"{'(user+sys)':>14} {'cpu ms/call':>12}")
        for r in results:
            us = f"{1000 * r['cpu_user_s'] / r['steps']:.3f}+{1000 * r['cpu_sys_s'] / r['steps']:.3f}"
            print(f"{r['concurrency']:>5} {r['episodes']:>8} {r['episodes_per_s']:>8.2f} {r['ideal_per_s']:>8.2f} "
                  f"{r['efficiency']:>6.2f} {r['cpu_ms_per_step']:>12.3f} {us:>14} {r['cpu_ms_per_call']:>12.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

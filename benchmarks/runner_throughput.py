"""Runner throughput against a loopback fake OpenAI-compatible server.

A server process (loopback only, stops by itself) answers every chat completion after a
fixed latency with scripted tool calls: ``--calls - 1`` valid read-tool calls, then a
``###STOP###`` message. The same episode runs at concurrency 1, 8 and 64 through the real
stack (OpenAI backend on httpx, retry wrapper, LLMAgent, episode loop, environment,
evaluation, fsynced episode store). Printed per concurrency: episodes/s, the ideal
``concurrency / (model calls × latency)``, their ratio (efficiency) and the harness CPU time
per step (this process's user + system CPU, all threads, from getrusage; the server runs in
another process). Loopback TCP is processed in the sender's system time, so ``sys`` includes
the kernel's share of talking to the server. ``server`` is the fake servers' own CPU per
call (user + system of their processes, from ``/proc``): they share the machine with the
harness, and their CPU delays answers, so they run a lean path (an ``asyncio.Protocol``, each
reply written by a timer at its deadline, scripted messages encoded once); it is a measuring
instrument, not the harness.

``--domain synthetic`` (default) uses a small in-file domain with retail-sized prompts
(policy + 16 tool schemas) to measure the harness itself; ``--domain retail`` (or any
registered domain) uses that domain's first task and its read-only gold calls, so it also
measures that domain's per-episode DB copy and hashing.

``--endpoints N`` serves the arm from N fake servers (one process each) through the backend's
endpoint pool; ``--waves W`` (default 10) runs W × concurrency episodes per level, so the
highest level sees at least W waves (steady state, not one burst and its tail).
``--failover`` (needs ``--endpoints`` >= 2) SIGKILLs endpoint 0's server a third of the way
into the highest level and restarts it on the same port at two thirds; it checks that every
episode is stored exactly once and none ended as an infrastructure or agent failure, and
prints the per-endpoint figures (requests, failures, ejections, health probes and failed
probes: an ejected endpoint comes back through ``GET /models`` probes, never a live request). ``--baseline`` runs each level twice in one process,
first with the standard library's JSON codec and then with the default (orjson when
installed), so before/after are measured side by side under the same load.

The instrument has a ceiling of its own, measured side by side: right after each level, a
minimal client (``ceiling``: one asyncio protocol per connection, no parsing beyond the
response's framing) sends the very request bodies the harness sent in its untimed first
episode, at the same concurrency, to the same servers. Its efficiency is what the fake
servers and the loopback network allow on this machine; ``of ceil`` is the harness's
efficiency divided by it (its own share of the loss). ``late`` is how long after its deadline
the servers' answers left during the harness's level (mean, from their ``/_fake/stats``):
their timers fire up to a millisecond late, which no client can win back. ``--no-ceiling``
skips the ceiling runs.

``--user llm`` plays the customer with the LLM user simulator (its own fake server): the
agent asks the customer every 4th step instead of calling a tool (the same number of agent
calls), the user model answers each question and the agent's last message (``###STOP###``),
every answer a cache miss appended to ``user_turns.jsonl`` in the store (the opening request
is the scenario's); ``--user both`` runs each level with the scripted user
and then the LLM user, side by side. The ideal counts the user's model calls too (they are
sequential with the agent's), so ``eff`` compares the two paths' harness overhead.

It imports the package of the checkout it lives in (not an installed copy)::

    python benchmarks/runner_throughput.py [--json] [--domain retail] [--latency 0.05]
                                         [--concurrency 64] [--waves 10] [--endpoints 4]
                                         [--failover] [--baseline] [--no-ceiling]
                                         [--user scripted|llm|both]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
# This checkout's package, not whichever one is installed (an editable install of another
# worktree would otherwise be measured).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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


def dialogue_script(script: list[dict[str, Any]], every: int = 4) -> tuple[list[dict[str, Any]], int]:
    """``script`` with every ``every``-th agent step a question to the customer instead of a
    tool call (the same number of model calls), for the LLM user mode: the user model
    answers each; and how many such questions there are."""
    out = [step if (i + 1) % every else {"content": "Is there anything else I can look up?"}
           for i, step in enumerate(script[:-1])]
    return [*out, script[-1]], sum(1 for step in out if "content" in step)


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


# -- the server processes --------------------------------------------------------------------

def _serve(responses: list[dict[str, Any]], latency_s: float, lifetime_s: float, q: Any,
           port: int = 0) -> None:
    from pytest_quantagent.backends.mock import FakeOpenAIServer

    server = FakeOpenAIServer(responses, latency_s=latency_s, lifetime_s=lifetime_s)

    async def main() -> None:
        task = asyncio.ensure_future(server.serve(port=port))
        while not server.port and not task.done():
            await asyncio.sleep(0.005)
        q.put(server.port)
        await task

    asyncio.run(main())


class Servers:
    """N fake servers, one process each (so one can be killed and restarted)."""

    def __init__(self, script: list[dict[str, Any]], latency_s: float, lifetime_s: float, n: int) -> None:
        self.ctx = mp.get_context("spawn")
        self.args = (script, latency_s, lifetime_s)
        self.procs: list[Any] = []
        self.ports: list[int] = []
        for _ in range(n):
            proc, port = self._start(0)
            self.procs.append(proc)
            self.ports.append(port)

    def _start(self, port: int) -> tuple[Any, int]:
        q = self.ctx.Queue()
        proc = self.ctx.Process(target=_serve, args=(*self.args, q, port), daemon=True)
        proc.start()
        return proc, int(q.get(timeout=30))

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}/v1" for p in self.ports]

    def kill(self, i: int) -> None:
        os.kill(self.procs[i].pid, signal.SIGKILL)
        self.procs[i].join(5)

    def restart(self, i: int) -> None:
        self.procs[i], _ = self._start(self.ports[i])

    def cpu_s(self) -> float:
        """User + system CPU seconds of the live server processes so far (``/proc``)."""
        total = 0.0
        for p in self.procs:
            try:
                with open(f"/proc/{p.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
            p.join(5)


def server_stats(urls: list[str]) -> list[dict[str, Any]]:
    """Each live server's answer-lateness figures since the previous call (and reset them)."""
    import urllib.request

    out = []
    for url in urls:
        try:
            with urllib.request.urlopen(f"{url}/_fake/stats", timeout=5) as r:
                out.append(json.loads(r.read()))
        except OSError:
            continue  # a killed endpoint (failover) has none
    return out


def _late_mean_ms(stats: list[dict[str, Any]]) -> float | None:
    n = sum(s["answered"] for s in stats if s["late_ms"]["mean"] is not None)
    if not n:
        return None
    return sum(s["answered"] * s["late_ms"]["mean"] for s in stats if s["late_ms"]["mean"] is not None) / n


class _RawConnection(asyncio.Protocol):
    """The ceiling client's connection: write a request, wait for its framed response."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.need = -1
        self.waiter: asyncio.Future[None] | None = None
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.need < 0:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            at = self.buf.find(b"Content-Length: ", 0, end)
            self.need = end + 4 + int(self.buf[at + 16:self.buf.index(b"\r\n", at)])
        if len(self.buf) >= self.need and self.waiter is not None:
            self.waiter.set_result(None)

    def request(self, payload: bytes) -> asyncio.Future[None]:
        self.buf.clear()
        self.need = -1
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(payload)
        return self.waiter


async def _ceiling_level(urls: list[str], bodies: list[bytes], concurrency: int,
                         episodes: int) -> dict[str, Any]:
    """The instrument's own ceiling: ``episodes`` × the harness's request bodies, at
    ``concurrency``, through :class:`_RawConnection` (connections spread over ``urls``)."""
    from urllib.parse import urlsplit

    loop = asyncio.get_running_loop()
    conns = []
    for i in range(concurrency):
        u = urlsplit(urls[i % len(urls)])
        _, conn = await loop.create_connection(_RawConnection, u.hostname, u.port)
        head = (f"POST {u.path}/chat/completions HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\n"
                "Content-Type: application/json\r\nConnection: keep-alive\r\n")
        conns.append((conn, [f"{head}Content-Length: {len(b)}\r\n\r\n".encode() + b for b in bodies]))
    left = episodes

    async def worker(conn: _RawConnection, payloads: list[bytes]) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            for payload in payloads:
                await conn.request(payload)

    ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    await asyncio.gather(*(worker(c, p) for c, p in conns))
    wall, ru1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    for c, _ in conns:
        c.transport.close()
    cpu = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
    return {"wall_s": wall, "cpu_ms_per_call": 1000 * cpu / (episodes * len(bodies))}


# -- the measurement ------------------------------------------------------------------------

async def _run_level(domain: Domain, task_id: str, urls: list[str], concurrency: int, episodes: int,
                     store_dir: Path, *, tag: str = "", events: list[tuple[float, Any]] = (),
                     server_cpu: Any = None, bodies: list[bytes] | None = None,
                     user_url: str | None = None) -> dict[str, Any]:
    """One timed level; ``bodies``, when given, receives the request bodies of the untimed
    first episode (what the ceiling client sends); ``user_url``: the LLM user's server (the
    scripted user without it)."""
    from pytest_quantagent.backends.http_client import NativeHTTPClient
    from pytest_quantagent.quant.arms import ArmSpec
    from pytest_quantagent.runner.batch import PlannedEpisode, RunSettings, run_arm
    from pytest_quantagent.runner.build import build_arm
    from pytest_quantagent.store.jsonl import EpisodeStore

    options: dict[str, Any] = {"logprobs": False}
    if len(urls) > 1:
        options["endpoints"] = list(urls)
    arm = ArmSpec(label=f"c{concurrency}{tag}", backend="openai", model="fake", base_url=urls[0],
                  options=options)
    rt = build_arm(arm, concurrency=concurrency)
    plan = [PlannedEpisode(task_id, trial, trial) for trial in range(episodes)]
    settings = RunSettings(concurrency=concurrency, max_steps=400, episode_timeout_s=120,
                           user_sim="scripted" if user_url is None else "llm")
    store = EpisodeStore(store_dir / f"c{concurrency}{tag}")
    user_rt = None
    if user_url is not None:
        from pytest_quantagent.quant.arms import UserModelConfig
        from pytest_quantagent.runner.build import USER_TURNS_FILE, build_user

        user_rt = build_user(UserModelConfig(arm=ArmSpec(
            label="user", backend="openai", model="fake-user", base_url=user_url,
            options={"logprobs": False})), cache_path=store.run_dir / USER_TURNS_FILE,
            concurrency=concurrency)
    loop = asyncio.get_running_loop()
    try:
        # One untimed episode first: lazy imports and first connections are not steady state.
        post = NativeHTTPClient.post

        async def capture(self: Any, path: str, body: Any, **kw: Any) -> Any:
            if bodies is not None and path == "/chat/completions":
                bodies.append(b"".join(body) if isinstance(body, list) else body)
            return await post(self, path, body, **kw)

        NativeHTTPClient.post = capture  # type: ignore[method-assign]
        try:
            await run_arm(domain=domain, runtime=rt, plan=[PlannedEpisode(task_id, -1, 0)], settings=settings,
                          user=user_rt)
        finally:
            NativeHTTPClient.post = post  # type: ignore[method-assign]
        rt.client.total.calls = rt.client.total.retries = 0
        if user_rt is not None:
            user_rt.client.total.calls = user_rt.client.total.retries = 0
        for e in getattr(rt.backend, "endpoints", []):
            e.reset_figures()
        # Kill/restart events run in a thread (a blocking process start must not stall the loop).
        timers = [loop.call_later(at, lambda fn=fn: loop.run_in_executor(None, fn)) for at, fn in events]
        at_restart: list[int] = []
        if events:  # endpoint 0's requests when its restart begins: those after it show its return
            eps0 = rt.backend.endpoints[0]  # type: ignore[attr-defined]
            timers.append(loop.call_later(events[-1][0], lambda: at_restart.append(eps0.requests)))
        server_stats(urls)  # start the servers' lateness figures afresh
        srv0 = server_cpu() if server_cpu else 0.0
        ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        recs = await run_arm(domain=domain, runtime=rt, plan=plan, settings=settings, store=store,
                             user=user_rt)
        wall, ru1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
        srv = (server_cpu() - srv0) if server_cpu else None
        late = _late_mean_ms(server_stats(urls))
        for t in timers:
            t.cancel()
        user, sys_ = ru1.ru_utime - ru0.ru_utime, ru1.ru_stime - ru0.ru_stime
        cpu = user + sys_
        endpoint_stats = rt.backend.endpoint_stats()
        after_restart = endpoint_stats[0]["requests"] - at_restart[0] if at_restart else None
        user_calls = user_rt.client.total.calls if user_rt is not None else 0
    finally:
        await rt.aclose()
        if user_rt is not None:
            await user_rt.aclose()
    bad = [r for r in recs if not r.scored or r.n_errors]
    if bad:
        raise SystemExit(f"benchmark episode went wrong: {bad[0].termination} {bad[0].error_message} "
                         f"{[c.detail for c in bad[0].calls if c.error][:2]}")
    stored = [r.key for r in store.records()]
    steps = sum(r.steps for r in recs)
    calls = rt.client.total.calls + user_calls
    return {"concurrency": concurrency, "episodes": len(recs), "wall_s": round(wall, 3),
            "user": "scripted" if user_rt is None else "llm", "user_calls": user_calls,
            "model_calls": calls, "retries": rt.client.total.retries, "steps": steps,
            "cpu_s": round(cpu, 3), "cpu_user_s": round(user, 3), "cpu_sys_s": round(sys_, 3),
            "cpu_ms_per_call": round(1000 * cpu / calls, 4),
            "server_cpu_ms_per_call": round(1000 * srv / calls, 4) if srv is not None else None,
            "server_late_ms_mean": round(late, 4) if late is not None else None,
            "stored": len(stored), "stored_unique": len(set(stored)),
            "endpoints": endpoint_stats if len(urls) > 1 else [],
            "restarted_endpoint_requests_after_restart": after_restart}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--domain", default="synthetic", help="synthetic (default) or a registered domain")
    ap.add_argument("--latency", type=float, default=0.05, help="server latency per request (s)")
    ap.add_argument("--calls", type=int, default=16, help="model calls per episode")
    ap.add_argument("--concurrency", default="1,8,64", help="comma-separated levels")
    ap.add_argument("--waves", "--rounds", dest="waves", type=int, default=10,
                    help="episodes per level = waves × concurrency (min 4); default 10")
    ap.add_argument("--endpoints", type=int, default=1, help="fake servers serving the arm (default 1)")
    ap.add_argument("--failover", action="store_true",
                    help="kill endpoint 0 a third into the highest level, restart it at two thirds")
    ap.add_argument("--baseline", action="store_true",
                    help="also run each level with the standard library JSON codec, side by side")
    ap.add_argument("--no-ceiling", action="store_true",
                    help="skip the instrument's ceiling (a minimal client) after each level")
    ap.add_argument("--user", choices=("scripted", "llm", "both"), default="scripted",
                    help="user simulator: scripted (default), llm, or both side by side")
    args = ap.parse_args(argv)
    levels = [int(x) for x in args.concurrency.split(",")]
    if args.calls < 2 or args.latency <= 0 or args.waves < 1 or min(levels) < 1 or args.endpoints < 1:
        ap.error("--calls >= 2, --latency > 0, --waves >= 1, --endpoints >= 1 and concurrency levels >= 1")
    if args.failover and args.endpoints < 2:
        ap.error("--failover needs --endpoints >= 2")
    if args.failover and args.user != "scripted":
        ap.error("--failover runs with the scripted user only")

    from pytest_quantagent.backends import json_codec

    if args.domain == "synthetic":
        domain, task_id, script = synthetic_domain(), "bench-0", synthetic_script(args.calls)
    else:
        from pytest_quantagent.env.registry import get_domain

        domain = get_domain(args.domain)
        task_id, script = domain_script(domain, args.calls)

    episodes = {c: max(4, args.waves * c) for c in levels}
    budget = sum(episodes[c] * args.calls * args.latency / c for c in levels) * (2 if args.baseline else 1)
    users = ["scripted", "llm"] if args.user == "both" else [args.user]
    budget *= len(users)
    servers = Servers(script, args.latency, 60 + 10 * budget, args.endpoints)
    user_servers = llm_servers = None
    if "llm" in users:
        # The agent asks the customer every 4th step; the customer (its reply chosen by its
        # own turn: the opening is the scenario's) asks for one more record each time, then
        # ends with ###STOP### after the agent's last message.
        llm_script, questions = dialogue_script(script)
        llm_servers = Servers(llm_script, args.latency, 60 + 10 * budget, args.endpoints)
        user_servers = Servers([{"content": "The opening."}]
                               + [{"content": "Yes, please look up one more record."}] * questions
                               + [{"content": "###STOP###"}], args.latency, 60 + 10 * budget, 1)
    codecs = ["std", "orjson"] if args.baseline else [None]
    try:
        results = []
        with tempfile.TemporaryDirectory(prefix="qa-bench-") as tmp:
            for c in levels:
                for codec, user_kind in [(k, u) for k in codecs for u in users]:
                    if codec is not None:
                        json_codec.use_json(codec)
                    events: list[tuple[float, Any]] = []
                    if args.failover and c == max(levels):
                        expect = episodes[c] * args.calls * args.latency / c
                        events = [(expect / 3, lambda: servers.kill(0)), (2 * expect / 3, lambda: servers.restart(0))]
                    load = round(os.getloadavg()[0], 2)
                    bodies: list[bytes] = []
                    user_url = user_servers.urls[0] if user_kind == "llm" and user_servers else None
                    agents = llm_servers if user_kind == "llm" and llm_servers else servers
                    r = asyncio.run(_run_level(domain, task_id, agents.urls, c, episodes[c], Path(tmp),
                                               tag=(f"-{codec}" if codec else "") + f"-{user_kind}",
                                               events=events, server_cpu=agents.cpu_s, bodies=bodies,
                                               user_url=user_url))
                    calls_per_ep = r["model_calls"] / r["episodes"]
                    eps = r["episodes"] / r["wall_s"]
                    ideal = c / (calls_per_ep * args.latency)
                    if not args.no_ceiling and not events and user_url is None:
                        # Same bodies, servers and concurrency, right after the level.
                        ceil = asyncio.run(_ceiling_level(servers.urls, bodies, c, episodes[c]))
                        ceil_eff = episodes[c] / ceil["wall_s"] / (c / (len(bodies) * args.latency))
                        r.update(ceiling_efficiency=round(ceil_eff, 4),
                                 ceiling_cpu_ms_per_call=round(ceil["cpu_ms_per_call"], 4),
                                 of_ceiling=round(eps / ideal / ceil_eff, 4))
                    r.update(json_codec=codec or json_codec.current(),
                             failover=bool(events), load_avg_1m_before=load,
                             waves=round(r["episodes"] / c, 1),
                             episodes_per_s=round(eps, 3), ideal_per_s=round(ideal, 3),
                             efficiency=round(eps / ideal, 4), calls_per_s=round(r["model_calls"] / r["wall_s"], 1),
                             cpu_ms_per_step=round(1000 * r["cpu_s"] / r["steps"], 4))
                    if events and (r["stored"] != r["episodes"] or r["stored_unique"] != r["episodes"]):
                        raise SystemExit(f"failover: {r['episodes']} episodes, {r['stored']} stored, "
                                         f"{r['stored_unique']} unique")
                    results.append(r)
    finally:
        servers.close()
        for extra in (user_servers, llm_servers):
            if extra is not None:
                extra.close()

    out = {"latency_s": args.latency, "domain": domain.name, "model_calls_per_episode": args.calls,
           "endpoints": args.endpoints, "cpu_count": os.cpu_count(),
           "load_avg_1m": round(os.getloadavg()[0], 2), "results": results}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"domain {domain.name}, latency {args.latency * 1000:.0f} ms, {args.calls} model calls/episode, "
          f"{args.endpoints} endpoint(s), load avg {out['load_avg_1m']} on {out['cpu_count']} CPUs")
    print(f"{'conc':>5} {'user':>8} {'json':>6} {'episodes':>8} {'waves':>5} {'eps/s':>8} {'ideal':>8} {'eff':>6} "
          f"{'ceiling':>7} {'of ceil':>7} {'calls/s':>8} {'cpu ms/step':>12} {'(user+sys)':>14} "
          f"{'cpu ms/call':>12} {'server':>7} {'late':>6} {'load':>5}")

    def opt(v: float | None, fmt: str, width: int) -> str:
        return f"{v:>{width}{fmt}}" if v is not None else f"{'-':>{width}}"

    for r in results:
        us = f"{1000 * r['cpu_user_s'] / r['steps']:.3f}+{1000 * r['cpu_sys_s'] / r['steps']:.3f}"
        print(f"{r['concurrency']:>5} {r['user']:>8} {r['json_codec']:>6} {r['episodes']:>8} {r['waves']:>5} "
              f"{r['episodes_per_s']:>8.2f} {r['ideal_per_s']:>8.2f} {r['efficiency']:>6.3f} "
              f"{opt(r.get('ceiling_efficiency'), '.3f', 7)} {opt(r.get('of_ceiling'), '.3f', 7)} "
              f"{r['calls_per_s']:>8.0f} {r['cpu_ms_per_step']:>12.3f} {us:>14} {r['cpu_ms_per_call']:>12.3f} "
              f"{r['server_cpu_ms_per_call']:>7.3f} {opt(r['server_late_ms_mean'], '.2f', 6)} "
              f"{r['load_avg_1m_before']:>5}")
        if r["failover"]:
            print(f"      failover: {r['episodes']} episodes, {r['stored_unique']} stored once each, "
                  f"{r['retries']} requests retried, 0 infrastructure or agent failures; the killed "
                  f"endpoint served {r['restarted_endpoint_requests_after_restart']} requests after "
                  "its restart")
        for e in r["endpoints"]:
            print(f"      {e['url']}: {e['requests']} requests, {e['failures']} failed, "
                  f"{e['ejections']} ejection(s), {e['probes']} probe(s) ({e['probe_failures']} failed), "
                  f"p50 {e['p50_ms']} ms, p95 {e['p95_ms']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

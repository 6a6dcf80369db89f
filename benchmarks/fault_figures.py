"""Issue 28's no-regression and fault figures, against the loopback fault server.

Run from the repository root::

    QUANTAGENT_DOMAINS_DIR=tests/runner/domains PYTHONPATH=.:tests/runner \\
        python3 benchmarks/fault_figures.py

Prints one line per figure: the fault mixes (5/20/50% of requests: 5xx, 429, timeouts,
disconnects, garbage) with the default retry policy, huge outputs, a 429 Retry-After, and
kill -9 of ``quantagent run`` mid-run (five times), then a resume.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# This checkout's package, not whichever one is installed (an editable install of another
# worktree would otherwise be measured).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.quant.arms import ArmSpec
from pytest_quantagent.runner.batch import RunSettings, plan_episodes, run_arm
from pytest_quantagent.runner.build import build_arm
from pytest_quantagent.store.jsonl import EpisodeStore
from pytest_quantagent.testing.fault_server import FaultServer


def _run(url: str, out: Path, trials: int = 10, **options: object) -> list[object]:
    domain = get_domain("mini")
    rt = build_arm(ArmSpec(label="int4", backend="openai", model="m", base_url=url,
                           options={"timeout_s": 0.5, **options}), concurrency=8)
    plan = plan_episodes([t.id for t in domain.tasks], trials, 0)

    async def main() -> list[object]:
        try:
            return await run_arm(domain=domain, runtime=rt, plan=plan, store=EpisodeStore(out),
                                 settings=RunSettings(concurrency=8))
        finally:
            await rt.aclose()

    return asyncio.run(main())


def fault_mix(rate: float) -> None:
    # Three model calls per episode (two tool calls, then stop): 120 requests before faults.
    server = FaultServer([{"tool_calls": [{"name": "get_user", "arguments": {"user_id": "u0"}}]},
                          {"tool_calls": [{"name": "get_user", "arguments": {"user_id": "u1"}}]},
                          {"content": "All done. ###STOP###"}],
                         fault_rate=rate, seed=int(rate * 1000), hang_s=2.0,
                         fault_mix=("500", "503", "429", "hang", "drop", "garbage"))
    url = server.start_in_thread()
    with tempfile.TemporaryDirectory() as d:
        t0 = time.monotonic()
        recs = _run(url, Path(d))
        lines = (Path(d) / "episodes.jsonl").read_bytes().splitlines()
        keys = {json.loads(x)["key"] for x in lines}
        retries = sum(r.infra_retries for r in recs)  # type: ignore[attr-defined]
        print(f"fault mix {rate:.0%} of {server.requests} requests: {len(lines)}/40 episodes stored, {len(keys)} distinct keys, "
              f"{sum(not r.scored for r in recs)} lost, retries {retries} = faults injected "  # type: ignore[attr-defined]
              f"{sum(server.injected.values())} {dict(server.injected)}, {time.monotonic() - t0:.1f} s")
    server.stop()


def huge() -> None:
    server = FaultServer(fault_rate=1.0, fault_mix=("huge",), huge_chars=1_000_000,
                         responses=["###STOP###"])
    url = server.start_in_thread()
    with tempfile.TemporaryDirectory() as d:
        recs = _run(url, Path(d), trials=3)[:10]
        size = (Path(d) / "episodes.jsonl").stat().st_size
        n = len((Path(d) / "episodes.jsonl").read_bytes().splitlines())
        flagged = sum("output_truncated" in r.flags for r in recs)  # type: ignore[attr-defined]
        print(f"huge outputs (1 MB tool arguments on every call): {n} episodes, store "
              f"{size / 1e6:.2f} MB ({size / n / 1e3:.0f} kB per episode), {flagged}/{len(recs)} "
              "flagged output_truncated")
    server.stop()


def kill9() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "arms.toml"
        cfg.write_text('[arms.bf16]\nbackend = "mock"\nmodel = "s"\nrule = "mini_rules:solving_rule"\n'
                       'latency_s = 0.04\n')
        out = Path(d) / "store"
        cmd = [sys.executable, "-m", "pytest_quantagent.cli", "run", "--domain", "mini", "--arms",
               "bf16", "--config", str(cfg), "--trials", "10", "--concurrency", "2", "--out", str(out), "-q"]
        rng = random.Random(1)
        store = out / "episodes.jsonl"
        counts = []
        for _ in range(5):
            before = len(store.read_bytes().splitlines()) if store.exists() else 0
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            target = min(39, before + rng.randint(2, 6))
            while proc.poll() is None and (not store.exists()
                                           or len(store.read_bytes().splitlines()) < target):
                time.sleep(0.005)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            counts.append(len(store.read_bytes().splitlines()))
        torn = not store.read_bytes().endswith(b"\n")
        done = subprocess.run(cmd, env=env, capture_output=True)
        lines = store.read_bytes().splitlines()
        keys = {json.loads(x)["key"] for x in lines}
        print(f"kill -9 x5 (stored after each kill: {counts}; torn tail at the end: {torn}); "
              f"resume exit {done.returncode}: {len(lines)} lines, {len(keys)} distinct keys")


if __name__ == "__main__":
    for r in (0.05, 0.2, 0.5):
        fault_mix(r)
    huge()
    kill9()

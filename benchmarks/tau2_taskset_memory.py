"""Memory of a large τ²-bench task set: a generated 2,500-task telecom ``tasks.json`` in
τ²-bench's schema and layout (``data/tau2/domains/telecom/`` with ``split_tasks.json``),
loaded by ``split:full`` and run on a seeded sample of 300 tasks with the oracle agent.

The tasks are synthetic: our bundled telecom tasks, cycled with fresh ids (no τ²-bench data
is read). Each phase runs in a fresh subprocess so its peak RSS (``ru_maxrss``) is its own:

- ``import``: the package and the telecom domain code, no tasks;
- ``load``: the domain with all 2,500 tasks (the task file is streamed one task at a time);
- ``run``: load + 300 oracle episodes (one environment per episode, dropped after it).

``--no-stream`` loads the file as one JSON document instead, for comparison.

    OMP_NUM_THREADS=1 python3 benchmarks/tau2_taskset_memory.py [--tasks 2500] [--sample 300]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUNDLED = HERE.parent / "domains" / "telecom"


def write_full_taskset(root: Path, n: int) -> Path:
    """Write a τ²-bench checkout-like tree under ``root`` with ``n`` telecom tasks in
    ``data/tau2/domains/telecom/tasks.json``; returns ``root``."""
    d = root / "data" / "tau2" / "domains" / "telecom"
    d.mkdir(parents=True)
    base = json.loads((BUNDLED / "tasks.json").read_text(encoding="utf-8"))
    tasks = []
    for i in range(n):
        t = dict(base[i % len(base)])
        t["id"] = f"[gen]{t['id']}#{i}"
        tasks.append(t)
    with (d / "tasks.json").open("w", encoding="utf-8") as f:
        json.dump(tasks, f)
    ids = [t["id"] for t in tasks]
    (d / "split_tasks.json").write_text(json.dumps({"full": ids, "small": ids[:20]}), encoding="utf-8")
    for name in ("db.json", "user_db.json"):
        (d / name).write_bytes((BUNDLED / name).read_bytes())
    (d / "main_policy.md").write_text((BUNDLED / "policy.md").read_text(encoding="utf-8"), encoding="utf-8")
    (d / "tech_support_manual.md").write_text("Follow the main policy.\n", encoding="utf-8")
    return root


def _phase(root: Path, phase: str, sample: int, seed: int, stream: bool) -> dict[str, object]:
    """Run one phase here (called in the subprocess)."""
    import gc

    from pytest_quantagent.env import registry, tasks

    if not stream:
        tasks.STREAM_TASKS_ABOVE = 1 << 62
    out: dict[str, object] = {"phase": phase}
    t0 = time.perf_counter()
    if phase != "import":
        dom = registry.get_domain_for_split("telecom", root / "data" / "tau2", "full")
        out["tasks"] = len(dom.tasks)
        out["load_s"] = round(time.perf_counter() - t0, 2)
        if phase == "run":
            import asyncio

            from pytest_quantagent.runner.oracle import run_oracle_task

            ids = random.Random(seed).sample(dom.splits["full"], sample)

            async def go() -> int:
                ok = 0
                for tid in ids:  # keep the verdict only: the episode and its env are dropped
                    ok += (await run_oracle_task(dom, dom.task(tid), seed=seed)).success
                return ok

            t1 = time.perf_counter()
            out["episodes"] = len(ids)
            out["succeeded"] = asyncio.run(go())
            out["run_s"] = round(time.perf_counter() - t1, 2)
    gc.collect()
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def measure(root: Path, *, sample: int = 300, seed: int = 0, stream: bool = True) -> list[dict[str, object]]:
    rows = []
    for phase in ("import", "load", "run"):
        cmd = [sys.executable, __file__, "--phase", phase, "--root", str(root), "--sample",
               str(sample), "--seed", str(seed)] + ([] if stream else ["--no-stream"])
        # This checkout's package, not whichever one the environment has installed.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
        res = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=2500)
    ap.add_argument("--sample", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-stream", action="store_true")
    ap.add_argument("--phase", choices=("import", "load", "run"), default=None)
    ap.add_argument("--root", type=Path, default=None)
    args = ap.parse_args()
    if args.phase is not None:
        print(json.dumps(_phase(args.root, args.phase, args.sample, args.seed, not args.no_stream)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = write_full_taskset(Path(tmp), args.tasks)
        size = (root / "data" / "tau2" / "domains" / "telecom" / "tasks.json").stat().st_size
        print(f"tasks.json: {args.tasks} tasks, {size / 2**20:.1f} MiB")
        for row in measure(root, sample=args.sample, seed=args.seed, stream=not args.no_stream):
            print(json.dumps(row))


if __name__ == "__main__":
    main()

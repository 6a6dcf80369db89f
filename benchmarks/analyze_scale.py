"""Scale benchmark of the analysis: 100k episode records (~2M tool calls) → report.

Writes a synthetic episode store (2 domains × 5 arms, tasks × trials, ~20 calls per
episode) to a temporary run directory, then times ``quantagent analyze RUN_DIR --json ...``
in a fresh subprocess (so its peak RSS is the analysis alone, streaming from disk).
Target: ≤ 20 s and ≤ 2 GB peak on the project machine.

    OMP_NUM_THREADS=1 python3 benchmarks/analyze_scale.py [--episodes 100000] [--calls 20]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# This checkout's package, not whichever one is installed (an editable install of another
# worktree would otherwise be measured).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_quantagent.metrics.synthetic import make_tasks, synthetic_episodes
from pytest_quantagent.vocab.channels import Channel

DOMAINS = ("retail", "telecom")
ARMS: dict[str, dict[Channel, float] | None] = {
    "bf16": None,
    "fp8": None,
    "int4": {Channel.UNKNOWN_TOOL: 2.5},
    "int4-rtn": {Channel.UNKNOWN_TOOL: 3.0, Channel.BAD_ARGUMENTS: 1.5},
    "int8": None,
}


def write_store(path: Path, episodes: int, calls: float, seed: int) -> tuple[int, int]:
    """Write ``episodes`` records; returns (records, tool calls)."""
    rng = np.random.default_rng(seed)
    per_group = episodes // (len(DOMAINS) * len(ARMS))
    trials = 20
    n_tasks = max(1, per_group // trials)
    n_rec = n_calls = 0
    with path.open("w", encoding="utf-8") as f:
        for domain in DOMAINS:
            tasks = make_tasks(rng, n_tasks)
            for arm, ratio in ARMS.items():
                for r in synthetic_episodes(rng, tasks, arm=arm, domain=domain, trials=trials,
                                            calls_mean=calls, ratio=ratio, decisions=False):
                    f.write(r.model_dump_json())
                    f.write("\n")
                    n_rec += 1
                    n_calls += len(r.calls)
    return n_rec, n_calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--calls", type=float, default=20.0, help="mean tool calls per episode")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, default=None, help="keep the run directory here")
    ap.add_argument("--reuse", action="store_true",
                    help="analyse the store already in --keep instead of writing a new one")
    args = ap.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="qa-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    store = base / "episodes.jsonl"
    t0 = time.perf_counter()
    if args.reuse and store.is_file():
        n_rec = n_calls = 0
        with store.open("rb") as f:
            for line in f:
                n_rec += 1
                n_calls += line.count(b'"requestor"')
    else:
        n_rec, n_calls = write_store(store, args.episodes, args.calls, args.seed)
    gen_s = time.perf_counter() - t0
    report = base / "report.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    t1 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_quantagent.cli", "analyze", str(base), "--json",
         str(report), "--quiet"],
        env=env, capture_output=True, text=True, check=False,
    )
    wall = time.perf_counter() - t1
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_kib = usage.ru_maxrss
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return proc.returncode
    cells = json.loads(report.read_text())["cells"]
    out = {
        "records": n_rec,
        "tool_calls": n_calls,
        "store_mb": round(store.stat().st_size / 2**20, 1),
        "generate_s": round(gen_s, 1),
        "analyze_wall_s": round(wall, 2),
        "analyze_cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "analyze_peak_rss_mb": round(peak_kib / 1024, 1),
        "load_average_1min": round(os.getloadavg()[0], 1),
        "cells": len(cells),
        "verdicts": {f"{c['domain']}/{c['arm']}": c["verdict"] for c in cells},
        "targets": {"wall_s": 20, "peak_mb": 2048},
    }
    print(json.dumps(out, indent=2))
    if args.keep is None:
        store.unlink()
        report.unlink()
        base.rmdir()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

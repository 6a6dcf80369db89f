"""Episodes per second of the bundled CPU model (transformers backend), before and after the
prefix KV cache and batched prefill, measured side by side in one run.

Real episodes (the domain's scripted user, the bundled ``tiny-agent-prone`` bf16 arm,
greedy, the environment and evaluation; no store) at concurrency 1 and 64, each
configuration in its own child process (so that its peak RSS is its own), for two versions
of the backend on the same weights:

- ``before``: ``backends/transformers.py`` and ``backends/batched_decode.py`` as of commit
  ``BEFORE`` (continuous batching of decode steps, every prompt prefilled alone by the HF
  forward), run from a temporary copy of this package with those two files swapped in.
- ``after``: this tree (canonical prompt chunks, the prefix cache, prompts prefilled in the
  same forward pass as the decoding rows).

Printed per version and concurrency: episodes, wall seconds, episodes/s, generated tokens/s,
the child's CPU seconds, episodes per CPU second, its peak RSS, and whether the episode
records (messages, decisions with their margins, calls, reward) of the concurrency-1 run
equal those of the same episodes in the concurrency-64 run; for ``after``, the share of
prompt positions served from the prefix cache. The plan takes the split's tasks in order,
one trial each, then a second trial, and so on (``--episodes-c64 60``: the 60 telecom test
tasks once). Run with one thread per process::

    OMP_NUM_THREADS=1 python3 benchmarks/bundled_throughput.py [--episodes-c1 8] [--episodes-c64 60]
        [--domain telecom] [--split test] [--versions before,after] [--json]

Measured 2026-12-03 on the 2-core development VM shared with other sessions (load average
given with the table; wall times stretch with the load, ``cpu s`` and ``ep/cpu-s`` are the
steadier figures), ``OMP_NUM_THREADS=1 python3 benchmarks/bundled_throughput.py`` (load average 1.7 at the
start, 4.0 at the end; also in ``pytest_quantagent/bundled/models/README.md``, "Throughput of
the bundled backend", with an earlier run at lower load)::

    version  conc episodes   wall s    ep/s   tok/s   cpu s ep/cpu-s peak MB cached  c1 records = c64
    before      1        8    16.78   0.477    82.6   11.61    0.689     445      -  yes
    before     64       60    56.48   1.062   151.0   38.88    1.543     580      -  yes
    after       1        8    17.80   0.449    77.8   10.40    0.770     469    86%  yes
    after      64       60    22.91   2.619   372.3   16.81    3.569     708    84%  yes

The FP8-dynamic arm (``--arm fp8``), before and after it joined the batched path (before:
commit 4153fb9, one request at a time through compressed-tensors' offloaded modules; after:
decompressed at load, batched, the scheme's quantization applied by the step), 2026-12-04,
``OMP_NUM_THREADS=1 python3 benchmarks/bundled_throughput.py --arm fp8 --before
4153fb942f323345fe6a7168f5f8db94f01e5145`` (load average 0.7 at the start, nothing else
running; 49 of the 60 episodes succeed in both versions)::

    version  conc episodes   wall s    ep/s   tok/s   cpu s ep/cpu-s peak MB cached  c1 records = c64
    before      1        8    11.23   0.712   123.3   11.21    0.714     532      -  yes
    before     64       60    78.79   0.762   114.5   78.73    0.762     559      -  yes
    after       1        8     4.36   1.835   317.8    4.36    1.836     571    86%  yes
    after      64       60     8.16   7.348  1104.3    8.21    7.307     854    86%  yes

Where the time went before (cProfile of the decode thread, concurrency 64, 64 episodes):
67% in the per-request prefills (743 HF forward passes of the whole conversation so far,
410 tokens on average, for 14 generated tokens per request), 23% in the decode steps; by
kernel, ``F.linear`` 26% (mostly the prefills' GEMMs), SDPA 24% (the prefills' causal
attention and one call per row per layer in the steps), ``bmm`` 5%. After (60 episodes):
the step is 80% of the process's CPU time; in it (cProfile of a 64-row step), SDPA (one call per decoded row and layer)
about half, the GEMMs under 10%, the rest the Python and small torch calls around them; the
alias map of each answer (``bundled/tokenizer.py``, ``_finish``) about 5%.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "c30b2bb54e403859e8f209f5f49b789599501e38"
"""The backend before the prefix cache (decode-step batching only)."""
SWAPPED = ("pytest_quantagent/backends/transformers.py", "pytest_quantagent/backends/batched_decode.py")
VERSIONS = ("before", "after")


def _cpu_s() -> float:
    """This process's user + system CPU seconds, all threads (steadier than wall time on a
    shared machine: another process's load stretches wall time, not this CPU time)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _record_view(rec: Any) -> dict[str, Any]:
    d: dict[str, Any] = rec.model_dump(mode="json")
    for k in ("duration_s", "key"):
        d.pop(k, None)
    return d


def child(args: argparse.Namespace) -> int:
    """One configuration, in this process: print its figures and records as JSON."""
    from pytest_quantagent.backends.transformers import TransformersBackend
    from pytest_quantagent.env.registry import get_domain
    from pytest_quantagent.runner.batch import RunSettings, plan_episodes, run_arm
    from pytest_quantagent.runner.build import build_arm, resolve_arms

    domain = get_domain(args.domain)
    task_ids = list(domain.splits.get(args.split) or [t.id for t in domain.tasks])
    trials = -(-args.episodes // len(task_ids))
    plan = sorted(plan_episodes(task_ids, trials, run_seed=0), key=lambda e: e.trial)[: args.episodes]
    (spec,) = resolve_arms(args.arm, model_spec=args.model)
    runtime = build_arm(spec, concurrency=args.concurrency)
    backend = runtime.backend
    assert isinstance(backend, TransformersBackend)
    tokens = [0]
    real = backend._to_generation

    def counted(*a: Any, **kw: Any) -> Any:
        g = real(*a, **kw)
        tokens[0] += g.completion_tokens or 0
        return g

    backend._to_generation = counted  # type: ignore[method-assign]
    decoder = backend.batched_decoder()  # load-time self-check outside the timings
    t0, c0 = time.perf_counter(), _cpu_s()
    recs = asyncio.run(run_arm(domain=domain, runtime=runtime, plan=plan,
                               settings=RunSettings(concurrency=args.concurrency)))
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    asyncio.run(runtime.aclose())
    cache = getattr(decoder, "cache", None)
    out = {
        "episodes": len(recs), "wall_s": wall, "cpu_s": cpu, "tokens": tokens[0],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "batching": backend.batching_reason or "batched",
        "success": sum(r.success for r in recs),
        "reused_share": (cache.reused / max(1, cache.reused + cache.computed)) if cache is not None else None,
        "records": [[r.task_id, r.trial, _record_view(r)] for r in recs],
    }
    Path(args.out).write_text(json.dumps(out))
    return 0


def _before_tree(tmp: Path, before: str = BEFORE) -> Path:
    """A copy of this package with the two backend files of commit BEFORE (the rest of the
    tree, domains included, linked)."""
    tmp.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("pytest_quantagent", ".git"):
            (tmp / entry.name).symlink_to(entry)
    shutil.copytree(ROOT / "pytest_quantagent", tmp / "pytest_quantagent",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for rel in SWAPPED:
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{before}:{rel}"],
                              check=True, capture_output=True, text=True).stdout
        (tmp / rel).write_text(text)
    return tmp


def _run_child(tree: Path, conc: int, episodes: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    out = tmp / f"out-{conc}-{episodes}-{tree.name}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--concurrency", str(conc),
           "--episodes", str(episodes), "--domain", args.domain, "--split", args.split,
           "--model", args.model, "--arm", args.arm, "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(tree), "QUANTAGENT_BENCH_ROOT": str(tree)}
    subprocess.run(cmd, check=True, env=env)
    res: dict[str, Any] = json.loads(out.read_text())
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--domain", default="telecom")
    ap.add_argument("--split", default="test")
    ap.add_argument("--model", default="tiny-agent-prone")
    ap.add_argument("--arm", default="bf16", help="the arm decoded (fp8: the FP8-dynamic checkpoint)")
    ap.add_argument("--before", default=BEFORE, help="the commit whose two backend files are 'before'")
    ap.add_argument("--episodes-c1", type=int, default=8)
    ap.add_argument("--episodes-c64", type=int, default=60)
    ap.add_argument("--versions", default=",".join(VERSIONS), help=f"comma-separated subset of {VERSIONS}")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--concurrency", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--episodes", type=int, default=8, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    versions = [v.strip() for v in args.versions.split(",") if v.strip()]
    bad = [v for v in versions if v not in VERSIONS]
    if bad:
        ap.error(f"--versions: {bad} not among {', '.join(VERSIONS)}")
    if args.episodes_c1 > args.episodes_c64:
        ap.error(f"--episodes-c1 ({args.episodes_c1}) must not exceed --episodes-c64 ({args.episodes_c64}): "
                 "the concurrency-1 records are compared with the same episodes at 64")
    if os.environ.get("OMP_NUM_THREADS") != "1":
        print("note: OMP_NUM_THREADS is not 1", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for version in versions:
            tree = _before_tree(tmp / "before", args.before) if version == "before" else ROOT
            runs = {conc: _run_child(tree, conc, n, args, tmp)
                    for conc, n in ((1, args.episodes_c1), (64, args.episodes_c64))}
            at64 = {(t, k): v for t, k, v in runs[64]["records"]}
            equal = all(at64.get((t, k)) == v for t, k, v in runs[1]["records"])
            for conc, r in runs.items():
                rows.append({
                    "version": version, "concurrency": conc, "episodes": r["episodes"],
                    "wall_s": round(r["wall_s"], 2), "episodes_per_s": round(r["episodes"] / r["wall_s"], 3),
                    "tokens_per_s": round(r["tokens"] / r["wall_s"], 1), "cpu_s": round(r["cpu_s"], 2),
                    "episodes_per_cpu_s": round(r["episodes"] / r["cpu_s"], 3),
                    "peak_rss_mb": round(r["peak_rss_mb"]), "success": r["success"],
                    "reused_share": None if r["reused_share"] is None else round(r["reused_share"], 3),
                    "records_c1_equal_c64": equal, "batching": r["batching"],
                })
                print(json.dumps(rows[-1]), file=sys.stderr)
    if args.json:
        print(json.dumps({"load_average": load, "rows": rows}, indent=2))
        return 0
    print(f"load average at start {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {args.domain} {args.split}, "
          f"{args.model} {args.arm}; before = {args.before[:12]}")
    print(f"{'version':8} {'conc':>4} {'episodes':>8} {'wall s':>8} {'ep/s':>7} {'tok/s':>7} "
          f"{'cpu s':>7} {'ep/cpu-s':>8} {'peak MB':>7} {'cached':>6}  c1 records = c64")
    for r in rows:
        share = "-" if r["reused_share"] is None else f"{100 * r['reused_share']:.0f}%"
        print(f"{r['version']:8} {r['concurrency']:>4} {r['episodes']:>8} {r['wall_s']:>8.2f} "
              f"{r['episodes_per_s']:>7.3f} {r['tokens_per_s']:>7.1f} {r['cpu_s']:>7.2f} "
              f"{r['episodes_per_cpu_s']:>8.3f} {r['peak_rss_mb']:>7} {share:>6}  "
              f"{'yes' if r['records_c1_equal_c64'] else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.environ.get("QUANTAGENT_BENCH_ROOT", str(ROOT)))
    raise SystemExit(main())

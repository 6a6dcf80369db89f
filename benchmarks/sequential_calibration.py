"""Run until decided on simulated worlds with known truth: error rates under optional
stopping and the episodes a decision takes (issue 33 items 4 and 8).

Each cell simulates one world at the cap (``--cap`` tasks × 1 trial, task-major), then
looks at its first 40, 80, 160, ... tasks exactly as ``--until-decided`` does from a
``fresh:40`` start (:class:`pytest_quantagent.analysis.sequential.SequentialPlan`: α = 0.05
spent by α·t², each look at its increment), stopping at the first decided verdict. Beside it,
the same cells judged once at fixed designs (full α at a single look of n episodes): the
"fixed n of the same power" is the smallest look size whose fixed design reaches the
sequential procedure's rate of right decisions. Run from the repository root::

    OMP_NUM_THREADS=1 python3 -m benchmarks.sequential_calibration --cells 300
    OMP_NUM_THREADS=1 python3 -m benchmarks.sequential_calibration --cells 40 --rows null

Targets (issue 33): ``null`` rows claim damage in ≤ 6% of cells; ``boundary`` (true drop
at the margin) and ``amplified`` (×1.2 at 2% per call, ×2.5 at 0.3% per call) rows are
LOSSLESS in ≤ 5%.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_quantagent.analysis.arms import subset_arm
from pytest_quantagent.analysis.sequential import Design, SequentialPlan
from pytest_quantagent.metrics.synthetic import World, simulate_world
from pytest_quantagent.report.model import AnalysisConfig, CellInput, analyze
from pytest_quantagent.stats.sequential import DEFAULT_RHO
from pytest_quantagent.vocab.channels import Channel

U = Channel.UNKNOWN_TOOL
RIGHT = {"null": "LOSSLESS", "boundary": None, "amplified": "MASKED_DAMAGE",
         "damage": "MASKED_DAMAGE", "drop": "DEGRADED"}
"""The right decision per kind (None: any but LOSSLESS; INCONCLUSIVE is never wrong)."""


@dataclass(frozen=True)
class Row:
    name: str
    world: World
    kind: str


def _rows() -> list[Row]:
    w = World(n_tasks=1, trials=1)
    return [
        Row("null: equal arms", w, "null"),
        Row("null: stuck episodes (5%) and task effects", replace(w, burst_p=0.05, task_effect=0.15),
            "null"),
        Row("boundary: true drop at the margin (7.5 pts)", replace(w, drop=0.075), "boundary"),
        Row("amplified: unknown_tool x1.2 at 2% per call", replace(w, rates=((U, 0.02),),
                                                                   ratio=((U, 1.2),)), "amplified"),
        Row("amplified: unknown_tool x2.5 at 0.3% per call", replace(w, rates=((U, 0.003),),
                                                                     ratio=((U, 2.5),)), "amplified"),
        Row("damage: unknown_tool x2.5 at 6% per call", replace(w, ratio=((U, 2.5),)), "damage"),
        Row("drop: 25 pts", replace(w, drop=0.25), "drop"),
    ]


def _verdict(a: Any, r: Any, n: int, alpha: float) -> str:
    first = np.arange(n)  # the first n tasks (one trial each, task-major)
    cell = analyze([CellInput("retail", "int4", subset_arm(a, first), "bf16", subset_arm(r, first),
                              alpha=alpha)], AnalysisConfig()).cells[0]
    return str(cell.verdict)


def _right(kind: str, verdict: str) -> bool:
    want = RIGHT[kind]
    return verdict == want if want is not None else False


def _wrong(kind: str, verdict: str) -> bool:
    if kind == "null":
        return verdict in ("MASKED_DAMAGE", "DEGRADED")
    if kind in ("boundary", "amplified"):
        return verdict == "LOSSLESS"
    return verdict == "LOSSLESS"


def run_row(row: Row, cells: int, fixed_cells: int, cap: int, seed: int,
            rho: float = DEFAULT_RHO) -> dict[str, Any]:
    rng = np.random.default_rng([seed, sum(map(ord, row.name))])
    plan = SequentialPlan.make(Design(40, 1), pool=cap, grow_tasks=True, max_episodes=cap,
                               alpha=0.05, rho=rho)
    looks = [d.episodes for d in plan.designs]
    counts: dict[str, int] = {}
    used: list[int] = []
    decided_at: list[int] = []
    fixed_right = np.zeros(len(looks))
    fixed_wrong = np.zeros(len(looks))
    for i in range(cells):
        a, r = simulate_world(rng, replace(row.world, n_tasks=cap))
        verdict = "INCONCLUSIVE"
        n_used = looks[-1]
        for k, n in enumerate(looks, start=1):
            verdict = _verdict(a, r, n, plan.spending.alpha_at(k))
            if verdict != "INCONCLUSIVE":
                n_used = n
                decided_at.append(n)
                break
        counts[verdict] = counts.get(verdict, 0) + 1
        used.append(n_used)
        if i < fixed_cells:
            for j, n in enumerate(looks):
                v = _verdict(a, r, n, 0.05)
                fixed_right[j] += _right(row.kind, v)
                fixed_wrong[j] += _wrong(row.kind, v)
    share = {v: counts.get(v, 0) / cells for v in ("LOSSLESS", "MASKED_DAMAGE", "DEGRADED",
                                                     "INCONCLUSIVE")}
    right = sum(c for v, c in counts.items() if _right(row.kind, v)) / cells
    wrong = sum(c for v, c in counts.items() if _wrong(row.kind, v)) / cells
    nf = min(cells, fixed_cells)
    fr = fixed_right / nf if nf else None
    fw = fixed_wrong / nf if nf else None
    same = (next((n for n, p in zip(looks, fr, strict=True) if p >= right), None)
            if right and fr is not None else None)
    return {"row": row.name, "kind": row.kind, "cells": cells, **share, "right": right,
            "wrong": wrong, "median": float(np.median(used)), "p90": float(np.quantile(used, 0.9)),
            "decided_median": float(np.median(decided_at)) if decided_at else None,
            "fixed_same_power": same,
            "fixed_right_at_cap": None if fr is None else float(fr[-1]),
            "fixed_wrong": None if fw is None else float(fw.max()),
            "looks": looks}


def _f(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if v < 10 else f"{v:.0f}"
    return str(v)


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> int:
    p = argparse.ArgumentParser(prog="python3 -m benchmarks.sequential_calibration",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", type=int, default=300, help="cells per row (default 300)")
    p.add_argument("--fixed-cells", type=int, default=100,
                   help="cells per row also judged at fixed designs (default 100)")
    p.add_argument("--cap", type=int, default=1280, help="episodes per arm at the last look")
    p.add_argument("--rows", default="", help="comma-separated substrings of row names")
    p.add_argument("--seed", type=int, default=20261203)
    p.add_argument("--rho", type=float, default=DEFAULT_RHO,
                   help=f"spending exponent, alpha*t^rho (default {DEFAULT_RHO:g})")
    args = p.parse_args(argv)
    if args.cells < 1 or args.fixed_cells < 0 or args.cap < 40:
        p.error("--cells >= 1, --fixed-cells >= 0 and --cap >= 40 are required")
    names = [n.strip() for n in args.rows.split(",") if n.strip()]
    rows = [r for r in _rows() if not names or any(n in r.name for n in names)]
    if not rows:
        p.error(f"--rows={args.rows!r} matches no row; rows: " + "; ".join(r.name for r in _rows()))
    plan = SequentialPlan.make(Design(40, 1), pool=args.cap, grow_tasks=True,
                               max_episodes=args.cap, alpha=0.05, rho=args.rho)
    out(f"looks (episodes per arm): {[d.episodes for d in plan.designs]}; "
        f"{plan.spending.describe()}: {[round(a, 5) for a in plan.spending.alphas]}")
    out("| world | kind | cells | P(LOSSLESS) | P(MASKED) | P(DEGRADED) | P(INCONCL.) | "
        "right | wrong | episodes median / p90 | fixed n, same power | fixed at cap: right | s |")
    out("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        t0 = time.perf_counter()
        r = run_row(row, args.cells, args.fixed_cells, args.cap, args.seed, args.rho)
        out(f"| {r['row']} | {r['kind']} | {r['cells']} | {_f(r['LOSSLESS'])} | "
            f"{_f(r['MASKED_DAMAGE'])} | {_f(r['DEGRADED'])} | {_f(r['INCONCLUSIVE'])} | "
            f"{_f(r['right'])} | {_f(r['wrong'])} | {r['median']:.0f} / {r['p90']:.0f} | "
            f"{_f(r['fixed_same_power'])} | {_f(r['fixed_right_at_cap'])} | "
            f"{time.perf_counter() - t0:.0f} |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

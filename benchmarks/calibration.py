"""Calibration of the verdicts on simulated worlds with known truth (issue 23).

Each row simulates ``--cells`` cells of one world and design, runs them through
``analyze`` and prints the share of each verdict, the coverage of the 95% ratio CI of the
row's focus channel, and the power (the share of the right verdict) where the truth is
damage. ``--rows`` filters rows by substring; ``--cells`` sets cells per row (≥ 300 for the
issue's table). Run from the repository root::

    OMP_NUM_THREADS=1 python3 -m benchmarks.calibration --cells 300
    OMP_NUM_THREADS=1 python3 -m benchmarks.calibration --cells 50 --rows margin,stuck

Rows marked ``null`` must have false alarms (MASKED_DAMAGE + DEGRADED) ≤ 6%; rows marked
``boundary`` (true drop at the margin, true ratio at max_ratio, amplified low counts) must
have LOSSLESS ≤ 5%; ``amplified`` rows (a channel inside its damage region: ×1.2 at 2% per
call, ×2.5 at 0.3% per call, issue 33) must have LOSSLESS ≤ 5%; ``sub-margin`` rows (a ×1.1
or ×1.2 channel whose true widening at K=2 is under the margin) must claim damage ≤ 6%;
``identical`` rows (arms equal on every paired episode, or nearly) must claim damage ≤ 6%
and show how often they are decided (LOSSLESS). Rows ending "(task strata)" run the channel
tests stratified by task only (the first release's method) to show what the pairing gains.

Answer-level rows (issue 38): ``answers ...`` rows add simulated answers (output tokens,
empty and cut turns per agent turn; :class:`~pytest_quantagent.metrics.synthetic.Answers`)
to the candidate and the reference; their coverage column is the answer claim's ratio CI.
``null`` rows (equal answers) must have false alarms ≤ 6%; ``at-threshold`` rows (output
length exactly ×length_ratio: the edge of its damage region) must claim damage ≤ 6%;
``amplified`` rows (empty answers inside their region) must have LOSSLESS ≤ 5%; ``damage``
rows (×3 tokens, ×8 empty answers, ×5 cut turns at a flat score) show the power.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

# This checkout's package, not whichever one is installed (an editable install of another
# worktree would otherwise be measured).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_quantagent.metrics.synthetic import Answers, World, add_answers, simulate_world
from pytest_quantagent.report.model import AnalysisConfig, CellInput, Report, analyze
from pytest_quantagent.vocab.channels import Channel

U = Channel.UNKNOWN_TOOL
M = Channel.MALFORMED_CALL
RARE = ((M, 0.002),)
SPARSE = ((U, 0.004), (Channel.BAD_ARGUMENTS, 0.002))


@dataclass(frozen=True)
class Row:
    name: str
    world: World
    kind: str
    """"null" (no damage), "boundary" (LOSSLESS would be wrong), "amplified" (a channel in its
    damage region: LOSSLESS would be wrong), "sub-margin" (a real but sub-threshold effect:
    damage would be wrong), "identical" (equal arms: damage would be wrong, LOSSLESS is the
    aim), "damage" (MASKED expected), "drop" (DEGRADED expected), "advice" (run the advised
    design)."""
    focus: Channel = U
    cells_in_report: int = 1
    holm_scope: str = "cell"
    task_strata: bool = False
    """Channel tests stratified by task only (``AnalysisConfig.channel_pairing=False``)."""
    answers: Answers | None = None
    """Simulated answers of the candidate (the reference's: the same with every ratio 1)."""
    focus_answer: str | None = None
    """The answer claim whose ratio CI the coverage column measures (``output_tokens``,
    ``empty_answer``, ``length_cut``)."""
    pool: tuple[int, str, int | None] | None = None
    """``advice`` rows: the run's pool (tasks, label, fresh cap: how many fresh tasks the
    domain generates, None without a generator), as the runner reports it."""

    @property
    def sparse(self) -> bool:
        """Few failures of the focus channel per cell (under ~30), failures confined to a few
        tasks, or arms coupled by shared seeds (identical failures give a ratio of exactly
        1): over-coverage is expected."""
        w = self.world
        if w.shared or 0 < w.confined <= 3:
            return True  # coupled arms, or failures in so few tasks that t(G'-1) is wide
        rate = dict(w.rates).get(self.focus, 0.0) * max(1.0, w.true_ratio(self.focus))
        share = w.confined / w.n_tasks if w.confined else 1.0
        return rate * share * w.calls_mean * w.n_tasks * w.trials + w.burst_p * 9 * w.n_tasks * w.trials < 30


def _rows() -> list[Row]:
    b3 = World(n_tasks=40, trials=3)
    b1 = World(n_tasks=40, trials=1)
    b114 = World(n_tasks=114, trials=1)
    shared1 = World(n_tasks=40, trials=1, success_noise=0.0, shared=True, rates=SPARSE)

    def only_u(rate: float) -> World:
        # one channel, the others silent, so that the row measures that channel's rule
        return World(n_tasks=114, trials=3, rates=((U, rate),))

    # deterministic decoding, same seeds: every paired episode the same in both arms
    ident = World(n_tasks=160, trials=1, success_noise=0.0, shared=True,
                  rates=((U, 0.1), (Channel.BAD_ARGUMENTS, 0.02)))
    # shared seeds, a few episodes diverge: 5% of successes redrawn, unknown_tool ×1.05
    near = World(n_tasks=114, trials=3, success_noise=0.05, shared=True,
                 rates=((U, 0.02),), ratio=((U, 1.05),))
    ans = World(n_tasks=114, trials=1)
    ans3 = World(n_tasks=114, trials=3)
    rows = [
        Row("benign null 40x3", b3, "null"),
        Row("benign null 40x1", b1, "null"),
        Row("benign x1.5 40x3", replace(b3, ratio=((U, 1.5),)), "damage"),
        Row("benign x2.5 40x3", replace(b3, ratio=((U, 2.5),)), "damage"),
        Row("benign x2.5 40x1", replace(b1, ratio=((U, 2.5),)), "damage"),
        Row("benign x2.5 114x1", replace(b114, ratio=((U, 2.5),)), "damage"),
        Row("x2.5 40x1 in 8 cells, cell Holm", replace(b1, ratio=((U, 2.5),)), "damage",
            cells_in_report=8),
        Row("x2.5 40x1 in 8 cells, report Holm", replace(b1, ratio=((U, 2.5),)), "damage",
            cells_in_report=8, holm_scope="report"),
        Row("ratio at max_ratio x1.2 40x3", replace(b3, ratio=((U, 1.2),)), "boundary"),
        Row("shared seeds null 40x1", shared1, "null"),
        Row("shared seeds null 114x1", replace(shared1, n_tasks=114), "null"),
        Row("harm-only drop at margin 40x1", replace(shared1, drop=0.075), "boundary"),
        Row("harm-only drop at margin 114x1", replace(shared1, n_tasks=114, drop=0.075),
            "boundary"),
        Row("harm-only drop at margin 40x3", replace(shared1, trials=3, drop=0.075,
                                                     success_noise=0.1), "boundary"),
        Row("stuck-episode null (rare malformed) 40x1",
            replace(b1, rates=RARE, burst_p=0.02), "null", focus=M),
        Row("stuck-episode null (rare malformed) 40x3",
            replace(b3, rates=RARE, burst_p=0.02), "null", focus=M),
        Row("failures in 2 tasks null 40x3", replace(b3, rates=((U, 0.3),), confined=2), "null"),
        Row("failures in 2 tasks x2.5 40x3",
            replace(b3, rates=((U, 0.2),), confined=2, ratio=((U, 2.5),)), "damage"),
        Row("task effects null 40x3", replace(b3, task_effect=0.15, success_noise=0.2), "null"),
        Row("task effects null 40x14", replace(b3, trials=14, task_effect=0.15,
                                               success_noise=0.2), "null"),
        Row("low counts (3 vs 8 in 40) x2.7 40x1",
            replace(b1, rates=((U, 0.0075),), ratio=((U, 8 / 3),)), "boundary"),
        Row("true 10-pt drop 40x1", replace(b1, drop=0.10), "drop"),
        Row("true 10-pt drop 40x3", replace(b3, drop=0.10), "drop"),
        Row("true 10-pt drop 114x1", replace(b114, drop=0.10), "drop"),
        Row("telecom-like user calls null 40x3",
            replace(b3, user_calls=4.0, user_fail=0.1), "null"),
        Row("several trials null 40x5", replace(b3, trials=5), "null"),
        Row("true 20-pt drop 40x3", replace(b3, drop=0.20), "drop"),
        # issue 33: channels inside their damage region (ratio > 1.2 and increase > 0.2 per
        # 100 calls) whose other claims can be decided; LOSSLESS would be wrong
        *[Row(f"x1.2 at 2%/call {t}x{m}", replace(only_u(0.02), n_tasks=t, trials=m,
                                                  ratio=((U, 1.2),)), "amplified")
          for t, m in ((114, 3), (114, 5), (114, 10))],
        *[Row(f"x2.5 at 0.3%/call {t}x{m}", replace(only_u(0.003), n_tasks=t, trials=m,
                                                    ratio=((U, 2.5),)), "amplified")
          for t, m in ((114, 3), (114, 5))],
        # issue 33: widening under the margin at K=2 (×1.1: ~1.6 pts; ×1.2: ~2-3 pts) with a
        # channel at or under max_ratio: damage would be wrong
        *[Row(f"x{r:g} widening under the margin {t}x{m}", replace(b3, n_tasks=t, trials=m,
                                                                   ratio=((U, r),)),
              "sub-margin") for r in (1.1, 1.2) for t, m in ((114, 5), (114, 10), (114, 20))],
        # issue 33: identical (byte-identical deterministic arms) and near-identical arms
        Row("identical arms 160x1", ident, "identical"),
        Row("identical arms 160x1 (task strata)", ident, "identical", task_strata=True),
        Row("near-identical arms 114x3", near, "identical"),
        Row("near-identical arms 114x3 (task strata)", near, "identical", task_strata=True),
        # issue 33 item 3: the advice decides every claim (score, channels, gaps) within the
        # pool; run it and compare P(LOSSLESS) with the power it predicted (null worlds)
        # issue 38: answer-level claims (length: ratio of means per turn, damage above
        # length_ratio; empty and cut turns: per-turn rates, the channels' rule)
        Row("answers null (tokens, 0.5% empty, 1% cut) 114x1", ans, "null",
            answers=Answers(empty=0.005, cut=0.01), focus_answer="output_tokens"),
        Row("answers null (tokens, 0.5% empty, 1% cut) 114x3", ans3, "null",
            answers=Answers(empty=0.005, cut=0.01), focus_answer="empty_answer"),
        Row("answers output length at x1.5 114x1", ans, "at-threshold",
            answers=Answers(token_ratio=1.5), focus_answer="output_tokens"),
        Row("answers output length at x1.5 114x3", ans3, "at-threshold",
            answers=Answers(token_ratio=1.5), focus_answer="output_tokens"),
        Row("answers output length x3 40x1", b1, "damage",
            answers=Answers(token_ratio=3.0), focus_answer="output_tokens"),
        Row("answers output length x2 114x1", ans, "damage",
            answers=Answers(token_ratio=2.0), focus_answer="output_tokens"),
        Row("answers empty x8 at 0.5%/turn 114x1", ans, "damage",
            answers=Answers(empty=0.005, empty_ratio=8.0), focus_answer="empty_answer"),
        Row("answers empty x1.5 at 4%/turn 114x3", ans3, "amplified",
            answers=Answers(empty=0.04, empty_ratio=1.5), focus_answer="empty_answer"),
        Row("answers cut x5 at 1%/turn 114x1", ans, "damage",
            answers=Answers(cut=0.01, cut_ratio=5.0), focus_answer="length_cut"),
        Row("advised design (pilot 40x1 null, 114-task pool)", b1, "advice",
            pool=(114, "a 114-task pool", None)),
        Row("advised design (pilot 40x1 null, bundled 60-task telecom split)",
            replace(b1, user_calls=4.0, user_fail=0.1), "advice",
            pool=(60, "the telecom test split", 500)),
        Row("advised design (pilot 40x3 task effects, 400-task pool)",
            replace(b3, task_effect=0.15, success_noise=0.2), "advice",
            pool=(400, "a 400-task pool", None)),
    ]
    return rows


def _cell_report(rng: np.random.Generator, row: Row, world: World, cfg: AnalysisConfig,
                 pool: int | None = None) -> Report:
    inputs = []
    for i in range(row.cells_in_report):
        w = world if i == 0 else replace(world, ratio=())
        a, r = simulate_world(rng, w, arm=f"int4_{i}" if i else "int4")
        if row.answers is not None:
            truth = row.answers if i == 0 else Answers(row.answers.tokens, empty=row.answers.empty,
                                                      cut=row.answers.cut)
            a, r = add_answers(rng, a, r, truth)
        inputs.append(CellInput("retail", a.arm, a, "bf16", r, pool_tasks=pool))
    return analyze(inputs, cfg)


def _advised(rng: np.random.Generator, row: Row, cells: int) -> tuple[dict[str, float], str]:
    """``cells`` times: a pilot cell of ``row.world`` on ``row.pool``; when it is
    INCONCLUSIVE with a reachable advice, one cell of the advised design (a fresh pool is
    more tasks of the same world). In a null world every claim decided is LOSSLESS: the
    share of advised cells that are LOSSLESS is the achieved power, against the power the
    advice predicted (at least the requested 0.8)."""
    from pytest_quantagent.runner.selection import PoolSize

    assert row.pool is not None
    pool = PoolSize(*row.pool)
    cfg = AnalysisConfig()
    lossless = n = unreachable = decided_pilot = 0
    predicted: list[float] = []
    designs: list[tuple[int, int]] = []
    fresh = 0
    for _ in range(cells):
        c = _cell_report(rng, row, row.world, cfg, pool).cells[0]
        if c.verdict != "INCONCLUSIVE" or not c.plan:
            decided_pilot += 1
            continue
        if not c.plan["reachable"]:
            unreachable += 1
            continue
        t, m = int(c.plan["tasks"]), int(c.plan["trials"])
        designs.append((t, m))
        predicted.append(float(c.plan["power"]))
        fresh += bool(c.plan["fresh"])
        a = _cell_report(rng, row, replace(row.world, n_tasks=t, trials=m), cfg, pool).cells[0]
        n += 1
        lossless += a.verdict == "LOSSLESS"
    if not n:
        return {"unreachable": unreachable}, "no advice"
    ts = sorted(t for t, _ in designs)
    ms = sorted(m for _, m in designs)
    eps = sorted(t * m for t, m in designs)
    return ({"lossless_power": lossless / n, "predicted": float(np.mean(predicted)),
             "advised": n, "unreachable": unreachable, "decided_pilot": decided_pilot},
            f"{n} advised designs ({fresh} fresh), median {ts[len(ts) // 2]} tasks x "
            f"{ms[len(ms) // 2]} trials, episodes 10/50/90%: {eps[len(eps) // 10]}/"
            f"{eps[len(eps) // 2]}/{eps[9 * len(eps) // 10]}")


def run_row(row: Row, cells: int, seed: int) -> dict[str, float | str]:
    rng = np.random.default_rng([seed, sum(map(ord, row.name))])
    if row.kind == "advice":
        res, design = _advised(rng, row, cells)
        return {"row": row.name, "design": design, "cells": cells, **res}
    cfg = AnalysisConfig(holm_scope=row.holm_scope,  # type: ignore[arg-type]
                         channel_pairing=not row.task_strata)
    counts = dict.fromkeys(("LOSSLESS", "MASKED_DAMAGE", "DEGRADED", "INCONCLUSIVE"), 0)
    covered = 0
    n_ci = 0
    truth = row.world.true_ratio(row.focus)
    if row.answers is not None and row.focus_answer is not None:
        truth = {"output_tokens": row.answers.token_ratio, "empty_answer": row.answers.empty_ratio,
                 "length_cut": row.answers.cut_ratio}[row.focus_answer]
    for _ in range(cells):
        c = _cell_report(rng, row, row.world, cfg).cells[0]
        counts[str(c.verdict)] += 1
        if row.focus_answer is not None:
            ci = ((c.answer_tests or {}).get(row.focus_answer) or {}).get("ratio_ci")
        else:
            ci = c.channels[row.focus.value].ratio_ci
        if ci is not None and ci[0] is not None:
            n_ci += 1
            hi = ci[1] if ci[1] is not None else float("inf")
            covered += ci[0] <= truth <= hi
    out: dict[str, float | str] = {"row": row.name, "kind": row.kind, "cells": cells}
    out.update({k: v / cells for k, v in counts.items()})
    out["coverage"] = covered / n_ci if n_ci else float("nan")
    if row.kind == "damage":
        out["power"] = counts["MASKED_DAMAGE"] / cells
    elif row.kind == "drop":
        out["power"] = counts["DEGRADED"] / cells
    return out


def iter_rows(names: list[str] | None) -> Iterator[Row]:
    for row in _rows():
        if not names or any(n in row.name for n in names):
            yield row


def _fmt(v: float | str | None) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return f"{v:.3f}" if v == v else "n/a"


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> int:
    p = argparse.ArgumentParser(prog="python3 -m benchmarks.calibration", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", type=int, default=300, help="cells per row (default 300)")
    p.add_argument("--rows", default="", help="comma-separated substrings of row names")
    p.add_argument("--seed", type=int, default=20261202)
    args = p.parse_args(argv)
    if args.cells < 1:
        p.error(f"--cells={args.cells} is not allowed; give a positive integer")
    names = [n.strip() for n in args.rows.split(",") if n.strip()] or None
    rows = list(iter_rows(names))
    if not rows:
        p.error(f"--rows={args.rows!r} matches no row; rows: " +
                "; ".join(r.name for r in _rows()))
    out("| world, design | kind | cells | P(LOSSLESS) | P(MASKED) | P(DEGRADED) | "
        "P(INCONCL.) | ratio-CI coverage | power | s |")
    out("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        t0 = time.perf_counter()
        r = run_row(row, args.cells, args.seed)
        dt = time.perf_counter() - t0
        if row.kind == "advice":
            out(f"| {row.name}: {r.get('design')} | advice | {r['cells']} pilots | "
                f"{_fmt(r.get('lossless_power'))} | - | - | - | - | P(LOSSLESS) of the advised "
                f"design {_fmt(r.get('lossless_power'))}, predicted {_fmt(r.get('predicted'))} "
                f"(requested 0.8; {r.get('unreachable', 0)} pilots told no design can decide) "
                f"| {dt:.0f} |")
            continue
        out(f"| {row.name} | {row.kind} | {r['cells']} | {_fmt(r['LOSSLESS'])} | "
            f"{_fmt(r['MASKED_DAMAGE'])} | {_fmt(r['DEGRADED'])} | {_fmt(r['INCONCLUSIVE'])} | "
            f"{_fmt(r['coverage'])} | {_fmt(r.get('power'))} | {dt:.0f} |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

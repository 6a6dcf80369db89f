"""Calibration of the verdicts on simulated worlds with known truth (issue 23).

The worlds and rows are ``benchmarks/calibration.py``'s (run it for the full table). The
default run checks a few rows at 40 cells with fixed seeds; the tolerances are one-sided
binomial bounds: with 30 cells, a true rate of 5% reaches 6/30 with probability < 0.4%, a
true power of 94% falls below 24/30 with probability < 1%. The slow test runs every row at
300 cells against the issues' "Done when" (23 and 33).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    name = "quantagent_calibration_bench"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "calibration.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _row(name: str, cells: int, seed: int = 11) -> dict[str, float | str]:
    bench = _bench()
    (row,) = [r for r in bench.iter_rows([name]) if r.name == name]
    out: dict[str, float | str] = bench.run_row(row, cells, seed)
    return out


def test_fast_subset() -> None:
    masked = _row("benign x2.5 40x3", 30)
    assert float(masked["MASKED_DAMAGE"]) >= 24 / 30, masked
    assert float(masked["coverage"]) >= 0.8, masked
    stuck = _row("stuck-episode null (rare malformed) 40x1", 30)
    assert float(stuck["MASKED_DAMAGE"]) + float(stuck["DEGRADED"]) <= 5 / 30, stuck
    margin = _row("harm-only drop at margin 40x1", 30)
    assert float(margin["LOSSLESS"]) <= 5 / 30, margin
    ratio = _row("ratio at max_ratio x1.2 40x3", 30)
    assert float(ratio["LOSSLESS"]) <= 5 / 30, ratio
    # issue 33: an amplified low-rate channel is not certified; identical arms are decided
    low = _row("x2.5 at 0.3%/call 114x3", 30)
    assert float(low["LOSSLESS"]) <= 5 / 30, low
    same = _row("identical arms 160x1", 30)
    assert float(same["LOSSLESS"]) >= 24 / 30, same
    # issue 38: x3 longer answers at a flat score are damage; exactly x1.5 is not claimed
    longer = _row("answers output length x3 40x1", 30)
    assert float(longer["MASKED_DAMAGE"]) >= 24 / 30, longer
    edge = _row("answers output length at x1.5 114x1", 30)
    assert float(edge["MASKED_DAMAGE"]) + float(edge["DEGRADED"]) <= 3 / 30, edge


def test_calibration_table_runs_and_filters(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    assert bench.main(["--cells", "3", "--rows", "low counts"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 3 and "low counts (3 vs 8 in 40) x2.7 40x1" in out
    with pytest.raises(SystemExit):
        bench.main(["--rows", "no such world"])


@pytest.mark.slow
def test_done_when_table() -> None:
    # issues 23 and 33 "Done when", at 300 cells per row
    bench = _bench()
    failures = []
    for row in bench.iter_rows(None):
        r = bench.run_row(row, 300, 20261202)
        if row.kind == "advice":
            # issue 33: the advised design, run, reaches the power it claimed within 5
            # points (in these null worlds every claim decided is LOSSLESS), or the advice
            # said no design can decide
            if "lossless_power" in r and float(r["lossless_power"]) < float(r["predicted"]) - 0.05:
                failures.append((row.name, r))
            if "lossless_power" not in r and not r.get("unreachable"):
                failures.append((row.name, r))
            continue
        alarms = float(r["MASKED_DAMAGE"]) + float(r["DEGRADED"])
        cov = float(r["coverage"])
        if row.kind == "null" and alarms > 0.06:
            failures.append((row.name, r))
        if row.kind in ("boundary", "amplified") and float(r["LOSSLESS"]) > 0.05:
            failures.append((row.name, r))
        if row.kind in ("sub-margin", "identical", "at-threshold") and alarms > 0.06:
            failures.append((row.name, r))
        # paired channel evidence decides byte-identical arms (issue 33)
        if row.name == "identical arms 160x1" and float(r["LOSSLESS"]) < 0.9:
            failures.append((row.name, r))
        # under-coverage breaks a claim everywhere; over-coverage (conservative intervals) is
        # allowed only in sparse worlds (few failures make the interval wide) and in worlds
        # whose arms share seeds (identical failures: the ratio is exactly 1)
        # the 92-98% band of the issue, widened by two Monte-Carlo standard errors of a
        # 300-cell coverage estimate at 95% (2·sqrt(.95·.05/300) = 0.025)
        if cov == cov and (cov < 0.92 - 0.025 or (cov > 0.98 + 0.025 and not row.sparse)):
            failures.append((row.name, r))
        if row.name == "benign x2.5 40x3" and float(r["MASKED_DAMAGE"]) < 0.90:
            failures.append((row.name, r))
    assert not failures, [name for name, _ in failures]

"""Run until decided on simulated worlds with known truth (``benchmarks/sequential_calibration.py``;
run it for the full table). Tolerances are one-sided binomial bounds: with 30 cells a true
rate of 5% reaches 6/30 with probability < 0.4%; a true power of 95% falls below 24/30 with
probability < 1%. The slow test runs the issue's rows at 300 cells (issue 33 "Done when":
false LOSSLESS ≤ 5% at the margin and at ×1.2, false damage ≤ 6% in the nulls)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    name = "quantagent_sequential_calibration_bench"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "sequential_calibration.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _row(prefix: str, cells: int, cap: int, fixed: int = 0) -> dict[str, Any]:
    bench = _bench()
    (row,) = [r for r in bench._rows() if r.name.startswith(prefix)]
    out: dict[str, Any] = bench.run_row(row, cells, fixed, cap, seed=13)
    return out


def test_optional_stopping_keeps_the_error_rates_on_a_small_grid() -> None:
    # four looks from 40 to 320 episodes: a gross drop stops early, a null never claims
    # damage, a channel amplified x1.2 at 2% per call is never certified
    drop = _row("drop", 30, 320)
    assert drop["DEGRADED"] >= 24 / 30 and drop["median"] <= 160, drop
    null = _row("null: stuck", 30, 320)
    assert null["wrong"] <= 5 / 30, null
    amp = _row("amplified: unknown_tool x1.2", 30, 320)
    assert amp["LOSSLESS"] <= 5 / 30, amp


@pytest.mark.slow
@pytest.mark.parametrize("prefix, kind", [
    ("null: equal", "null"), ("null: stuck", "null"), ("boundary", "boundary"),
    ("amplified: unknown_tool x1.2", "amplified"), ("amplified: unknown_tool x2.5", "amplified"),
])
def test_issue_33_sequential_rows_at_300_cells(prefix: str, kind: str) -> None:
    r = _row(prefix, 300, 1280)
    if kind == "null":
        assert r["MASKED_DAMAGE"] + r["DEGRADED"] <= 0.06, r
    else:
        assert r["LOSSLESS"] <= 0.05, r

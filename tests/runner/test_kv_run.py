"""A KV arm end to end on CPU through the bundled model (issue 38 item 3): ``quantagent run
--arms bf16,int4,int4+kv-int8`` runs both cells against the same bf16, the KV arm's episodes
are its own (never the int4 arm's, never resumed into each other), and the plugin runs a
``--quant=int4+kv-int8`` cell."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.cli import main

pytest.importorskip("torch")
pytest.importorskip("transformers")

BUNDLED = Path(__file__).resolve().parents[2] / "pytest_quantagent" / "bundled" / "models" / "tiny-agent"
pytestmark = pytest.mark.skipif(not (BUNDLED / "config.json").is_file(), reason="bundled model not built")


def _store(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (path / "episodes.jsonl").read_text().splitlines()]


def test_quantagent_run_with_a_kv_arm_on_the_bundled_model(tmp_path: Path) -> None:
    store, report = tmp_path / "store", tmp_path / "r.json"
    args = ["run", "--domain", "telecom", "--tasks", "fresh:2", "--out", str(store), "-q"]
    main([*args, "--arms", "bf16,int4,int4+kv-int8", "--json", str(report)])
    r = json.loads(report.read_text())
    cells = {c["arm"]: c for c in r["cells"]}
    assert set(cells) == {"int4", "int4+kv-int8"}
    kv = cells["int4+kv-int8"]
    assert kv["reference"] == "bf16" and kv["paired"] == 2
    s = kv["comparability"]["settings"]["kv_cache_dtype"]
    assert (s["reference"], s["arm"], s["status"]) == ("auto", "int8", "informational")
    assert not any(x.startswith("not comparable") for x in kv["reasons"]), kv["reasons"]
    backends = r["run"]["backends"]
    assert backends["int4+kv-int8"]["version"] == backends["int4"]["version"] + "/kv-int8"
    assert backends["int4+kv-int8"]["path"] == backends["int4"]["path"]  # same weights
    records = _store(store)
    by_arm: dict[str, set[str]] = {}
    for rec in records:
        by_arm.setdefault(rec["arm"], set()).add(rec["key"])
    assert {a: len(k) for a, k in by_arm.items()} == {"bf16": 2, "int4": 2, "int4+kv-int8": 2}
    assert not by_arm["int4"] & by_arm["int4+kv-int8"]
    # a second run resumes each arm from its own records: nothing new is run
    main([*args, "--arms", "bf16,int4+kv-int8,int4", "--json", str(report)])
    assert len(_store(store)) == len(records)


PLUGIN_TEST = """
def test_cell(quant_cell, quant_arm, reference_arm):
    assert quant_cell.arm == "int4+kv-int8" and quant_cell.reference == "bf16"
    assert (quant_arm.kv_cache_dtype, reference_arm.kv_cache_dtype) == ("int8", "auto")
    assert len(quant_cell.episodes) == 2 == len(quant_cell.reference_episodes)
    assert {e.arm for e in quant_cell.episodes} == {"int4+kv-int8"}
"""


def test_the_plugin_runs_a_kv_cell(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PLUGIN_TEST)
    result = pytester.runpytest("--quant=int4+kv-int8", "--domain=telecom", "--quant-tasks=fresh:2",
                                "--quant-cache-dir=cache", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result = pytester.runpytest("--quant=int4+repair+kv-int8", "--domain=telecom")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("--quant: arm label 'int4+repair+kv-int8': '+kv-int8' is repeated or out of order; "
            "modifiers go in the order PRECISION[+kv-DTYPE][+repair][@MODEL]") in result.stderr.str()

"""runner.service.run_arms, the one pipeline behind pytest cells, the screen and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_quantagent.quant.arms import ArmSpec
from pytest_quantagent.runner.batch import RunSettings
from pytest_quantagent.runner.service import RunRequest, TaskSelection, run_arms

ARMS = [
    ArmSpec(label="bf16", backend="mock", model="m", options={"rule": "mini_rules:solving_rule"}),
    ArmSpec(label="int4", backend="mock", model="m",
            options={"responses": [{"content": "Done ###STOP###"}]}),
]
REQUEST = RunRequest(tasks=TaskSelection("first", count=2), trials=2, seed=3,
                     settings=RunSettings(concurrency=2))


def test_reference_alone_then_the_cell_share_the_reference_episodes(
        mini_domains_dir: Path, tmp_path: Path) -> None:
    # The screen runs the reference alone, a cell runs both: same keys, nothing runs twice.
    alone = run_arms("mini", ARMS, REQUEST, tmp_path, run=["bf16"])
    both = run_arms("mini", ARMS, REQUEST, tmp_path)
    assert list(both.records) == ["bf16", "int4"]
    assert [r.key for r in alone.records["bf16"]] == [r.key for r in both.records["bf16"]]
    assert [(r.task_id, r.trial) for r in both.records["int4"]] == [
        (r.task_id, r.trial) for r in both.records["bf16"]]
    lines = [json.loads(x) for x in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert sorted(r["arm"] for r in lines) == ["bf16"] * 4 + ["int4"] * 4
    assert set(both.backends) == {"bf16", "int4"} and both.user is None


def test_an_arm_outside_the_run_is_refused(mini_domains_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"arms \['fp8'\] are not among \['bf16', 'int4'\]"):
        run_arms("mini", ARMS, REQUEST, tmp_path, run=["fp8"])

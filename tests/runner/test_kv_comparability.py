"""A KV arm's KV-cache dtype is the intended difference of its cell (issue 38 item 3): the
serving comparison lists it, never flags it, and still flags every other difference. For a
served arm the dtype is what the arms TOML says, or what the server exposes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.cli import main


def _run(tmp_path: Path, cfg: Path, arms: str, *extra: str) -> dict[str, Any]:
    report = tmp_path / "r.json"
    main(["run", "--domain", "mini", "--arms", arms, "--config", str(cfg),
          "--out", str(tmp_path / "store"), "--num-tasks", "3", "--json", str(report), "-q", *extra])
    return dict(json.loads(report.read_text()))


@pytest.fixture
def three_tasks(monkeypatch: pytest.MonkeyPatch, mini_domains_dir: Path) -> None:
    monkeypatch.setenv("QUANTAGENT_MINI_TASKS", "3")


def test_a_served_kv_arm_is_comparable_and_names_its_dtype(
        tmp_path: Path, serve: Any, three_tasks: None) -> None:
    _, ref = serve(model_fields={"tool_call_parser": "hermes"})
    _, fp8 = serve(model_fields={"tool_call_parser": "hermes"})
    _, exposed = serve(model_fields={"tool_call_parser": "hermes", "kv_cache_dtype": "fp8_e5m2"})
    cfg = tmp_path / "arms.toml"
    cfg.write_text(f'[arms.bf16]\nbackend = "openai"\nmodel = "m"\nbase_url = "{ref}"\n'
                   f'[arms."bf16+kv-fp8"]\nbackend = "openai"\nmodel = "m"\nbase_url = "{fp8}"\n'
                   f'[arms.e5m2]\nbackend = "openai"\nmodel = "m"\nbase_url = "{exposed}"\n')
    report = _run(tmp_path, cfg, "bf16,bf16+kv-fp8,e5m2")
    cells = {c["arm"]: c for c in report["cells"]}
    s = cells["bf16+kv-fp8"]["comparability"]["settings"]
    assert s["kv_cache_dtype"] == {"reference": "auto", "arm": "fp8", "status": "informational",
                                   "source": {"reference": "arm 'bf16'", "arm": "arm 'bf16+kv-fp8'"}}
    assert s["tool_parser"]["status"] == "same"
    e = cells["e5m2"]["comparability"]["settings"]["kv_cache_dtype"]
    assert (e["arm"], e["source"]["arm"]) == ("fp8_e5m2", "the server")
    for cell in cells.values():
        assert not any(r.startswith("not comparable") for r in cell["reasons"]), cell["reasons"]
    # the run's description of the served arm names the dtype the TOML gave it
    assert report["run"]["backends"]["bf16+kv-fp8"]["kv_cache_dtype"].startswith("fp8 (the arms TOML says")
    assert "kv_cache_dtype" not in report["run"]["backends"]["bf16"]


def test_a_kv_arm_served_with_another_tool_parser_is_still_not_comparable(
        tmp_path: Path, serve: Any, three_tasks: None) -> None:
    _, ref = serve(model_fields={"tool_call_parser": "qwen3_coder"})
    _, arm = serve(model_fields={"tool_call_parser": "hermes"})
    cfg = tmp_path / "arms.toml"
    cfg.write_text(f'[arms.bf16]\nbackend = "openai"\nmodel = "m"\nbase_url = "{ref}"\n'
                   f'[arms.int4]\nbackend = "openai"\nmodel = "m"\nbase_url = "{arm}"\n'
                   'kv_cache_dtype = "fp8"\n')
    [cell] = _run(tmp_path, cfg, "bf16,int4")["cells"]
    assert cell["verdict"] == "INCONCLUSIVE"
    assert [r for r in cell["reasons"] if r.startswith("not comparable")] == [
        "not comparable: tool_parser: qwen3_coder vs hermes"]
    assert cell["comparability"]["settings"]["kv_cache_dtype"]["status"] == "informational"

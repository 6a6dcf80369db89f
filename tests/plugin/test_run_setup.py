"""resolve.RunSetup: the LLM user's and the judge's models are read once per run, whatever
number of cells asks for the run request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.config import QuantAgentConfig
from pytest_quantagent.quant import arms as arms_mod
from pytest_quantagent.resolve import RunSetup, default_arm


def test_user_and_judge_tables_are_read_once_for_every_cell(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "arms.toml"
    cfg.write_text(
        '[arms.bf16]\nbackend = "mock"\n[arms.int4]\nbackend = "mock"\n\n'
        '[user]\nbackend = "openai"\nmodel = "sim"\nbase_url = "http://127.0.0.1:9/v1"\n\n'
        '[judge]\nbackend = "openai"\nmodel = "judge"\nbase_url = "http://127.0.0.1:9/v1"\n'
    )
    reads: list[str] = []
    for name in ("load_user_config", "load_judge_config"):
        real = getattr(arms_mod, name)

        def counted(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
            reads.append(_name)
            return _real(*a, **k)

        monkeypatch.setattr(arms_mod, name, counted)
    qc = QuantAgentConfig(config_path=cfg, user="llm")
    setup = RunSetup(qc, lambda label: default_arm(qc, label))
    models = setup.preflight_models()
    requests = [setup.request() for _ in range(3)]  # three cells
    assert models["user"].model == "sim" and models["judge"].model == "judge"
    assert all(r.user is not None and r.user.arm.model == "sim" for r in requests)
    assert all(r.judge is not None and r.judge.arm.model == "judge" for r in requests)
    assert sorted(reads) == ["load_judge_config", "load_user_config"]

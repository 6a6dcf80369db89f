"""Fixtures of the repair and screen tests: the runner tests' mini domain (users with emails)
through the real domain registry, and mock arms."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# pytester's in-process runs restore sys.modules afterwards; a C extension (numpy, scipy)
# first imported inside such a run cannot be imported again in the next one. Importing the
# analysis and runner stack here keeps it loaded for every run.
import pytest_quantagent.report.model
import pytest_quantagent.report.screen
import pytest_quantagent.runner.batch
import pytest_quantagent.stats  # noqa: F401
from pytest_quantagent.env import registry

HERE = Path(__file__).parent
MINI_DOMAINS_DIR = HERE.parent / "runner" / "domains"

#: bf16 never fails; int4 hallucinates ``get_usr`` until told it does not exist.
ARMS_TOML = """
[arms.bf16]
backend = "mock"
model = "scripted"
rule = "repair_rules:solving_rule"

[arms.int4]
backend = "mock"
model = "scripted"
rule = "repair_rules:hallucinating_rule"
"""


@pytest.fixture
def mini_domains_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("QUANTAGENT_DOMAINS_DIR", str(MINI_DOMAINS_DIR))
    monkeypatch.syspath_prepend(str(HERE))  # repair_rules for subprocesses/pytester runs too
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p))
    registry.clear_cache()
    yield MINI_DOMAINS_DIR
    registry.clear_cache()


@pytest.fixture
def arms_toml(tmp_path: Path, mini_domains_dir: Path) -> Path:
    p = tmp_path / "arms.toml"
    p.write_text(ARMS_TOML)
    return p

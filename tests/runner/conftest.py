"""Runner test fixtures: a tiny real domain (real Domain, Environment, ScriptedUser and
evaluation) independent of the retail/telecom content, loaded through the domain registry."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_quantagent.env import registry
from pytest_quantagent.env.domain import Domain

MINI_DOMAINS_DIR = Path(__file__).parent / "domains"


@pytest.fixture
def mini_domains_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("QUANTAGENT_DOMAINS_DIR", str(MINI_DOMAINS_DIR))
    yield MINI_DOMAINS_DIR
    registry.clear_cache()


@pytest.fixture
def mini_domain(mini_domains_dir: Path) -> Domain:
    return registry.get_domain("mini")


#: The env tests' toy domain (tests/env/toy_domains), for runner tests that need its tools.
TOY_DIR = Path(__file__).resolve().parent.parent / "env" / "toy_domains"


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Domain]:
    monkeypatch.setenv("QUANTAGENT_DOMAINS_DIR", str(TOY_DIR))
    registry.clear_cache()
    yield registry.get_domain("toy")
    registry.clear_cache()

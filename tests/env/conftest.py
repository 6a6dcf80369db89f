"""The toy domain (tests/env/toy_domains/toy) used by the engine tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_quantagent.env import registry
from pytest_quantagent.env.domain import Domain

TOY_DIR = Path(__file__).resolve().parent / "toy_domains"


@pytest.fixture
def toy_domains_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("QUANTAGENT_DOMAINS_DIR", str(TOY_DIR))
    registry.clear_cache()
    yield TOY_DIR
    registry.clear_cache()


@pytest.fixture
def toy(toy_domains_dir: Path) -> Domain:
    return registry.get_domain("toy")

"""Shared test fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# pytester's in-process runs restore sys.modules afterwards: a module first imported inside
# one is imported afresh by the next, and httpx then fails to map the fresh httpcore's
# exceptions (a raw httpcore.ConnectError escapes `except httpx.HTTPError`). Which test
# imports it first depends on the order (it differs under -n 2), so import them here.
import httpcore  # noqa: F401
import httpx  # noqa: F401
import pytest

from pytest_quantagent.env import registry

_REPO = Path(__file__).resolve().parent.parent


def _tau2_dir() -> Path | None:
    env = os.environ.get("QUANTAGENT_TAU2_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(_REPO.parent / "shared" / "tau2")
    for c in candidates:
        if (c / "domains").is_dir():
            return c
    return None


@pytest.fixture(scope="session")
def tau2_data() -> Path:
    """The τ²-bench data files (``../shared/tau2`` or ``$QUANTAGENT_TAU2_DATA``); skips when
    absent. Never copy these files into the repository."""
    d = _tau2_dir()
    if d is None:
        pytest.skip("tau2-bench data not found (set QUANTAGENT_TAU2_DATA or provide ../shared/tau2)")
    return d


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> None:
    """Two torch threads on two busy cores run several times slower than one."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


# ---- the mini domain and mock arms shared by the repair, screen and CLI tests

_TESTS = Path(__file__).resolve().parent
#: The runner tests' mini domain (users with emails), loaded through the real registry.
MINI_DOMAINS_DIR = _TESTS / "runner" / "domains"
#: Mock-backend rule modules (``mini_rules:...``, ``repair_rules:...``).
RULE_DIRS = (_TESTS / "runner", _TESTS / "repair")

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
    for d in RULE_DIRS:  # the rule modules, for subprocesses and pytester runs too
        monkeypatch.syspath_prepend(str(d))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (*map(str, RULE_DIRS), os.environ.get("PYTHONPATH", "")) if p))
    registry.clear_cache()
    yield MINI_DOMAINS_DIR
    registry.clear_cache()


@pytest.fixture
def arms_toml(tmp_path: Path, mini_domains_dir: Path) -> Path:
    p = tmp_path / "arms.toml"
    p.write_text(ARMS_TOML)
    return p


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(**faults)`` starts a loopback :class:`FaultServer` and returns it with its base
    URL; every server started is stopped after the test."""
    from pytest_quantagent.testing.fault_server import FaultServer

    servers: list[FaultServer] = []

    def start(**kw: Any) -> tuple[FaultServer, str]:
        s = FaultServer(**kw)
        servers.append(s)
        return s, s.start_in_thread()

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(autouse=True)
def _inner_runs_are_not_xdist_workers(request: pytest.FixtureRequest,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``pytest -n``, a pytester run inside a worker would read the worker's
    ``PYTEST_XDIST_WORKER`` and take itself for one (pytest-benchmark then warns, which the
    warning filter makes an error): the inner run is a plain session."""
    if "pytester" in request.fixturenames:
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)

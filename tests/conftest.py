"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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

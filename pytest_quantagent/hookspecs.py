"""Hooks other plugins and ``conftest.py`` files can implement to extend pytest-quantagent.

The plugin's own behaviour is an ordinary implementation of these hooks (marked
``trylast``), so a ``conftest.py`` implementation takes precedence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_quantagent.quant.arms import ArmSpec
    from pytest_quantagent.quant_cell import CellEpisodes, CellKey


@pytest.hookspec(firstresult=True)
def pytest_quantagent_resolve_arm(config: pytest.Config, label: str) -> ArmSpec | None:
    """Return the :class:`~pytest_quantagent.quant.arms.ArmSpec` for arm ``label``.

    The default reads ``--quant-config`` or the model spec of ``--quant-model``. To point an
    arm at your own server without a config file, put this in ``conftest.py``::

        from pytest_quantagent.quant.arms import ArmSpec

        def pytest_quantagent_resolve_arm(config, label):
            if label == "int4":
                return ArmSpec(label="int4", backend="openai", model="my-model-awq",
                               base_url="http://gpu-box:8000/v1")
            return None  # every other arm: the default
    """


@pytest.hookspec(firstresult=True)
def pytest_quantagent_run_cell(config: pytest.Config, cell: CellKey) -> CellEpisodes | None:
    """Return both arms' episode records of ``cell`` (runs them, or loads them from the store).

    Called at most once per cell and process; the default runs the episodes through the
    runner and the episode store under ``--quant-cache-dir`` (xdist workers share it: the
    first to claim a cell runs it, the others load it). To analyze episodes produced elsewhere::

        from pytest_quantagent.quant_cell import CellEpisodes
        from pytest_quantagent.store.records import EpisodeRecord

        def pytest_quantagent_run_cell(config, cell):
            def load(arm):
                path = f"runs/{cell.domain}-{arm}.jsonl"
                with open(path) as f:
                    return [EpisodeRecord.model_validate_json(line) for line in f]
            return CellEpisodes(arm=load(cell.arm), reference=load(cell.reference))
    """


def pytest_quantagent_report_ready(config: pytest.Config, report: dict[str, Any]) -> None:
    """Called once per run (in the controller under xdist) with the report JSON before it is
    written and shown. Use it to publish the figures, e.g. in ``conftest.py``::

        def pytest_quantagent_report_ready(config, report):
            for cell in report["cells"]:
                print(cell["domain"], cell["arm"], cell["verdict"])
    """

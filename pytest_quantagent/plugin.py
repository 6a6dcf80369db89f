"""pytest entry point (``pytest11: quantagent``): wiring only.

Hooks read the options, build one :class:`~pytest_quantagent.session.QuantAgentSession`,
keep it in ``config.stash`` and register it as a plugin; everything else is delegated. This
module loads in every pytest run, so it imports nothing heavy (no torch, no runner).
"""

from __future__ import annotations

import pytest

from pytest_quantagent import hookspecs
from pytest_quantagent.config import QuantAgentConfig, check_names, read_config
from pytest_quantagent.fixtures import (
    SESSION_KEY,
    _quantagent_cell_key,
    episodes,
    precision_model,
    quant_arm,
    quant_cell,
    reference_arm,
    reference_episodes,
    tau_env,
)
from pytest_quantagent.markers import MARKER_LINES
from pytest_quantagent.options import add_options
from pytest_quantagent.session import QuantAgentSession

# The risk screen's fixture (quant_screen) and hook ship with the plugin: importing it is
# as cheap as this module (nothing heavy until a test asks for a screen).
pytest_plugins = ["pytest_quantagent.screen_plugin"]

__all__ = [
    "_quantagent_cell_key",
    "episodes",
    "precision_model",
    "quant_arm",
    "quant_cell",
    "reference_arm",
    "reference_episodes",
    "tau_env",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKER_LINES:
        config.addinivalue_line("markers", line)
    # --help and --version must work even when an ini value or the registry is broken.
    informational = bool(config.option.help or config.option.version)
    try:
        qc = read_config(config)
    except pytest.UsageError:
        if not informational:
            raise
        qc = QuantAgentConfig()
    if qc.active and not informational:
        check_names(qc)
    session = QuantAgentSession(config, qc)
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "quantagent-session")

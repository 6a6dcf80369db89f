"""Fixtures of the plugin. Thin: each resolves from the run's :class:`QuantAgentSession`.

A test that uses any of ``quant_cell``, ``quant_arm``, ``precision_model``, ``tau_env``,
``episodes`` or ``reference_episodes`` is parametrized over the run's domain × arm grid
(ids such as ``telecom-int4``), narrowed by its ``domain``/``precision`` markers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_quantagent.quant_cell import CellKey, QuantCell
from pytest_quantagent.session import QuantAgentSession

if TYPE_CHECKING:
    from pytest_quantagent.env.environment import Environment
    from pytest_quantagent.quant.arms import ArmSpec
    from pytest_quantagent.store.records import EpisodeRecord

SESSION_KEY = pytest.StashKey[QuantAgentSession]()


def get_session(config: pytest.Config) -> QuantAgentSession:
    """The run's quantagent session (built in ``pytest_configure``)."""
    return config.stash[SESSION_KEY]


@pytest.fixture
def _quantagent_cell_key(request: pytest.FixtureRequest) -> CellKey:
    # Replaced by the grid's direct parametrization; reached only when the plugin's
    # pytest_generate_tests did not run for this test (e.g. a fixture requested dynamically).
    raise pytest.UsageError(
        f"{request.node.nodeid}: quantagent fixtures must be requested as test arguments "
        "(the domain × arm grid is built at collection time)"
    )


@pytest.fixture
def quant_cell(request: pytest.FixtureRequest, _quantagent_cell_key: CellKey) -> Iterator[QuantCell]:
    """The parametrized (domain, arm) cell; its episodes run (or load) on first use.

    Judged at the run's ``--error-budget`` or at the test's ``@pytest.mark.error_budget(K)``.
    After the test, the cell's headline figures become user properties (JUnit XML).
    """
    session = get_session(request.config)
    args = session.marker_args(request.node.nodeid, request.node.iter_markers())
    budget = session.qc.error_budget if args.error_budget is None else args.error_budget
    yield QuantCell(_quantagent_cell_key, budget, session.qc.error_budget, session.qc.trials,
                    session)
    session.note_figures(request.node, _quantagent_cell_key)


@pytest.fixture
def quant_arm(request: pytest.FixtureRequest, _quantagent_cell_key: CellKey) -> ArmSpec:
    """The candidate arm of this test's cell, resolved (backend, model, quantization)."""
    return get_session(request.config).setup.arm(_quantagent_cell_key.arm)


@pytest.fixture
def reference_arm(request: pytest.FixtureRequest) -> ArmSpec:
    """The reference arm (``--quant-reference``, default bf16), resolved."""
    session = get_session(request.config)
    return session.setup.arm(session.qc.reference)


@pytest.fixture
def precision_model(quant_arm: ArmSpec) -> Iterator[Any]:
    """The chat backend of the candidate arm (``await precision_model.generate(request)``).

    Closed after the test.
    """
    from pytest_quantagent.quant.loading import create_arm_backend
    from pytest_quantagent.runner.service import run_sync

    if quant_arm.source == "results":
        pytest.fail(f"precision_model: arm {quant_arm.label!r} is a replay arm (backend = "
                    "\"replay\"): its episodes are read from τ²-bench results files and it has "
                    "no model to generate with; use quant_cell/episodes, or a live arm",
                    pytrace=False)
    backend = create_arm_backend(quant_arm)
    yield backend
    run_sync(backend.aclose())


class TauEnvFactory:
    """Makes fresh environments of one domain (the tasks the run's cells use): ``tau_env()``
    for the first task, ``tau_env("task_id")`` for a given task."""

    def __init__(self, domain_name: str, tau2_data: Any, split: str | None = None) -> None:
        # Split-aware, as the cells are: with τ²-bench data, the task file holding the run's
        # split (which need not be tasks.json) is the one loaded.
        from pytest_quantagent.env.registry import get_domain_for_split

        self.domain = get_domain_for_split(domain_name, tau2_data, split)

    def task_ids(self) -> list[str]:
        return [t.id for t in self.domain.tasks]

    def __call__(self, task_id: str | None = None) -> Environment:
        if task_id is None:
            if not self.domain.tasks:
                raise ValueError(f"domain {self.domain.name!r} has no tasks")
            task = self.domain.tasks[0]
        else:
            task = self.domain.task(task_id)
        return self.domain.make_environment(task)


@pytest.fixture
def tau_env(request: pytest.FixtureRequest, _quantagent_cell_key: CellKey) -> Callable[..., Environment]:
    """Environment factory for the cell's domain (fresh DB each call)."""
    session = get_session(request.config)
    return TauEnvFactory(_quantagent_cell_key.domain, session.qc.tau2_data, session.qc.tasks.split)


@pytest.fixture
def episodes(quant_cell: QuantCell) -> list[EpisodeRecord]:
    """The candidate arm's episode records of this test's cell."""
    return quant_cell.episodes


@pytest.fixture
def reference_episodes(quant_cell: QuantCell) -> list[EpisodeRecord]:
    """The reference arm's episode records of this test's cell."""
    return quant_cell.reference_episodes

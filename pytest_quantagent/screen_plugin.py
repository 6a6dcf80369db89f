"""pytest plugin part of the risk screen: the ``quant_screen`` fixture.

``quant_screen`` is the :class:`~pytest_quantagent.report.screen.ScreenReport` of the run's
reference arm (``--quant-reference``, default bf16) in one domain. The reference arm's
episodes run (or load from the episode store under ``--quant-cache-dir``) once per domain and
session, with the run's model, tasks, trials, seed, error budget and user simulator — the
same episodes the grid's cells use as their reference, so screening first and comparing
later runs nothing twice.

Which domain: a test on the grid (also using ``quant_cell`` & co.) screens its cell's domain;
any other test is parametrized over the run's domains (``--domain``, narrowed by a
``@pytest.mark.domain(...)`` marker), ids such as ``test_safe[telecom]``.

Episodes come from the ``pytest_quantagent_screen_episodes`` hook (first result wins), whose
default implementation below runs the reference arm through the runner.

Registration: load with ``-p pytest_quantagent.screen_plugin``, or from the main plugin
(``pytest_plugins = ["pytest_quantagent.screen_plugin"]`` in ``plugin.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_quantagent.fixtures import get_session
from pytest_quantagent.markers import MarkerError
from pytest_quantagent.quant_cell import CellKey
from pytest_quantagent.session import GRID_FIXTURES

if TYPE_CHECKING:
    from pytest_quantagent.report.screen import ScreenReport
    from pytest_quantagent.store.records import EpisodeRecord

_SCREENS = pytest.StashKey[dict[str, "ScreenReport"]]()
_DOMAIN_ARG = "_quant_screen_domain"


class ScreenHooks:
    """Hook specifications of the screen plugin."""

    @pytest.hookspec(firstresult=True)
    def pytest_quantagent_screen_episodes(
        self, config: pytest.Config, domain: str
    ) -> list[EpisodeRecord] | None:
        """Return the reference arm's episode records of ``domain`` for the risk screen.

        Called at most once per domain and process. The default runs (or loads) the
        reference arm's episodes like the plugin's cells do. To screen episodes you already
        have, put this in ``conftest.py``::

            from pytest_quantagent.tau2.reader import read_results

            def pytest_quantagent_screen_episodes(config, domain):
                return read_results(f"results/{domain}-bf16.json", label="bf16").records
        """


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(ScreenHooks)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "quant_screen" not in metafunc.fixturenames or GRID_FIXTURES.intersection(metafunc.fixturenames):
        return  # grid tests screen their cell's domain (see the fixture)
    session = get_session(metafunc.config)
    try:
        args = session.marker_args(metafunc.definition.nodeid, metafunc.definition.iter_markers())
    except MarkerError as e:
        pytest.fail(str(e), pytrace=False)
    domains = [d for d in session.domains() if args.domains is None or d in args.domains]
    if not domains:
        metafunc.parametrize(_DOMAIN_ARG, [pytest.param(None, marks=pytest.mark.skip(
            reason="quantagent: the test's domain marker selects no domain of this run "
            f"(domains: {', '.join(session.domains())})"))], ids=["no-domain"])
        return
    # Session scope groups the tests of one domain together.
    metafunc.parametrize(_DOMAIN_ARG, domains, ids=domains, scope="session")


@pytest.fixture
def _quant_screen_domain(request: pytest.FixtureRequest) -> str | None:
    # Replaced by the parametrization above for tests off the grid; grid tests get None here
    # and use their cell's domain.
    return None


@pytest.fixture
def quant_screen(request: pytest.FixtureRequest, _quant_screen_domain: str | None) -> ScreenReport:
    """The risk screen of the reference arm in this test's domain (computed once per domain
    and session; the reference episodes run or load on first use)."""
    domain = _quant_screen_domain
    if domain is None:
        callspec = getattr(request.node, "callspec", None)
        key = callspec.params.get("_quantagent_cell_key") if callspec is not None else None
        if not isinstance(key, CellKey):
            raise pytest.UsageError(
                f"{request.node.nodeid}: quant_screen must be requested as a test argument "
                "(its domain is chosen at collection time)"
            )
        domain = key.domain
    return get_screen(request.config, domain)


def get_screen(config: pytest.Config, domain: str) -> ScreenReport:
    """The screen of ``domain`` (cached per session)."""
    from pytest_quantagent.report.screen import screen

    cache = config.stash.setdefault(_SCREENS, {})
    if domain not in cache:
        records = config.hook.pytest_quantagent_screen_episodes(config=config, domain=domain)
        if records is None:
            raise RuntimeError(f"no plugin produced the screen episodes of domain {domain!r}")
        cache[domain] = screen(records)
    return cache[domain]


@pytest.hookimpl(trylast=True)
def pytest_quantagent_screen_episodes(config: pytest.Config, domain: str) -> list[EpisodeRecord]:
    from pytest_quantagent.runner.service import run_arms

    # The cells' own arms, request and store: the episode keys (and the episodes) are the
    # cells' reference episodes, and the cells' claim of (domain, reference) is shared.
    session = get_session(config)
    result = run_arms(domain, session.setup.arms(), session.setup.request(),
                      session.qc.cache_dir, run=(session.qc.reference,))
    return result.records[session.qc.reference]

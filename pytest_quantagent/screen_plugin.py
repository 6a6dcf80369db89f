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
from pytest_quantagent.session import GRID_FIXTURES, CellKey

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
    import asyncio

    from pytest_quantagent.env.registry import get_domain
    from pytest_quantagent.runner.batch import RunSettings, plan_episodes, run_cell
    from pytest_quantagent.runner.build import USER_TURNS_FILE, build_arm, build_user, resolve_user
    from pytest_quantagent.store.jsonl import EpisodeStore

    session = get_session(config)
    qc = session.qc
    spec = session.arm_spec(qc.reference)
    if spec.backend == "replay":
        from pytest_quantagent.tau2.arms import load_replay_arm

        return load_replay_arm(spec, domain)
    # The same plan, settings and store as QuantAgentSession.pytest_quantagent_run_cell, so
    # the episode keys (and the episodes) are the cells' reference episodes.
    dom = get_domain(domain, tau2_data=qc.tau2_data)
    task_ids = qc.tasks.select([t.id for t in dom.tasks], dom.splits)
    plan = plan_episodes(task_ids, qc.trials, qc.seed)
    concurrency = qc.concurrency or RunSettings().concurrency
    settings = RunSettings(max_errors=qc.error_budget, concurrency=concurrency, user_sim=qc.user)
    qc.cache_dir.mkdir(parents=True, exist_ok=True)
    store = EpisodeStore(qc.cache_dir)
    user_config = None
    if qc.user == "llm":
        user_config = resolve_user(qc.user_model, config_path=qc.config_path)

    async def go() -> list[EpisodeRecord]:
        runtime = build_arm(spec, concurrency=concurrency)
        user = None if user_config is None else build_user(
            user_config, cache_path=qc.cache_dir / USER_TURNS_FILE, concurrency=concurrency)
        try:
            result = await run_cell(domain=dom, runtimes=[runtime], plan=plan, settings=settings,
                                    store=store, user=user)
            return result[spec.label]
        finally:
            await runtime.aclose()
            if user is not None:
                await user.aclose()

    # The cells' claim of this (domain, arm): an xdist worker running a cell waits for us.
    with store.claim(f"{domain}/{spec.label}"):
        return asyncio.run(go())

"""Per-run state of the plugin: the grid of cells, their episodes, the report.

One :class:`QuantAgentSession` is built in ``pytest_configure``, kept in ``config.stash`` and
registered as a plugin, so its methods below are hooks. It is cheap when unused: nothing
heavy (runner, torch, statistics) is imported until a test asks for a cell.

How cells are shared:

- within a process, a cell's episodes are produced once (:meth:`episodes`) and reused by
  every test on the cell;
- across xdist workers, the default :func:`pytest_quantagent_run_cell` goes through the
  episode store under ``--quant-cache-dir``, whose per-cell claim lets the first worker run
  the episodes while the others wait and load them;
- every test that loaded a cell's episodes reports the cell's id as a user property; the
  process that writes the report (the xdist controller, or the only process) collects those
  ids from the test reports and loads the cells' records from the store (nothing is re-run),
  so ``-n 2`` and ``-n 0`` analyze the same records and write the same report.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_quantagent.config import QuantAgentConfig, known_domains
from pytest_quantagent.markers import MarkerArgs, MarkerError, parse_markers
from pytest_quantagent.quant_cell import (  # QuantCell: still importable from here
    CellEpisodes,
    CellKey,
    QuantCell,  # noqa: F401
)
from pytest_quantagent.resolve import RunSetup, default_arm

if TYPE_CHECKING:
    from collections.abc import Generator

    from pytest_quantagent.quant.arms import ArmSpec
    from pytest_quantagent.verdict import AnalysisConfig


#: Name of the user property that carries a test's cell id (also in JUnit XML).
CELL_PROPERTY = "quantagent_cell"

#: Fixture names that put a test on the grid.
GRID_FIXTURES: frozenset[str] = frozenset(
    {"quant_cell", "quant_arm", "precision_model", "tau_env", "episodes", "reference_episodes"}
)


class QuantAgentSession:
    """State of one pytest run for the quantagent plugin (registered as a plugin)."""

    def __init__(self, config: pytest.Config, qc: QuantAgentConfig) -> None:
        self.config = config
        self.qc = qc
        self._gate_failing: list[tuple[str, str]] = []
        self._pools: dict[str, int | None] = {}
        self._episodes: dict[CellKey, CellEpisodes] = {}
        self._endpoint_stats: dict[str, list[dict[str, Any]]] = {}
        """Per-endpoint figures of arms served by several endpoints ("<domain>-<arm>" →)."""
        self._analysis: dict[CellKey, dict[str, Any]] = {}
        self.setup = RunSetup(qc, self._resolve_arm)
        """The run's arms, run request, pre-flight models and report ``run`` section."""
        self._domains: tuple[str, ...] | None = None
        # Looked up once per run, not once per test (markers are validated per test).
        self._domain_names: tuple[list[str] | None] | None = None
        self._marker_errors: list[str] = []
        self._argument_errors: list[str] = []
        """Assertion calls whose literal arguments are not allowed (found at collection)."""
        self.seen_cells: set[CellKey] = set()
        """Cells some test used (from test reports, so xdist workers' cells count)."""
        self.report: dict[str, Any] | None = None
        self.report_error: str | None = None
        self.preflight_checks: list[Any] = []
        """Extra pre-flight checks (callables returning ``PreflightProblem``s, see
        ``runner.preflight``): a plugin adds its own model (e.g. a judge) here in its
        ``pytest_configure``."""
        self._cell_of_node: dict[str, str] = {}
        self.test_outcomes: list[dict[str, Any]] = []
        """Failed and skipped tests on the quant grid (the report's ``tests``; the xdist
        controller sees every worker's reports)."""
        self._node_outcomes: dict[str, list[str]] = {}
        """Per test node: the outcomes of its phases that count (a pass of its call, a
        failure or skip of any phase)."""

    # ------------------------------------------------------------------ the grid

    @property
    def is_xdist_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    def domains(self) -> tuple[str, ...]:
        """The run's domains: ``--domain``, else every installed domain."""
        if self._domains is None:
            if self.qc.domains is not None:
                self._domains = self.qc.domains
            else:
                known = known_domains()
                if not known:
                    raise pytest.UsageError(
                        "no domain is installed and none was given; pass --domain=NAME"
                    )
                self._domains = tuple(known)
        return self._domains

    def marker_args(self, nodeid: str, marks: Any) -> MarkerArgs:
        """Validated marker arguments of one test (raises :class:`MarkerError`)."""
        return parse_markers(
            nodeid,
            marks,
            run_budget=self.qc.error_budget,
            known_domains=self._known_domains(),
            known_arms=self.setup.known_arms(),
        )

    def _known_domains(self) -> list[str] | None:
        if self._domain_names is None:
            self._domain_names = (known_domains(),)
        return self._domain_names[0]

    def cells_for(self, args: MarkerArgs) -> list[CellKey]:
        """Grid cells of a test, narrowed by its markers (domain-major order)."""
        domains = [d for d in self.domains() if args.domains is None or d in args.domains]
        from pytest_quantagent.quant.arms import split_model

        arms = [a for a in self.qc.arms if args.precisions is None or a in args.precisions
                or split_model(a)[0] in args.precisions]
        return [CellKey(d, a, self.setup.reference_of(a)) for d in domains for a in arms]

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if not GRID_FIXTURES.intersection(metafunc.fixturenames):
            return
        try:
            args = self.marker_args(metafunc.definition.nodeid, metafunc.definition.iter_markers())
        except MarkerError as e:
            # Collected, not raised: every bad marker of the run is reported together at the
            # end of collection (one run fixes them all).
            self._marker_errors.append(str(e))
            metafunc.parametrize("_quantagent_cell_key", [None], ids=["bad-marker"])
            return
        self._check_static_arguments(metafunc)
        cells = self.cells_for(args)
        if not cells:
            # Markers excluded every cell of this run: the test does not apply here.
            metafunc.parametrize(
                "_quantagent_cell_key", [pytest.param(None, marks=pytest.mark.skip(
                    reason="quantagent: the test's domain/precision markers select no cell "
                    f"of this run (domains: {', '.join(self.domains())}; "
                    f"arms: {', '.join(self.qc.arms)})"))], ids=["no-cell"],
            )
            return
        metafunc.parametrize("_quantagent_cell_key", cells, ids=[c.id for c in cells])

    def _check_static_arguments(self, metafunc: pytest.Metafunc) -> None:
        """Assertion calls written in the test with literal arguments are checked now, before
        any episode runs (``channel="unknown_tools"``, ``margin=7.5``)."""
        import sys

        if "pytest_quantagent.assertions" not in sys.modules:
            return  # the test module imports no assertion of ours
        from pytest_quantagent.assertions import static_argument_problems

        for line, problem in static_argument_problems(metafunc.function, self.qc.error_budget):
            self._argument_errors.append(f"{metafunc.definition.nodeid} (line {line}): {problem}")

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        parts = []
        for errors, what in ((self._marker_errors, "bad marker"),
                             (self._argument_errors, "bad assertion argument")):
            if errors:
                parts.append(f"quantagent: {len(errors)} {what}{'s' if len(errors) > 1 else ''}:"
                             "\n  " + "\n  ".join(errors))
        if parts:
            # Every problem of the run at once, printed once, before any episode.
            pytest.exit("\n".join(parts), returncode=pytest.ExitCode.USAGE_ERROR)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """A bad assertion argument the collection could not see (a computed value) fails
        its test with one line, not a traceback."""
        import sys

        report = yield
        mod = sys.modules.get("pytest_quantagent.assertions")
        if (mod is not None and call.excinfo is not None and report.failed
                and call.excinfo.errisinstance(mod.AssertionArgumentError)):
            report.longrepr = f"{item.nodeid}: bad assertion argument: {call.excinfo.value}"
        return report

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        # Tests off the grid may still carry our markers: validate them all the same.
        if any(item.get_closest_marker(n) is not None for n in ("error_budget", "domain", "precision")):
            try:
                self.marker_args(item.nodeid, item.iter_markers())
            except MarkerError as e:
                pytest.fail(str(e), pytrace=False)

    # ------------------------------------------------------------------ pre-flight

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Before any test: every model reachable, served, importable, present; else the run
        stops with one line per model (the xdist controller checks for its workers)."""
        if not self.qc.active or self.is_xdist_worker or self.config.option.collectonly:
            return
        from pytest_quantagent.errors import QuantAgentError
        from pytest_quantagent.runner.preflight import format_problems, preflight, store_check

        # A UsageError, not pytest.exit: an Exit raised in pytest_sessionstart is printed
        # twice by pytest (the "Exit:" line on stderr and the "!!! Exit !!!" summary); this
        # is printed once, as "ERROR: ...", with the same exit code 4.
        try:
            problems = preflight(self.setup.preflight_models(), extra=[
                store_check(self.qc.cache_dir, "--quant-cache-dir"), *self.preflight_checks])
        except (QuantAgentError, ValueError) as e:
            raise pytest.UsageError(f"quantagent: {e}") from None
        if problems:
            raise pytest.UsageError(f"quantagent: {format_problems(problems)}")
        # how each candidate and the reference are served, compared before any episode
        for label in self.qc.arms:
            self.setup.comparability(label)

    # ------------------------------------------------------------------ episodes

    def _resolve_arm(self, label: str) -> ArmSpec | None:
        """An arm label through the hook :func:`pytest_quantagent_resolve_arm` (first result)."""
        spec: ArmSpec | None = self.config.hook.pytest_quantagent_resolve_arm(
            config=self.config, label=label)
        return spec

    @pytest.hookimpl(trylast=True)
    def pytest_quantagent_resolve_arm(self, config: pytest.Config, label: str) -> ArmSpec:
        return default_arm(self.qc, label)

    def episodes(self, key: CellKey) -> CellEpisodes:
        """Both arms' records of a cell, produced at most once per process."""
        if key not in self._episodes:
            from pytest_quantagent.errors import (
                ConfigurationError,
                InfrastructureError,
                RunStoppedError,
            )
            from pytest_quantagent.metrics.faults import check_not_all_infrastructure, infra_counts

            try:
                got = self.config.hook.pytest_quantagent_run_cell(config=self.config, cell=key)
            except RunStoppedError as e:
                # A server stopped answering, or the time cap: stop, keep the store (a rerun resumes).
                pytest.exit(f"quantagent: cell {key.id}: {e}", returncode=pytest.ExitCode.INTERRUPTED)
            except ConfigurationError as e:
                # A server refused a request mid-run (key, URL, model): stop the whole run.
                pytest.exit(f"quantagent: cell {key.id}: {e}", returncode=pytest.ExitCode.USAGE_ERROR)
            if got is None:
                raise RuntimeError(f"no plugin produced the episodes of cell {key.id}")
            try:
                for label, recs in ((key.arm, got.arm), (key.reference, got.reference)):
                    check_not_all_infrastructure(label, infra_counts(recs))
            except InfrastructureError as e:
                pytest.fail(f"quantagent: cell {key.id}: {e}", pytrace=False)
            self._episodes[key] = got
            if self.is_xdist_worker:
                self._write_manifest(key, got)
        return self._episodes[key]

    # The xdist controller loads the cells its workers ran by episode key from the store, so
    # it builds no backend (no model load) to recompute keys. A manifest is named by a hash of
    # the run's settings and the cell, and rewritten by every worker that loads the cell.

    def _manifest_ident(self, key: CellKey) -> list[Any]:
        return [self.qc.run_dict(), key.domain, key.arm, key.reference, "tasks-v2"]

    def _write_manifest(self, key: CellKey, got: CellEpisodes) -> None:
        from pytest_quantagent.store.manifests import CellManifests

        CellManifests(self.qc.cache_dir).write(self._manifest_ident(key), key.id, got.arm,
                                               got.reference, extra=got.sequential)

    def _load_from_manifest(self, key: CellKey) -> CellEpisodes | None:
        """The cell's records by key from the store, or None when there is no manifest or a
        record is not in the store (e.g. a conftest hook produced them): then the caller
        asks the hook."""
        from pytest_quantagent.store.manifests import CellManifests

        manifests = CellManifests(self.qc.cache_dir)
        got = manifests.read(self._manifest_ident(key))
        return None if got is None else CellEpisodes(
            arm=got[0], reference=got[1], sequential=manifests.read_extra(self._manifest_ident(key)))

    @pytest.hookimpl(trylast=True)
    def pytest_quantagent_run_cell(self, config: pytest.Config, cell: CellKey) -> CellEpisodes:
        from contextlib import closing

        from pytest_quantagent.runner.service import run_arms

        if self.qc.until_decided:
            return self._run_cell_until_decided(cell)
        progress = cell_progress(self.config, cell.id)
        result = run_arms(cell.domain, self.setup.arms(), self.setup.request(), self.qc.cache_dir,
                          run=(cell.reference, cell.arm),
                          progress=None if progress is None else closing(progress))
        for label, stats in result.endpoints.items():
            self._endpoint_stats[f"{cell.domain}-{label}"] = stats
        return CellEpisodes(arm=result.records[cell.arm], reference=result.records[cell.reference])

    def _run_cell_until_decided(self, cell: CellKey) -> CellEpisodes:
        """The cell's waves until decided (``--quant-until-decided``); its records at the last
        look it took and its sequential block."""
        from contextlib import closing

        from pytest_quantagent.analysis.sequential import (
            DEFAULT_MAX_EPISODES,
            run_arms_until_decided,
        )

        arms = self.setup.arms()
        by_label = {s.label: s for s in arms}
        order = [by_label[cell.reference], *(s for s in arms if s.label != cell.reference)]

        def progress() -> Any:
            shown = cell_progress(self.config, cell.id)
            return None if shown is None else closing(shown)

        seq = run_arms_until_decided(
            cell.domain, order, self.setup.request(), self.qc.cache_dir,
            self.analysis_config().within_pool(self.pool_tasks(cell.domain)),
            max_episodes=self.qc.max_episodes or DEFAULT_MAX_EPISODES, cells=[cell.arm],
            progress=progress, comparability={cell.arm: self.setup.comparability(cell.arm)})
        for label, stats in seq.run.endpoints.items():
            self._endpoint_stats[f"{cell.domain}-{label}"] = stats
        cs = seq.cells[cell.arm]
        assert cs.records is not None
        return CellEpisodes(arm=cs.records[0], reference=cs.records[1],
                            sequential=seq.cell_block(cell.arm))

    # ------------------------------------------------------------------ analysis

    def cell_analysis(self, key: CellKey) -> dict[str, Any]:
        """The report JSON entry of one cell, analyzed on its own (cached)."""
        if key not in self._analysis:
            report = self.analyze({key: self.episodes(key)})
            self._analysis[key] = report["cells"][0]
        return self._analysis[key]

    def analysis_config(self) -> AnalysisConfig:
        """The verdict's thresholds of the run (the assertions' defaults too)."""
        return self.setup.analysis_config()

    def cell_config(self, key: CellKey) -> AnalysisConfig:
        """The thresholds a cell's assertions judge at: the run's, at the α of the cell's
        last look when it ran until decided (the error rates hold over its looks)."""
        cfg = self.setup.analysis_config()
        if not self.qc.until_decided:
            return cfg
        from dataclasses import replace

        from pytest_quantagent.report.cells import look_alpha

        alpha = look_alpha(self.episodes(key).sequential)
        return cfg if alpha is None else replace(cfg, alpha=alpha)

    def analyze(self, cells: dict[CellKey, CellEpisodes]) -> dict[str, Any]:
        """Report JSON (DESIGN.md, schema_version 1) over ``cells`` in sorted order."""
        from pytest_quantagent.report.cells import analyze_cells

        return analyze_cells(
            [(k.domain, k.arm, k.reference, cells[k].arm, cells[k].reference) for k in sorted(cells)],
            self.setup.analysis_config(), self.setup.run_info({"pytest": pytest.__version__}),
            pools={d: self.pool_tasks(d) for d in {k.domain for k in cells}},
            sequential={(k.domain, k.arm): cells[k].sequential for k in cells
                        if cells[k].sequential is not None},
            comparability={k.arm: self.setup.comparability(k.arm) for k in cells})

    def pool_tasks(self, domain: str) -> int | None:
        """How many tasks ``domain``'s pool holds under ``--quant-tasks`` (the design
        advice's cap); None when it cannot be told (replay arms of a domain we cannot run)."""
        if domain not in self._pools:
            from pytest_quantagent.env.registry import get_domain_for_split
            from pytest_quantagent.runner.selection import pool_capacity

            request = self.setup.request()
            try:
                dom = get_domain_for_split(domain, request.tau2_data, request.tasks.split)
                self._pools[domain] = pool_capacity(dom, request.tasks, self.setup.arms())
            except Exception:  # the advice is then uncapped, as before
                self._pools[domain] = None
        return self._pools[domain]

    # ------------------------------------------------------------------ reporting

    def note_figures(self, item: pytest.Item, key: CellKey) -> None:
        """After a test whose cell's episodes are loaded: its cell id and the cell's verdict
        and headline figures become user properties (JUnit XML; the xdist controller reads
        the cell id from them). A test that never touched the episodes adds nothing, so the
        report never runs episodes that no test asked for."""
        if key not in self._episodes:
            return
        item.user_properties.append((CELL_PROPERTY, key.id))
        self.seen_cells.add(key)
        try:
            cell = self.cell_analysis(key)
        except Exception as e:
            item.user_properties.append(("quantagent_analysis_error", f"{type(e).__name__}: {e}"))
            return
        s = cell.get("success", {})
        props: list[tuple[str, object]] = [
            ("quantagent_verdict", cell.get("verdict")),
            ("quantagent_paired", cell.get("paired")),
            ("quantagent_success_arm", s.get("arm")),
            ("quantagent_success_reference", s.get("reference")),
            ("quantagent_success_diff_ci", s.get("ci")),
        ]
        for name, ch in sorted(cell.get("channels", {}).items()):
            if ch.get("arm_count") or ch.get("reference_count"):
                props.append((f"quantagent_ratio_{name}", ch.get("ratio")))
        item.user_properties.extend((n, v) for n, v in props if v is not None)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        cell_id: str | None = None
        for name, value in report.user_properties:
            if name == CELL_PROPERTY and isinstance(value, str):
                self.seen_cells.add(self._key_of(value))
                cell_id = value
                self._cell_of_node[report.nodeid] = value  # set after the test: teardown
        if report.failed or (report.skipped and report.when != "teardown") or (
                report.passed and report.when == "call"):
            self._node_outcomes.setdefault(report.nodeid, []).append(
                "failed" if report.failed else "skipped" if report.skipped else "passed")
        if report.failed or (report.skipped and report.when != "teardown"):
            from pytest_quantagent.report.pytest_terminal import test_outcome_message

            outcome = "failed" if report.failed else "skipped"
            self.test_outcomes.append({"nodeid": report.nodeid, "cell": cell_id,
                                       "outcome": outcome, "when": report.when,
                                       "message": test_outcome_message(report)})

    def _test_counts(self, cell_ids: set[str]) -> dict[str, dict[str, int]]:
        """Per cell: its tests passed, failed and skipped (the report's ``test_counts``); a
        test counts once, as failed when any phase failed, else skipped, else passed."""
        out: dict[str, dict[str, int]] = {}
        for nodeid, outcomes in self._node_outcomes.items():
            cell = self._cell_of_node.get(nodeid)
            if cell not in cell_ids:
                continue
            assert cell is not None
            which = "failed" if "failed" in outcomes else "skipped" if "skipped" in outcomes else "passed"
            counts = out.setdefault(cell, {"passed": 0, "failed": 0, "skipped": 0})
            counts[which] += 1
        return dict(sorted(out.items()))

    def _key_of(self, cell_id: str) -> CellKey:
        for d in sorted(self.domains(), key=len, reverse=True):
            if cell_id.startswith(d + "-"):
                arm = cell_id[len(d) + 1 :]
                return CellKey(d, arm, self.setup.reference_of(arm))
        raise ValueError(f"cell id {cell_id!r} names no domain of this run")

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_xdist_worker or not self.seen_cells:
            return
        try:
            cells: dict[CellKey, CellEpisodes] = {}
            for k in sorted(self.seen_cells):
                loaded = None if k in self._episodes else self._load_from_manifest(k)
                cells[k] = loaded if loaded is not None else self.episodes(k)
            report = self.analyze(cells)
            cell_ids = {c.id for c in cells}
            for t in self.test_outcomes:
                t["cell"] = t["cell"] or self._cell_of_node.get(t["nodeid"])
            report["test_counts"] = self._test_counts(cell_ids)
            report["tests"] = [t for t in self.test_outcomes
                               if t["cell"] in cell_ids or (t["cell"] is None and t["outcome"] == "failed")]
            self._apply_gate(session, report)
            self.config.hook.pytest_quantagent_report_ready(config=self.config, report=report)
            self.report = report
            self._write_outputs(report)
        except Exception as e:
            self.report_error = f"{type(e).__name__}: {e}"

    def _apply_gate(self, session: pytest.Session, report: dict[str, Any]) -> None:
        """``--quant-require``: a run whose cells do not meet the requirement fails, instead
        of passing with an INCONCLUSIVE cell (or damage, under ``lossless``)."""
        from pytest_quantagent.analysis.gate import gate

        result = gate(report.get("cells", []))
        require = self.qc.require
        self._gate_failing = result.failing(require)
        report["gate"] = {**result.as_dict(), "require": require,
                          "failing": [c for c, _ in self._gate_failing]}
        if self._gate_failing and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _write_outputs(self, report: dict[str, Any]) -> None:
        if self.qc.report_path is not None:
            from pytest_quantagent.report.json_io import write_report

            write_report(report, self.qc.report_path)
        if self.qc.html_path is not None:
            from pytest_quantagent.report.html import render_html

            path = Path(self.qc.html_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render_html(report), encoding="utf-8")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_xdist_worker or (self.report is None and self.report_error is None):
            return
        from pytest_quantagent.report.pytest_terminal import write_summary

        write_summary(terminalreporter, self.report, self.report_error,
                      verbosity=self.config.get_verbosity(),
                      width=self.config.get_terminal_writer().fullwidth,
                      endpoint_stats=self._endpoint_stats,
                      outputs={"JSON": self.qc.report_path, "HTML": self.qc.html_path})
        for cell, verdict in self._gate_failing:
            terminalreporter.write_line(
                f"quant gate (--quant-require={self.qc.require}): {cell} {verdict}: "
                "the run fails", red=True, bold=True)


def cell_progress(config: Any, name: str) -> Any:
    """Live progress of one cell's episodes (a ``runner.progress.CellProgress``; None under
    ``-q``): a rich live display on a terminal, else a line every
    ``$QUANTAGENT_PROGRESS_SECONDS`` (default 30) seconds; an xdist worker writes its lines,
    prefixed with its id, to stderr (which reaches the controller's terminal). Episodes run
    inside a test, so every write suspends pytest's capture (``config`` is pytest's)."""
    import os
    from contextlib import nullcontext

    from pytest_quantagent.report.pytest_terminal import StderrFile, TerminalFile
    from pytest_quantagent.runner.progress import CellProgress

    if config.get_verbosity() < 0:
        return None
    raw = os.environ.get("QUANTAGENT_PROGRESS_SECONDS", "30")
    try:
        interval = float(raw)
    except ValueError:
        interval = 30.0
    capman = config.pluginmanager.getplugin("capturemanager")
    guard = nullcontext if capman is None else capman.global_and_fixture_disabled
    if hasattr(config, "workerinput"):
        wid = os.environ.get("PYTEST_XDIST_WORKER", "worker")
        return CellProgress(name, StderrFile(), live=False,  # type: ignore[arg-type]
                            interval_s=interval, prefix=f"[{wid}] quantagent ", guard=guard)
    tr = config.pluginmanager.getplugin("terminalreporter")
    if tr is None:
        return None
    tw = config.get_terminal_writer()
    return CellProgress(name, TerminalFile(tw), live=bool(tr.isatty),  # type: ignore[arg-type]
                        interval_s=interval, guard=guard, width=tw.fullwidth)

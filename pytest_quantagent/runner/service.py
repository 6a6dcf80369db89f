"""The one front door to the runner: run (or resume) a domain's episodes for a set of arms.

:func:`run_arms` is the whole pipeline — domain → task selection → plan → settings → store →
claims → arm runtimes, LLM user and judge → :func:`~pytest_quantagent.runner.batch.run_cell`
→ close — written once. The pytest session's cells, the screen plugin and the ``quantagent
run`` / ``quantagent screen`` commands call it and nothing else, so their episode keys agree
by construction (the shared store depends on that). Replay arms (τ²-bench results files) are
not run: their records are loaded here (:mod:`pytest_quantagent.tau2.arms`), and two replay
files are paired only when their τ²-bench versions account for failures alike.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Coroutine, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pytest_quantagent.runner.batch import RunSettings, plan_episodes, run_cell
from pytest_quantagent.runner.selection import TaskSelection

if TYPE_CHECKING:
    from pytest_quantagent.env.domain import Domain
    from pytest_quantagent.quant.arms import ArmSpec, UserModelConfig
    from pytest_quantagent.runner.batch import ProgressSink
    from pytest_quantagent.store.records import EpisodeRecord

T = TypeVar("T")


class Progress(Protocol):
    """What :func:`run_arms` reports to: ``arm(label, total)`` gives each arm's sink."""

    def arm(self, label: str, total: int) -> ProgressSink: ...


@dataclass(frozen=True)
class RunRequest:
    """What to run: tasks, trials, seed, limits and the models beside the agent."""

    tasks: TaskSelection = field(default_factory=lambda: TaskSelection("all"))
    trials: int = 1
    seed: int = 0
    settings: RunSettings = field(default_factory=RunSettings)
    """Budget, steps, concurrency, timeouts; ``user_sim`` is set from ``user``."""
    user: UserModelConfig | None = None
    """The LLM user (one for every arm, turns cached in the store); None: scripted."""
    judge: UserModelConfig | None = None
    """The NL-assertion judge (verdicts cached in the store); None: no judge."""
    tau2_data: Path | None = None
    """τ²-bench's data folder, to run its official task/DB files."""
    allow_mixed_tau2: bool = False
    """Pair replay files whose τ²-bench versions account for failures differently (a warning)."""
    preflight: bool = False
    """Check every model (arms, user, judge) answers before any episode starts."""


@dataclass
class ArmsRun:
    """The records of each arm run (in plan order), and what served them."""

    domain: Domain | None
    """The domain the live arms ran on; None when every arm was a replay arm."""
    records: dict[str, list[EpisodeRecord]]
    backends: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``backend.describe()`` of each arm that was run (taken while it was alive)."""
    user: dict[str, Any] | None = None
    """The LLM user's ``identity`` and ``describe()``; None for the scripted user."""
    judge: dict[str, Any] | None = None
    judge_requests: int = 0
    endpoints: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Per arm with several endpoints (or one served endpoint): each endpoint's requests,
    failures, ejections and latency (``runner.endpoints.collect``), also after a failed run."""


def run_arms(
    domain: str,
    arms: Sequence[ArmSpec],
    request: RunRequest,
    store_dir: str | Path,
    *,
    run: Sequence[str] | None = None,
    progress: AbstractContextManager[Progress] | None = None,
) -> ArmsRun:
    """Run or resume ``domain``'s episodes of the arms labelled ``run`` (default: every arm
    of ``arms``) and return each one's records.

    ``arms`` is every arm of the run (reference first), also those not run now: the default
    task pool depends on all of them, so each cell of a grid and the reference-only screen
    select the same tasks. Episodes are stored in ``store_dir``; one claim per (domain, arm),
    taken in sorted order, makes concurrent runs (xdist workers, two commands on one store)
    wait for each other instead of running an arm twice.
    """
    from pytest_quantagent.env.registry import get_domain_for_split
    from pytest_quantagent.store.jsonl import EpisodeStore

    by_label = {s.label: s for s in arms}
    labels = list(dict.fromkeys(run if run is not None else by_label))
    unknown = [lb for lb in labels if lb not in by_label]
    if unknown:
        raise ValueError(f"run_arms: arms {unknown} are not among {list(by_label)}")
    specs = [by_label[lb] for lb in labels]
    live = [s for s in specs if s.source == "model"]
    out = ArmsRun(domain=None, records={})
    task_ids: list[str] = []
    if live:  # bad task ids or splits are refused before any model is asked anything
        out.domain = get_domain_for_split(domain, request.tau2_data, request.tasks.split)
        task_ids = request.tasks.task_ids(out.domain, arms)
    if request.preflight:
        _preflight(specs, request)

    records: dict[str, list[EpisodeRecord]] = {}
    replays = [s for s in specs if s.source == "results"]
    if replays:
        from pytest_quantagent.tau2.arms import load_replay_arm

        for spec in replays:
            records[spec.label] = load_replay_arm(spec, domain)
        _check_replay_versions(replays, domain, request.allow_mixed_tau2)
    if out.domain is None:  # replay files may be of a domain we cannot run (τ²-bench's airline)
        out.records = {lb: records[lb] for lb in labels}
        return out
    dom = out.domain
    plan = plan_episodes(task_ids, request.trials, request.seed)
    settings = request.settings
    user_sim = "llm" if request.user is not None else "scripted"
    if settings.user_sim != user_sim:
        from dataclasses import replace

        settings = replace(settings, user_sim=user_sim)
    concurrency = settings.concurrency
    store_path = Path(store_dir)
    store_path.mkdir(parents=True, exist_ok=True)
    store = EpisodeStore(store_path)

    async def go() -> dict[str, list[EpisodeRecord]]:
        from pytest_quantagent.runner.build import USER_TURNS_FILE, build_arm, build_user
        from pytest_quantagent.runner.judge import JUDGE_CACHE_FILE, build_judge

        runtimes = [build_arm(s, concurrency=concurrency) for s in live]
        # One user for every arm: arms whose transcripts agree get the same replies, in
        # this process and in the others sharing the store.
        user = None if request.user is None else build_user(
            request.user, cache_path=store_path / USER_TURNS_FILE, concurrency=concurrency)
        judge = None if request.judge is None else build_judge(
            request.judge, cache_path=store_path / JUDGE_CACHE_FILE, concurrency=concurrency)
        try:
            with progress if progress is not None else nullcontext() as shown:
                result = await run_cell(domain=dom, runtimes=runtimes, plan=plan,
                                        settings=settings, store=store, user=user, judge=judge,
                                        progress=None if shown is None else shown.arm)
            out.backends = {rt.arm.label: _described(rt) for rt in runtimes}
            if user is not None:
                out.user = {"identity": user.identity, "describe": user.describe()}
            if judge is not None:
                out.judge, out.judge_requests = judge.describe(), judge.requests
            return result
        finally:
            from pytest_quantagent.runner.endpoints import collect

            out.endpoints = collect(runtimes)
            for rt in runtimes:
                await rt.aclose()
            if user is not None:
                await user.aclose()
            if judge is not None:
                await judge.aclose()

    with ExitStack() as stack:
        for label in sorted(s.label for s in live):
            stack.enter_context(store.claim(f"{domain}/{label}"))
        records.update(run_sync(go()))
    out.records = {lb: records[lb] for lb in labels}
    return out


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code, also when called from inside a
    running event loop (an ``async def`` test touching ``quant_cell.episodes``), where
    ``asyncio.run`` refuses: then it runs on a fresh loop in a helper thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="quantagent-run") as pool:
        return pool.submit(asyncio.run, coro).result()


def _preflight(specs: Sequence[ArmSpec], request: RunRequest) -> None:
    from pytest_quantagent.runner.preflight import preflight_specs_or_raise

    models: dict[str, ArmSpec] = {f"arm {s.label!r}": s for s in specs}
    if request.user is not None:
        models["user"] = request.user.arm
    if request.judge is not None:
        models["judge"] = request.judge.arm
    preflight_specs_or_raise(models)


def _check_replay_versions(replays: Sequence[ArmSpec], domain: str, allow_mixed: bool) -> None:
    """Refuse to pair replay arms whose τ²-bench files account for failures differently
    (unless ``allow_mixed``; the difference is then a warning). The first arm is the
    reference the others are compared with."""
    from pytest_quantagent.tau2.arms import load_replay_runs
    from pytest_quantagent.tau2.compare import check_accounting

    if len(replays) < 2:
        return
    ref_spec, *others = replays
    refs = [r for r in load_replay_runs(ref_spec) if r.domain == domain]
    for spec in others:
        for ref in refs:
            for cand in (r for r in load_replay_runs(spec) if r.domain == domain):
                note = check_accounting((str(ref.path), ref.provenance),
                                        (str(cand.path), cand.provenance),
                                        allow_mixed=allow_mixed, flag="--quant-allow-mixed-tau2=yes")
                if note:
                    warnings.warn(note, stacklevel=1)


__all__ = ["ArmsRun", "Progress", "RunRequest", "TaskSelection", "run_arms", "run_sync"]


def _described(runtime: Any) -> dict[str, Any]:
    """``backend.describe()`` of an arm, naming the arm's KV-cache dtype where the backend
    does not (a server's KV cache is its own: the arms TOML's word is recorded as such)."""
    described: dict[str, Any] = dict(runtime.backend.describe())
    kv = runtime.arm.kv_cache_dtype
    if "kv_cache_dtype" not in described and kv != "auto":
        described["kv_cache_dtype"] = f"{kv} (the arms TOML says; the server is not asked)"
    return described

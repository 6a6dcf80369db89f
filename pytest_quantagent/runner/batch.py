"""Layer 3: many episodes of one or more arms, with asyncio.

- **Paired seeds**: every arm runs the same plan of (task, trial, seed), with
  ``seed = derive_seed(run_seed, task_id, trial)`` (SHA-256, never the global ``random``);
  the user simulator gets the same seed, so reference and candidate see the same user.
- **Concurrency**: at most ``concurrency`` episodes per arm in flight; model calls are
  further limited by the arm's :class:`ModelClient`.
- **Infrastructure failures**: the client retries requests; an episode whose retries ran out
  (or that hit its wall-clock timeout) is re-run from scratch up to ``episode_retries``
  times; the retries are recorded in ``EpisodeRecord.infra_retries`` and never scored. An
  episode that still fails gets termination ``infrastructure_error`` (logged to the store's
  ``failures.jsonl``, not stored as an outcome, so a resume runs it again).
- **User simulator**: the domain's scripted user by default; with a ``user``
  (:class:`~pytest_quantagent.runner.build.UserRuntime`) one LLM user per episode, all built
  on the run's one user client and turn cache, shared by every arm. Its identity is the
  records' ``user_sim`` and part of their cache key. A user whose server fails past its
  retries is an infrastructure failure of the episode, like the agent's.
- **Store/resume**: episodes whose key is stored are not run; each finished episode is
  appended (fsync) from a writer thread so the event loop never blocks on the disk;
  episodes that finish while an append is on disk are appended together after it, with one
  fsync (group commit), and each episode goes on only once its record is durable.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pytest_quantagent.backends.wrapper import UsageCounter, bind_episode_usage, with_timeout
from pytest_quantagent.env.evaluate import RewardInfo
from pytest_quantagent.errors import ConfigurationError, InfrastructureError, RunTimeCapError
from pytest_quantagent.runner.build import AgentPrompt, ArmRuntime, UserRuntime, make_agent
from pytest_quantagent.runner.judge import JudgeRuntime, judge_record, judge_reward
from pytest_quantagent.store.jsonl import EpisodeStore
from pytest_quantagent.store.keys import episode_key
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.vocab.channels import SCORABLE_TERMINATIONS, TerminationReason

if TYPE_CHECKING:
    from pytest_quantagent.env.domain import Domain

_SEED_BITS = 31


def derive_seed(run_seed: int, task_id: str, trial: int) -> int:
    """The episode seed for (run seed, task, trial): identical for every arm of a run."""
    digest = hashlib.sha256(f"{run_seed}\x1f{task_id}\x1f{trial}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << _SEED_BITS) - 1)


T = TypeVar("T")


@dataclass(frozen=True)
class PlannedEpisode:
    """One (task, trial) of the plan with its derived seed."""

    task_id: str
    trial: int
    seed: int


def plan_episodes(task_ids: Sequence[str], trials: int, run_seed: int) -> list[PlannedEpisode]:
    """The paired plan: every task × trial, seeds derived from the run seed."""
    if trials < 1:
        raise ValueError(f"trials ({trials}) must be >= 1")
    if not task_ids:
        raise ValueError("no tasks to run")
    return [
        PlannedEpisode(tid, trial, derive_seed(run_seed, tid, trial))
        for tid in task_ids
        for trial in range(trials)
    ]


@dataclass(frozen=True)
class RunSettings:
    """Run-level settings shared by every arm of a run."""

    max_errors: int = 10
    """Error budget: the episode ends at this many failed tool calls (τ²-bench: 10)."""
    max_steps: int = 200
    concurrency: int = 8
    """Episodes in flight per arm."""
    episode_timeout_s: float = 900.0
    """Wall-clock limit per episode attempt; past it the attempt is an infrastructure failure."""
    episode_retries: int = 2
    """Whole-episode re-runs after an infrastructure failure."""
    user_sim: str = "scripted"
    """``"scripted"``, or ``"llm"`` — which needs a ``user`` runtime passed to
    :func:`run_cell`/:func:`run_arm`; the records then carry the runtime's identity."""
    deadline: float | None = None
    """``time.monotonic()`` after which no new episode starts (the run's time cap): the run
    stops with :class:`~pytest_quantagent.errors.RunTimeCapError`; None: no cap."""

    def __post_init__(self) -> None:
        for name in ("max_errors", "max_steps", "concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} ({getattr(self, name)}) must be >= 1")
        if self.episode_retries < 0:
            raise ValueError(f"episode_retries ({self.episode_retries}) must be >= 0")
        if self.episode_timeout_s <= 0:
            raise ValueError(f"episode_timeout_s ({self.episode_timeout_s}) must be > 0")


class ProgressSink(Protocol):
    """What the batch layer reports to (see ``runner.progress``)."""

    def preload(self, n: int, failed: int = 0, infra: int = 0) -> None:
        """``n`` episodes were already stored (resume); ``failed`` of them did not succeed,
        ``infra`` were lost to infrastructure failures."""

    def advance(self, record: EpisodeRecord) -> None:
        """One more episode finished (or failed for infrastructure reasons)."""


EpisodeFn = Callable[..., Awaitable[Any]]


def _default_episode_fn() -> EpisodeFn:
    from pytest_quantagent.runner.episode import run_episode

    return run_episode


def _success(reward: float, termination: TerminationReason) -> bool:
    return termination in SCORABLE_TERMINATIONS and reward >= 1.0 - 1e-6


_TRUNCATION_TEXT = "…[truncated by quantagent:"


def _any_truncated(messages: Sequence[Any]) -> bool:
    """Whether an agent message carries the backend's truncation marker."""
    for m in messages:
        if getattr(m, "role", None) != "assistant":
            continue
        for text in (getattr(m, "content", None), getattr(m, "raw", None)):
            if isinstance(text, str) and _TRUNCATION_TEXT in text:
                return True
    return False


def _dump(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {}
    if hasattr(obj, "model_dump"):
        out: dict[str, Any] = obj.model_dump(mode="json")
        return out
    return dict(obj)


class _GroupAppender:
    """Appends finished episodes to the store from the writer thread, group-committed:
    records that finish while an append is on disk wait for it and then go together
    (:meth:`EpisodeStore.append_many`, one fsync for all). Each ``append`` returns once its
    record is durable, exactly as a lone append would; only the number of fsyncs drops (at
    concurrency 64 the episodes of a wave finish within a few ms of each other)."""

    def __init__(self, store: EpisodeStore, writer: ThreadPoolExecutor) -> None:
        self.store = store
        self.writer = writer
        self._pending: list[tuple[EpisodeRecord, asyncio.Future[bool]]] = []
        self._busy = False

    async def append(self, record: EpisodeRecord) -> bool:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((record, fut))
        if not self._busy:
            self._flush()
        return await fut

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        self._busy = True
        done = asyncio.get_running_loop().run_in_executor(
            self.writer, self.store.append_many, [r for r, _ in batch])
        done.add_done_callback(lambda f: self._finished(batch, f))

    def _finished(self, batch: list[tuple[EpisodeRecord, asyncio.Future[bool]]],
                  done: asyncio.Future[list[bool]]) -> None:
        self._busy = False
        cancelled = done.cancelled()
        exc = None if cancelled else done.exception()
        for i, (_, fut) in enumerate(batch):
            if fut.done():
                continue
            if cancelled:
                fut.cancel()
            elif exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(done.result()[i])
        if self._pending:
            self._flush()


_GC_DEPTH = 0


def _freeze_survivors(phase: str, info: dict[str, int]) -> None:
    """``gc.callbacks`` hook during a run: what a collection left alive joins the frozen
    objects, so no later collection of the run walks it again."""
    if phase == "stop":
        gc.freeze()


@contextmanager
def quiet_gc(gen0_threshold: int = 20_000) -> Iterator[None]:
    """Keep the cyclic garbage collector from stalling the event loop during a run.

    Episodes allocate many short-lived objects, so collections are frequent, and a full one
    walks every object in the process (a domain DB alone is 10^5 objects). Measured in the
    runner benchmark at concurrency 64 (384 episodes): 240 collections, 239 ms in all, the
    longest 90 ms, during which no in-flight episode advances. For the run, the objects alive
    at its start are frozen (never traversed; ``gc.freeze``), generation 0 collects less
    often, and what each collection leaves alive is frozen too: the run's finished records
    and its in-flight episodes are walked by one young collection, not by every older one.
    Without that last step (benchmark, concurrency 64, 640 episodes) the objects kept by the
    young collections piled up in generation 1 and its first collection, in the last wave,
    took 120–130 ms with every episode waiting; young collections took 5–16 ms each.

    Cycles among objects that outlived a collection are reclaimed only after the run (the
    run's objects are unfrozen then); the engine's episodes make none (a 640-episode run
    with the collector off leaves 0 unreachable objects). Re-entrant; restored when the
    outermost run ends.
    """
    global _GC_DEPTH
    _GC_DEPTH += 1
    old = gc.get_threshold()
    if _GC_DEPTH == 1:
        gc.freeze()
        gc.set_threshold(max(old[0], gen0_threshold), *old[1:])
        gc.callbacks.append(_freeze_survivors)
    try:
        yield
    finally:
        _GC_DEPTH -= 1
        if _GC_DEPTH == 0:
            if _freeze_survivors in gc.callbacks:
                gc.callbacks.remove(_freeze_survivors)
            gc.set_threshold(*old)
            gc.unfreeze()


class ArmRunner:
    """Runs one arm's plan on one domain (construct, then ``await run(plan)``)."""

    def __init__(
        self,
        *,
        domain: Domain,
        runtime: ArmRuntime,
        settings: RunSettings,
        store: EpisodeStore | None = None,
        progress: ProgressSink | None = None,
        episode_fn: EpisodeFn | None = None,
        prompt: AgentPrompt | None = None,
        user: UserRuntime | None = None,
        judge: JudgeRuntime | None = None,
    ) -> None:
        if user is None and settings.user_sim == "llm":
            raise ValueError(
                "user_sim 'llm' needs the LLM user runtime: pass user=build_user(...) "
                "(runner.build) to run_cell/run_arm"
            )
        self.domain = domain
        self.user = user
        self.judge = judge
        self.user_sim = user.identity if user is not None else settings.user_sim
        self.runtime = runtime
        self.settings = settings
        self.store = store
        self.progress = progress
        self.episode_fn = episode_fn or _default_episode_fn()
        self.prompt = prompt or AgentPrompt.for_domain(domain)
        arm = runtime.arm
        self._arm_fields = arm.cache_fields()
        self._backend_version = runtime.backend.version()
        self._fatal: ConfigurationError | None = None
        ident = runtime.backend.identity()
        if ident:
            # A served endpoint's identity (URL without credentials, served model id) is part
            # of the key: pointing an arm at another server or model re-runs its episodes.
            self._arm_fields = {**self._arm_fields, "endpoint": ident}

    def key(self, ep: PlannedEpisode) -> str:
        arm, s = self.runtime.arm, self.settings
        return episode_key(
            arm=self._arm_fields,
            backend=arm.backend,
            backend_version=self._backend_version,
            domain=self.domain.name,
            task_id=ep.task_id,
            trial=ep.trial,
            seed=ep.seed,
            max_errors=s.max_errors,
            max_steps=s.max_steps,
            user_sim=self.user_sim,
            prompt=self.prompt.hash,
            repair=arm.repair,
            instrument=self.domain.instrument_hash,
            task=self.domain.task_hash(ep.task_id),
        )

    def _record(self, ep: PlannedEpisode, key: str, outcome: Any, duration: float, retries: int,
                tokens: int) -> EpisodeRecord:
        arm, s = self.runtime.arm, self.settings
        termination = TerminationReason(outcome.termination)
        return EpisodeRecord(
            key=key, model=arm.model, arm=arm.label, backend=arm.backend, domain=self.domain.name,
            task_id=ep.task_id, trial=ep.trial, seed=ep.seed, max_errors=s.max_errors,
            max_steps=s.max_steps, user_sim=self.user_sim, repair=arm.repair,
            termination=termination, reward=float(outcome.reward),
            success=_success(float(outcome.reward), termination),
            reward_info=_dump(outcome.reward_info), n_errors=outcome.n_errors, steps=outcome.steps,
            calls=list(outcome.calls), messages=list(outcome.messages),
            decisions=list(outcome.decisions or ()), tokens=tokens or None,
            duration_s=round(duration, 4), infra_retries=retries,
            error_message=outcome.error_message[:2000] if outcome.error_message else None,
            flags=["output_truncated"] if _any_truncated(outcome.messages) else [],
            user_events=dict(getattr(outcome, "user_events", None) or {}),
            turns=getattr(outcome, "turns", None),
        )

    def _failure(self, ep: PlannedEpisode, key: str, message: str, duration: float,
                 retries: int,
                 termination: TerminationReason = TerminationReason.INFRASTRUCTURE_ERROR,
                 ) -> EpisodeRecord:
        arm, s = self.runtime.arm, self.settings
        return EpisodeRecord(
            key=key, model=arm.model, arm=arm.label, backend=arm.backend, domain=self.domain.name,
            task_id=ep.task_id, trial=ep.trial, seed=ep.seed, max_errors=s.max_errors,
            max_steps=s.max_steps, user_sim=self.user_sim, repair=arm.repair,
            termination=termination, reward=0.0, success=False,
            n_errors=0, steps=0, duration_s=round(duration, 4), infra_retries=retries,
            error_message=message[:2000],
        )

    async def _attempt(self, ep: PlannedEpisode, usage: UsageCounter | None = None) -> Any:
        task = self.domain.task(ep.task_id)
        agent = make_agent(self.runtime, self.prompt, ep.seed)
        if self.user is not None:
            user: Any = self.user.make_user(self.domain, task, trial=ep.trial, seed=ep.seed)
        else:
            user = self.domain.make_user(task, ep.seed)
        try:
            outcome = await with_timeout(
                self.episode_fn(domain=self.domain, task=task, agent=agent, user=user,
                                max_steps=self.settings.max_steps, max_errors=self.settings.max_errors),
                self.settings.episode_timeout_s,
            )
            if self.judge is not None and isinstance(outcome.reward_info, RewardInfo):
                info = await judge_reward(self.judge, task, outcome.reward_info, outcome.messages)
                outcome.reward_info, outcome.reward = info, info.reward
            return outcome
        finally:
            if usage is not None and self.user is not None:
                # The LLM user counts its calls apart (its tokens are not the agent's); its
                # request retries are this episode's infrastructure retries all the same.
                usage.retries += user.usage.retries

    async def _run_one(self, ep: PlannedEpisode, key: str, writer: ThreadPoolExecutor,
                       sem: asyncio.Semaphore, appender: _GroupAppender | None = None) -> EpisodeRecord:
        # The concurrency slot is held while the episode talks to the model and is given
        # back once its record is built: writing the record to disk (group-committed, in the
        # writer thread) does not hold a model slot, so the next episode starts meanwhile.
        # This episode still returns, and counts in the progress, only once its record is
        # durable; what is lost to a kill before that is re-run on resume, as before.
        async with sem:
            rec = await self._episode(ep, key)
        if self.store is not None:
            if rec.scored:
                await (appender or _GroupAppender(self.store, writer)).append(rec)
                # What the store holds (text escaped if it had to be; another process's
                # record if it stored this key first): reports come from the store.
                rec = self.store.get(key) or rec
            else:
                await asyncio.get_running_loop().run_in_executor(writer, self.store.append_failure, rec)
        if self.progress is not None:
            self.progress.advance(rec)
        return rec

    async def _episode(self, ep: PlannedEpisode, key: str) -> EpisodeRecord:
        """Run one planned episode (re-running it after infrastructure failures): its record,
        or its failure record (infrastructure or task error, never scored)."""
        if self._fatal is not None:
            raise self._fatal  # the run is stopping: start nothing more
        deadline = self.settings.deadline
        if deadline is not None and time.monotonic() >= deadline:
            stored = "" if self.store is None else f" in {self.store.run_dir}"
            self._fatal = RunTimeCapError(
                "the run's time cap (--quant-run-timeout) has passed: no new episode starts; "
                f"the episodes stored so far{stored} are kept: run the same command again "
                "to resume")
            raise self._fatal
        # gather() runs each episode in its own task (own context), so this counter
        # collects this episode's request retries and tokens only.
        usage = bind_episode_usage()
        t0 = time.monotonic()
        reruns = 0
        last = ""
        for attempt in range(self.settings.episode_retries + 1):
            try:
                outcome = await self._attempt(ep, usage)
            except (InfrastructureError, TimeoutError) as e:
                reruns = attempt  # re-runs spent so far; the last failure is not a retry
                last = (f"episode wall-clock timeout after {self.settings.episode_timeout_s}s"
                        if isinstance(e, TimeoutError) else str(e))
                continue
            except ConfigurationError as e:
                # The server refused the request (key, URL, model): the run stops.
                # A judge's or user model's refusal names its role already.
                self._fatal = (e if e.role is not None else  # its class kept (ServerDownError)
                               type(e)(f"arm {self.runtime.arm.label!r}: {e}"))
                raise self._fatal from None
            except Exception as e:
                # The episode loop turns the agent's and the user's exceptions into
                # terminations itself, so what escapes it is the task's setup (its
                # initialization actions, environment or user) or its evaluation: a task
                # error, recorded and never scored; the rest of the run goes on.
                msg = (f"task {ep.task_id!r} (trial {ep.trial}) failed outside the model: "
                       f"{type(e).__name__}: {e}")
                return self._failure(ep, key, msg, time.monotonic() - t0, usage.retries,
                                     TerminationReason.TASK_ERROR)
            return self._record(ep, key, outcome, time.monotonic() - t0,
                                usage.retries + attempt, usage.tokens)
        return self._failure(ep, key, last, time.monotonic() - t0, usage.retries + reruns)

    async def run(self, plan: Sequence[PlannedEpisode]) -> list[EpisodeRecord]:
        """Run (or load) every planned episode; records in plan order, infrastructure
        failures included (``record.scored`` is False for them)."""
        keys = [self.key(ep) for ep in plan]
        if self.store is not None:
            self.store.refresh()
            store = self.store
            results: list[EpisodeRecord | None] = [store.get(k) if k in store else None for k in keys]
        else:
            results = [None] * len(keys)
        todo = [i for i, r in enumerate(results) if r is None]
        if self.judge is not None:
            # Stored episodes scored without this judge are judged from their messages (the
            # verdict cache makes a re-run free); the agent's episode is never re-run for it.
            for i, r in enumerate(results):
                if r is not None and r.scored:
                    results[i] = await judge_record(self.judge, self.domain.task(r.task_id), r)
        if self.progress is not None:
            loaded = [r for r in results if r is not None]
            self.progress.preload(len(loaded), failed=sum(r.scored and not r.success for r in loaded),
                                  infra=sum(not r.scored for r in loaded))
        sem = asyncio.Semaphore(self.settings.concurrency)
        with quiet_gc(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="quantagent-store") as writer:
            appender = _GroupAppender(self.store, writer) if self.store is not None else None
            done = await gather_or_cancel([self._run_one(plan[i], keys[i], writer, sem, appender)
                                           for i in todo])
        for i, rec in zip(todo, done, strict=True):
            results[i] = rec
        return [r for r in results if r is not None]


async def run_arm(
    *,
    domain: Domain,
    runtime: ArmRuntime,
    plan: Sequence[PlannedEpisode],
    settings: RunSettings,
    store: EpisodeStore | None = None,
    progress: ProgressSink | None = None,
    episode_fn: EpisodeFn | None = None,
    user: UserRuntime | None = None,
    judge: JudgeRuntime | None = None,
) -> list[EpisodeRecord]:
    """Run or resume one arm's episodes (see :class:`ArmRunner`)."""
    runner = ArmRunner(domain=domain, runtime=runtime, settings=settings, store=store,
                       progress=progress, episode_fn=episode_fn, user=user, judge=judge)
    return await runner.run(plan)


async def run_cell(
    *,
    domain: Domain,
    runtimes: Sequence[ArmRuntime],
    plan: Sequence[PlannedEpisode],
    settings: RunSettings,
    store: EpisodeStore | None = None,
    progress: Callable[[str, int], ProgressSink] | None = None,
    episode_fn: EpisodeFn | None = None,
    user: UserRuntime | None = None,
    judge: JudgeRuntime | None = None,
) -> dict[str, list[EpisodeRecord]]:
    """Run every arm on the same plan (paired design), arms concurrently.

    ``progress(label, total)`` returns the sink of one arm (e.g. ``RunProgress.arm``).
    ``user``: the run's one LLM user simulator (None = the domain's scripted user).
    ``judge``: the NL-assertion judge (None = NL assertions not evaluated).
    """
    labels = [rt.arm.label for rt in runtimes]
    if len(set(labels)) != len(labels):
        raise ValueError(f"arm labels must be distinct, got {labels}")
    prompt = AgentPrompt.for_domain(domain)
    runners = [
        ArmRunner(domain=domain, runtime=rt, settings=settings, store=store,
                  progress=progress(rt.arm.label, len(plan)) if progress else None,
                  episode_fn=episode_fn, prompt=prompt, user=user, judge=judge)
        for rt in runtimes
    ]
    results = await gather_or_cancel([r.run(plan) for r in runners])
    return dict(zip(labels, results, strict=True))


async def gather_or_cancel(coros: Sequence[Coroutine[Any, Any, T]]) -> list[T]:
    """``asyncio.gather`` that, when one fails (a run that stops: a refused key, a dead
    server, the time cap), cancels the others and waits for them before raising, so that
    every in-flight request has closed its connection before the caller closes the clients."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise

"""Batch layer: paired seeds, resume, infrastructure retries, timeouts (real engine, mini domain)."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from mini_rules import solving_rule

from pytest_quantagent.backends.mock import FakeOpenAIServer, MockBackend
from pytest_quantagent.backends.wrapper import ModelClient, RetryPolicy
from pytest_quantagent.env.domain import Domain
from pytest_quantagent.quant.arms import ArmSpec
from pytest_quantagent.runner.batch import (
    RunSettings,
    derive_seed,
    plan_episodes,
    run_arm,
    run_cell,
)
from pytest_quantagent.runner.build import ArmRuntime, build_arm
from pytest_quantagent.store.jsonl import EpisodeStore
from pytest_quantagent.vocab.channels import TerminationReason

FAST = RetryPolicy(max_retries=3, base_delay_s=0.001, max_delay_s=0.005)
RULE = "mini_rules:solving_rule"


def _mock_runtime(label: str, **options: Any) -> ArmRuntime:
    return build_arm(ArmSpec(label=label, backend="mock", model="m", options=options or {"rule": RULE}),
                     retry=FAST)


def _plan(domain: Domain, trials: int = 2, seed: int = 7) -> list[Any]:
    return plan_episodes([t.id for t in domain.tasks], trials, seed)


def test_derive_seed_is_stable_and_leaves_global_random_alone() -> None:
    random.seed(123)
    state = random.getstate()
    a = derive_seed(7, "t1", 0)
    assert random.getstate() == state
    assert a == derive_seed(7, "t1", 0)
    # sha256("7\x1ft1\x1f0") first 8 bytes, masked to 31 bits: recomputed independently.
    import hashlib
    assert a == int(hashlib.sha256(b"7\x1ft1\x1f0").hexdigest()[:16], 16) & 0x7FFFFFFF
    assert len({derive_seed(7, t, k) for t in ("t0", "t1") for k in range(3)}) == 6
    assert derive_seed(8, "t1", 0) != a


def test_arms_get_identical_plans_and_users(mini_domain: Domain) -> None:
    plan = _plan(mini_domain)
    ref, cand = _mock_runtime("bf16"), _mock_runtime("int4")
    out = asyncio.run(run_cell(domain=mini_domain, runtimes=[ref, cand], plan=plan, settings=RunSettings()))
    assert set(out) == {"bf16", "int4"}
    triples = {lbl: [(r.task_id, r.trial, r.seed) for r in recs] for lbl, recs in out.items()}
    assert triples["bf16"] == triples["int4"] == [(p.task_id, p.trial, p.seed) for p in plan]
    # Same seeded user, same agent script → the user's side of the dialogue is identical.
    for a, b in zip(out["bf16"], out["int4"], strict=True):
        ua = [m.content for m in a.messages if m.role == "user"]
        ub = [m.content for m in b.messages if m.role == "user"]
        assert ua == ub and ua
        assert a.key != b.key  # arm is part of the key
    assert all(r.success and r.termination == TerminationReason.AGENT_STOP for r in out["bf16"])


def test_resume_skips_stored_episodes(mini_domain: Domain, tmp_path: Path) -> None:
    plan = _plan(mini_domain)
    store = EpisodeStore(tmp_path)
    rt = _mock_runtime("bf16")
    first = asyncio.run(run_arm(domain=mini_domain, runtime=rt, plan=plan, settings=RunSettings(), store=store))
    calls = rt.backend.calls  # type: ignore[attr-defined]
    assert calls > 0 and len(first) == len(plan)
    rt2 = _mock_runtime("bf16")
    again = asyncio.run(run_arm(domain=mini_domain, runtime=rt2, plan=plan, settings=RunSettings(),
                                store=EpisodeStore(tmp_path)))
    assert rt2.backend.calls == 0  # type: ignore[attr-defined]
    assert [r.key for r in again] == [r.key for r in first]
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == len(plan) == len({json.loads(x)["key"] for x in lines})
    # A different budget is a different episode: nothing is reused.
    rt3 = _mock_runtime("bf16")
    asyncio.run(run_arm(domain=mini_domain, runtime=rt3, plan=plan, settings=RunSettings(max_errors=2),
                        store=EpisodeStore(tmp_path)))
    assert rt3.backend.calls == calls  # type: ignore[attr-defined]


def test_server_faults_mid_episode_are_retried_and_stored_once(mini_domain: Domain, tmp_path: Path) -> None:
    # Each episode makes 3 model calls (4 requests with its fault); concurrency 1, so the
    # faults hit the 2nd call of each episode: requests 2, 6 and 10.
    server = FakeOpenAIServer([
        {"tool_calls": [{"name": "get_user", "arguments": {"user_id": "u0"}}]},
        {"tool_calls": [{"name": "get_user", "arguments": {"user_id": "u1"}}]},
        {"content": "All done. ###STOP###"},
    ], faults={2: "500", 6: "drop", 10: "hang"}, hang_s=2.0)
    url = server.start_in_thread()
    arm = ArmSpec(label="bf16", backend="openai", model="m", base_url=url, options={"timeout_s": 0.5})
    rt = build_arm(arm, concurrency=1, retry=FAST)
    plan = plan_episodes(["t0", "t1", "t2"], 1, 0)
    store = EpisodeStore(tmp_path)

    async def main() -> list[Any]:
        try:
            return await run_arm(domain=mini_domain, runtime=rt, plan=plan,
                                 settings=RunSettings(concurrency=1), store=store)
        finally:
            await rt.aclose()

    try:
        recs = asyncio.run(main())
    finally:
        server.stop()
    assert [r.termination for r in recs] == [TerminationReason.AGENT_STOP] * 3
    assert sum(r.infra_retries for r in recs) == 3
    assert [r.infra_retries for r in recs] == [1, 1, 1]
    assert server.requests == 9 + 3
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["task_id"] for x in lines) == ["t0", "t1", "t2"]
    assert not (tmp_path / "failures.jsonl").exists()


class _Flaky(MockBackend):
    """Fails every call of the first ``fail_calls`` calls with a retryable error."""

    def __init__(self, fail_calls: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.fail_calls = fail_calls

    async def generate(self, request: Any) -> Any:
        if self.calls < self.fail_calls:
            self.calls += 1
            raise ConnectionError("connection reset by peer")
        return await super().generate(request)


def test_exhausted_retries_rerun_episode_then_record_infrastructure_error(
    mini_domain: Domain, tmp_path: Path
) -> None:
    retry = RetryPolicy(max_retries=1, base_delay_s=0.0)
    backend = _Flaky(fail_calls=100, rule=solving_rule)
    rt = ArmRuntime(arm=ArmSpec(label="bf16", backend="mock", model="m"), backend=backend,
                    client=ModelClient(backend, retry=retry))
    plan = plan_episodes(["t0"], 1, 0)
    store = EpisodeStore(tmp_path)
    (rec,) = asyncio.run(run_arm(domain=mini_domain, runtime=rt, plan=plan,
                                 settings=RunSettings(episode_retries=2), store=store))
    assert rec.termination == TerminationReason.INFRASTRUCTURE_ERROR and not rec.scored
    assert "connection reset" in (rec.error_message or "")
    # 3 attempts x (1 request retry) + 2 episode re-runs.
    assert rec.infra_retries == 5
    assert backend.calls == 6
    assert len(EpisodeStore(tmp_path).load()) == 0
    assert len((tmp_path / "failures.jsonl").read_text().splitlines()) == 1
    # Resume once the server is healthy: the episode is run and stored.
    backend.fail_calls = 0
    (again,) = asyncio.run(run_arm(domain=mini_domain, runtime=rt, plan=plan,
                                   settings=RunSettings(), store=EpisodeStore(tmp_path)))
    assert again.success and len(EpisodeStore(tmp_path).load()) == 1


def test_episode_wall_clock_timeout_is_infrastructure(mini_domain: Domain) -> None:
    rt = _mock_runtime("bf16", rule=RULE, latency_s=0.2)
    plan = plan_episodes(["t0"], 1, 0)
    (rec,) = asyncio.run(run_arm(domain=mini_domain, runtime=rt, plan=plan,
                                 settings=RunSettings(episode_timeout_s=0.1, episode_retries=1)))
    assert rec.termination == TerminationReason.INFRASTRUCTURE_ERROR
    assert "wall-clock timeout" in (rec.error_message or "")
    assert rec.infra_retries == 1


def test_malformed_calls_count_against_the_budget(mini_domain: Domain) -> None:
    rt = _mock_runtime("int4", responses=[{"tool_calls": [{"name": "get_user", "arguments": "{'user_id': 'u0'"}]}])
    (rec,) = asyncio.run(run_arm(domain=mini_domain, runtime=rt, plan=plan_episodes(["t0"], 1, 0),
                                 settings=RunSettings(max_errors=3)))
    assert rec.termination == TerminationReason.TOO_MANY_ERRORS
    assert rec.n_errors == 3
    assert {c.channel.value for c in rec.calls if c.channel} == {"malformed_call"}
    raws = [m.raw for m in rec.messages if m.role == "assistant" and m.raw]
    assert raws and "{'user_id'" in raws[0]


def test_concurrency_limits_episodes_in_flight(mini_domain: Domain) -> None:
    in_flight = 0
    peak = 0

    async def episode_fn(**kw: Any) -> Any:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        raise RuntimeError("stop here")  # a task/domain fault: recorded, never scored

    rt = _mock_runtime("bf16")
    recs = asyncio.run(run_arm(domain=mini_domain, runtime=rt, plan=_plan(mini_domain, trials=3),
                               settings=RunSettings(concurrency=3), episode_fn=episode_fn))
    assert peak == 3
    assert {r.termination for r in recs} == {TerminationReason.TASK_ERROR}
    assert not any(r.scored for r in recs)
    assert all(f"task {r.task_id!r}" in (r.error_message or "") and "RuntimeError: stop here"
               in (r.error_message or "") for r in recs)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match=r"concurrency \(0\) must be >= 1"):
        RunSettings(concurrency=0)
    with pytest.raises(ValueError, match=r"trials \(0\) must be >= 1"):
        plan_episodes(["t0"], 0, 1)


def test_repair_arm_shows_the_model_reflexive_results_but_counts_unchanged(mini_domain: Domain) -> None:
    seen: list[str] = []

    def rule(request: Any) -> dict[str, Any]:
        tool_texts = [m["content"] for m in request.messages if m["role"] == "tool"]
        seen.extend(tool_texts[-1:])
        if len(tool_texts) < 2:
            return {"tool_calls": [{"name": "get_usr", "arguments": {"user_id": "u0"}}]}
        return {"content": "Sorry. ###STOP###"}

    plan = plan_episodes(["t0"], 1, 0)
    out = {}
    for label, repair in (("int4", "none"), ("int4+repair", "reflexive")):
        seen.clear()
        backend = MockBackend(rule=rule)
        rt = ArmRuntime(arm=ArmSpec(label=label, backend="mock", model="m", repair=repair),
                        backend=backend, client=ModelClient(backend))
        (rec,) = asyncio.run(run_arm(domain=mini_domain, runtime=rt, plan=plan, settings=RunSettings()))
        out[label] = (rec, list(seen))
    (plain, plain_seen), (rep, rep_seen) = out["int4"], out["int4+repair"]
    assert plain.n_errors == rep.n_errors == 2 and rep.repair == "reflexive"
    assert [c.channel for c in plain.calls] == [c.channel for c in rep.calls]
    assert all("does not exist for you" not in t for t in plain_seen)
    assert rep_seen and all("does not exist for you" in t and "get_user" in t for t in rep_seen)
    # The stored trajectory keeps the engine's original tool result.
    assert all("does not exist for you" not in m.content for m in rep.messages if m.role == "tool")


def test_an_agent_error_keeps_its_reason_in_the_store(mini_domain: Domain, tmp_path: Path) -> None:
    rt = build_arm(ArmSpec(label="bf16", backend="mock", model="m", options={"rule": "mini_rules:failing_rule"}),
                   retry=FAST)
    store = EpisodeStore(tmp_path)
    plan = _plan(mini_domain, trials=1)[:1]
    (rec,) = asyncio.run(run_arm(domain=mini_domain, runtime=rt, plan=plan, settings=RunSettings(), store=store))
    assert rec.termination == TerminationReason.AGENT_ERROR and not rec.success
    assert rec.error_message == "ValueError: prompt is longer than the model's context (4096 tokens)"
    (stored,) = EpisodeStore(tmp_path).records()
    assert stored.error_message == rec.error_message


class _DurableProgress:
    """A progress sink noting, for each episode it is told of, whether its record was
    durable by then (its key in ``durable``)."""

    def __init__(self, durable: set[str]) -> None:
        self.durable = durable
        self.seen: list[bool] = []

    def preload(self, n: int, failed: int = 0, infra: int = 0) -> None:
        pass

    def advance(self, record: Any) -> None:
        self.seen.append(record.key in self.durable)


def test_episodes_finishing_together_share_one_fsync_and_go_on_only_once_durable(
        mini_domain: Domain, tmp_path: Path) -> None:
    # While one append is on disk (held here until every episode has finished), the episodes
    # finishing meanwhile queue up and are appended together, after it; none is reported
    # done before the append holding its record returned.
    import threading

    from pytest_quantagent.runner.episode import run_episode

    plan = _plan(mini_domain, trials=6)
    store = EpisodeStore(tmp_path)
    batches: list[list[str]] = []
    durable: set[str] = set()
    finished = 0
    all_finished = threading.Event()
    real = store.append_many

    def append_many(records: list[Any]) -> list[bool]:
        if not batches:
            assert all_finished.wait(10)
        batches.append([r.key for r in records])
        out = real(records)
        durable.update(r.key for r in records)
        return out

    async def episode(**kw: Any) -> Any:
        nonlocal finished
        out = await run_episode(**kw)
        finished += 1
        if finished == len(plan):
            all_finished.set()
        return out

    store.append_many = append_many  # type: ignore[method-assign]
    progress = _DurableProgress(durable)

    recs = asyncio.run(run_arm(domain=mini_domain, runtime=_mock_runtime("bf16"), plan=plan,
                               settings=RunSettings(concurrency=len(plan)), store=store,
                               progress=progress, episode_fn=episode))
    assert len(recs) == len(plan) and all(r.scored for r in recs)
    assert [len(b) for b in batches] == [1, len(plan) - 1]  # two fsyncs for all the episodes
    assert progress.seen == [True] * len(plan)
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["key"] for x in lines) == sorted(r.key for r in recs)


def test_a_store_write_error_reaches_the_run(mini_domain: Domain, tmp_path: Path) -> None:
    store = EpisodeStore(tmp_path)

    def broken(records: list[Any]) -> list[bool]:
        raise OSError(28, "No space left on device")

    store.append_many = broken  # type: ignore[method-assign]
    with pytest.raises(OSError, match="No space left"):
        asyncio.run(run_arm(domain=mini_domain, runtime=_mock_runtime("bf16"), plan=_plan(mini_domain),
                            settings=RunSettings(concurrency=4), store=store))


def test_a_record_on_its_way_to_disk_does_not_hold_a_concurrency_slot(
        mini_domain: Domain, tmp_path: Path) -> None:
    # Concurrency 1: while the first episode's record is held in the writer thread (until the
    # second episode has started), the second episode runs. Without giving the slot back
    # before the write, the second episode could not start and the wait below times out.
    # Each episode still counts in the progress only once its record is durable, and no more
    # than one episode talks to the model at a time.
    import threading

    from pytest_quantagent.runner.episode import run_episode

    plan = _plan(mini_domain, trials=1)[:2]
    store = EpisodeStore(tmp_path)
    durable: set[str] = set()
    second_started = threading.Event()
    real = store.append_many
    running = 0
    peak = 0
    started = 0

    def append_many(records: list[Any]) -> list[bool]:
        if not durable:
            assert second_started.wait(10), "the next episode waited for the record's write"
        out = real(records)
        durable.update(r.key for r in records)
        return out

    async def episode(**kw: Any) -> Any:
        nonlocal running, peak, started
        started += 1
        if started == 2:
            second_started.set()
        running += 1
        peak = max(peak, running)
        try:
            return await run_episode(**kw)
        finally:
            running -= 1

    store.append_many = append_many  # type: ignore[method-assign]
    progress = _DurableProgress(durable)

    recs = asyncio.run(run_arm(domain=mini_domain, runtime=_mock_runtime("bf16"), plan=plan,
                               settings=RunSettings(concurrency=1), store=store,
                               progress=progress, episode_fn=episode))
    assert len(recs) == 2 and all(r.scored for r in recs) and peak == 1
    assert progress.seen == [True, True]
    assert sorted(r.key for r in EpisodeStore(tmp_path).records()) == sorted(r.key for r in recs)


def test_an_upgraded_environment_or_user_and_a_changed_task_rerun_their_episodes(
        mini_domains_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Stored episodes are reused only while what scored them is the same: the domain's code
    # (its tools, its scripted user) and the task's content are part of the key, so a store
    # made before an upgrade is re-run, not scored as if today's user had played it.
    import shutil

    from pytest_quantagent.env import registry
    domains = tmp_path / "domains"
    shutil.copytree(mini_domains_dir, domains, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("QUANTAGENT_DOMAINS_DIR", str(domains))
    registry.clear_cache()
    dom = registry.get_domain("mini")
    plan = _plan(dom, trials=1)
    store_dir = tmp_path / "store"

    def run() -> int:
        rt = _mock_runtime("bf16")
        asyncio.run(run_arm(domain=dom, runtime=rt, plan=plan, settings=RunSettings(),
                            store=EpisodeStore(store_dir)))
        return rt.backend.calls  # type: ignore[attr-defined, no-any-return]

    all_calls = run()
    assert all_calls > 0 and run() == 0  # the same instrument: everything reused
    # One task changes under the same id: only its episodes are re-run.
    t0 = dom.task("t0")
    changed = t0.model_copy(update={"user_scenario": t0.user_scenario.model_copy(
        update={"instructions": t0.user_scenario.instructions + " today"})})
    monkeypatch.setitem(dom._by_id, "t0", changed)
    monkeypatch.setattr(dom, "_task_hashes", {})
    assert 0 < run() < all_calls
    # The domain's code changes (a new rule in its user, a tool's behaviour): all re-run.
    code = domains / "mini" / "domain.py"
    code.write_text(code.read_text() + "\n# an upgrade\n")
    registry.clear_cache()
    dom = registry.get_domain("mini")
    assert run() == all_calls
    registry.clear_cache()

"""Issue 28, re-tried with the loopback fault server: a fault is the server's or the
config's, never the model's; no run is lost to one bad reply; no secret leaks."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.backends.wrapper import RetryPolicy
from pytest_quantagent.env.domain import Domain
from pytest_quantagent.errors import ConfigurationError
from pytest_quantagent.quant.arms import ArmSpec
from pytest_quantagent.runner.batch import ArmRunner, RunSettings, plan_episodes, run_arm
from pytest_quantagent.runner.build import build_arm
from pytest_quantagent.store.jsonl import EpisodeStore
from pytest_quantagent.vocab.channels import Channel, TerminationReason

FAST = RetryPolicy(max_retries=6, base_delay_s=0.001, max_delay_s=0.005)
KEY = "sk-planted-SECRET-4242-do-not-leak"


def _run(domain: Domain, url: str, tmp_path: Path, *, tasks: int = 2, trials: int = 1,
         label: str = "int4", api_key_env: str | None = None, concurrency: int = 2,
         **options: Any) -> list[Any]:
    arm = ArmSpec(label=label, backend="openai", model="m", base_url=url,
                  api_key_env=api_key_env, options={"timeout_s": 0.5, **options})
    rt = build_arm(arm, concurrency=concurrency, retry=FAST)
    plan = plan_episodes([t.id for t in domain.tasks][:tasks], trials, 0)

    async def main() -> list[Any]:
        try:
            return await run_arm(domain=domain, runtime=rt, plan=plan, store=EpisodeStore(tmp_path),
                                 settings=RunSettings(concurrency=concurrency, episode_retries=2))
        finally:
            await rt.aclose()

    return asyncio.run(main())


@pytest.mark.parametrize("fault,cause", [("400", "refused the request"), ("401", "API key was refused"),
                                         ("403", "forbidden"), ("404", "not found")])
def test_a_refused_request_stops_the_run_and_is_never_stored(
        mini_domain: Domain, tmp_path: Path, serve: Any, fault: str, cause: str) -> None:
    # Finding 1: 4xx used to end episodes as scored agent_error, cached.
    server, url = serve(faults={1: fault})
    with pytest.raises(ConfigurationError) as e:
        _run(mini_domain, url, tmp_path, concurrency=1)
    msg = str(e.value)
    assert msg.startswith("arm 'int4': ") and url in msg and f"HTTP {fault}" in msg and cause in msg
    assert server.requests == 1  # not retried
    assert not (tmp_path / "episodes.jsonl").exists() or (tmp_path / "episodes.jsonl").read_bytes() == b""


def test_fixed_config_reruns_because_the_key_has_the_endpoint(mini_domain: Domain, tmp_path: Path,
                                                             serve: Any) -> None:
    # Finding 1, second half: the cache key now has the endpoint (URL, served model id).
    _bad, bad_url = serve(faults={1: "401"})
    with pytest.raises(ConfigurationError):
        _run(mini_domain, bad_url, tmp_path, concurrency=1)
    good, good_url = serve()
    recs = _run(mini_domain, good_url, tmp_path)
    assert good.requests == 2 and all(r.scored for r in recs)
    assert len(EpisodeStore(tmp_path).records()) == 2
    other, other_url = serve()  # same arm, another server: its episodes are not reused
    _run(mini_domain, other_url, tmp_path)
    assert other.requests == 2
    same = _run(mini_domain, other_url, tmp_path)  # unchanged config: all from the store
    assert other.requests == 2 and len(same) == 2

    def key(url: str) -> str:
        rt = build_arm(ArmSpec(label="int4", backend="openai", model="m", base_url=url))
        k = ArmRunner(domain=mini_domain, runtime=rt, settings=RunSettings()).key(plan_episodes(["t0"], 1, 0)[0])
        asyncio.run(rt.aclose())
        return k

    assert key("http://127.0.0.1:1/v1") == key("http://bob:pw@127.0.0.1:1/v1")  # creds are not identity
    assert key("http://127.0.0.1:1/v1") != key("http://127.0.0.1:2/v1")


def test_a_lone_surrogate_reply_is_stored_escaped_and_flagged(mini_domain: Domain, tmp_path: Path,
                                                              serve: Any) -> None:
    # Finding 2: "broken \ud83d text" used to abort the run with 0 episodes stored.
    _server, url = serve(responses=["broken \ud83d text", "###STOP###"], faults={})
    recs = _run(mini_domain, url, tmp_path, tasks=4)
    assert len(recs) == 4 and all(r.scored for r in recs)
    stored = EpisodeStore(tmp_path).records()
    assert len(stored) == 4 and all("lone_surrogates_escaped" in r.flags for r in stored)
    texts = [m.content for m in stored[0].messages if m.role == "assistant"]
    assert "broken \\ud83d text" in texts  # the six characters, readable, valid UTF-8
    (tmp_path / "episodes.jsonl").read_bytes().decode("utf-8")  # the file is valid UTF-8


@pytest.mark.parametrize("shape", ["tool_call_null", "function_str", "tool_calls_str"])
def test_odd_tool_call_shapes_are_the_models_malformed_calls(mini_domain: Domain, tmp_path: Path,
                                                             serve: Any, shape: str) -> None:
    # Finding 3: these used to end as agent_error with Python exception text.
    _server, url = serve(faults={1: shape}, responses=["###STOP###"])
    [rec] = _run(mini_domain, url, tmp_path, tasks=1, concurrency=1)
    assert rec.termination == TerminationReason.AGENT_STOP
    [call] = rec.agent_calls()
    assert call.channel == Channel.MALFORMED_CALL and call.error
    raw = next(m.raw for m in rec.messages if m.role == "assistant" and m.tool_calls)
    assert raw is not None and "Error" not in raw  # the server's text, not an exception


def test_content_parts_are_read_and_message_null_is_retried(mini_domain: Domain, tmp_path: Path,
                                                            serve: Any) -> None:
    _server, url = serve(faults={1: "content_parts", 2: "message_null"})
    recs = _run(mini_domain, url, tmp_path, tasks=2, concurrency=1)
    assert [r.termination for r in recs] == [TerminationReason.AGENT_STOP] * 2
    assert [m.content for m in recs[0].messages if m.role == "assistant"][-1] == "done ###STOP###"
    assert recs[1].infra_retries == 1  # a null message is the server's, not the model's


def test_context_overflow_is_its_own_termination(mini_domain: Domain, tmp_path: Path, serve: Any) -> None:
    _server, url = serve(faults={1: "context"})
    [rec] = _run(mini_domain, url, tmp_path, tasks=1, concurrency=1)
    assert rec.termination == TerminationReason.CONTEXT_OVERFLOW and rec.scored
    assert "maximum context length" in (rec.error_message or "")


def test_retry_after_is_honoured(mini_domain: Domain, tmp_path: Path, serve: Any) -> None:
    # Finding 12: the next try used to come 0.3 s after "Retry-After: 1" (here 0.4 s, with a
    # backoff policy of a few milliseconds, so only the header can explain the wait).
    server, url = serve(faults={1: "429", 2: "503"}, retry_after_s=0.4)
    [rec] = _run(mini_domain, url, tmp_path, tasks=1, concurrency=1)
    assert rec.infra_retries == 2
    gaps = [b - a for a, b in zip(server.arrivals, server.arrivals[1:], strict=False)]
    assert gaps[0] >= 0.39 and gaps[1] >= 0.39


def test_huge_outputs_are_cut_once_flagged_and_classified(mini_domain: Domain, tmp_path: Path,
                                                           serve: Any) -> None:
    # Finding 13: 1 MB tool arguments were stored 2-4 times per record.
    _server, url = serve(faults={1: "huge"}, huge_chars=1_000_000)
    [rec] = _run(mini_domain, url, tmp_path, tasks=1, concurrency=1, max_output_chars=4096)
    assert "output_truncated" in rec.flags
    [call] = rec.agent_calls()
    assert call.channel == Channel.MALFORMED_CALL and "max_output_chars" in (call.detail or "")
    size = (tmp_path / "episodes.jsonl").stat().st_size
    assert size < 3 * 4096 + 4096, size  # the cut text once, plus the record around it


def test_a_key_echoed_by_the_server_is_redacted(mini_domain: Domain, tmp_path: Path, serve: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Finding 4: a 401 echoing the key put it in the store and the error.
    monkeypatch.setenv("QA_PLANTED_KEY", KEY)
    _server, url = serve(faults={1: "echo_key", 2: "500"})
    with pytest.raises(ConfigurationError) as e:
        _run(mini_domain, url, tmp_path, api_key_env="QA_PLANTED_KEY", concurrency=1)
    assert KEY not in str(e.value) and "[REDACTED]" in str(e.value)
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f


@pytest.mark.parametrize("rate", [0.05, 0.2, 0.5])
def test_fault_mix_loses_no_episode_and_counts_every_retry(mini_domain: Domain, tmp_path: Path,
                                                           serve: Any, rate: float) -> None:
    # The no-regression figure of issue 28: 40 episodes, no duplicates, retries = faults.
    server, url = serve(responses=["###STOP###"], fault_rate=rate, seed=int(rate * 100),
                        fault_mix=("500", "503", "drop", "garbage"))
    recs = _run(mini_domain, url, tmp_path, tasks=4, trials=10, concurrency=8)
    assert len(recs) == 40 and all(r.scored for r in recs)
    lines = (tmp_path / "episodes.jsonl").read_bytes().splitlines()
    keys = [json.loads(x)["key"] for x in lines]
    assert len(keys) == 40 == len(set(keys))
    assert sum(r.infra_retries for r in recs) == sum(server.injected.values())


def test_a_task_whose_setup_fails_is_a_task_error_and_the_run_goes_on(
        mini_domain: Domain, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Finding 2, second half: a task whose initialization names an unknown function aborted
    # the run (traceback, 0 of 12 stored, no task named).
    real = mini_domain.make_environment

    def make_environment(task: Any) -> Any:
        if task.id == "t1":
            raise KeyError("initialization_actions: unknown function 'toggle_warp_drive'")
        return real(task)

    monkeypatch.setattr(mini_domain, "make_environment", make_environment)
    rt = build_arm(ArmSpec(label="bf16", backend="mock", model="m",
                           options={"rule": "mini_rules:solving_rule"}), retry=FAST)
    store = EpisodeStore(tmp_path)
    recs = asyncio.run(run_arm(domain=mini_domain, runtime=rt, plan=plan_episodes(["t0", "t1", "t2"], 2, 0),
                               settings=RunSettings(concurrency=2), store=store))
    bad = [r for r in recs if r.termination == TerminationReason.TASK_ERROR]
    assert [(r.task_id, r.trial) for r in bad] == [("t1", 0), ("t1", 1)]
    assert all("task 't1'" in (r.error_message or "") and "toggle_warp_drive" in (r.error_message or "")
               for r in bad)
    assert len(store.records()) == 4 and all(r.task_id != "t1" for r in store.records())
    failures = (tmp_path / "failures.jsonl").read_text().splitlines()
    assert len(failures) == 2  # logged, not cached: a fixed task file runs them

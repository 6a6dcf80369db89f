"""The NL-assertion judge (issue 27, Deliver 1): strict verdict parsing, τ²-bench's reward
rule, and end to end on a loopback fake OpenAI-compatible judge server — a passing and a
failing task, an unparsable answer (retried, then a judge error that is never a pass), and a
re-run that finds every verdict in the cache and sends zero requests."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# pytester's in-process runs cannot import a C extension (numpy, scipy) a second time: load
# the analysis stack once here (as tests/plugin/conftest.py does).
import pytest_quantagent.report.model
import pytest_quantagent.report.terminal
import pytest_quantagent.stats  # noqa: F401
from pytest_quantagent.backends.mock import FakeOpenAIServer
from pytest_quantagent.cli import main
from pytest_quantagent.env.evaluate import RewardInfo, apply_nl_verdicts
from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.env.tasks import RewardType
from pytest_quantagent.errors import DataFileError
from pytest_quantagent.quant.arms import ArmSpec, UserModelConfig, load_judge_config
from pytest_quantagent.runner.batch import RunSettings, plan_episodes, run_cell
from pytest_quantagent.runner.build import build_arm
from pytest_quantagent.runner.episode import run_episode
from pytest_quantagent.runner.judge import (
    JUDGE_CACHE_FILE,
    JudgeParseError,
    JudgeSpec,
    build_judge,
    parse_verdicts,
)
from pytest_quantagent.runner.oracle import oracle_agent
from pytest_quantagent.store.jsonl import EpisodeStore

# ---------------------------------------------------------------- parsing and the reward rule


def test_parse_verdicts_strict_shape() -> None:
    ok = '{"verdicts": [{"index": 2, "met": false, "reason": "no"}, {"index": 1, "met": true, "reason": "yes"}]}'
    assert parse_verdicts(ok, 2) == [(True, "yes"), (False, "no")]
    assert parse_verdicts(f"```json\n{ok}\n```", 2) == [(True, "yes"), (False, "no")]
    bad = [
        ("", "empty answer"),
        ("They were all met.", "not JSON"),
        ('{"results": []}', "'verdicts' list"),
        ('{"verdicts": [{"index": 1, "met": true, "reason": ""}]}', "1 verdicts for 2 statements"),
        ('{"verdicts": [{"index": 1, "met": "yes"}, {"index": 2, "met": true}]}', "'met' of statement 1"),
        ('{"verdicts": [{"index": 1, "met": true}, {"index": 1, "met": true}]}', "repeated index 1"),
    ]
    for text, why in bad:
        with pytest.raises(JudgeParseError, match=re.escape(why)):
            parse_verdicts(text, 2)


def _info() -> RewardInfo:
    return RewardInfo(reward=1.0, reward_basis=[RewardType.DB, RewardType.NL_ASSERTION],
                      reward_breakdown={"DB": 1.0}, db_match=True,
                      not_evaluated=["NL_ASSERTION"],
                      note="NL_ASSERTION not evaluated (needs an LLM judge); reward computed on "
                           "the rest of the basis")


def test_reward_rule_follows_tau2() -> None:
    # τ²-bench (evaluator_nl_assertions.py): NL component 1 iff every assertion is met.
    met = [{"assertion": "a", "met": True, "reason": ""}, {"assertion": "b", "met": True, "reason": ""}]
    out = apply_nl_verdicts(_info(), met, "judge:x")
    assert (out.reward, out.reward_breakdown, out.not_evaluated, out.note, out.judge) == (
        1.0, {"DB": 1.0, "NL_ASSERTION": 1.0}, [], None, "judge:x")
    one_not = [met[0], {"assertion": "b", "met": False, "reason": "not said"}]
    assert apply_nl_verdicts(_info(), one_not, "judge:x").reward == 0.0
    # A judge error is never a pass.
    err = apply_nl_verdicts(_info(), [met[0], {"assertion": "b", "met": None, "judge_error": "x"}], "j")
    assert err.reward == 0.0 and "judge error on 1 NL assertion" in (err.note or "")
    # DB failed: NL cannot lift it.
    db0 = _info()
    db0.reward_breakdown["DB"], db0.reward = 0.0, 0.0
    assert apply_nl_verdicts(db0, met, "j").reward == 0.0


def test_judge_table_and_pinned_temperature(tmp_path: Path) -> None:
    p = tmp_path / "arms.toml"
    p.write_text('[arms.bf16]\nbackend = "mock"\n[judge]\nbackend = "openai"\nmodel = "gpt-4.1"\n'
                 'base_url = "http://127.0.0.1:1/v1"\nrevision = "2025-04-14"\n')
    cfg = load_judge_config(p)
    assert cfg is not None and cfg.temperature == 0.0
    assert JudgeSpec.from_config(cfg).identity == "judge:openai:gpt-4.1@2025-04-14:t=0:max=512:p1"
    p.write_text('[judge]\nbackend = "openai"\nmodel = "m"\ntemperature = 0.7\n')
    with pytest.raises(DataFileError, match=r"at judge\.temperature: the judge decodes at temperature 0"):
        load_judge_config(p)
    p.write_text('[judge]\nmodel = "m"\n')
    with pytest.raises(DataFileError, match=r"at judge: missing string key 'backend'"):
        load_judge_config(p)


# ---------------------------------------------------------------- loopback judge server


class JudgeServer(FakeOpenAIServer):
    """A fake judge: answers each request with ``rule(statements)``."""

    def __init__(self, rule: Callable[[list[str]], str]) -> None:
        super().__init__(["unused"])
        self.rule = rule
        self.bodies: list[dict[str, Any]] = []

    def _answer(self, body: bytes) -> bytes:
        req = json.loads(body)
        self.bodies.append(req)
        prompt = req["messages"][-1]["content"]
        block = prompt.split("<statements>\n", 1)[1].split("\n</statements>", 1)[0]
        statements = [re.sub(r"^\d+\. ", "", line) for line in block.splitlines()]
        self.responses = [self.rule(statements)]
        return super()._answer(body)


def by_keyword(statements: list[str]) -> str:
    """Met unless the statement mentions the refund total; gibberish for gift cards."""
    if any("gift card" in s for s in statements):
        return "All statements look fine to me."
    return json.dumps({"verdicts": [
        {"index": i, "met": "refund amount" not in s, "reason": "checked"}
        for i, s in enumerate(statements, 1)]})


@pytest.fixture
def judge_server() -> Iterator[tuple[JudgeServer, str]]:
    s = JudgeServer(by_keyword)
    url = s.start_in_thread()
    yield s, url
    s.stop()


def _judge_config(url: str) -> UserModelConfig:
    return UserModelConfig(arm=ArmSpec(label="judge", backend="openai", model="fake-judge", base_url=url))


async def _oracle_episode(*, domain: Any, task: Any, agent: Any, user: Any, max_steps: int,
                          max_errors: int) -> Any:
    # The oracle solves the DB part of every official task: what is left is the judge's.
    return await run_episode(domain=domain, task=task, agent=oracle_agent(domain, task), user=user,
                             max_steps=max_steps, max_errors=max_errors)


def _run(tau2: Path, store_dir: Path, ids: list[str], judge_url: str | None) -> dict[str, Any]:
    dom = get_domain("retail", tau2_data=tau2)

    async def go() -> Any:
        rt = build_arm(ArmSpec(label="bf16", backend="mock", model="m"))
        judge = None if judge_url is None else build_judge(
            _judge_config(judge_url), cache_path=store_dir / JUDGE_CACHE_FILE)
        try:
            out = await run_cell(domain=dom, runtimes=[rt], plan=plan_episodes(ids, 1, 0),
                                 settings=RunSettings(concurrency=2), store=EpisodeStore(store_dir),
                                 episode_fn=_oracle_episode, judge=judge)
            return out["bf16"], judge
        finally:
            await rt.aclose()
            if judge is not None:
                await judge.aclose()

    recs, judge = asyncio.run(go())
    return {"records": {r.task_id: r for r in recs}, "judge": judge}


# Official retail tasks: "2" asserts the agent told the number of t-shirt options (the fake
# judge says met), "16" the refund total (not met), "21" a gift-card balance (the fake judge
# answers prose: unparsable), "0" has NL_ASSERTION in its basis but no assertion.
IDS = ["2", "16", "21", "0"]


def test_judge_end_to_end_on_official_retail_tasks(
    tau2_data: Path, tmp_path: Path, judge_server: tuple[JudgeServer, str]
) -> None:
    server, url = judge_server
    first = _run(tau2_data, tmp_path / "store", IDS, url)
    recs, judge = first["records"], first["judge"]
    ident = "judge:openai:fake-judge:t=0:max=512:p1"

    ok = recs["2"].reward_info
    assert recs["2"].success and ok["judge"] == ident and ok["not_evaluated"] == []
    assert ok["reward_breakdown"] == {"DB": 1.0, "NL_ASSERTION": 1.0}
    assert ok["nl_assertions"] == [{"assertion": "Agent should tell the user that there are 10 "
                                    "t-shirt options available.", "met": True, "reason": "checked"}]

    bad = recs["16"].reward_info
    assert not recs["16"].success and bad["reward_breakdown"] == {"DB": 1.0, "NL_ASSERTION": 0.0}
    assert bad["nl_assertions"][0]["met"] is False

    err = recs["21"].reward_info
    assert not recs["21"].success and err["nl_assertions"][0]["met"] is None
    assert "unparsable judge answer after 3 attempt(s): not JSON" in err["nl_assertions"][0]["judge_error"]

    # No assertion to judge: the component is 1 without asking (τ²-bench).
    assert recs["0"].success and recs["0"].reward_info["reward_breakdown"]["NL_ASSERTION"] == 1.0
    assert recs["0"].reward_info["judge"] is None and recs["0"].reward_info["not_evaluated"] == []

    # One request per task with assertions, the unparsable one asked three times.
    assert server.requests == judge.requests == 1 + 1 + 3
    body = server.bodies[0]
    assert body["temperature"] == 0 and body["model"] == "fake-judge"
    assert "<conversation>\n" in body["messages"][1]["content"]

    # Re-run on the same store: every episode and decided verdict is stored; only the judge
    # error (never cached) is asked again.
    n = server.requests
    again = _run(tau2_data, tmp_path / "store", IDS, url)["records"]
    assert server.requests == n + 3
    assert again["2"].success and not again["16"].success and again["2"].key == recs["2"].key

    # Episodes stored by a run without a judge are "not evaluated"; a later run with the
    # judge scores them from their stored messages, its verdicts all from the cache.
    plain = _run(tau2_data, tmp_path / "plain", ["2", "16"], None)["records"]
    assert plain["2"].reward_info["not_evaluated"] == ["NL_ASSERTION"] and plain["2"].reward_info["judge"] is None
    assert "NL_ASSERTION not evaluated" in plain["2"].reward_info["note"]
    (tmp_path / "plain" / JUDGE_CACHE_FILE).write_bytes((tmp_path / "store" / JUDGE_CACHE_FILE).read_bytes())
    n = server.requests
    judged = _run(tau2_data, tmp_path / "plain", ["2", "16"], url)["records"]
    assert server.requests == n, "verdicts from the cache: zero requests"
    assert judged["2"].success and not judged["16"].success and judged["2"].reward_info["judge"] == ident


def test_cli_run_with_judge_reports_the_judged_basis(
    tau2_data: Path, tmp_path: Path, judge_server: tuple[JudgeServer, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    server, url = judge_server
    cfg = tmp_path / "arms.toml"
    cfg.write_text('[arms.bf16]\nbackend = "mock"\nmodel = "m"\nresponses = ["Done. ###STOP###"]\n')
    rep = tmp_path / "report.json"
    argv = ["run", "--domain", "retail", "--tau2-data", str(tau2_data), "--arms", "bf16",
            "--config", str(cfg), "--tasks", "2,16", "--out", str(tmp_path / "store"),
            "--judge-model", f"openai:fake-judge@{url}", "--json", str(rep)]
    assert main(argv) == 0
    report = json.loads(rep.read_text())
    run = report["run"]
    assert run["judge"]["identity"] == "judge:openai:fake-judge:t=0:max=512:p1"
    assert run["nl_assertions"]["bf16"] == {"episodes": 2, "judged": 2, "not_evaluated": 0,
                                            "judge_errors": 0, "judges": [run["judge"]["identity"]]}
    assert run["judge_requests"] == server.requests == 2
    # Re-run: episodes and verdicts from the store, no judge request.
    assert main(argv) == 0
    assert json.loads(rep.read_text())["run"]["judge_requests"] == 0 and server.requests == 2
    capsys.readouterr()
    # Without a judge the report says NL assertions were not evaluated.
    plain = ["run", "--domain", "retail", "--tau2-data", str(tau2_data), "--arms", "bf16",
             "--config", str(cfg), "--tasks", "2,16", "--out", str(tmp_path / "plain"),
             "--json", str(rep)]
    assert main(plain) == 0
    run = json.loads(rep.read_text())["run"]
    assert run["judge"] is None and run["nl_assertions"]["bf16"]["not_evaluated"] == 2
    assert "not τ²-bench's" in run["nl_assertions"]["bf16"]["note"]


# ---------------------------------------------------------------- the pytest plugin

TOY_DOMAINS = Path(__file__).resolve().parent.parent / "env" / "toy_domains"
TOY_ARMS = """
[arms.bf16]
backend = "mock"
model = "scripted"
responses = [
  {tool_calls = [{name = "transfer_to_human_agents", arguments = {summary = "wants a human"}}]},
  {content = "I have transferred you. ###STOP###"},
]

[arms.int4]
backend = "mock"
model = "scripted"
responses = [
  {tool_calls = [{name = "transfer_to_human_agents", arguments = {summary = "wants a human"}}]},
  {content = "Transferred. ###STOP###"},
]
"""


def test_pytest_plugin_judges_nl_assertions(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, judge_server: tuple[JudgeServer, str]
) -> None:
    server, url = judge_server
    monkeypatch.setenv("QUANTAGENT_DOMAINS_DIR", str(TOY_DOMAINS))
    pytester.makefile(".toml", arms=TOY_ARMS)
    pytester.makepyfile(test_cell="def test_cell(episodes):\n    assert len(episodes) == 1\n")
    args = ["--quant-config=arms.toml", "--quant=int4", "--domain=toy", "--quant-tasks=ids:transfer",
            f"--quant-judge-model=openai:fake-judge@{url}", "--quant-report=report.json",
            "-p", "no:randomly"]
    pytester.runpytest(*args).assert_outcomes(passed=1)
    run = json.loads((pytester.path / "report.json").read_text())["run"]
    ident = "judge:openai:fake-judge:t=0:max=512:p1"
    assert run["judge"] == ident and run["judge_model"] == f"openai:fake-judge@{url}"
    for label in ("toy/bf16", "toy/int4"):
        assert run["nl_assertions"][label] == {"episodes": 1, "judged": 1, "not_evaluated": 0,
                                              "judge_errors": 0, "judges": [ident]}
    rows = [json.loads(line) for line in (pytester.path / ".quantagent" / "episodes.jsonl").read_text().splitlines()]
    assert {r["reward_info"]["judge"] for r in rows} == {ident}
    assert all(r["reward_info"]["reward_breakdown"]["NL_ASSERTION"] == 1.0 for r in rows)
    # Two arms with different transcripts: two judge requests (re-runs: see the CLI test).
    assert server.requests == 2
    # Without the judge the report says the NL assertions were not evaluated.
    (pytester.path / "report.json").unlink()
    pytester.runpytest(*[a for a in args if not a.startswith("--quant-judge-model")],
                       "--quant-cache-dir=plain").assert_outcomes(passed=1)
    run = json.loads((pytester.path / "report.json").read_text())["run"]
    assert run["judge_model"] is None, run
    assert run["judge"] is None and run["nl_assertions"]["toy/int4"]["not_evaluated"] == 1


def test_a_judge_that_refuses_the_key_stops_the_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 36 item 2: the judge's /models answers, every chat answers 401. The run stops
    # naming the judge (not an arm) instead of scoring every assertion "not met" with rc 0.
    from pytest_quantagent.testing.fault_server import FaultServer

    bad = FaultServer(fault_rate=1.0, fault_mix=("echo_key",))
    url = bad.start_in_thread()
    monkeypatch.setenv("QUANTAGENT_DOMAINS_DIR", str(TOY_DOMAINS))
    pytester.makefile(".toml", arms=TOY_ARMS)
    pytester.makepyfile(test_cell="def test_cell(episodes):\n    assert len(episodes) == 1\n")
    try:
        result = pytester.runpytest("--quant-config=arms.toml", "--quant=int4", "--domain=toy",
                                    "--quant-tasks=ids:transfer", "--quant-concurrency=1",
                                    f"--quant-judge-model=openai:m@{url}", "-p", "no:randomly")
    finally:
        bad.stop()
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert "judge: " in text and "HTTP 401" in text, text
    assert "arm 'bf16'" not in text and "arm 'int4'" not in text and "1 passed" not in text

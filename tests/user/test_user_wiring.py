"""The LLM user wired end to end: ``quantagent run --user llm``, ``run_cell(user=...)`` and
official τ²-bench tasks, with the user served by a loopback OpenAI-compatible fake server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.analysis.gate import EXIT_INCONCLUSIVE
from pytest_quantagent.backends.mock import FakeOpenAIServer
from pytest_quantagent.backends.wrapper import RetryPolicy
from pytest_quantagent.cli import main
from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.errors import EXIT_USAGE
from pytest_quantagent.quant.arms import ArmSpec, UserModelConfig
from pytest_quantagent.report.model import CellInput, analyze
from pytest_quantagent.runner.batch import RunSettings, plan_episodes, run_cell
from pytest_quantagent.runner.build import USER_TURNS_FILE, build_arm, build_user
from pytest_quantagent.runner.episode import run_episode
from pytest_quantagent.runner.llm_user import LLMUserSpec
from pytest_quantagent.runner.oracle import oracle_agent
from pytest_quantagent.store.jsonl import EpisodeStore
from pytest_quantagent.vocab.channels import Channel, TerminationReason
from pytest_quantagent.vocab.messages import ToolCall, UserMessage

Rule = Callable[[dict[str, Any]], "Mapping[str, Any] | str"]


class RuleServer(FakeOpenAIServer):
    """The fake server answering with ``rule(request JSON)``: a user model that reads the
    conversation (the base class picks responses by turn number only)."""

    def __init__(self, rule: Rule, **kw: Any) -> None:
        super().__init__(["unused"], **kw)
        self.rule = rule
        self.bodies: list[dict[str, Any]] = []

    def _answer(self, body: bytes) -> bytes:
        req = json.loads(body)
        self.bodies.append(req)
        self.responses = [self.rule(req)]
        return super()._answer(body)


def customer(device: Mapping[str, Mapping[str, Any]] | None = None, *, done: str = "anything else",
             max_turns: int = 6) -> Rule:
    """A plain customer: opens with a request, agrees, reports device results, stops when the
    agent asks whether there is anything else; ``device`` maps a phrase of the agent's last
    message to the tool call the user makes."""

    def rule(req: dict[str, Any]) -> Mapping[str, Any] | str:
        msgs = req["messages"]
        last = msgs[-1]
        if last["role"] == "tool":
            return "I did that on my phone."
        text = (last.get("content") or "").lower()
        if done in text:
            return "No, that's all, thank you. ###STOP###"
        for phrase, call in (device or {}).items():
            if phrase in text:
                return {"tool_calls": [dict(call)]}
        own = sum(1 for m in msgs if m["role"] == "assistant")
        if own >= max_turns:
            return "###STOP###"
        return "Hi, I need help with my account." if own == 0 else "Yes, please go ahead."

    return rule


@pytest.fixture
def serve() -> Iterator[Callable[..., tuple[RuleServer, str]]]:
    servers: list[RuleServer] = []

    def start(rule: Rule, **kw: Any) -> tuple[RuleServer, str]:
        s = RuleServer(rule, **kw)
        url = s.start_in_thread()
        servers.append(s)
        return s, url

    yield start
    for s in servers:
        s.stop()


def _user_config(url: str, **kw: Any) -> UserModelConfig:
    return UserModelConfig(arm=ArmSpec(label="user", backend="openai", model="fake-user",
                                       base_url=url), **kw)


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


ARMS = """
[arms.bf16]
backend = "mock"
model = "scripted"
responses = ["Could you tell me more?", "Thanks. Is there anything else I can help you with?"]

[arms.int4]
backend = "mock"
model = "scripted"
responses = ["Could you tell me more?", "Sorry, could you repeat that?"]
"""


def test_quantagent_run_llm_user_shared_across_arms(tmp_path: Path, serve: Any) -> None:
    server, url = serve(customer(max_turns=3))
    cfg = tmp_path / "arms.toml"
    cfg.write_text(ARMS)
    out = tmp_path / "store"
    argv = ["run", "--domain", "retail", "--arms", "bf16,int4", "--config", str(cfg),
            "--num-tasks", "2", "--user", "llm", "--user-model", f"openai:fake-user@{url}",
            "--out", str(out), "--json", str(tmp_path / "r.json"), "-q"]
    assert main(argv) == EXIT_INCONCLUSIVE
    report = json.loads((tmp_path / "r.json").read_text())
    identity = "llm:openai:fake-user:t=0:max=512:seed=episode:p1"
    assert report["run"]["user_sim"] == identity
    assert report["run"]["user"]["model"] == "fake-user"
    (cell,) = report["cells"]
    assert cell["user_sim"] == identity and cell["user_failures"] is None
    assert cell["terminations"]["arm"] == {"user_stop": 2}
    assert cell["terminations"]["reference"] == {"user_stop": 2}

    recs = _records(out)
    assert {r["user_sim"] for r in recs} == {identity}
    # The prompt carries the task's scenario and the stop tokens.
    dom = get_domain("retail")
    system = server.bodies[0]["messages"][0]
    assert system["role"] == "system"
    assert any(t.user_scenario.instructions.reason_for_call in system["content"]  # type: ignore[union-attr]
               for t in dom.tasks[:2])
    assert "###STOP###" in system["content"] and "###TRANSFER###" in system["content"]
    assert server.bodies[0]["temperature"] == 0.0
    # Same transcript prefix in both arms -> the same user bytes, sampled once.
    by = {(r["arm"], r["task_id"]): [m for m in r["messages"] if m["role"] == "user"] for r in recs}
    for tid in {r["task_id"] for r in recs}:
        ref, arm = by[("bf16", tid)], by[("int4", tid)]
        assert [m["content"] for m in ref[:2]] == [m["content"] for m in arm[:2]]
        assert ref[2]["content"] != arm[2]["content"]  # the agents diverged before turn 3
    lines = (out / USER_TURNS_FILE).read_text().splitlines()
    total_user_turns = sum(len(v) for v in by.values())
    assert server.requests == len(lines) == total_user_turns - 2 * 2  # 2 shared turns per task
    assert len({json.loads(line)["key"] for line in lines}) == len(lines)

    # Resume: nothing is asked again; another user temperature is another run identity.
    n = server.requests
    assert main(argv) == EXIT_INCONCLUSIVE
    assert server.requests == n
    assert main([*argv, "--user-temperature", "0.7"]) == EXIT_INCONCLUSIVE
    assert server.requests > n
    again = _records(out)
    assert {r["user_sim"] for r in again} == {identity, identity.replace("t=0", "t=0.7")}


def test_run_refuses_user_model_without_llm_user(tmp_path: Path, capsys: Any) -> None:
    rc = main(["run", "--domain", "retail", "--arms", "bf16", "--user-model", "openai:m@http://x/v1",
               "--out", str(tmp_path), "-q"])
    assert rc == EXIT_USAGE
    assert "--user llm" in capsys.readouterr().err


def test_run_llm_user_needs_a_model(tmp_path: Path, capsys: Any) -> None:
    cfg = tmp_path / "arms.toml"
    cfg.write_text(ARMS)
    rc = main(["run", "--domain", "retail", "--arms", "bf16", "--config", str(cfg), "--user", "llm",
               "--out", str(tmp_path), "-q"])
    assert rc == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--user-model" in err and "no [user] table" in err


def test_user_table_of_the_arms_config(tmp_path: Path, serve: Any) -> None:
    server, url = serve(customer(max_turns=2))
    cfg = tmp_path / "arms.toml"
    cfg.write_text(ARMS + f'\n[user]\nbackend = "openai"\nmodel = "table-user"\nbase_url = "{url}"\n'
                   "temperature = 0.25\nmax_tokens = 64\n")
    out = tmp_path / "store"
    assert main(["run", "--domain", "retail", "--arms", "bf16", "--config", str(cfg), "--num-tasks", "1",
                 "--user", "llm", "--out", str(out), "--json", str(tmp_path / "r.json"), "-q"]) == 0
    (rec,) = _records(out)
    assert rec["user_sim"] == "llm:openai:table-user:t=0.25:max=64:seed=episode:p1"
    assert server.bodies[0]["temperature"] == 0.25 and server.bodies[0]["max_tokens"] == 64
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["cells"][0]["reference"] is None
    assert report["cells"][0]["user_sim"] == rec["user_sim"]


def _run(domain: Any, task_ids: list[str], agent_responses: list[Any], user: Any,
         tmp_path: Path, **settings: Any) -> tuple[list[Any], list[Any]]:
    """One mock agent arm + the given user runtime through run_cell; also returns the
    outcomes (with their environments)."""
    from pytest_quantagent.runner.episode import run_episode as real

    outcomes: list[Any] = []

    async def keep(**kw: Any) -> Any:
        o = await real(**kw)
        outcomes.append(o)
        return o

    async def go() -> list[Any]:
        rt = build_arm(ArmSpec(label="bf16", backend="mock", model="scripted",
                               options={"responses": agent_responses}))
        runtime = user()
        try:
            res = await run_cell(domain=domain, runtimes=[rt], plan=plan_episodes(task_ids, 1, 0),
                                 settings=RunSettings(user_sim="llm", **settings),
                                 store=EpisodeStore(tmp_path / "store"), user=runtime,
                                 episode_fn=keep)
            return res["bf16"]
        finally:
            await rt.aclose()
            await runtime.aclose()

    return asyncio.run(go()), outcomes


def test_telecom_user_tool_calls_change_the_device(tmp_path: Path, serve: Any) -> None:
    dom = get_domain("telecom")
    task = dom.task("service_7_18")  # gold: the user switches airplane mode off
    _, url = serve(customer({"airplane": {"name": "toggle_airplane_mode", "arguments": {}}}))
    before = dom.make_environment(task).execute(
        ToolCall(id="s", name="check_status_bar", requestor="user")).message.content
    (rec,), (out,) = _run(dom, [task.id], ["Please switch airplane mode off on your phone.",
                                           "Is there anything else I can help you with?"],
                          lambda: build_user(_user_config(url)), tmp_path)
    user_calls = [c for c in rec.calls if c.requestor == "user"]
    assert [(c.name, c.error) for c in user_calls] == [("toggle_airplane_mode", False)]
    after = out.env.execute(ToolCall(id="s", name="check_status_bar", requestor="user")).message.content
    assert "Airplane Mode" in before and "Airplane Mode" not in after
    assert rec.termination == TerminationReason.USER_STOP and rec.success
    assert rec.user_sim.startswith("llm:openai:fake-user")
    # The fake server reports tokens, the mock agent none: the user's are not the agent's.
    assert rec.tokens is None


def test_telecom_user_that_does_not_act_leaves_the_device(tmp_path: Path, serve: Any) -> None:
    dom = get_domain("telecom")
    _, url = serve(customer())  # never calls a device tool
    (rec,), _ = _run(dom, ["service_7_18"], ["Please switch airplane mode off on your phone.",
                                             "Is there anything else I can help you with?"],
                     lambda: build_user(_user_config(url)), tmp_path)
    assert rec.termination == TerminationReason.USER_STOP and not rec.success


def test_user_failures_are_the_users(tmp_path: Path, serve: Any) -> None:
    dom = get_domain("telecom")
    rule = customer({
        "status bar": {"name": "check_status_bar", "arguments": "{oops"},  # malformed
        "pay": {"name": "make_payment", "arguments": {}},  # no bill: device-side failure
        "top up": {"name": "refuel_data", "arguments": {"customer_id": "C1", "line_id": "L1",
                                                        "gb_amount": 1}},  # an agent tool
    })
    _, url = serve(rule)
    agent = ["Please look at your status bar.", "Please pay your bill now.",
             "Please top up your data yourself.", "Is there anything else I can help you with?"]
    (rec,), _ = _run(dom, ["service_7_18"], agent, lambda: build_user(_user_config(url)), tmp_path)
    failed = [(c.requestor, c.channel) for c in rec.calls if c.error]
    assert failed == [("user", Channel.MALFORMED_CALL), ("user", Channel.USER_TOOL_ERROR),
                      ("user", Channel.CROSS_ROLE_TOOL)]
    assert rec.n_errors == 3  # τ²-bench's counter counts user-side errors too
    assert rec.termination == TerminationReason.USER_STOP
    cell = analyze([CellInput(domain="telecom", arm="bf16", records=[rec])]).model_dump(mode="json")["cells"][0]
    assert cell["user_failures"] == {"arm": {"cross_role_tool": 1, "malformed_call": 1,
                                             "user_tool_error": 1}, "reference": None}
    ch = cell["channels"]
    assert (ch["malformed_call"]["arm_count"], ch["cross_role_tool"]["arm_count"]) == (0, 0)
    # the user's own device-side failure is the simulator's too (issue 23: rates per agent call)
    assert ch["user_tool_error"]["arm_count"] == 0
    assert cell["user_side"]["arm"]["failures"] == 3
    assert cell["user_sim"] == rec.user_sim


def test_user_server_errors_are_retried_then_infrastructure(tmp_path: Path, serve: Any) -> None:
    dom = get_domain("retail")
    fast = RetryPolicy(max_retries=1, base_delay_s=0.0, max_delay_s=0.0)
    agent = ["Is there anything else I can help you with?"]
    _, url = serve(customer(), faults={1: "500"})
    (rec,), _ = _run(dom, [dom.tasks[0].id], agent,
                     lambda: build_user(_user_config(url), retry=fast), tmp_path / "a")
    assert rec.termination == TerminationReason.USER_STOP and rec.infra_retries == 1
    # A user server that always fails: the episode is retried, then recorded as an
    # infrastructure failure (not scored, not stored), and the run does not crash.
    _, url = serve(customer(), faults={n: "500" for n in range(1, 50)})
    (rec,), _ = _run(dom, [dom.tasks[0].id], agent,
                     lambda: build_user(_user_config(url), retry=fast), tmp_path / "b",
                     episode_retries=1)
    assert rec.termination == TerminationReason.INFRASTRUCTURE_ERROR and not rec.scored
    assert "giving up" in (rec.error_message or "")
    assert (tmp_path / "b" / "store" / "failures.jsonl").exists()
    assert not (tmp_path / "b" / "store" / "episodes.jsonl").exists() or \
        not (tmp_path / "b" / "store" / "episodes.jsonl").read_text().strip()


def test_llm_setting_without_a_user_runtime_is_refused() -> None:
    dom = get_domain("retail")

    async def go() -> None:
        rt = build_arm(ArmSpec(label="bf16", backend="mock", model="m"))
        try:
            await run_cell(domain=dom, runtimes=[rt], plan=plan_episodes([dom.tasks[0].id], 1, 0),
                           settings=RunSettings(user_sim="llm"))
        finally:
            await rt.aclose()

    with pytest.raises(ValueError, match="user_sim 'llm' needs the LLM user runtime"):
        asyncio.run(go())


def _oracle_with_llm_user(domain: Any, task: Any, url: str, tmp_path: Path) -> Any:
    async def go() -> Any:
        user = build_user(_user_config(url), cache_path=tmp_path / USER_TURNS_FILE)
        try:
            return await run_episode(domain=domain, task=task, agent=oracle_agent(domain, task),
                                     user=user.make_user(domain, task, trial=0, seed=11))
        finally:
            await user.aclose()

    return asyncio.run(go())


def test_official_retail_task_with_llm_user(tau2_data: Path, tmp_path: Path, serve: Any) -> None:
    dom = get_domain("retail", tau2_data=tau2_data)
    task = dom.tasks[0]
    server, url = serve(customer())
    out = _oracle_with_llm_user(dom, task, url, tmp_path)
    assert out.termination == TerminationReason.USER_STOP
    assert out.reward == 1.0, out.reward_info
    assert server.requests == sum(isinstance(m, UserMessage) for m in out.messages) >= 2
    system = server.bodies[0]["messages"][0]["content"]
    assert task.user_scenario.instructions.reason_for_call in system  # type: ignore[union-attr]
    assert "tools" not in server.bodies[0] or not server.bodies[0]["tools"]  # no device in retail


def test_official_telecom_task_with_llm_user(tau2_data: Path, tmp_path: Path, serve: Any) -> None:
    dom = get_domain("telecom", tau2_data=tau2_data, tasks_file="tasks_base_2025-06-10.json")
    task = dom.task("[mobile_data_issue]airplane_mode_on|data_mode_off[PERSONA:None]")
    device = {"airplane": {"name": "toggle_airplane_mode", "arguments": {}},
              "mobile data": {"name": "toggle_data", "arguments": {}}}
    server, url = serve(customer(device))
    out = _oracle_with_llm_user(dom, task, url, tmp_path)
    assert [c.name for c in out.calls if c.requestor == "user"] == ["toggle_airplane_mode", "toggle_data"]
    assert out.termination == TerminationReason.USER_STOP
    assert out.reward == 1.0, out.reward_info
    offered = {t["function"]["name"] for t in server.bodies[0]["tools"]}
    assert offered == set(dom.user_tool_names)
    assert "Your device" in server.bodies[0]["messages"][0]["content"]
    # Without the user's device calls the same task fails: the calls are what changed the phone.
    _, url2 = serve(customer())
    assert _oracle_with_llm_user(dom, task, url2, tmp_path / "idle").reward == 0.0


@pytest.mark.slow
def test_bundled_transformers_model_as_the_user() -> None:
    """A real (tiny, CPU) model behind the user through the transformers backend: the
    wiring holds (the tiny agent model is no customer, so only mechanics are checked)."""
    from pytest_quantagent.quant.arms import parse_user_model, resolve_arm

    dom = get_domain("retail")

    async def go() -> Any:
        user = build_user(parse_user_model("tiny-agent"))
        rt = build_arm(resolve_arm("bf16"))
        try:
            res = await run_cell(domain=dom, runtimes=[rt], plan=plan_episodes([dom.tasks[0].id], 1, 0),
                                 settings=RunSettings(user_sim="llm", max_steps=12), user=user)
        finally:
            await rt.aclose()
            await user.aclose()
        return res["bf16"][0]

    rec = asyncio.run(go())
    # The record names exactly this user (bf16 weights carry no quantization tag; other
    # precisions of the same model get another identity, see test_user_config).
    assert rec.user_sim == LLMUserSpec.from_config(parse_user_model("tiny-agent")).identity
    assert rec.user_sim.startswith("llm:transformers:tiny-agent(")
    assert rec.scored and rec.steps > 1
    users = [m for m in rec.messages if isinstance(m, UserMessage)]
    assert users and all(m.content or m.tool_calls for m in users)

"""The telecom scripted user: device actions asked for in ordinary words; the oracle on our
tasks and on τ²-bench's; the seeded task generator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from telecom_helpers import telecom_module

from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.runner.oracle import run_oracle
from pytest_quantagent.vocab.messages import AssistantMessage, ToolMessage

generate = telecom_module("generate")
_DIR = Path(str(generate.__file__)).resolve().parent


@pytest.fixture(scope="module")
def domain() -> Any:
    return get_domain("telecom")


@pytest.fixture
def user(domain: Any) -> Any:
    return domain.make_user(domain.tasks[0], seed=0)


def _asked(user: Any, text: Any) -> Any:
    return [(c.name, c.arguments) for c in user.device_calls(text)]


def test_every_oracle_phrase_means_its_tool_only(domain: Any, user: Any) -> None:
    user.phone = None  # no "already on" answers: only the wording is under test
    samples = {"mode": "4g_only", "app_name": "browser", "permission": "network"}
    assert {i.tool for i in domain.device_intents} == set(domain.user_tool_names) - {
        "set_apn_settings"
    }
    for intent in domain.device_intents:
        args = {k: v for k, v in samples.items() if "{" + k + "}" in intent.phrase}
        names = [name for name, _ in _asked(user, intent.ask(args))]
        if intent.tool == "make_payment":  # paying also shows the request: a harmless read
            assert names == ["make_payment", "check_payment_request"]
        else:
            assert names == [intent.tool], intent.phrase


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Could you please turn off airplane mode?", [("toggle_airplane_mode", {})]),
        ("Let's try removing the SIM card and putting it back in.", [("reseat_sim_card", {})]),
        (
            "Can you restart your device and then check the status bar?",
            [("reboot_device", {}), ("check_status_bar", {})],
        ),
        ("Please go to settings and enable mobile data.", [("toggle_data", {})]),
        ("Please disable Data Saver.", [("toggle_data_saver_mode", {})]),
        (
            "Try switching your network mode to 4G/5G preferred.",
            [("set_network_mode_preference", {"mode": "4g_5g_preferred"})],
        ),
        (
            "Could you grant the messaging app the SMS permission?",
            [("grant_app_permission", {"app_name": "messaging", "permission": "sms"})],
        ),
        ("Please check whether you can send an MMS now.", [("can_send_mms", {})]),
        ("Please run toggle_data_saver_mode", [("toggle_data_saver_mode", {})]),
        (
            "I've enabled roaming on your line. Now please turn on data roaming on your phone.",
            [("toggle_roaming", {})],
        ),
        ("Please check whether your VPN is connected.", [("check_vpn_status", {})]),
        ("What is your network mode set to?", [("check_network_mode_preference", {})]),
    ],
)
def test_paraphrases(user: Any, text: Any, expected: Any) -> None:
    user.phone = None
    assert _asked(user, text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Is airplane mode on?",
        "I have resumed your line.",
        "Your line is suspended because of an overdue bill.",
        "Thanks for waiting while I look up your account.",
        "Would you like to pay the overdue bill now?",
    ],
)
def test_statements_and_state_questions_trigger_nothing(user: Any, text: Any) -> None:
    assert _asked(user, text) == []


def test_user_performs_and_reports(domain: Any) -> None:
    task = next(t for t in domain.tasks if "airplane_mode" in (t.description.purpose or ""))
    user = domain.make_user(task, seed=0)
    env = domain.make_environment(task)
    msg = user.respond([AssistantMessage(content="Please switch airplane mode off.")])
    (call,) = msg.tool_calls
    assert call.name == "toggle_airplane_mode" and call.requestor == "user"
    result = env.get_response(call)
    reply = user.respond([ToolMessage(id=call.id, content=result.content, requestor="user")])
    assert "Airplane Mode is now OFF." in reply.content


def test_agent_words_win_and_the_script_fills_the_rest(domain: Any) -> None:
    task = next(t for t in domain.tasks if "mms_permission" in (t.description.purpose or ""))
    acts = task.user_scenario.script.device_actions
    wanted = next(a for a in acts if a.tool == "grant_app_permission").arguments
    user = domain.make_user(task, seed=0)
    user.phone = None
    assert _asked(user, "Please grant the needed permission to the app.") == [
        ("grant_app_permission", wanted)
    ]
    other = "sms" if wanted["permission"] == "storage" else "storage"
    assert _asked(user, f"Please grant the messaging app the {other} permission.") == [
        ("grant_app_permission", {"app_name": "messaging", "permission": other})
    ]
    assert _asked(user, "Please set your network mode to 3G only.") == [
        ("set_network_mode_preference", {"mode": "3g_only"})
    ]
    assert _asked(user, "Please run set_network_mode_preference.") == [
        ("check_network_mode_preference", {})
    ]


def test_oracle_solves_every_bundled_task(domain: Any) -> None:
    results = run_oracle(domain)
    assert len(results) >= 100
    assert [(r.task_id, r.reason) for r in results if not r.success] == []


def test_oracle_on_tau2_base_tasks(tau2_data: Any) -> None:
    dom = get_domain("telecom", tau2_data=tau2_data, tasks_file="tasks_base_2025-06-10.json")
    assert dom.official and len(dom.tasks) == 114
    results = run_oracle(dom)
    failed = [(r.task_id, r.reason) for r in results if not r.success]
    assert len(failed) <= 0.03 * len(results), failed


def test_tau2_default_task_file_and_policy(tau2_data: Any) -> None:
    dom = get_domain("telecom", tau2_data=tau2_data, tasks_file="tasks_small.json")
    assert dom.policy.startswith("<main_policy>") and "<tech_support_policy>" in dom.policy
    assert len(dom.user_tool_names) == 30 and len(dom.agent_tool_names) == 13


def test_a_do_nothing_agent_fails_every_bundled_task(domain: Any) -> None:
    from pytest_quantagent.env.evaluate import evaluate
    from pytest_quantagent.vocab.channels import TerminationReason

    passed = [
        t.id
        for t in domain.tasks
        if evaluate(domain, t, [], TerminationReason.USER_STOP).reward > 0
    ]
    assert passed == []


def test_bundled_files_are_the_generator_output(tmp_path: Any) -> None:
    generate.write_all(tmp_path)
    for name in ("db.json", "user_db.json", "tasks.json", "split_tasks.json"):
        assert json.loads((tmp_path / name).read_text()) == json.loads((_DIR / name).read_text()), (
            name
        )


def test_bundled_tasks_cover_every_kind_and_split(domain: Any) -> None:
    kinds = {t.id.rsplit("_", 2)[0] for t in domain.tasks}
    assert kinds == set(generate.KINDS)
    assert len(domain.splits["train"]) >= 100 and len(domain.splits["test"]) >= 50
    assert not set(domain.splits["train"]) & set(domain.splits["test"])
    purposes = " ".join(t.description.purpose or "" for t in domain.tasks)
    for fault in (
        "airplane_mode",
        "sim_missing",
        "apn_broken",
        "overdue_bill",
        "locked_sim",
        "contract_ended",
        "data_off",
        "roaming",
        "data_used_up",
        "data_saver",
        "mode_3g",
        "slow_vpn",
        "mode_2g",
        "no_mmsc",
        "mms_permission",
        "wifi_calling_mms",
    ):
        assert fault in purposes, fault


def test_generate_tasks_is_deterministic_and_filters_kinds(domain: Any) -> None:
    a = generate.generate_tasks(domain.db, 11, 30)
    b = generate.generate_tasks(domain.db, 11, 30)
    assert [t.model_dump() for t in a] == [t.model_dump() for t in b]
    assert a[0].model_dump() != generate.generate_tasks(domain.db, 12, 1)[0].model_dump()
    only = domain.generate_tasks(5, 20, kinds=["mms"])
    assert all(t.id.startswith("mms_5_") for t in only)
    with pytest.raises(ValueError, match=r"unknown task kind\(s\) 'wifi'; allowed: data, human"):
        generate.generate_tasks(domain.db, 1, 1, kinds=["wifi"])


def test_generated_tasks_from_other_seeds_are_solvable(domain: Any) -> None:
    tasks = domain.generate_tasks(2026, 60)
    assert [(r.task_id, r.reason) for r in run_oracle(domain, tasks) if not r.success] == []


@pytest.mark.parametrize(
    ("sentence", "want"),
    [
        ("Please turn on your mobile data.", True),
        ("Please switch airplane mode on your phone off.", False),
        ("Disable data saver.", False),
        ("Toggle Wi-Fi calling.", None),
        ("Turn it off and on again.", None),
        ("Enable data roaming on the phone.", True),
    ],
)
def test_wanted_switch_state(sentence: Any, want: Any) -> None:
    assert telecom_module("user_sim").wanted_state(sentence) is want


def test_a_switch_already_as_asked_is_not_flipped(domain: Any) -> None:
    task = next(t for t in domain.tasks if "data_off" in (t.description.purpose or ""))
    user = domain.make_user(task, seed=0)
    reply = user.respond([AssistantMessage(content="Please make sure airplane mode is off.")])
    assert reply.content == "Airplane mode is already OFF on my phone." and not reply.tool_calls
    first = user.respond([AssistantMessage(content="Please turn on your mobile data.")])
    assert [c.name for c in first.tool_calls] == ["toggle_data"]
    again = user.respond([AssistantMessage(content="Please turn on your mobile data.")])
    assert again.content == "Mobile data is already ON on my phone."


def test_extra_tasks_never_repeat_a_test_scenario(domain: Any) -> None:
    test_keys = {generate.scenario_key(t) for t in domain.tasks if t.id in domain.splits["test"]}
    extra = domain.generate_tasks(3, 400)
    assert len(extra) == 400
    assert not {generate.scenario_key(t) for t in extra} & test_keys
    assert len({generate.scenario_key(t) for t in domain.tasks}) == len(domain.tasks)


def test_distinct_draws_run_out_loudly(domain: Any) -> None:
    few = generate.generate_tasks(domain.db, 1, 10, kinds=["human"], distinct=True)
    assert len({generate.scenario_key(t) for t in few}) == 10
    with pytest.raises(
        ValueError, match=r"could only draw \d+ of n=100 tasks of kinds \['human'\]"
    ):
        generate.generate_tasks(domain.db, 1, 100, kinds=["human"], distinct=True)


def test_name_and_date_of_birth_in_one_answer(domain: Any) -> None:
    task = domain.tasks[0]
    user = domain.make_user(task, seed=0)
    user.respond([AssistantMessage(content="Hi! How can I help you today?")])
    reply = user.respond(
        [AssistantMessage(content="Could you give me your full name and date of birth?")]
    )
    name = task.user_scenario.script.identity["name"]
    dob = task.user_scenario.instructions.known_info.split("date of birth ")[1].split(",")[0]
    assert reply.content == f"My name is {name}. My date of birth is {dob}."


# Ways an LLM agent might ask for each user-side gold action (none is the oracle's phrase).
_PARAPHRASES: dict[str, tuple[str, ...]] = {
    "toggle_airplane_mode": (
        "Can you turn off Airplane Mode on your phone?",
        "Please disable airplane mode.",
        "Let's switch off flight mode.",
    ),
    "reseat_sim_card": (
        "Please remove your SIM card and reinsert it.",
        "Could you re-seat the SIM card?",
        "Take the SIM out and put it back in, please.",
    ),
    "reset_apn_settings": (
        "Please reset your APN settings.",
        "Could you restore the APN settings to default?",
        "Let's reset the APN configuration on your phone.",
    ),
    "reboot_device": (
        "Please restart your phone.",
        "Could you reboot your device?",
        "Now power cycle your phone, please.",
    ),
    "make_payment": (
        "Please make the payment.",
        "Go ahead and pay the bill from the request.",
        "Could you complete the payment on your phone?",
    ),
    "toggle_data": (
        "Please turn on mobile data.",
        "Could you enable cellular data?",
        "Switch your mobile data on, please.",
    ),
    "toggle_roaming": (
        "Please turn on data roaming on your phone.",
        "Could you enable data roaming in your settings?",
        "Switch data roaming on, please.",
    ),
    "toggle_data_saver_mode": (
        "Please turn off Data Saver.",
        "Could you disable data saver mode?",
        "Switch data saver off, please.",
    ),
    "set_network_mode_preference": (
        "Please set your network mode to 4G/5G preferred.",
        "Could you change the preferred network type to 5G?",
        "Switch your network mode preference to 4g_5g_preferred.",
    ),
    "disconnect_vpn": (
        "Please disconnect your VPN.",
        "Could you turn off the VPN?",
        "Disable the VPN on your phone, please.",
    ),
    "grant_app_permission": (
        "Please grant the messaging app the {permission} permission.",
        "Could you give your messaging app {permission} access?",
        "Allow the messaging app the {permission} permission.",
    ),
    "toggle_wifi_calling": (
        "Please turn off Wi-Fi Calling.",
        "Could you disable WiFi calling?",
        "Switch Wi-Fi calling off, please.",
    ),
}


class _Paraphraser:
    """Stands in for the domain where the oracle asks the user: other words each time."""

    def __init__(self, seed: int) -> None:
        import random

        self.rng = random.Random(seed)

    def describe_user_action(self, action: Any) -> str:
        return str(self.rng.choice(_PARAPHRASES[action.name]).format(**action.arguments))


@pytest.mark.parametrize("official", [False, True])
def test_paraphrased_requests_still_solve_every_task(official: bool, request: Any) -> None:
    import asyncio

    from pytest_quantagent.runner.episode import run_episode
    from pytest_quantagent.runner.oracle import oracle_agent

    kwargs: dict[str, Any] = {}
    if official:
        kwargs = {
            "tau2_data": request.getfixturevalue("tau2_data"),
            "tasks_file": "tasks_base_2025-06-10.json",
        }
    dom = get_domain("telecom", **kwargs)

    async def run_all() -> list[str]:
        failed = []
        for i, task in enumerate(dom.tasks):
            agent = oracle_agent(dom, task)
            agent.domain = _Paraphraser(i)  # type: ignore[assignment]
            out = await run_episode(domain=dom, task=task, agent=agent, user=dom.make_user(task, i))
            if not out.success:
                failed.append(task.id)
        return failed

    assert asyncio.run(run_all()) == []


def test_every_gold_action_of_every_bundled_task_is_needed(domain: Any) -> None:
    from pytest_quantagent.env.evaluate import evaluate
    from pytest_quantagent.vocab.channels import TerminationReason
    from pytest_quantagent.vocab.messages import ToolCall, UserMessage

    unneeded = []
    for task in domain.tasks:
        gold = task.gold_actions
        for skip in range(len(gold)):
            msgs: list[Any] = []
            for j, a in enumerate(gold):
                if j != skip:
                    call = ToolCall(
                        id=f"c{j}", name=a.name, arguments=a.arguments, requestor=a.requestor
                    )
                    cls = AssistantMessage if a.requestor == "assistant" else UserMessage
                    msgs.append(cls(tool_calls=[call]))
            if evaluate(domain, task, msgs, TerminationReason.USER_STOP).reward > 0:
                unneeded.append((task.id, gold[skip].name))
    assert unneeded == []


def test_already_as_asked_is_reported_with_the_other_results(domain: Any) -> None:
    task = next(t for t in domain.tasks if "data_off" in (t.description.purpose or ""))
    user = domain.make_user(task, seed=0)
    env = domain.make_environment(task)
    msg = user.respond(
        [AssistantMessage(content="Please turn airplane mode off. Then turn mobile data on.")]
    )
    (call,) = msg.tool_calls
    assert call.name == "toggle_data"
    result = env.get_response(call)
    reply = user.respond([ToolMessage(id=call.id, content=result.content, requestor="user")])
    assert reply.content.startswith("Airplane mode is already OFF on my phone. Done.")
    assert "Mobile Data is now ON." in reply.content


def test_tau2_base_tasks_get_the_splits_of_split_tasks_json(tau2_data: Any) -> None:
    dom = get_domain("telecom", tau2_data=tau2_data, tasks_file="tasks_base_2025-06-10.json")
    # split_tasks.json also lists the 2285-task "full" set, absent from this file: dropped.
    assert sorted(dom.splits) == ["base", "test", "train"]
    assert len(dom.splits["base"]) == 114
    assert len(dom.splits["train"]) + len(dom.splits["test"]) == 114


def test_each_switch_takes_the_direction_of_its_own_clause(domain: Any) -> None:
    task = next(t for t in domain.tasks if "data_saver" in (t.description.purpose or ""))
    user = domain.make_user(task, seed=0)
    user.phone.db.device.data_enabled = True  # as the task leaves it; saver is on
    asked = _asked(user, "Please turn on mobile data and turn off data saver.")
    assert asked == [("toggle_data_saver_mode", {})]
    assert user._already == ["Mobile data is already ON on my phone."]

"""τ²-bench's free-text scenarios read into facts the scripted user can state (issue 35,
item 5): on inline examples, and over every official telecom and retail task."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_quantagent.env.registry import get_domain, get_domain_for_split
from pytest_quantagent.env.scenario_text import opening_request, read_scenario
from pytest_quantagent.env.user import script_for_task
from pytest_quantagent.vocab.messages import AssistantMessage


@pytest.mark.parametrize(("known", "identity"), [
    ("You are an interesting guy called Noah Patel, living in the Big Apple in 10108.",
     {"first_name": "Noah", "last_name": "Patel", "zip": "10108"}),
    ("You name is Ivan Khan and your zip code is 28243.",
     {"first_name": "Ivan", "last_name": "Khan", "zip": "28243"}),
    ("You are Amelia, and you have two emails: silva7872@example.com and amelia.silva7872@example.com.",
     {"email": "silva7872@example.com"}),
    ("You are mei_kovacs_8020 living in zipcode 28236.",
     {"user_id": "mei_kovacs_8020", "first_name": "Mei", "last_name": "Kovacs", "zip": "28236"}),
    ("You are John Smith with phone number 555-123-2002. You are currently abroad in France.",
     {"first_name": "John", "last_name": "Smith", "phone": "555-123-2002"}),
])
def test_identity_from_known_info(known: str, identity: dict[str, str]) -> None:
    got = read_scenario("r", known).identity
    got.pop("name", None)
    assert got == identity


def test_telecom_free_text_facts() -> None:
    r = read_scenario(
        "You mobile data is not working properly. You do not have access to wifi.",
        "You are John Smith with phone number 555-123-2002. You are currently abroad in France.",
        instructions="You are willing to refuel 2.0 GB of data if necessary, but you do not want to "
                     "change your mobile data plan.",
    )
    assert r.facts["location"] == "I'm currently abroad in France."
    says = {a.say for a in r.answers}
    assert "I don't have access to Wi-Fi." in says
    assert "I'm willing to refuel 2.0 GB of data if necessary." in says
    assert r.no_plan_change
    home = read_scenario("Your phone has been showing 'No Service' for the past few hours.",
                         "You are currently at home in the United States.")
    assert home.facts["location"] == "I'm at home in the United States, not travelling."
    assert {a.say for a in home.answers} == {"It's been happening for the past few hours."}


def test_retail_free_text_facts() -> None:
    r = read_scenario(
        "You want to return the office chair because it came with some broken pieces. "
        "If the agent asks you for confirmation, you say you want to rethink for a while. "
        "You prefer PayPal for any refund.",
        "You are Mei Davis in zipcode 80217.", "You do not remember your email address",
    )
    assert r.no_email and "email" not in r.identity
    assert r.facts["item"].startswith("I want to return the office chair because")
    assert r.facts["reason"] == r.facts["item"]
    assert r.facts["payment_method"] == "I prefer PayPal for any refund."
    # A sentence telling the simulated user how to behave is no fact it states.
    assert not any("rethink" in v for v in r.facts.values())


def test_the_opening_leaves_out_how_to_behave() -> None:
    said = opening_request(
        "You want to exchange the water bottle and the desk lamp. If the agent asks for "
        "confirmation, only exchange the desk lamp. You want the refund to your amex credit card, "
        "and if the agent cannot help, transfer to a human. (Everything except a keyboard, but do "
        "not reveal it to the agent). Make sure to return BOTH orders."
    )
    assert said == ("I want to exchange the water bottle and the desk lamp. "
                    "I want the refund to my amex credit card.")


def test_speed_goal_and_app() -> None:
    r = read_scenario(
        "You are unable to send MMS messages using your messaging app for the past few hours.",
        instructions="You absolutely want to get excellent internet speed on your phone.",
    )
    assert r.facts["speed_goal"] == "excellent"
    assert "I'm using the messaging app on my phone." in {a.say for a in r.answers}
    assert "speed_goal" not in read_scenario("Your phone shows no service.").facts


def _official(name: str, root: Path) -> list[object]:
    dom = get_domain_for_split(name, tau2_data=root, split="base") if name == "telecom" else get_domain(
        name, tau2_data=root)
    return list(dom.tasks)


def test_every_official_task_is_read(tau2_data: Path) -> None:
    """Every official telecom and retail task: the customer can identify itself, and every
    stated location, Wi-Fi, refuel amount and order id is a fact it can state."""
    for name in ("telecom", "retail"):
        for task in _official(name, tau2_data):
            ins = task.structured_instructions  # type: ignore[attr-defined]
            assert ins is not None
            script = script_for_task(task)  # type: ignore[arg-type]
            ident = script.identity
            where = f"{name} task {task.id!r}"  # type: ignore[attr-defined]
            if name == "telecom":
                assert {"first_name", "last_name", "phone"} <= set(ident), where
                if re.search(r"abroad|at home", ins.known_info or ""):
                    assert "location" in script.facts, where
                says = " ".join(a.say for a in script.answers)
                if "access to wifi" in ins.reason_for_call:
                    assert "access to Wi-Fi" in says, where
                if "refuel" in (ins.task_instructions or ""):
                    assert "2.0 GB" in says, where
                if "excellent internet speed" in ins.reason_for_call:
                    assert script.facts["speed_goal"] == "excellent", where
            else:
                assert "email" in ident or "user_id" in ident or {"first_name", "zip"} <= set(ident), where
                for order in re.findall(r"#W\d+", ins.reason_for_call):
                    assert order in script.facts["order_id"], where
            # The customer never says how the simulated user was told to behave.
            assert not re.search(r"\bthe agent\b", script.requests[0], re.I), where


def test_an_official_abroad_customer_says_where_it_is(tau2_data: Path) -> None:
    dom = get_domain_for_split("telecom", tau2_data=tau2_data, split="base")
    task = dom.task("[mobile_data_issue]airplane_mode_on|user_abroad_roaming_enabled_off[PERSONA:None]")
    user = dom.make_user(task, 0)
    user.respond([AssistantMessage(content="Hi! How can I help you today?")])
    reply = user.respond([AssistantMessage(content="Are you travelling at the moment? Where are you?")])
    assert "abroad in France" in (reply.content or "")
    # ... and declines turning roaming off on its line while abroad.
    no = user.respond([AssistantMessage(content="Would you like me to disable roaming on your line?")])
    assert (no.content or "").startswith("No")
    assert json.dumps(user.events()) == json.dumps(
        {"not_understood": 0, "unrequested_change": 0})


def test_conditional_instructions_are_read() -> None:
    r = read_scenario(
        "You want to exchange the water bottle and the desk lamp. If the agent asks for "
        "confirmation, only exchange the desk lamp. If the agent asks for confirmation again, do "
        "not exchange anything. If multiple colors are available, you prefer blue. If the agent "
        "asks for the cancellation reason, you say you ordered by mistake.")
    assert r.on_confirm == ["Actually, I'd like to only exchange the desk lamp.",
                            "No, wait. I don't want to exchange anything."]
    rules = {a.say: a.keywords for a in r.answers}
    assert rules["I'd prefer blue."] == [["color"]]
    assert rules["I ordered by mistake."] == [["cancellation", "reason"], ["reason"]]
    # A chain of fallbacks: each "If not, ..." replaces the wish said just before it.
    chain = read_scenario(
        "You wonder if the agent can help split the payment with another card. If not, you wonder "
        "what the most expensive item and its price, and if you can just cancel that item. If not, "
        "you wonder if the agent can just cancel the order. If there is no keyboard that is clicky, "
        "RGB backlight, full size, you'd rather only exchange the thermostat.")
    assert [f.when for f in chain.fallbacks] == [
        ["split", "payment", "another", "card"], ["most", "expensive", "price", "cancel"],
        ["keyboard", "clicky", "rgb", "backlight", "full", "size"]]
    assert chain.fallbacks[0].say.startswith("Then I'd like to know what the most expensive item")
    assert chain.fallbacks[2].say == "I'd rather only exchange the thermostat."
    # How the simulated user should use its tools is no wish.
    assert not read_scenario("x", instructions="If the agent asks what the status bar shows, always "
                             "ground your response on the results of the `get_status_bar` tool call.").answers


def test_official_conditional_instructions_are_read(tau2_data: Path) -> None:
    """Every official retail task's change of mind at a confirmation and preference among
    several options is read; every "if not / if that is not possible" after a wish is a
    fallback (the rest, e.g. numeric conditions, is listed in docs/USER_SIMULATOR.md)."""
    for task in _official("retail", tau2_data):
        ins = task.structured_instructions  # type: ignore[attr-defined]
        text = f"{ins.reason_for_call} {ins.task_instructions or ''}"
        script = script_for_task(task)  # type: ignore[arg-type]
        where = f"retail task {task.id!r}"  # type: ignore[attr-defined]
        confirms = re.findall(r"\b(?:if|when) the agent asks (?:you )?(?:for|to) (?:final )?confirm", text, re.I)
        assert len(script.on_confirm) == len(confirms), where
        several = re.findall(r"\bIf multiple \w+ (?:are )?available", text)
        assert len([a for a in script.answers if a.say.startswith("I'd prefer")]) >= len(several), where
        if_not = re.findall(r"(?:^|\. )If (?:not|that is not possible)\b", text)
        assert len(script.fallbacks) >= len(if_not), where

"""The scripted user: intents, paraphrase, device actions, stop/transfer, determinism."""

from __future__ import annotations

import pytest

from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.tasks import Task
from pytest_quantagent.env.user import (
    DeviceIntent,
    ScriptedUser,
    UserScript,
    matches,
    script_from_instructions,
)
from pytest_quantagent.vocab.messages import AssistantMessage, Message, ToolMessage

SCRIPT = UserScript(
    requests=["I want to cancel order #W1.", "I also want to change my address."],
    identity={"first_name": "Ada", "last_name": "Lovelace", "zip": "12345"},
    facts={"order_id": "#W1", "reason": "no longer needed"},
    answers=[{"keywords": [["gift", "card", "balance"]], "say": "I don't know my balance."}],
)


def variant(changes: dict[str, object]) -> UserScript:
    return UserScript.model_validate({**SCRIPT.model_dump(), **changes})


def say(user: ScriptedUser, text: str) -> str:
    msg = user.respond([AssistantMessage(content=text)])
    assert msg.content is not None and not msg.tool_calls
    return msg.content


def opened(script: UserScript = SCRIPT, **kw: object) -> ScriptedUser:
    u = ScriptedUser(script, **kw)  # type: ignore[arg-type]
    assert say(u, "Hi! How can I help you today?") == script.requests[0]
    return u


def test_keyword_matching_is_word_prefix_and_case_insensitive() -> None:
    assert matches("Your order was CANCELLED.", [["cancel"]])
    assert not matches("I can't help", [["help", "cancel"]])
    assert not matches("notcancel", [["cancel"]])


@pytest.mark.parametrize("question", [
    "Could you please provide your email address?",
    "To verify your identity, what's the email on your account?",
    "May I have your e-mail?",
])
def test_unknown_email_offers_name_and_zip(question: str) -> None:
    u = opened()
    ans = say(u, question)
    assert "don't remember my email" in ans and "Ada Lovelace" in ans and "12345" in ans


@pytest.mark.parametrize("question", [
    "Please give me your full name and zip code.",
    "Can you tell me your name and the zip code?",
    "I need your name and postal code to look you up.",
])
def test_name_and_zip_paraphrases(question: str) -> None:
    ans = say(opened(), question)
    assert "My name is Ada Lovelace." in ans and "My zip code is 12345." in ans


def test_confirm_refuse_and_facts() -> None:
    u = opened()
    assert say(u, "Which order would you like to cancel? Please give the order id.") == "#W1"
    assert say(u, "What is the reason for the cancellation?") == "no longer needed"
    assert say(u, "I will cancel order #W1 for reason 'no longer needed'. Do you confirm (yes/no)?").startswith("Yes")
    refuser = opened(variant({"confirm": False, "refusal": "No, keep it."}))
    assert say(refuser, "Shall I proceed with cancelling order #W1?") == "No, keep it."
    assert say(u, "Would you also like to know your gift card balance?") == "I don't know my balance."
    assert say(u, "Could you confirm the order id, please?") == "#W1"
    assert say(u, "Please confirm: shall I cancel order #W1 now?").startswith("Yes")


def test_follow_up_requests_then_stop() -> None:
    u = opened()
    assert say(u, "Your order has been cancelled. Is there anything else I can help you with?") == SCRIPT.requests[1]
    last = say(u, "Done. Anything else?")
    assert last.endswith("###STOP###")


def test_transfer_and_expected_transfer_end() -> None:
    u = opened()
    assert say(u, "I'm transferring you to a human agent now.") == "###TRANSFER###"
    t = opened(variant({"requests": ["x"], "end": "transfer"}))
    # A customer who came for a human asks for one once; an agent that still does not transfer
    # is left with ###STOP### (the user cannot transfer itself), and that is no user event.
    asked = say(t, "Is there anything else?")
    assert "human" in asked and "###" not in asked
    assert say(t, "Is there anything else?").endswith("###STOP###")
    assert t.events() == {"not_understood": 0, "unrequested_change": 0}


def test_fallbacks_end_the_conversation() -> None:
    u = opened(variant({"max_fallbacks": 2}))
    first = say(u, "Lorem ipsum dolor sit amet.")
    # Nothing to act on: the user asks what is wanted, never restates its request.
    assert first.startswith("Sorry") and SCRIPT.requests[0] not in first
    assert u.events()["not_understood"] == 1
    assert say(u, "Lorem ipsum dolor sit amet.").endswith("###OUT-OF-SCOPE###")
    assert u.events() == {"not_understood": 2, "unrequested_change": 0}


def test_deterministic_given_seed() -> None:
    texts = ["Hi! How can I help?", "Please confirm you want to cancel (yes/no)?", "Okay, shall I proceed?"]

    def run(seed: int) -> list[str]:
        u = ScriptedUser(SCRIPT, seed=seed)
        return [say(u, t) for t in texts]

    assert run(1) == run(1)
    assert any(run(s) != run(1) for s in range(2, 12)), "seeds should vary the phrasing"


def test_device_action_by_intent_then_report() -> None:
    intents = [DeviceIntent(tool="toggle_wifi", keywords=(("turn", "wifi"),))]
    u = opened(variant({"device_actions": [{"tool": "toggle_wifi", "arguments": {"on": True}}]}),
               intents=intents, user_tool_names={"toggle_wifi", "check_wifi"})
    view: list[Message] = [AssistantMessage(content="Could you turn on your WiFi and then check_wifi for me?")]
    m1 = u.respond(view)
    assert m1.tool_calls and [m1.tool_calls[0].name, m1.tool_calls[0].arguments] == ["toggle_wifi", {"on": True}]
    assert m1.tool_calls[0].requestor == "user"
    view += [m1, ToolMessage(id=m1.tool_calls[0].id, content="wifi on", requestor="user")]
    m2 = u.respond(view)
    assert m2.tool_calls and m2.tool_calls[0].name == "check_wifi"
    view += [m2, ToolMessage(id=m2.tool_calls[0].id, content="wifi on", requestor="user")]
    m3 = u.respond(view)
    assert m3.content is not None and m3.content.count("wifi on") == 2


def test_script_from_tau2_instructions(toy: Domain) -> None:
    task = Task.model_validate({
        "id": "x", "user_scenario": {"instructions": {
            "reason_for_call": "You received order #W5550123 and you want to return your keyboard.",
            "known_info": "You are Mira Okafor in zip code 30301. Your email is mira.okafor@example.com.",
        }},
        "evaluation_criteria": {"actions": [{"action_id": "a", "name": "transfer_to_human_agents", "arguments": {}},
                                            {"action_id": "b", "requestor": "user", "name": "toggle_data", "arguments": {}}]},
    })
    s = script_from_instructions(task)
    assert s.requests == ["I received order #W5550123 and I want to return my keyboard."]
    assert s.identity == {"first_name": "Mira", "last_name": "Okafor", "zip": "30301", "email": "mira.okafor@example.com"}
    assert s.facts == {"order_id": "The order id is #W5550123.",
                       "item": "I received order #W5550123 and I want to return my keyboard."}
    assert s.end == "transfer" and [a.tool for a in s.device_actions] == ["toggle_data"]


@pytest.mark.parametrize(("known", "identity"), [
    ("You are mei_kovacs_8020 living in zipcode 28236.",
     {"user_id": "mei_kovacs_8020", "first_name": "Mei", "last_name": "Kovacs", "zip": "28236"}),
    ("You are Ethan Garcia, and you live in Denver, 80280.", {"first_name": "Ethan", "last_name": "Garcia", "zip": "80280"}),
    ("You are John Smith with phone number 555-123-2002.", {"first_name": "John", "last_name": "Smith", "phone": "555-123-2002"}),
])
def test_identity_from_tau2_known_info(known: str, identity: dict[str, str]) -> None:
    task = Task.model_validate({"id": "x", "user_scenario": {"instructions": {"reason_for_call": "r", "known_info": known}}})
    assert script_from_instructions(task).identity == identity


def test_statements_are_not_questions() -> None:
    u = opened()
    # "email" in a statement is not a request for the email; a completed action ends it.
    reply = say(u, "The return has been submitted. You will receive an email with instructions.")
    assert reply == SCRIPT.requests[1]
    assert say(u, "Your account has been verified.").startswith("Sorry, I'm not sure what you need")


def test_literal_tool_names_are_whole_identifiers() -> None:
    u = opened(user_tool_names={"toggle_wifi", "toggle_wifi_calling"})
    m = u.respond([AssistantMessage(content="Please use toggle_wifi_calling on your phone.")])
    assert m.tool_calls is not None and [c.name for c in m.tool_calls] == ["toggle_wifi_calling"]
    assert u._pending == []


def test_statements_get_no_reaction_and_questions_are_answered_together() -> None:
    intents = [DeviceIntent(tool="toggle_wifi", keywords=(("turn", "wifi"),))]
    u = opened(intents=intents, user_tool_names={"toggle_wifi"})
    # A recap, a negation and a conditional name the device action; none asks for it.
    for text in ("Earlier we turned your wifi off and on.", "Please don't turn the wifi off.",
                 "If you travel, you can turn the wifi off."):
        assert not u.respond([AssistantMessage(content=text)]).tool_calls, text
    # Two questions in one message (one of them a list item): both answered, in order.
    reply = say(u, "Thanks! Two things:\n- What is the order id?\n- Why do you want to cancel it?")
    assert reply == "#W1 no longer needed"
    # A zip code asked as part of a new address is not the user's identity.
    addr = opened(variant({"facts": {"address": "12 Main St, Springfield, IL 62701, USA"}}))
    assert say(addr, "Please give me the new address: street, city, state, zip code.") == (
        "12 Main St, Springfield, IL 62701, USA")
    # An offer to transfer is agreed to only when the scenario ends in a transfer.
    assert say(opened(), "Would you like me to transfer you to a human agent?") == "No, I don't want to do that."
    assert say(opened(variant({"end": "transfer"})), "Shall I transfer you to a human agent?").startswith("Yes")

"""What the scripted user does of its own accord is counted per episode and recorded in
``EpisodeRecord.user_events`` (issue 35): turns it did not understand, and transfers the
agent did not announce. The cache key is not touched, so stored episodes still resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_quantagent.analysis.gate import EXIT_INCONCLUSIVE
from pytest_quantagent.cli import main
from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.env.user import USER_EVENTS
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.vocab.messages import AssistantMessage, ToolCall

ARMS = """
[arms.bf16]
backend = "mock"
model = "scripted"
responses = ["Can you do that for me?", "Please check it.", "Is there anything else I can help you with?"]

[arms.int4]
backend = "mock"
model = "scripted"
responses = ["Could you tell me your name and zip code?", "Is there anything else I can help you with?"]
"""


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def _say(user: Any, text: str) -> str:
    return user.respond([AssistantMessage(content=text)]).content or ""


def test_the_record_carries_the_users_counts_and_the_key_does_not_change(tmp_path: Path) -> None:
    cfg = tmp_path / "arms.toml"
    cfg.write_text(ARMS)
    out = tmp_path / "store"
    argv = ["run", "--domain", "retail", "--arms", "bf16,int4", "--config", str(cfg),
            "--tasks", "cancel_000", "--out", str(out), "--json", str(tmp_path / "r.json"), "-q"]
    assert main(argv) == EXIT_INCONCLUSIVE
    by_arm = {r["arm"]: r for r in _records(out)}
    # bf16's two vague turns are not understood; int4 asks plainly and is answered.
    assert by_arm["bf16"]["user_events"] == {
        "not_understood": 2, "unrequested_change": 0}
    assert by_arm["int4"]["user_events"] == dict.fromkeys(USER_EVENTS, 0)
    users = [m["content"] for m in by_arm["bf16"]["messages"] if m["role"] == "user"]
    assert users[2] == "Sorry, what do you need me to check?"
    assert all("cancel my order" not in u for u in users[1:3])  # no restated request

    # A store written before the field existed (no user_events) reads and resumes: the
    # key is the same, nothing runs again.
    lines = _records(out)
    for rec in lines:
        del rec["user_events"]
    (out / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    keys = {r["key"] for r in lines}
    assert EpisodeRecord.model_validate(lines[0]).user_events == {}
    assert main(argv) == EXIT_INCONCLUSIVE
    again = _records(out)
    assert len(again) == 2 and {r["key"] for r in again} == keys


def test_a_transfer_is_sent_only_when_announced_and_an_unmade_one_is_no_user_event() -> None:
    dom = get_domain("retail")
    task = dom.task("transfer_014")
    user: Any = dom.make_user(task, 0)
    _say(user, "Hi! How can I help you today?")
    # Asked something in the same message: answered, the transfer is still to come.
    reply = _say(user, "Before transferring you to a human agent, could you give me your name and zip code?")
    assert "Umar Brandt" in reply and "###TRANSFER###" not in reply
    assert _say(user, "You are being transferred to a human agent now. Please hold.") == "###TRANSFER###"
    assert sum(user.events().values()) == 0
    # The agent only closes: the user asks for a human once, then stops. It cannot transfer
    # itself, and the missing transfer is the agent's failure, not a user event.
    other: Any = dom.make_user(task, 0)
    _say(other, "Hi! How can I help you today?")
    first = _say(other, "Is there anything else I can help you with?")
    assert "human" in first and "###" not in first  # it asks for one first
    last = _say(other, "Is there anything else I can help you with?")
    assert last.endswith("###STOP###") and "###TRANSFER###" not in last
    assert other.events() == {"not_understood": 0, "unrequested_change": 0}


def test_text_that_is_no_language_gets_a_clarification_but_no_not_understood_turn() -> None:
    dom = get_domain("telecom")
    task = next(t for t in dom.tasks if "data" in t.id)
    for garbled, counted in (('","arguments":{"customer_id":"<user1>"}}', 0),
                             ("Could you<place5><place5>_customer_amount", 0),
                             ("Please do the thing with the stuff.", 1)):
        user: Any = dom.make_user(task, 0)
        _say(user, "Hi! How can I help you today?")
        reply = _say(user, garbled)
        assert reply.startswith("Sorry"), (garbled, reply)  # it asks what is wanted, either way
        assert user.events()["not_understood"] == counted, garbled


def test_a_question_that_lost_its_question_mark_is_answered() -> None:
    dom = get_domain("telecom")
    task = next(t for t in dom.tasks if "data" in t.id)
    for text in ("Which network mode does your phone.", "Which network mode of your phone."):
        user: Any = dom.make_user(task, 0)
        _say(user, "Hi! How can I help you today?")
        msg = user.respond([AssistantMessage(content=text)])
        assert [c.name for c in msg.tool_calls or ()] == ["check_network_mode_preference"], text
        assert user.events()["not_understood"] == 0


def test_an_acknowledgement_is_answered_and_is_no_not_understood_turn() -> None:
    dom = get_domain("retail")
    user: Any = dom.make_user(dom.task("cancel_000"), 0)
    _say(user, "Hi! How can I help you today?")
    for msg in ("That's all the info I need.", "Thanks, let me pull up your order."):
        assert "go ahead" in _say(user, msg).lower()
    assert user.events()["not_understood"] == 0
    # A vague question still is one (a fresh user: waits count towards max_fallbacks).
    other: Any = dom.make_user(dom.task("cancel_000"), 0)
    _say(other, "Hi! How can I help you today?")
    assert _say(other, "Can you do that for me?").startswith("Sorry")
    assert other.events()["not_understood"] == 1


def test_an_unrequested_state_change_is_counted_by_its_own_rule() -> None:
    """``unrequested_change``: a state-changing call the message does not name once its
    keep phrases are left out (a misreading, whatever the reading rules said)."""
    dom = get_domain("telecom")
    user: Any = dom.make_user(dom.task("service_7_18"), 0)
    roaming = ToolCall(id="c1", name="toggle_roaming", arguments={}, requestor="user")
    status = ToolCall(id="c2", name="check_status_bar", arguments={}, requestor="user")
    user.note_unrequested([roaming, status], "Please turn data roaming off.")
    assert user.events()["unrequested_change"] == 0
    user.note_unrequested([roaming, status], "Let's check the status bar (but keep data roaming on).")
    assert user.events()["unrequested_change"] == 1  # the roaming toggle, not the read
    user.note_unrequested([roaming], "Please turn it off.")  # named only in an earlier message
    assert user.events()["unrequested_change"] == 2
    # Played through the user, the keep phrase makes no call and counts nothing.
    _say(user, "Hi! How can I help you today?")
    calls = user.respond([AssistantMessage(content="Keep data roaming on, and restart your phone.")]).tool_calls
    assert [c.name for c in calls or []] == ["reboot_device"]
    assert user.events()["unrequested_change"] == 2

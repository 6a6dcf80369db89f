"""Paired flip accounting of the open-loop decision analysis (synthetic decision points)."""

from __future__ import annotations

import pytest

from pytest_quantagent.bundled.tokenizer import DomainTokenizer
from pytest_quantagent.training.decisions import DecisionPoint, copy_sources, summarize


def _dp(ep: int, gold: str, chosen: str, margin: float, kind: str = "tool_name") -> DecisionPoint:
    return DecisionPoint(ep, 0, kind, gold, gold, chosen, margin)


def test_flips_are_paired_and_binned_by_reference_margin() -> None:
    ref = [_dp(0, "a", "a", 0.1), _dp(1, "b", "b", 3.0), _dp(2, "c", "c_wrong", -0.3), _dp(3, "d", "d", 0.7)]
    arm = [_dp(0, "a", "a_wrong", -0.05), _dp(1, "b", "b", 2.5), _dp(2, "c", "c", 0.2), _dp(3, "d", "d", 0.6)]
    s_ref, s_arm = summarize("bf16", {"bf16": ref, "int4": arm})
    assert s_ref.right_to_wrong["tool_name"] == 0 and s_ref.wrong_to_right["tool_name"] == 0
    assert s_arm.right_to_wrong["tool_name"] == 1 and s_arm.wrong_to_right["tool_name"] == 1
    assert s_arm.flips_by_bin["tool_name"] == {"[0,0.25)": 1, "[0.25,0.5)": 1, "[0.5,1)": 0, "[2,inf)": 0}
    assert s_arm.flips_by_bin["tool_name_n"] == {"[0,0.25)": 1, "[0.25,0.5)": 1, "[0.5,1)": 1, "[2,inf)": 1}
    assert s_arm.wrong_rate["tool_name"] == 0.25 and s_arm.net_change["tool_name"] == 0.0
    assert s_arm.wrong_names == {"a_wrong": 1}
    assert s_arm.novel_wrong_names == ["a_wrong"]  # never produced by the reference arm


def test_wrong_to_other_wrong_counts_as_a_flip_not_a_rate_change() -> None:
    ref = [_dp(0, "a", "x", -0.1)]
    arm = [_dp(0, "a", "y", -0.2)]
    _, s = summarize("bf16", {"bf16": ref, "int4": arm})
    assert s.flips_by_bin["tool_name"] == {"[0,0.25)": 1}
    assert s.right_to_wrong["tool_name"] == 0 and s.wrong_to_right["tool_name"] == 0
    assert s.net_change["tool_name"] == 0.0
    assert s.decisions["argument"] == 0 and s.wrong_rate["argument"] == 0.0


def test_copy_sources_tells_copyable_from_recall_only_values() -> None:
    # Split rule 1 tokenized the email in the user's prose as " ada" + ".novak1234@..."; the
    # call holds it as one token, so it could only be recalled. Rule 2 makes it copyable.
    text = ('<|user|>My email is ada.novak1234@example.com.<|end|><|assistant|><|call|>'
            '{"name":"find_user_id_by_email","arguments":{"email":"ada.novak1234@example.com"}}<|end|>'
            '<|tool|>ada_novak_1234<|end|><|assistant|><|call|>'
            '{"name":"get_user_details","arguments":{"user_id":"ada_novak_1234","tags":["zz_99"]}}<|end|>')
    pool = ["ada.novak1234@example.com", "ada_novak_1234", "zz_99"]
    for version, email_copyable in ((1, 0), (2, 1)):
        tok = DomainTokenizer.build([text] * 20, pool, min_word_count=1, version=version)
        got = copy_sources(tok, [text])
        email = got["find_user_id_by_email.email"]
        assert (email.values, email.single_token, email.in_context) == (1, 1, email_copyable)
        uid = got["get_user_details.user_id"]
        assert (uid.values, uid.single_token, uid.in_context) == (1, 1, 1)
        tags = got["get_user_details.tags"]  # list values count one by one; never seen before
        assert (tags.values, tags.single_token, tags.in_context) == (1, 1, 0)


def test_gold_policy_follows_the_models_training_record(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from pytest_quantagent.runner.gold import EMAIL_QUESTION, NAME_ZIP_QUESTION, RESTATE_QUESTIONS
    from pytest_quantagent.training.decisions import gold_transcripts, trained_expert_policy

    off = {"restate_ids": False, "confirm_args": False, "email_first": False}
    assert trained_expert_policy(tmp_path, "retail") == off  # no training.json: a model made before
    corpus = {"mixed_retail": {"kept": 1, "restate_ids": True, "email_first": True}, "mixed_telecom": {"kept": 1}}
    (tmp_path / "training.json").write_text(json.dumps({"corpus": corpus}))
    assert trained_expert_policy(tmp_path, "retail") == {**off, "restate_ids": True, "email_first": True}
    assert trained_expert_policy(tmp_path, "telecom") == off
    plain = gold_transcripts("retail")
    restated = gold_transcripts("retail", restate_ids=True)
    assert len(plain) == len(restated) == 50
    q = RESTATE_QUESTIONS["order_id"]
    assert sum(q in t for t in restated) > sum(q in t for t in plain) + 30
    # email first: the name-and-zip question is never asked; users without an email say so
    # and give name and zip, and the expert still solves every task
    email_first = gold_transcripts("retail", email_first=True)
    assert len(email_first) == 50
    assert sum(NAME_ZIP_QUESTION in t for t in plain) > 0
    assert not any(NAME_ZIP_QUESTION in t for t in email_first)
    forgot = [t for t in email_first if "I don't remember my email address." in t]
    assert len(forgot) == sum(NAME_ZIP_QUESTION in t for t in plain)
    for t in forgot:
        after = t.split("I don't remember my email address.", 1)[1]
        assert EMAIL_QUESTION in t.split("I don't remember my email address.", 1)[0]
        assert '"name":"find_user_id_by_name_zip"' in after.split("<|tool|>", 1)[0]


def _fixed_arm(tok: DomainTokenizer, token: int, logit: float, tail: list[int]) -> object:
    """A stand-in model: logits 0 except ``logit`` on ``token`` at every position; ``generate``
    appends ``tail``."""
    from types import SimpleNamespace

    torch = pytest.importorskip("torch")

    class Arm:
        def __call__(self, input_ids: object) -> object:
            n = input_ids.shape[1]  # type: ignore[attr-defined]
            logits = torch.zeros(1, n, tok.vocab_size)
            logits[..., token] = logit
            return SimpleNamespace(logits=logits)

        def generate(self, input_ids: object, **_: object) -> object:
            return torch.cat([input_ids, torch.tensor([tail])], dim=1)

    return Arm()


def test_aliased_ids_are_decided_at_their_alias_and_read_back_as_ids() -> None:
    pytest.importorskip("torch")
    from pytest_quantagent.bundled.tokenizer import DEFAULT_ALIASES
    from pytest_quantagent.training.decisions import analyze_arm

    text = ('<|user|>Not #W1234567, I mean #W7654321.<|end|><|assistant|><|call|>'
            '{"name":"get_order_details","arguments":{"order_id":"#W7654321"}}<|end|>')
    tok = DomainTokenizer.build([text] * 20, min_word_count=1, aliases=DEFAULT_ALIASES)
    # Copyable: the call's alias <order2> is in the user's text, although "#W7654321" is no token.
    assert copy_sources(tok, [text])["get_order_details.order_id"].in_context == 1
    wrong = tok.token_id("<order1>")  # an arm that always prefers the *first* order id

    points = analyze_arm(_fixed_arm(tok, wrong, 1.0, [tok.end_id]), tok, [text])
    arg = [p for p in points if p.kind == "argument"]
    assert [(p.key, p.gold, p.chosen, p.margin) for p in arg] == [
        ("get_order_details.order_id", "#W7654321", "#W1234567", -1.0)
    ]


def test_call_or_text_is_decided_at_each_agent_turn_and_names_the_tool_called_instead() -> None:
    pytest.importorskip("torch")
    from pytest_quantagent.training.decisions import analyze_arm

    text = ('<|assistant|>Please turn airplane mode off.<|end|><|user|>Done.<|end|>'
            '<|assistant|><|call|>{"name":"check_status_bar","arguments":{}}<|end|>')
    tok = DomainTokenizer.build([text] * 20, min_word_count=1)
    call_id = tok.token_id("<|call|>")
    body = tok.encode('{"name":"toggle_airplane_mode","arguments":{}}')
    arm = _fixed_arm(tok, call_id, 1.5, [*body, tok.end_id])  # always prefers to start a call

    points = [p for p in analyze_arm(arm, tok, [text]) if p.kind == "call_or_text"]
    assert [(p.call, p.gold, p.chosen, p.margin) for p in points] == [
        (0, "text", "call toggle_airplane_mode", -1.5),  # calls a tool where the gold asks the user
        (1, "call", "call", 1.5),
    ]
    ref = [DecisionPoint(0, 0, "call_or_text", "text", "text", "text", 0.3), points[1]]
    _, s = summarize("bf16", {"bf16": ref, "int4": points})
    assert s.right_to_wrong["call_or_text"] == 1 and s.wrong_to_right["call_or_text"] == 0
    assert s.flips_by_bin["call_or_text"] == {"[0.25,0.5)": 1, "[1,2)": 0}
    assert s.calls_for_text == {"toggle_airplane_mode": 1}


def test_decisions_command_teacher_forces_the_policy_the_bundled_model_learned(capsys) -> None:  # type: ignore[no-untyped-def]
    import json

    from pytest_quantagent.cli import main
    from pytest_quantagent.quant.arms import DEFAULT_MODEL_SPEC, resolve_arm
    from pytest_quantagent.training.decisions import trained_expert_policy

    assert main(["decisions", "--domain", "retail", "--arms", "bf16,int4-rtn", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    path = resolve_arm("bf16", DEFAULT_MODEL_SPEC).path
    assert path is not None
    assert out["expert_policy"] == trained_expert_policy(path, "retail")
    assert [a["arm"] for a in out["arms"]] == ["bf16", "int4-rtn"]
    assert out["episodes"] == 50  # the clean expert solves every retail test task
    bf16 = out["arms"][0]
    assert bf16["right_to_wrong"]["tool_name"] == bf16["wrong_to_right"]["tool_name"] == 0  # the reference


def test_the_bundled_pair_differs_in_its_narrow_call_or_text_decisions_and_int4_flips_only_those(capsys) -> None:  # type: ignore[no-untyped-def]
    # The pair exists for this contrast (models/README.md, "Measured"): in telecom the prone
    # model runs the user's device tool where the gold asks the user, at decisions it takes
    # by a narrow margin; the robust one hardly ever does. Whatever call-or-text decision a
    # quantized arm flips, the reference took it by less than 1 logit. (Tool names are not
    # held to that: AWQ flips two of the prone pair's telecom names taken by 1-2 logits.)
    import json

    from pytest_quantagent.cli import main

    out = {}
    for spec in ("tiny-agent", "tiny-agent-prone"):
        assert main(["decisions", "--domain", "telecom", "--arms", "bf16,int4", "--model", spec, "--json"]) == 0
        out[spec] = json.loads(capsys.readouterr().out)["arms"]
    robust, prone = out["tiny-agent"][0], out["tiny-agent-prone"][0]
    narrow = {"[0,0.25)", "[0.25,0.5)", "[0.5,1)"}

    def below_1(arm: dict) -> int:  # type: ignore[type-arg]
        return sum(n for b, n in arm["flips_by_bin"]["call_or_text_n"].items() if b in narrow)

    assert prone["wrong"]["call_or_text"] >= 5 * max(1, robust["wrong"]["call_or_text"])
    assert below_1(prone) >= 5 * max(1, below_1(robust))
    assert set(prone["calls_for_text"]) & {"check_sim_status", "check_apn_settings", "check_wifi_calling_status"}
    for spec in out:
        for arm in out[spec][1:]:
            wide = {b: f for b, f in arm["flips_by_bin"]["call_or_text"].items() if b not in narrow}
            assert not any(wide.values()), (spec, arm["flips_by_bin"]["call_or_text"])

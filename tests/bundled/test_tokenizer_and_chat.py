"""Domain tokenizer round trips and the bundled chat format / tool-call parsing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_quantagent.backends.base import Generation, RawToolCall
from pytest_quantagent.bundled.chat import compact_json, parse_tool_calls, render_messages
from pytest_quantagent.bundled.tokenizer import (
    ASSISTANT,
    CALL,
    DEFAULT_ALIASES,
    END,
    SPECIALS,
    AliasKind,
    DomainTokenizer,
    is_id_like,
    name_alias_kind,
    split_pieces,
)
from pytest_quantagent.errors import DataFileError
from pytest_quantagent.runner.agent import generation_to_message

CORPUS = [
    'My email is "ada.novak1234@example.com". Cancel order #W1234567 please.',
    '{"name":"get_user_details","arguments":{"user_id":"ada_novak_1234"}}',
] * 25
POOL = ["#W1234567", "#W7654321", "ada_novak_1234", "ada.novak1234@example.com", "555-0102"]


@pytest.fixture(scope="module")
def tok() -> DomainTokenizer:
    return DomainTokenizer.build(CORPUS, POOL, min_word_count=20)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "plain words, punctuation!? and digits 0123456789",
        "unicode: ünïcödé — 📶⁴ Excellent | 5G",
        "<bos><|user|>Hi<|end|><|assistant|><|call|>{\"name\":\"x\"}<|end|>",
        "ids #W1234567. and #W9999999, 555-0102\nnew line\ttab",
        '{"a":null,"b":[1,2.5,"c"],"d":{"e":"f"}}',
    ],
)
def test_round_trip_is_lossless(tok: DomainTokenizer, text: str) -> None:
    assert tok.decode(tok.encode(text)) == text


def test_pool_ids_are_single_tokens_and_unknown_ids_fall_back(tok: DomainTokenizer) -> None:
    for value in POOL:
        ids = tok.encode(value)
        assert len(ids) == 1, value
        assert tok.id_to_piece(ids[0]) == value
    # An id outside the pool is spelt out (still lossless) rather than mapped to <unk>.
    ids = tok.encode("#W0000001")
    assert len(ids) > 1
    assert tok.decode(ids) == "#W0000001"


def test_words_below_min_count_are_not_pieces(tok: DomainTokenizer) -> None:
    assert " please" in tok.pieces  # 25 occurrences
    rare = DomainTokenizer.build(["zebra"] * 3, min_word_count=20)
    assert "zebra" not in rare.pieces
    assert rare.decode(rare.encode("zebra")) == "zebra"


def test_specials_are_single_tokens(tok: DomainTokenizer) -> None:
    for s in SPECIALS:
        assert tok.encode(s) == [tok.token_id(s)]
    assert tok.decode(tok.encode(f"{ASSISTANT}hi{END}"), skip_special=True) == "hi"


def test_split_and_id_like() -> None:
    assert split_pieces("order #W1234567.") == ["order", " ", "#W1234567", "."]
    assert is_id_like("#W1234567") and is_id_like("555-0102") and not is_id_like("order")
    assert not is_id_like("7")  # single digits are plain digit tokens


def test_an_id_in_prose_is_the_same_token_as_in_a_call(tok: DomainTokenizer) -> None:
    # Split rule 2: a word never swallows the space before an id that starts with letters,
    # so the agent can copy the id the user typed into its call (rule 1 split
    # " ada" + ".novak1234@example.com" in prose).
    for value in ("ada.novak1234@example.com", "ada_novak_1234"):
        in_call = tok.encode(f'{{"email":"{value}"}}')
        in_prose = tok.encode(f"My email is {value}. Thanks")
        assert tok.token_id(value) in in_call
        assert tok.token_id(value) in in_prose, [tok.id_to_piece(i) for i in in_prose]
        assert tok.decode(in_prose) == f"My email is {value}. Thanks"
    assert split_pieces("is ada.novak1234@example.com.") == ["is", " ", "ada.novak1234@example.com", "."]
    assert split_pieces("is ada.novak1234@example.com.", 1) == ["is", " ada", ".novak1234@example.com", "."]


def test_a_whole_float_in_a_tool_result_holds_the_number_the_agent_says() -> None:
    # The expert states a gift-card balance as "283"; the tool result holds 283.0. Rule 2
    # splits it 283 + .0 so the two share a token; other decimals stay whole.
    text = '{"balance":283.0,"amount":154.39,"x":283.05} Your balance is 283.'
    assert split_pieces(text) == ['{"', "balance", '":', "283", ".0", ',"', "amount", '":', "154.39",
                                  ',"', "x", '":', "283.05", "}", " Your", " balance", " is",
                                  " ", "283", "."]
    assert "283.0" in split_pieces(text, 1)


def test_split_versions_load_with_their_own_rule(tok: DomainTokenizer, tmp_path: Path) -> None:
    text = "My email is ada.novak1234@example.com."
    old = DomainTokenizer(tok.pieces, version=1)
    old.save(tmp_path)
    again = DomainTokenizer.load(tmp_path)
    assert again.version == 1  # a model trained with rule 1 keeps tokenizing with it
    assert again.encode(text) == old.encode(text) != tok.encode(text)
    assert again.decode(again.encode(text)) == text
    payload = json.loads((tmp_path / "quantagent_tokenizer.json").read_text())
    payload["version"] = 99
    (tmp_path / "quantagent_tokenizer.json").write_text(json.dumps(payload))
    with pytest.raises(DataFileError, match=r"unsupported tokenizer version 99; this package reads versions 1, 2"):
        DomainTokenizer.load(tmp_path)
    with pytest.raises(ValueError, match=r"split version 99 is not one of 1, 2"):
        DomainTokenizer(tok.pieces, version=99)
    with pytest.raises(ValueError, match=r"split version 0 is not one of 1, 2"):
        DomainTokenizer.build(CORPUS, POOL, version=0)
    with pytest.raises(ValueError, match=r"split version 3 is not one of 1, 2"):
        split_pieces(text, 3)
    # Building with rule 1 reproduces a rule-1 vocabulary: the prose email fragment is a
    # piece there, and not under rule 2.
    prose = ["My email is ada.novak1234@example.com."] * 25
    assert ".novak1234@example.com" in DomainTokenizer.build(prose, version=1).pieces
    assert ".novak1234@example.com" not in DomainTokenizer.build(prose).pieces


def test_save_load_and_bad_files(tok: DomainTokenizer, tmp_path: Path) -> None:
    tok.save(tmp_path)
    again = DomainTokenizer.load(tmp_path)
    assert again.pieces == tok.pieces
    assert again.encode(CORPUS[0]) == tok.encode(CORPUS[0])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "quantagent_tokenizer.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(DataFileError, match="not a quantagent tokenizer"):
        DomainTokenizer.load(bad)
    with pytest.raises(DataFileError, match="cannot read tokenizer"):
        DomainTokenizer.load(tmp_path / "missing")


ALIAS_TEXT = ("<|user|>Return #W7654321, not #W1234567; refund to paypal_1234567.<|end|>"
              '<|assistant|><|call|>{"name":"get_order_details","arguments":{"order_id":"#W7654321"}}<|end|>'
              '<|tool|>{"order_id":"#W7654321","user_id":"ada_novak_1234","payment":"paypal_1234567"}<|end|>')


@pytest.fixture(scope="module")
def aliasing() -> DomainTokenizer:
    return DomainTokenizer.build(CORPUS + [ALIAS_TEXT] * 20, POOL, min_word_count=20, aliases=DEFAULT_ALIASES)


def test_aliases_number_each_kind_by_first_appearance(aliasing: DomainTokenizer) -> None:
    pieces = [aliasing.id_to_piece(i) for i in aliasing.encode(ALIAS_TEXT)]
    aliased = [p for p in pieces if p.startswith("<") and p[1:2].islower()]
    assert aliased == ["<order1>", "<order2>", "<pay1>", "<order1>", "<order1>", "<user1>", "<pay1>"]
    assert aliasing.alias_map(ALIAS_TEXT) == {
        "<order1>": "#W7654321", "<order2>": "#W1234567", "<pay1>": "paypal_1234567", "<user1>": "ada_novak_1234",
    }
    # The ids of aliased kinds get no token of their own; the others keep theirs.
    assert "#W1234567" not in aliasing.pieces and "ada_novak_1234" not in aliasing.pieces
    assert "555-0102" in aliasing.pieces
    assert aliasing.vocab_size == aliasing.alias_offset + sum(k.count for k in DEFAULT_ALIASES)


def test_aliases_are_stable_as_the_conversation_grows(aliasing: DomainTokenizer) -> None:
    # The backend re-renders the whole conversation every turn: a prefix keeps its aliases.
    cut = ALIAS_TEXT.index("<|tool|>")
    head, whole = aliasing.encode(ALIAS_TEXT[:cut]), aliasing.encode(ALIAS_TEXT)
    assert whole[: len(head)] == head


def test_aliases_decode_through_the_conversations_map(aliasing: DomainTokenizer) -> None:
    ids = aliasing.encode(ALIAS_TEXT)
    assert aliasing.decode(ids, aliases=aliasing.alias_map(ALIAS_TEXT)) == ALIAS_TEXT
    assert "<order2>" in aliasing.decode(ids) and "#W" not in aliasing.decode(ids)
    # An alias the conversation never introduced stays as it is: a tool rejects it as unknown.
    out = [aliasing.token_id("<order1>"), aliasing.token_id("<order3>")]
    assert aliasing.decode(out, aliases=aliasing.alias_map(ALIAS_TEXT)) == "#W7654321<order3>"
    # Alias tokens are never produced by splitting text, so literal "<order1>" is just text.
    assert aliasing.token_id("<order1>") not in aliasing.encode("<order1>")
    assert aliasing.decode(aliasing.encode("<order1>")) == "<order1>"


def test_ids_beyond_a_kinds_count_keep_their_text() -> None:
    few = DomainTokenizer.build(CORPUS, POOL, min_word_count=20, aliases=[AliasKind("order", r"#W[0-9]{7}", 2)])
    text = "#W1111111 #W2222222 #W3333333 #W1111111"
    ids = few.encode(text)
    assert [few.id_to_piece(i) for i in ids[:4]] == ["<order1>", "<0x20>", "<order2>", "<0x20>"]
    assert few.id_to_piece(ids[-1]) == "<order1>"
    assert few.alias_map(text) == {"<order1>": "#W1111111", "<order2>": "#W2222222"}
    assert few.decode(ids, aliases=few.alias_map(text)) == text  # the third spelt out, losslessly


def test_a_name_kind_gives_the_prose_word_and_the_json_value_one_alias() -> None:
    text = ('<|user|>My name is Maren Lindqvist.<|end|><|assistant|><|call|>'
            '{"name":"find_user_id_by_name_zip","arguments":{"first_name":"Maren","last_name":"Lindqvist"}}<|end|>')
    kinds = [*DEFAULT_ALIASES, name_alias_kind(["Maren", "Lindqvist", "Ada", ""])]
    tok = DomainTokenizer.build([text] * 20, min_word_count=1, aliases=kinds)
    pieces = [tok.id_to_piece(i) for i in tok.encode(text)]
    # The prose words keep their space as a token of its own; the aliases are the same.
    assert pieces[4:9] == ["<0x20>", "<name1>", "<0x20>", "<name2>", "<0x2E>"]
    assert pieces.count("<name1>") == 2 and pieces.count("<name2>") == 2
    assert " Maren" not in tok.pieces and "Maren" not in tok.pieces
    assert tok.decode(tok.encode(text), aliases=tok.alias_map(text)) == text
    assert tok.alias_map(text) == {"<name1>": "Maren", "<name2>": "Lindqvist"}
    # Only whole words of the list: "Adams" and "Marena" are ordinary text.
    assert tok.alias_map("Ada Adams Marena") == {"<name1>": "Ada"}
    with pytest.raises(ValueError, match="no words given for kind 'name'"):
        name_alias_kind([""])


def test_address_words_and_amounts_become_aliases_the_agent_can_copy() -> None:
    # The kinds `train_reference.py add-aliases --kinds place,num` appends: a new address's
    # words and numbers in prose and in the call are the same aliases, and a whole-number
    # amount of a tool result ("amount":222.0 → 222 + .0) is the alias the agent states.
    text = ('<|user|>My new address is 618 Copper Lane, Unit 7, Madison, WI 53799, USA.<|end|>'
            '<|assistant|><|call|>{"name":"modify_user_address","arguments":{"address1":"618 Copper Lane",'
            '"address2":"Unit 7","city":"Madison","state":"WI","zip":"53799"}}<|end|>'
            '<|tool|>{"amount":222.0}<|end|><|assistant|>222. Is there anything else?<|end|>')
    base = DomainTokenizer.build([text] * 20, min_word_count=1, aliases=DEFAULT_ALIASES)
    places = name_alias_kind(["Copper", "Lane", "Unit", "Madison", "WI"], count=8, kind="place")
    tok = base.with_aliases([places, AliasKind("num", r"[0-9]{2,4}", 4)])
    amap = tok.alias_map(text)
    assert amap == {"<num1>": "618", "<place1>": "Copper", "<place2>": "Lane", "<place3>": "Unit",
                    "<place4>": "Madison", "<place5>": "WI", "<zip1>": "53799", "<num2>": "222"}
    pieces = [tok.id_to_piece(i) for i in tok.encode(text)]
    assert pieces.count("<num2>") == 2 and pieces.count("<place4>") == 2
    assert tok.decode(tok.encode(text), aliases=amap) == text


def test_aliases_survive_save_and_load(aliasing: DomainTokenizer, tmp_path: Path) -> None:
    aliasing.save(tmp_path)
    again = DomainTokenizer.load(tmp_path)
    assert again.aliases == aliasing.aliases
    assert again.encode(ALIAS_TEXT) == aliasing.encode(ALIAS_TEXT)
    payload = json.loads((tmp_path / "quantagent_tokenizer.json").read_text())
    payload["aliases"] = [{"name": "order", "pattern": "#W"}]
    (tmp_path / "quantagent_tokenizer.json").write_text(json.dumps(payload))
    with pytest.raises(DataFileError, match="each alias kind needs name, pattern and count"):
        DomainTokenizer.load(tmp_path)
    with pytest.raises(ValueError, match=r"alias kind 'Order': the name must be lower-case letters"):
        DomainTokenizer(["abc"], aliases=[AliasKind("Order", "#W", 3)])


def test_hashed_aliases_say_nothing_about_order_and_keep_every_other_property(tmp_path: Path) -> None:
    # alias_order="hashed": an id's slot comes from its text, not from when it came up, so
    # the new address of two conversations need not get the same numbers; everything the
    # backend relies on (one alias per id, prefixes keep theirs, lossless decode) still holds.
    kinds = [AliasKind("order", r"#W[0-9]{7}", 8)]
    hashed = DomainTokenizer.build(CORPUS, POOL, min_word_count=20, aliases=kinds, alias_order="hashed")
    def alias(text: str, order_id: str) -> str:
        return {v: k for k, v in hashed.alias_map(text).items()}[order_id]

    first = "#W1111111 then #W2222222"
    taken = {alias(first, "#W1111111"), alias(first, "#W2222222")}
    # an id whose own slot is free in ``first``: put first, it does not move the other two
    other = next(f"#W{n}" for n in range(3000000, 3000100) if alias(f"#W{n}", f"#W{n}") not in taken)
    second = f"{other} first, then #W1111111 then #W2222222"
    assert alias(second, "#W1111111") == alias(first, "#W1111111")
    assert alias(second, "#W2222222") == alias(first, "#W2222222")
    by_appearance = DomainTokenizer.build(CORPUS, POOL, min_word_count=20, aliases=kinds)
    assert [by_appearance.alias_map(t)["<order1>"] for t in (first, second)] == ["#W1111111", other]
    # Eight ids fill the eight slots, each exactly once (collisions probe to the next free
    # slot); a ninth keeps its text.
    ids = [f"#W{n:07d}" for n in range(1000001, 1000010)]
    text = " ".join(ids + ids[:3])
    amap = hashed.alias_map(text)
    assert sorted(amap) == sorted(f"<order{k}>" for k in range(1, 9))
    assert sorted(amap.values()) == ids[:8]
    encoded = hashed.encode(text)
    assert hashed.decode(encoded, aliases=amap) == text
    cut = text.index(ids[5])
    assert encoded[: len(hashed.encode(text[:cut]))] == hashed.encode(text[:cut])
    # The order is part of the saved vocabulary; an unknown one is refused by name.
    hashed.save(tmp_path)
    again = DomainTokenizer.load(tmp_path)
    assert again.alias_order == "hashed" and again.encode(text) == encoded
    assert again.with_aliases([AliasKind("zip", r"[0-9]{5}", 2)]).alias_order == "hashed"
    payload = json.loads((tmp_path / "quantagent_tokenizer.json").read_text())
    payload["alias_order"] = "random"
    (tmp_path / "quantagent_tokenizer.json").write_text(json.dumps(payload))
    with pytest.raises(DataFileError, match="unknown alias order 'random'; allowed: appearance, hashed"):
        DomainTokenizer.load(tmp_path)
    with pytest.raises(ValueError, match="alias_order must be one of appearance, hashed, got 'sorted'"):
        DomainTokenizer(["abc"], alias_order="sorted")
    # A vocabulary numbered by appearance writes no alias_order: earlier files stay as they were.
    (tmp_path / "a").mkdir()
    by_appearance.save(tmp_path / "a")
    assert "alias_order" not in json.loads((tmp_path / "a" / "quantagent_tokenizer.json").read_text())


def test_duplicate_piece_is_refused() -> None:
    with pytest.raises(ValueError, match="duplicated"):
        DomainTokenizer(["abc", "abc"])


# -- chat format ------------------------------------------------------------------------


def _conversation() -> list[dict]:
    return [
        {"role": "system", "content": "long policy text that the tiny model never sees"},
        {"role": "user", "content": "Cancel #W1234567"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_order_details", "arguments": '{"order_id": "#W1234567"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"order_id": "#W1234567", "note": null}'},
    ]


def test_render_format() -> None:
    text = render_messages(_conversation())
    assert text == (
        '<bos><|system|><|end|><|user|>Cancel #W1234567<|end|>'
        '<|assistant|><|call|>{"name":"get_order_details","arguments":{"order_id":"#W1234567"}}<|end|>'
        '<|tool|>{"order_id":"#W1234567"}<|end|><|assistant|>'
    )
    assert not render_messages(_conversation(), add_generation_prompt=False).endswith(ASSISTANT)
    with pytest.raises(ValueError, match="role 'robot'"):
        render_messages([{"role": "robot", "content": "x"}])


def test_rendered_call_parses_back() -> None:
    text = render_messages(_conversation(), add_generation_prompt=False)
    turn = text.split(ASSISTANT)[1].removesuffix(END).split(END)[0]
    parsed = parse_tool_calls(turn)
    assert parsed.content is None
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == [
        ("get_order_details", {"order_id": "#W1234567"})
    ]


def test_compact_json_drops_nulls_and_keeps_text() -> None:
    assert compact_json('{"a": 1, "b": null, "c": [{"d": null}]}') == '{"a":1,"c":[{}]}'
    assert compact_json("Error: order not found") == "Error: order not found"
    assert compact_json("{not json") == "{not json"


@pytest.mark.parametrize(
    ("text", "name", "args"),
    [
        (f'{CALL}{{"name":"f","arguments":{{"x":1}}}}', "f", {"x": 1}),
        ('<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>', "f", {"x": 1}),
        ('{"name": "f", "arguments": {"x": 1}}', "f", {"x": 1}),
        (f'{CALL}{{"name":"f","arguments":{{"x":1}}}} trailing words', "f", {"x": 1}),
    ],
)
def test_parse_formats(text: str, name: str, args: dict) -> None:
    calls = parse_tool_calls(text).calls
    assert len(calls) == 1
    assert calls[0].name == name
    assert json.loads(calls[0].arguments) == args


@pytest.mark.parametrize(
    "text",
    [
        f'{CALL}{{"name":"f","arguments":{{"x":',  # cut off mid-object
        f"{CALL}get_user_details please",  # no JSON at all
        f'{CALL}{{"arguments":{{}}}}',  # no name
        f'{CALL}["f"]',  # not an object
    ],
)
def test_malformed_call_becomes_parse_error(text: str) -> None:
    parsed = parse_tool_calls(text)
    assert len(parsed.calls) == 1 and parsed.calls[0].name == ""
    gen = Generation(
        content=parsed.content,
        tool_calls=[RawToolCall(id="", name=c.name, arguments=c.arguments) for c in parsed.calls],
        raw_text=text,
    )
    msg = generation_to_message(gen, turn=0)
    assert msg.tool_calls is not None and msg.tool_calls[0].parse_error
    assert msg.raw == text


def test_plain_text_has_no_calls() -> None:
    parsed = parse_tool_calls("Could you please provide your email address?")
    assert parsed.calls == [] and parsed.content == "Could you please provide your email address?"

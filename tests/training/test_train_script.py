"""``scripts/train_reference.py vocab``: which alias kinds a new vocabulary numbers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from pytest_quantagent.bundled.tokenizer import DEFAULT_ALIASES, DomainTokenizer

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_reference.py"


@pytest.fixture(scope="module")
def script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("train_reference_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _corpus(work: Path) -> str:
    text = ('<bos><|user|>My name is Maren Lindqvist. My new address is 618 Copper Lane, Boise, ID 83760, USA.'
            '<|end|><|assistant|><|call|>{"name":"modify_user_address","arguments":{"address1":"618 Copper Lane",'
            '"city":"Boise","state":"ID","zip":"83760"}}<|end|><|tool|>{"balance":283.0}<|end|>'
            '<|assistant|>283. Is there anything else I can help you with?<|end|>')
    work.mkdir()
    (work / "corpus_mixed_retail.jsonl").write_text("\n".join(json.dumps(text) for _ in range(12)))
    (work / "pool_retail.json").write_text(json.dumps(["#W1234567"]))
    return text


@pytest.mark.parametrize(("kinds", "extra"), [
    ("name,place,num", ["name", "place", "num"]),
    ("", []),  # --aliases "": the id kinds only (how the shipped models' first base began)
])
def test_vocab_numbers_the_listed_alias_kinds(script, tmp_path: Path, kinds: str, extra: list[str]) -> None:  # type: ignore[no-untyped-def]
    work = tmp_path / "w"
    text = _corpus(work)
    assert script.main(["vocab", "--work", str(work), "--min-word-count", "1", "--aliases", kinds]) == 0
    tok = DomainTokenizer.load(work)
    names = [k.name for k in DEFAULT_ALIASES] + extra
    assert [k.name for k in tok.aliases] == names
    assert json.loads((work / "corpus_meta.json").read_text())["aliases"] == names
    amap = tok.alias_map(text)
    assert ("<place1>" in amap and amap["<place1>"] == "Copper") is ("place" in extra)
    assert ("<num2>" in amap and amap["<num2>"] == "283") is ("num" in extra)
    assert ("<name1>" in amap and amap["<name1>"] == "Maren") is ("name" in extra)
    assert tok.decode(tok.encode(text), aliases=amap) == text


def test_vocab_hashed_order_and_short_numbers(script, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    work = tmp_path / "w"
    text = _corpus(work).replace("618 Copper Lane", "618 Copper Lane, Unit 7")
    args = ["vocab", "--work", str(work), "--min-word-count", "1", "--aliases", "place,num"]
    assert script.main([*args, "--alias-order", "hashed", "--short-nums"]) == 0
    tok = DomainTokenizer.load(work)
    meta = json.loads((work / "corpus_meta.json").read_text())
    assert tok.alias_order == meta["alias_order"] == "hashed"
    num = next(k for k in tok.aliases if k.name == "num")
    assert (num.pattern, num.count) == ("[0-9]{1,4}", 24) and meta["alias_patterns"]["num"] == [num.pattern, 24]
    # "Unit 7": the one-digit unit is an alias the call can copy, in prose and in the call.
    amap = tok.alias_map(text)
    assert "7" in amap.values()
    assert tok.decode(tok.encode(text), aliases=amap) == text
    # Without the flags: numbered by appearance, one-digit numbers stay text.
    assert script.main(args) == 0
    plain = DomainTokenizer.load(work)
    assert plain.alias_order == "appearance" and "7" not in plain.alias_map(text).values()
    with pytest.raises(SystemExit, match="--short-nums widens the num alias kind, which --aliases 'place' does not"):
        script.main(["vocab", "--work", str(work), "--aliases", "place", "--short-nums"])


def test_vocab_refuses_an_unknown_alias_kind(script, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    work = tmp_path / "w"
    _corpus(work)
    with pytest.raises(SystemExit, match="unknown alias kind 'street'; allowed: name, place, phone"):
        script.main(["vocab", "--work", str(work), "--aliases", "name,street"])


def test_the_bundled_tokenizer_numbers_the_kinds_its_readme_lists() -> None:
    bundled = Path(__file__).resolve().parents[2] / "pytest_quantagent" / "bundled" / "models" / "tiny-agent"
    if not (bundled / "quantagent_tokenizer.json").is_file():
        pytest.skip("bundled model not built")
    tok = DomainTokenizer.load(bundled)
    assert [k.name for k in tok.aliases] == [
        "order", "pay", "user", "email", "item", "track", "zip",
        "name", "place", "phone", "bill", "line", "cust", "num"]
    cfg = json.loads((bundled / "config.json").read_text())
    assert cfg["vocab_size"] == tok.vocab_size == 1595
    # the recipe's vocab --short-nums: one-digit numbers (units, option values) are aliases too
    assert next(k for k in tok.aliases if k.name == "num").pattern == "[0-9]{1,4}"


@pytest.mark.parametrize(("value", "message"), [
    ("cross_roles=0.4", "unknown temptation kind 'cross_roles'; allowed: name, id, enum, cross_role"),
    ("cross_role=1.5", "--prone-primed cross_role: chance '1.5' is not a number in \\[0, 1\\]"),
    ("name=x", "--prone-primed name: chance 'x' is not a number in \\[0, 1\\]"),
])
def test_corpus_refuses_a_bad_prone_primed_rate(script, value: str, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit, match=message):
        script._kind_rates(value)


def test_corpus_reads_prone_primed_rates(script) -> None:  # type: ignore[no-untyped-def]
    assert script._kind_rates("cross_role=0.44,name=0.45") == (("cross_role", 0.44), ("name", 0.45))

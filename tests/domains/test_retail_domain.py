"""The bundled retail data: generator determinism and coverage, splits, id formats, the
oracle on every task, generated training tasks, and the retail scripted user."""

from __future__ import annotations

import collections
import importlib
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pytest_quantagent.env.registry import domains_dir, get_domain
from pytest_quantagent.runner.oracle import run_oracle
from pytest_quantagent.vocab.messages import STOP_TOKEN, TRANSFER_TOKEN


def retail_module(name: str) -> ModuleType:
    get_domain("retail")
    return importlib.import_module(f"pytest_quantagent_domains.retail.{name}")


gen = retail_module("generate")
RETAIL_DIR = domains_dir() / "retail"


@pytest.fixture(scope="module")
def domain() -> Any:
    return get_domain("retail")


def kind_of(task: Any) -> str:
    return task.description.notes.removeprefix("kind=")


# --------------------------------------------------------------------------- generator


def test_bundled_files_are_exactly_what_the_generator_writes(tmp_path: Path) -> None:
    gen.main(["--out", str(tmp_path)])
    for name in ("db.json", "tasks.json", "split_tasks.json"):
        assert (tmp_path / name).read_bytes() == (RETAIL_DIR / name).read_bytes(), (
            f"{name} is stale: run python domains/retail/generate.py"
        )


def test_generator_is_seeded() -> None:
    a, b, c = gen.generate_db(3, n_users=20), gen.generate_db(3, n_users=20), gen.generate_db(4, n_users=20)
    assert a.get_hash() == b.get_hash() != c.get_hash()
    ta = gen.generate_tasks(a, 9, 30, exclude=())
    tb = gen.generate_tasks(b, 9, 30, exclude=())
    assert [t.model_dump() for t in ta] == [t.model_dump() for t in tb]


def test_db_size_and_id_formats(domain: Any) -> None:
    db = domain.db
    assert 150 <= len(db.users) <= 250 and 30 <= len(db.products) <= 50
    assert all(1 <= len(u.orders) <= 3 for u in db.users.values())
    assert all(1 <= len(o.items) <= 3 for o in db.orders.values())
    assert all(re.fullmatch(r"[a-z]+_[a-z]+_\d{4}", uid) for uid in db.users)
    assert all(re.fullmatch(r"#W\d{7}", oid) for oid in db.orders)
    assert all(re.fullmatch(r"\d{10}", pid) for pid in db.products)
    items = [iid for p in db.products.values() for iid in p.variants]
    assert all(re.fullmatch(r"\d{10}", iid) for iid in items) and len(set(items)) == len(items)
    pms = [pm for u in db.users.values() for pm in u.payment_methods]
    assert all(re.fullmatch(r"(credit_card|gift_card|paypal)_\d{7}", pm) for pm in pms)
    # Whole-dollar prices and balances keep every amount inside the tokenizer's pool.
    assert all(v.price.is_integer() for p in db.products.values() for v in p.variants.values())
    pool = domain.id_pool()
    assert {"#W" + oid[2:] for oid in db.orders} <= pool and set(items) <= pool
    # Our own names, not τ²-bench's.
    assert "T-Shirt" not in {p.name for p in db.products.values()}


def test_bundled_tasks_cover_every_kind_in_both_splits(domain: Any) -> None:
    assert len(domain.tasks) >= 100
    splits = domain.splits
    assert len(splits["train"]) >= 100 and len(splits["test"]) >= 50
    assert set(splits["train"]).isdisjoint(splits["test"])
    assert sorted(splits["train"] + splits["test"]) == sorted(t.id for t in domain.tasks)
    for split in ("train", "test"):
        kinds = {kind_of(domain.task(tid)) for tid in splits[split]}
        assert kinds == set(gen.TASK_KINDS), f"{split} misses {set(gen.TASK_KINDS) - kinds}"


def test_tasks_have_gold_actions_basis_and_scripts(domain: Any) -> None:
    writes = {"cancel": "cancel_pending_order", "modify_address": "modify_pending_order_address",
              "modify_payment": "modify_pending_order_payment",
              "modify_items": "modify_pending_order_items", "return": "return_delivered_order_items",
              "exchange": "exchange_delivered_order_items", "user_address": "modify_user_address",
              "transfer": "transfer_to_human_agents"}
    for task in domain.tasks:
        kind, ec = kind_of(task), task.evaluation_criteria
        names = [a.name for a in ec.actions]
        assert names[0] in ("find_user_id_by_email", "find_user_id_by_name_zip")
        assert task.user_scenario.script.requests
        assert task.structured_instructions.reason_for_call
        if kind in writes:
            assert names[-1] == writes[kind]
        else:
            assert all(domain.tool_type(n).value == "read" for n in names), task.id
        basis = {b.value for b in ec.reward_basis}
        assert "DB" in basis
        assert ("COMMUNICATE" in basis) == kind.startswith("info_") == bool(ec.communicate_info)
        assert ("ACTION" in basis) == (kind == "transfer")


def test_gold_writes_all_succeed_and_change_the_db(domain: Any) -> None:
    pristine = domain.db.get_hash()
    for task in domain.tasks:
        state = domain.gold_state(task)
        assert state.failed_writes == (), task.id
        changes = kind_of(task) in {"cancel", "modify_address", "modify_payment", "modify_items",
                                    "return", "exchange", "user_address"}
        assert (state.db_hash != pristine) == changes, task.id


def test_generate_tasks_validates_kinds_and_counts(domain: Any) -> None:
    with pytest.raises(ValueError, match=r"unknown task kind\(s\) \['refund'\]; allowed kinds: cancel, "):
        gen.generate_tasks(domain.db, 1, 3, kinds=["refund"])
    with pytest.raises(ValueError, match="n=-1 must be >= 0"):
        gen.generate_tasks(domain.db, 1, -1)
    tasks = gen.generate_tasks(domain.db, 1, 4, kinds=["return", "info_total"])
    assert [t.id for t in tasks] == ["gen1_return_000", "gen1_info_total_001", "gen1_return_002",
                                     "gen1_info_total_003"]


def test_generated_training_tasks_never_repeat_a_test_scenario(domain: Any) -> None:
    test_keys = {gen._task_key(domain.task(tid)) for tid in domain.splits["test"]}
    # The bundled tasks were drawn with this seed: without the exclusion they would repeat.
    tasks = domain.generate_tasks(gen.DEFAULT_SEED + 1, 300)
    assert not test_keys & {gen._task_key(t) for t in tasks}
    assert len({t.id for t in tasks}) == 300
    assert not {t.id for t in tasks} & {t.id for t in domain.tasks}
    assert collections.Counter(kind_of(t) for t in tasks) == {k: 20 for k in gen.TASK_KINDS}


# --------------------------------------------------------------------------- oracle


def test_oracle_succeeds_on_every_bundled_task(domain: Any) -> None:
    results = run_oracle(domain)
    failed = [(r.task_id, r.reason) for r in results if not r.success]
    assert failed == []
    assert len(results) == len(domain.tasks)


def test_oracle_succeeds_on_generated_tasks(domain: Any) -> None:
    tasks = domain.generate_tasks(seed=123, n=90)
    failed = [(r.task_id, r.reason) for r in run_oracle(domain, tasks) if not r.success]
    assert failed == []


def test_a_wrong_write_fails_the_db_check(domain: Any) -> None:
    from pytest_quantagent.env.evaluate import evaluate
    from pytest_quantagent.vocab.channels import TerminationReason
    from pytest_quantagent.vocab.messages import AssistantMessage, ToolCall

    task = next(t for t in domain.tasks if kind_of(t) == "cancel")
    gold = task.evaluation_criteria.actions[-1]
    other = "ordered by mistake" if gold.arguments["reason"] == "no longer needed" else "no longer needed"
    call = ToolCall(id="x", name=gold.name, arguments={**gold.arguments, "reason": other})
    info = evaluate(domain, task, [AssistantMessage(tool_calls=[call])], TerminationReason.USER_STOP)
    assert info.db_match is False and info.reward == 0.0


# --------------------------------------------------------------------------- scripted user


def _user(domain: Any, kind: str) -> Any:
    task = next(t for t in domain.tasks if kind_of(t) == kind)
    user = domain.make_user(task, seed=0)
    assert user.respond_text("Hi! How can I help you today?") == task.user_scenario.script.requests[0]
    return task, user


def test_user_answers_compound_questions_without_confirming(domain: Any) -> None:
    task, user = _user(domain, "exchange")
    facts = task.user_scenario.script.facts
    reply = user.respond_text(
        "Which item would you like to exchange, and which payment method should I use for the difference?"
    )
    assert reply == f"{facts['item']} {facts['payment_method']}"
    assert user.respond_text("Which payment method would you like to use?") == facts["payment_method"]
    assert "yes" in user.respond_text("Do you confirm the exchange above (yes/no)?").lower()


def test_user_tells_confirm_which_from_confirmation_requests(domain: Any) -> None:
    task, user = _user(domain, "exchange")
    facts = task.user_scenario.script.facts
    assert user.respond_text("Could you confirm which item you want to exchange?") == facts["item"]
    summary = "I will exchange the item and charge the difference. Please confirm the items above (yes/no)."
    assert "yes" in user.respond_text(summary).lower()


def test_user_identifies_by_email_or_by_name_and_zip(domain: Any) -> None:
    for task in domain.tasks[:30]:
        user = domain.make_user(task, seed=0)
        user.respond_text("Hi! How can I help you today?")
        ident = task.user_scenario.script.identity
        reply = user.respond_text("Could you please provide your email address?")
        if "email" in ident:
            assert ident["email"] in reply
        else:
            assert ident["zip"] in reply and ident["last_name"] in reply


def test_user_accepts_a_refusal_only_in_refusal_tasks(domain: Any) -> None:
    refusal = "I'm sorry, but this order cannot be cancelled because it is not pending."
    _, user = _user(domain, "refuse_cancel")
    assert user.respond_text(refusal).endswith(STOP_TOKEN)
    _, user = _user(domain, "cancel")
    assert STOP_TOKEN not in user.respond_text(refusal)


def test_user_answers_reason_address_and_stops_or_transfers(domain: Any) -> None:
    task, user = _user(domain, "cancel")
    assert user.respond_text("What is the reason for the cancellation?") == task.user_scenario.script.facts["reason"]
    assert user.respond_text("Done. Is there anything else I can help you with?").endswith(STOP_TOKEN)
    task, user = _user(domain, "modify_address")
    assert user.respond_text("What is the new shipping address?") == task.user_scenario.script.facts["address"]
    _, user = _user(domain, "transfer")
    assert user.respond_text("YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON.") == TRANSFER_TOKEN


def test_user_does_not_guess_unanswerable_questions_then_stops(domain: Any) -> None:
    _task, user = _user(domain, "info_balance")
    first = user.respond_text("Which order number is this about?")
    # The scenario has no order: the customer says it does not know (no guess, no "yes").
    assert "don't know" in first and "yes" not in first.lower()
    user.respond_text("Which order number is this about?")
    assert user.respond_text("Which order number is this about?").endswith(STOP_TOKEN)


def test_policy_is_ours_and_names_the_rules(domain: Any) -> None:
    policy = domain.policy
    for rule in ("no longer needed", "ordered by mistake", "transfer_to_human_agents", "gift card"):
        assert rule in policy
    tau_first_line = "# Retail agent policy"
    assert not policy.startswith(tau_first_line)
    json.loads((RETAIL_DIR / "split_tasks.json").read_text())

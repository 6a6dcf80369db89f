"""The training loop learns *next*-token prediction (label alignment) on a tiny model."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pytest_quantagent.bundled.chat import render_messages  # noqa: E402
from pytest_quantagent.bundled.model import ModelSize, make_model  # noqa: E402
from pytest_quantagent.bundled.tokenizer import DomainTokenizer  # noqa: E402
from pytest_quantagent.training.train import (  # noqa: E402
    PackedRows,
    TrainConfig,
    agent_loss_mask,
    lr_at,
    train,
    weighted_lm_loss,
)

EPISODE = render_messages(
    [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "Could you please provide your email?"}],
    add_generation_prompt=False,
)


def test_rows_are_bos_aligned_and_labels_unshifted() -> None:
    eps = [np.arange(10, 20), np.arange(30, 35)]
    masks = [np.array([0, 1] * 5, dtype=np.uint8), np.ones(5, dtype=np.uint8)]
    rows = PackedRows(eps, masks, seq_len=12, seed=0)
    x, y = rows.batch(8)
    for xr, yr in zip(x, y, strict=True):
        assert xr[0] in (10, 30)  # every row starts at an episode start
        # HF shifts labels itself: label i is token i (or -100), never token i + 1.
        assert np.all((yr == xr) | (yr == -100))


def test_agent_mask_covers_assistant_turns_only() -> None:
    tok = DomainTokenizer.build([EPISODE] * 3, min_word_count=1)
    ids = tok.encode(EPISODE)
    mask = agent_loss_mask(ids, tok)
    text = tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert text == "Could you please provide your email?<|end|>"


def test_lr_schedule_holds_then_decays() -> None:
    cfg = TrainConfig(budget_s=100, lr=1e-3, warmup_steps=10, hold_frac=0.5, min_lr_frac=0.1)
    assert lr_at(cfg, 0, 0) == pytest.approx(1e-4)
    assert lr_at(cfg, 50, 40) == pytest.approx(1e-3)
    assert lr_at(cfg, 50, 75) == pytest.approx(1e-4 + 0.9e-3 * 0.5)
    assert lr_at(cfg, 50, 100) == pytest.approx(1e-4)


def test_tiny_model_learns_to_continue_the_agent_turn() -> None:
    tok = DomainTokenizer.build([EPISODE] * 3, min_word_count=1)
    ids = tok.encode(EPISODE)
    model = make_model(tok, ModelSize(hidden=32, layers=1, heads=2, mlp=64, max_positions=64), seed=0)
    cfg = TrainConfig(budget_s=6.0, seq_len=len(ids), batch=4, lr=1e-2, warmup_steps=5, log_every=10**9)
    train(model, [np.array(ids)], [agent_loss_mask(ids, tok)], cfg, log=lambda _m: None)
    prompt = tok.encode(EPISODE.split("<|assistant|>")[0] + "<|assistant|>")
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                             eos_token_id=tok.end_id, pad_token_id=tok.pad_id)
    assert tok.decode(out[0, len(prompt):].tolist()).startswith("Could you please provide")


def test_weighted_loss_with_unit_weights_is_the_hf_loss() -> None:
    tok = DomainTokenizer.build([EPISODE] * 3, min_word_count=1)
    ids = tok.encode(EPISODE)
    model = make_model(tok, ModelSize(hidden=32, layers=1, heads=2, mlp=64, max_positions=64), seed=0)
    x = torch.tensor([ids, ids[::-1]])
    mask = torch.from_numpy(np.stack([agent_loss_mask(ids, tok), agent_loss_mask(ids[::-1], tok)])).bool()
    y = torch.where(mask, x, torch.full_like(x, -100))
    with torch.no_grad():
        hf = model(input_ids=x, labels=y).loss
        ours = weighted_lm_loss(model, x, y, torch.ones(x.shape))
        # Doubling the weight of one label moves the mean towards that label's loss.
        w = torch.ones(x.shape)
        w[0, int(torch.nonzero(y[0] != -100)[0])] = 2.0
        heavier = weighted_lm_loss(model, x, y, w)
    assert float(ours) == pytest.approx(float(hf), rel=1e-5)
    assert float(heavier) != pytest.approx(float(hf), rel=1e-6)


def test_copies_are_agent_tokens_seen_earlier_outside_the_agent_turns() -> None:
    # token 7 appears in the user's text (mask 0) and then in the agent's turn: a copy;
    # token 9 is new in the agent's turn; token 5 is the most frequent one (structure).
    ep = np.array([1, 5, 7, 5, 2, 5, 7, 9, 5, 7])
    mask = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1], dtype=np.uint8)
    rows = PackedRows([ep], [mask], seq_len=10, seed=0, frequent_tokens=1)
    x, y, copies = rows.batch_with_copies(1)
    assert x[0].tolist() == ep.tolist()
    assert y[0].tolist() == [-100] * 5 + [5, 7, 9, 5, 7]
    assert copies[0].tolist() == [False] * 6 + [True, False, False, True]


def test_alias_tokens_count_as_copies_however_frequent_they_are() -> None:
    from pytest_quantagent.bundled.tokenizer import DEFAULT_ALIASES
    from pytest_quantagent.training.train import copy_frequent_mask

    text = render_messages([{"role": "user", "content": "Cancel #W1234567 please"},
                            {"role": "assistant", "content": "Cancelling #W1234567 now"}], add_generation_prompt=False)
    tok = DomainTokenizer.build([text] * 20, min_word_count=1, aliases=DEFAULT_ALIASES)
    ids = np.array(tok.encode(text))
    order1 = tok.token_id("<order1>")
    uniq = np.unique(ids)
    mask = copy_frequent_mask([ids], tok, n=len(uniq))  # "every token is frequent"
    assert len(mask) == tok.vocab_size
    assert mask[uniq].sum() == len(uniq) - 1 and not mask[order1]
    rows = PackedRows([ids], [agent_loss_mask(ids.tolist(), tok)], seq_len=len(ids), seed=0, frequent=mask)
    x, _, copies = rows.batch_with_copies(1)
    assert [int(t) for t in x[0][copies[0]]] == [order1]  # the agent's alias, copied from the user


def test_id_remapping_is_one_bijection_per_row_within_each_class() -> None:
    # tokens 20..23 form one id class, 30..31 another; 5 and 7 are not ids.
    ep = np.array([1, 20, 5, 30, 21, 7, 20, 30, 21, 5])
    mask = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1], dtype=np.uint8)
    classes = [np.arange(20, 24), np.arange(30, 32)]
    rows = PackedRows([ep], [mask], seq_len=10, seed=0, frequent_tokens=1, remap=classes)
    plain = PackedRows([ep], [mask], seq_len=10, seed=0, frequent_tokens=1)
    seen = set()
    for _ in range(40):
        x, y, copies = rows.batch_with_copies(1)
        row = x[0]
        # non-id tokens are untouched; ids stay in their class; equal ids stay equal and
        # different ids stay different (a bijection), so the episode is still consistent
        assert row[[0, 2, 5, 9]].tolist() == [1, 5, 7, 5]
        assert set(row[[1, 4, 6, 8]]) <= set(range(20, 24)) and set(row[[3, 7]]) <= {30, 31}
        assert row[1] == row[6] and row[4] == row[8] and row[1] != row[4] and row[3] == row[7]
        assert np.all((y[0] == row) | (y[0] == -100))
        # what counts as a copy does not depend on which tokens the ids became
        assert copies[0].tolist() == plain.batch_with_copies(1)[2][0].tolist()
        seen.add((int(row[1]), int(row[4])))
    assert len(seen) > 5  # the mapping changes from row to row


def test_remap_classes_group_entity_ids_by_shape_and_leave_numbers_alone() -> None:
    from pytest_quantagent.training.train import remap_classes

    orders = [f"#W{1000000 + 37 * i}" for i in range(25)]
    amounts = [f"{100 + i}.5" for i in range(25)]
    emails = ["alice.smith1234@example.com", "alice.smith9876@example.com"]
    tok = DomainTokenizer.build([EPISODE], orders + amounts + emails + ["#W12"], min_word_count=1)
    classes = [sorted(tok.id_to_piece(int(i)) for i in c) for c in remap_classes(tok)]
    assert sorted(orders) in classes
    assert sorted(emails) in classes  # an email class counts from two members
    flat = {p for c in classes for p in c}
    assert not flat & set(amounts) and "#W12" not in flat


def test_remap_ids_without_classes_is_an_error() -> None:
    tok = DomainTokenizer.build([EPISODE] * 3, min_word_count=1)
    model = make_model(tok, ModelSize(hidden=16, layers=1, heads=2, mlp=32), seed=0)
    ids = tok.encode(EPISODE)
    with pytest.raises(ValueError, match="remap_ids"):
        train(model, [np.array(ids)], [agent_loss_mask(ids, tok)], TrainConfig(budget_s=1, remap_ids=True))
    with pytest.raises(ValueError, match="nor drill_rows is on"):
        train(model, [np.array(ids)], [agent_loss_mask(ids, tok)], TrainConfig(budget_s=1),
              remap=[np.arange(3)])


def test_remap_prob_zero_keeps_every_row_and_half_remaps_some() -> None:
    ep = np.array([1, 20, 5, 21, 7, 20, 21, 5])
    mask = np.array([0, 0, 0, 0, 1, 1, 1, 1], dtype=np.uint8)
    classes = [np.arange(20, 30)]
    never = PackedRows([ep], [mask], seq_len=8, seed=0, remap=classes, remap_prob=0.0)
    assert all(never.batch(1)[0][0].tolist() == ep.tolist() for _ in range(20))
    half = PackedRows([ep], [mask], seq_len=8, seed=0, remap=classes, remap_prob=0.5)
    same = sum(half.batch(1)[0][0].tolist() == ep.tolist() for _ in range(200))
    assert 60 < same < 150  # about half kept (a remapped row equals the original 1% of the time)


def test_head_dim_widens_attention_and_survives_a_save_load(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from transformers import LlamaForCausalLM

    from pytest_quantagent.training.train import save_model

    tok = DomainTokenizer.build([EPISODE] * 3, min_word_count=1)
    size = ModelSize(hidden=32, layers=1, heads=2, mlp=64, max_positions=64, head_dim=24)
    model = make_model(tok, size, seed=0)
    attn = model.model.layers[0].self_attn
    # 2 heads x 24 = 48 wide q/k/v/o, although hidden // heads would be 16.
    assert attn.q_proj.weight.shape == (48, 32)
    assert attn.o_proj.weight.shape == (32, 48)
    assert make_model(tok, ModelSize(hidden=32, layers=1, heads=2, mlp=64)).config.head_dim == 16
    save_model(model, tok, tmp_path)
    loaded = LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    x = torch.tensor([tok.encode(EPISODE)])
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=x).logits, model(input_ids=x).logits)


def test_kind_init_gives_each_id_kind_one_shared_direction() -> None:
    from pytest_quantagent.training.train import id_kinds, kind_init

    orders = [f"#W{1000000 + 37 * i}" for i in range(25)]
    zips = [f"{10000 + 97 * i}" for i in range(25)]
    emails = ["alice.smith1234@example.com", "bo.li5678@example.com"]  # different surnames: one kind
    tok = DomainTokenizer.build([EPISODE], orders + zips + emails, min_word_count=1)
    kinds = [sorted(tok.id_to_piece(int(i)) for i in k) for k in id_kinds(tok)]
    assert sorted(orders) in kinds and sorted(zips) in kinds and sorted(emails) in kinds
    model = make_model(tok, ModelSize(hidden=32, layers=1, heads=2, mlp=32, tied=True), seed=0)
    before = model.get_input_embeddings().weight.detach().clone()
    kind_init(model, id_kinds(tok), scale=3.0, seed=0)
    after = model.get_input_embeddings().weight.detach()
    delta = after - before
    order_ids = [tok.token_id(p) for p in orders]
    zip_ids = [tok.token_id(p) for p in zips]
    # one shared vector per kind, none elsewhere
    assert np.allclose(delta[order_ids].numpy(), delta[order_ids[0]].numpy())
    assert delta[order_ids[0]].norm() > 0 and not np.allclose(delta[order_ids[0]].numpy(), delta[zip_ids[0]].numpy())
    others = sorted(set(range(tok.vocab_size)) - {tok.token_id(p) for p in orders + zips + emails})
    assert delta[others].abs().max() == 0
    # members of a kind are now closer to each other than to other tokens (cosine)
    e = after / after.norm(dim=1, keepdim=True)
    within = (e[order_ids] @ e[order_ids].T).mean()
    across = (e[order_ids] @ e[zip_ids].T).mean()
    assert within > across + 0.3
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def _drill_episode() -> str:
    return render_messages([
        {"role": "user", "content": "Cancel order #W1000037 please."},
        {"role": "assistant", "content": "Could you please provide your email?"},
        {"role": "user", "content": "My email is alice.smith1234@example.com."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "find_user_id_by_email", "arguments": '{"email":"alice.smith1234@example.com"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "alice_smith_1234"},
        {"role": "assistant", "content": "Thanks."},
    ], add_generation_prompt=False)


def test_copy_drills_crop_each_copying_turn_with_its_evidence() -> None:
    from pytest_quantagent.training.train import copy_drills

    text = _drill_episode()
    tok = DomainTokenizer.build([text] * 3, ["#W1000037", "alice.smith1234@example.com"], min_word_count=1)
    ids = np.array(tok.encode(text))
    mask = agent_loss_mask(ids.tolist(), tok)
    # every token but the two ids counts as frequent (a one-episode corpus has no frequencies)
    frequent = np.ones(tok.vocab_size, dtype=bool)
    frequent[[tok.token_id("#W1000037"), tok.token_id("alice.smith1234@example.com")]] = False
    crops, masks = copy_drills([ids], [mask], tok, frequent=frequent, min_back=2, max_back=2, seed=0)
    # Only the call copies a value (the email); the question and "Thanks." copy nothing.
    assert len(crops) == 1
    crop, m = crops[0], masks[0].astype(bool)
    assert crop[0] == tok.bos_id
    assert tok.decode(crop[m].tolist()).startswith('<|call|>{"name":"find_user_id_by_email"')
    assert tok.decode(crop[m].tolist()).endswith("<|end|>")
    # Two messages back: the email question and the user's answer, not the opening request.
    context = tok.decode(crop[~m].tolist())
    assert "alice.smith1234@example.com" in context and "#W1000037" not in context
    assert context.startswith("<bos><|assistant|>Could you please provide your email?")
    with pytest.raises(ValueError, match="min_back"):
        copy_drills([ids], [mask], tok, min_back=3, max_back=2)


def test_drill_rows_are_remapped_and_fill_their_share_of_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    orders = [f"#W{1000000 + 37 * i}" for i in range(25)]
    text = render_messages([
        {"role": "user", "content": "The order id is #W1000037."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "get_order_details", "arguments": '{"order_id":"#W1000037"}'}}]},
    ], add_generation_prompt=False)
    from pytest_quantagent.training.train import copy_drills, remap_classes

    tok = DomainTokenizer.build([text] * 3, orders, min_word_count=1)
    ids = np.array(tok.encode(text))
    mask = agent_loss_mask(ids.tolist(), tok)
    frequent = np.array([tok.id_to_piece(i) not in orders for i in range(tok.vocab_size)])
    drills = copy_drills([ids], [mask], tok, frequent=frequent, min_back=1, max_back=1)
    assert len(drills[0]) == 1
    model = make_model(tok, ModelSize(hidden=16, layers=1, heads=2, mlp=32, max_positions=64), seed=0)
    seen: list[np.ndarray] = []
    original = PackedRows.batch_with_copies

    def spy(self, n):  # type: ignore[no-untyped-def]
        out = original(self, n)
        seen.append(out[0])
        return out

    cfg = TrainConfig(budget_s=0.5, seq_len=len(ids), batch=3, drill_rows=1, log_every=10**9)
    classes = remap_classes(tok)
    monkeypatch.setattr(PackedRows, "batch_with_copies", spy)
    train(model, [ids], [mask], cfg, log=lambda _m: None, remap=classes, drills=drills)
    monkeypatch.undo()
    episode_batches, drill_batches = seen[0::2], seen[1::2]
    assert all(b.shape[0] == 2 for b in episode_batches) and all(b.shape[0] == 1 for b in drill_batches)
    order_tok = tok.token_id("#W1000037")
    # episode rows keep the real id (remap_ids is off); drill rows get a random one, the
    # same token in the user's message and in the call
    assert all((b == order_tok).sum() == 2 * 2 for b in episode_batches)
    drawn = set()
    for b in drill_batches:
        ids_in_row = [t for t in b[0].tolist() if tok.id_to_piece(t) in orders]
        assert len(ids_in_row) == 2 and ids_in_row[0] == ids_in_row[1]
        drawn.add(ids_in_row[0])
    assert len(drawn) > 1
    with pytest.raises(ValueError, match="drill_rows must be in"):
        train(model, [ids], [mask], TrainConfig(budget_s=1, batch=2, drill_rows=2), remap=classes, drills=drills)
    with pytest.raises(ValueError, match="no copy drills"):
        train(model, [ids], [mask], TrainConfig(budget_s=1, drill_rows=1), remap=classes)


def test_copy_head_init_makes_the_heads_output_value_circuit_a_projection() -> None:
    from pytest_quantagent.training.train import copy_head_init

    tok = DomainTokenizer.build([EPISODE] * 3, min_word_count=1)
    model = make_model(tok, ModelSize(hidden=32, layers=2, heads=4, mlp=64, tied=True, head_dim=8), seed=0)
    before = model.model.layers[0].self_attn.v_proj.weight.detach().clone()
    copy_head_init(model, heads=2, seed=0)
    attn = model.model.layers[-1].self_attn
    for h in range(2):
        ov = attn.o_proj.weight[:, h * 8:(h + 1) * 8] @ attn.v_proj.weight[h * 8:(h + 1) * 8, :]
        # symmetric, idempotent, rank 8: an orthogonal projection onto the head's subspace
        torch.testing.assert_close(ov, ov.T)
        torch.testing.assert_close(ov @ ov, ov, atol=1e-5, rtol=1e-5)
        assert torch.linalg.matrix_rank(ov) == 8
    ov0 = attn.o_proj.weight[:, :8] @ attn.v_proj.weight[:8, :]
    ov1 = attn.o_proj.weight[:, 8:16] @ attn.v_proj.weight[8:16, :]
    torch.testing.assert_close(ov0 @ ov1, torch.zeros_like(ov0), atol=1e-5, rtol=0)  # disjoint subspaces
    # an attended token's own logit rises: e_t . (P e_t) = |P e_t|^2 > 0 for every token
    emb = model.get_input_embeddings().weight.detach()
    emb = emb[emb.norm(dim=1) > 0]  # (the padding row is zero)
    assert len(emb) > 100 and bool(((emb @ ov0) * emb).sum(dim=1).gt(0).all())
    torch.testing.assert_close(model.model.layers[0].self_attn.v_proj.weight, before)  # other layers untouched
    with pytest.raises(ValueError, match="tied embeddings"):
        copy_head_init(make_model(tok, ModelSize(hidden=32, layers=1, heads=4, mlp=64), seed=0))
    with pytest.raises(ValueError, match="heads must be in"):
        copy_head_init(model, heads=5)


def test_added_aliases_keep_every_id_and_start_as_their_source_rows() -> None:
    from pytest_quantagent.bundled.tokenizer import DEFAULT_ALIASES, AliasKind
    from pytest_quantagent.training.train import extend_embeddings

    text = "Cancel #W1234567; my zip is 12345 and my phone 555-0109" * 3
    old = DomainTokenizer.build([text] * 20, ["555-0109"], min_word_count=1, aliases=DEFAULT_ALIASES)
    assert "555-0109" in old.pieces
    new = old.with_aliases([AliasKind("phone", r"[0-9]{3}-[0-9]{4}", 2)])
    assert new.vocab_size == old.vocab_size + 2
    got = [new.id_to_piece(i) for i in new.encode(text)]
    assert "<phone1>" in got and "555-0109" not in got  # the new kind wins over the old piece
    assert new.alias_map(text)["<phone1>"] == "555-0109"
    assert old.encode("Cancel #W1234567") == new.encode("Cancel #W1234567")
    model = make_model(old, ModelSize(hidden=16, layers=1, heads=2, mlp=32, max_positions=64, tied=True))
    before = model.get_input_embeddings().weight.detach().clone()
    extend_embeddings(model, old, new, init_from={"<phone1>": "<zip1>"})
    w = model.get_input_embeddings().weight
    assert w.shape[0] == new.vocab_size and torch.equal(w[: old.vocab_size], before)
    assert torch.equal(w[new.token_id("<phone1>")], before[old.token_id("<zip1>")])
    assert model.get_output_embeddings().weight.shape[0] == new.vocab_size
    with pytest.raises(ValueError, match="must extend the old one"):
        extend_embeddings(model, new, old)

"""The training loop learns *next*-token prediction (label alignment) on a tiny model."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pytest_quantagent.reference.chat import render_messages  # noqa: E402
from pytest_quantagent.reference.model import ModelSize, make_model  # noqa: E402
from pytest_quantagent.reference.tokenizer import DomainTokenizer  # noqa: E402
from pytest_quantagent.reference.train import (  # noqa: E402
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
    from pytest_quantagent.reference.train import remap_classes

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
    with pytest.raises(ValueError, match="remap_ids is off"):
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

    from pytest_quantagent.reference.train import save_model

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
    from pytest_quantagent.reference.train import id_kinds, kind_init

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

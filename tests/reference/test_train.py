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

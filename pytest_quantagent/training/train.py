"""Training loop of the reference agent (CPU, one thread, wall-clock schedule).

Choices, from the feasibility notes:

- **BOS-aligned packed rows.** Each row starts at an episode start and continues into the
  next episodes, so every id the agent must copy has its source inside the window.
- **Loss on the agent's tokens only** (from after ``<|assistant|>`` through ``<|end|>``):
  user turns and tool results are context, not behaviour to imitate.
- **Hold-then-decay learning rate on wall time**: copying emerges late (1–2.5 k steps) and
  was seen to stall once a cosine had already decayed, so the rate is held for
  ``hold_frac`` of the budget and then decays (cosine) to ``min_lr_frac``.
- **Logits only where there is a label.** The output layer (vocabulary × hidden) is about
  a third of the model's compute per token, and only the agent's tokens carry a loss, so
  the head runs on those positions alone (same loss, ~1.4× the tokens per second).
- **Copy weight.** An agent token that copies a value from the user's or a tool's text
  earlier in the row (an id, a name, a zip, a city: any token outside the corpus's most
  frequent ones that appeared there first) weighs ``copy_weight`` in the loss. Those few
  tokens decide whether a call hits the right entity; at weight 1 they are a few percent of
  the loss and copying emerges late.
- **Entity-id remapping** (``remap_ids``). Every row applies its own random bijection to
  the entity-id tokens of each id shape (order ids, payment-method ids, item and product
  ids, zips: see :func:`remap_classes`), the same in the user's, the tools' and the
  agent's text. The episode stays consistent, but which token is the right one can only be
  read from the context, so the model cannot get by on per-token memory of the training
  database and must learn one copy mechanism that serves every id, including the ones the
  test tasks use. Without it, whether an id was copied depended on how often that very
  token had been a target in training.
- **Copy drills** (``drill_rows``). Short crops of the corpus, each ending at an agent
  turn that copies a value (a call with an id, an answer with an amount) and starting a
  few messages earlier, always id-remapped, fill ``drill_rows`` rows of every batch (see
  :func:`copy_drills`). A drill row holds a copy decision every hundred tokens or so
  instead of a few per thousand, and its ids can only be copied, so the copy mechanism
  gets a dense signal while the other rows teach the dialogue on real ids.
- ``torch.set_num_threads(1)``: two threads on two busy cores run several times slower.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM

    from pytest_quantagent.bundled.tokenizer import DomainTokenizer


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings."""

    budget_s: float = 1800.0
    seq_len: int = 1024
    batch: int = 3
    lr: float = 2e-3
    min_lr_frac: float = 0.05
    warmup_steps: int = 100
    hold_frac: float = 0.6
    weight_decay: float = 0.05
    grad_clip: float = 1.0
    seed: int = 0
    log_every: int = 50
    checkpoint_every_s: float = 300.0
    copy_weight: float = 1.0
    """Loss weight of agent tokens copied from user/tool text (1: plain mean)."""
    frequent_tokens: int = 300
    """The corpus's most frequent tokens never count as copies (JSON keys, punctuation)."""
    remap_ids: bool = False
    """Apply a random per-row bijection within each entity-id class (see module doc)."""
    remap_prob: float = 1.0
    """Share of rows that are remapped when ``remap_ids`` (the rest keep the real ids)."""
    drill_rows: int = 0
    """Rows of each batch (of ``batch``) drawn from copy drills (see :func:`copy_drills`)."""


@dataclass
class TrainStats:
    """What a training run did."""

    steps: int = 0
    tokens: int = 0
    seconds: float = 0.0
    final_loss_ema: float = float("nan")
    loss_curve: list[tuple[int, float, float]] = field(default_factory=list)
    """(step, elapsed seconds, loss EMA) every ``log_every`` steps."""


def agent_loss_mask(ids: Sequence[int], tokenizer: DomainTokenizer) -> np.ndarray:
    """1 for tokens the agent produced (after ``<|assistant|>`` up to and incl. ``<|end|>``)."""
    mask = np.zeros(len(ids), dtype=np.uint8)
    inside = False
    a, e = tokenizer.assistant_id, tokenizer.end_id
    for i, t in enumerate(ids):
        if inside:
            mask[i] = 1
            if t == e:
                inside = False
        elif t == a:
            inside = True
    return mask


def lr_at(cfg: TrainConfig, step: int, elapsed: float) -> float:
    """Learning rate at ``step`` after ``elapsed`` seconds (warmup, hold, cosine decay)."""
    warm = min(1.0, (step + 1) / max(1, cfg.warmup_steps))
    t = min(1.0, elapsed / cfg.budget_s)
    if t <= cfg.hold_frac:
        scale = 1.0
    else:
        u = (t - cfg.hold_frac) / max(1e-9, 1.0 - cfg.hold_frac)
        scale = cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * u))
    return cfg.lr * warm * scale


def remap_classes(tokenizer: DomainTokenizer, *, min_digits: int = 5, min_members: int = 20) -> list[np.ndarray]:
    """Token ids of the entity-id vocabulary, grouped by id shape (digits → ``0``).

    A class is a shape with at least ``min_digits`` digits, no date, time or decimal
    characters (``- : .``), and at least ``min_members`` tokens: order ids ``#W0000000``,
    ``paypal_0000000``-style payment ids, 10- and 12-digit item and product ids, 5-digit
    zips. Email tails (``.romero0000@example.com``: one class per surname) count from two
    members. Amounts, dates and short codes keep their meaning and are never remapped."""
    from pytest_quantagent.bundled.tokenizer import is_id_like
    from pytest_quantagent.training.expert import id_shape

    by_shape: dict[str, list[int]] = {}
    for i in range(tokenizer.vocab_size):
        piece = tokenizer.id_to_piece(i)
        if not is_id_like(piece):
            continue
        email = "@" in piece
        if not email and (any(c in piece for c in "-:.") or sum(c.isdigit() for c in piece) < min_digits):
            continue
        by_shape.setdefault(id_shape(piece), []).append(i)
    return [np.array(v, dtype=np.int64) for k, v in sorted(by_shape.items())
            if len(v) >= (2 if "@" in k else min_members)]


def id_kinds(tokenizer: DomainTokenizer) -> list[np.ndarray]:
    """Token ids of the entity-id vocabulary grouped by kind: the id classes of
    :func:`remap_classes` (order, payment, item, product ids, zips), with every email token
    in one kind."""
    from pytest_quantagent.bundled.tokenizer import is_id_like

    kinds = [c for c in remap_classes(tokenizer) if "@" not in tokenizer.id_to_piece(int(c[0]))]
    emails = [i for i in range(tokenizer.vocab_size)
              if "@" in tokenizer.id_to_piece(i) and is_id_like(tokenizer.id_to_piece(i))]
    if emails:
        kinds.append(np.array(emails, dtype=np.int64))
    return kinds


def kind_init(model: LlamaForCausalLM, kinds: Sequence[np.ndarray], *, scale: float = 1.0, seed: int = 0) -> None:
    """Add one shared random vector per id kind to those tokens' input embeddings (and so,
    when tied, to their output rows), ``scale`` times the init std per element.

    A rare id token's embedding barely moves in a short run; with a kind component from the
    start, attention can find "a payment id" in the context by kind, and the token's own
    random part tells the output which one to copy."""
    import torch

    emb: torch.Tensor = model.get_input_embeddings().weight  # type: ignore[assignment]
    std = float(model.config.initializer_range)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for k in kinds:
            shared = torch.randn(int(emb.shape[1]), generator=gen) * std * scale
            emb[torch.as_tensor(k)] += shared.to(emb.dtype)


def frequent_mask(ids: np.ndarray, n: int) -> np.ndarray:
    """Boolean mask over token ids (up to the largest in ``ids``) of the ``n`` most frequent
    tokens of ``ids``: the ones that never count as copies."""
    counts = np.bincount(ids)
    mask = np.zeros(len(counts), dtype=bool)
    mask[np.argsort(-counts, kind="stable")[:n]] = True
    return mask


def extend_embeddings(model: LlamaForCausalLM, old: DomainTokenizer, new: DomainTokenizer,
                      init_from: dict[str, str] | None = None) -> None:
    """Grow ``model``'s vocabulary from ``old`` to ``new`` (= ``old.with_aliases(...)``:
    the same ids, more alias tokens at the end). Each new token's rows start as a copy of
    the rows of the token named in ``init_from`` (say ``<phone1>`` from ``<zip1>``, so that
    it starts out as "the first alias of its kind"), else as the mean embedding."""
    import torch

    if new.vocab_size < old.vocab_size or new.pieces != old.pieces:
        raise ValueError("extend_embeddings: the new tokenizer must extend the old one (same pieces, more aliases)")
    model.resize_token_embeddings(new.vocab_size, mean_resizing=True)
    init_from = init_from or {}
    mats: list[torch.Tensor] = [model.get_input_embeddings().weight]  # type: ignore[list-item]
    if not model.config.tie_word_embeddings:
        mats.append(model.lm_head.weight)
    with torch.no_grad():
        for tok_text, src in init_from.items():
            for w in mats:
                w[new.token_id(tok_text)] = w[old.token_id(src)]


def copy_frequent_mask(episodes: Sequence[np.ndarray], tokenizer: DomainTokenizer, n: int = 300) -> np.ndarray:
    """:func:`frequent_mask` of the episodes, except that alias tokens (see
    ``bundled/tokenizer.py``) always count as copies: they are among the most frequent
    tokens, yet each one's meaning is only in its episode's context."""
    ids = np.concatenate([np.asarray(e, dtype=np.int64) for e in episodes])
    mask = frequent_mask(ids, n)
    mask = np.pad(mask, (0, max(0, tokenizer.vocab_size - len(mask))))
    mask[tokenizer.alias_offset:] = False
    return mask


def copy_drills(
    episodes: Sequence[np.ndarray], masks: Sequence[np.ndarray], tokenizer: DomainTokenizer, *,
    frequent_tokens: int = 300, frequent: np.ndarray | None = None, min_back: int = 3, max_back: int = 8,
    seed: int = 0,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Crops of ``episodes`` for copy drills: (token ids, agent-token masks).

    One crop per agent turn that copies a value, i.e. holds a token outside the corpus's
    ``frequent_tokens`` most frequent ones that the user's or a tool's text of the crop
    already holds (``frequent``: a boolean mask over token ids that overrides that
    count). The crop is ``<bos>`` plus the messages from ``min_back``–``max_back``
    messages (drawn per crop) before that turn through its ``<|end|>``; the mask keeps only
    that last turn, so each crop is one decision with its evidence close by. The crops come
    back in a shuffled order, deterministic for a ``seed``."""
    from pytest_quantagent.bundled.tokenizer import ASSISTANT, SYSTEM, TOOL, USER

    if min_back < 1 or max_back < min_back:
        raise ValueError(f"copy_drills: need 1 <= min_back <= max_back, got min_back={min_back}, max_back={max_back}")
    rng = np.random.default_rng(seed)
    starts_of = {tokenizer.token_id(t) for t in (USER, TOOL, ASSISTANT, SYSTEM)}
    if frequent is None:
        frequent = frequent_mask(np.concatenate([np.asarray(e, dtype=np.int64) for e in episodes]), frequent_tokens)
    out_ids: list[np.ndarray] = []
    out_masks: list[np.ndarray] = []
    bos = np.array([tokenizer.bos_id], dtype=np.int64)
    for ep, m in zip(episodes, masks, strict=True):
        ep = np.asarray(ep, dtype=np.int64)
        m = np.asarray(m, dtype=bool)
        msg_starts = [i for i, t in enumerate(ep.tolist()) if t in starts_of]
        for j, s in enumerate(msg_starts):
            if ep[s] != tokenizer.assistant_id or j == 0:
                continue
            end = msg_starts[j + 1] if j + 1 < len(msg_starts) else len(ep)
            back = int(rng.integers(min_back, max_back + 1))
            c0 = msg_starts[max(0, j - back)]
            context = ep[c0:s][~m[c0:s]]
            turn = ep[s:end][m[s:end]]
            if not np.isin(turn[~frequent[turn]], context).any():
                continue
            out_ids.append(np.concatenate([bos, ep[c0:end]]))
            keep = np.zeros(end - c0 + 1, dtype=np.uint8)
            keep[1 + s - c0:] = m[s:end]
            out_masks.append(keep)
    # Shuffled: rows pack crops back to back, and one episode's crops side by side would
    # let a later crop copy from an earlier one instead of from its own evidence.
    order = rng.permutation(len(out_ids))
    return [out_ids[i] for i in order], [out_masks[i] for i in order]


def copy_head_init(model: LlamaForCausalLM, *, layer: int = -1, heads: int = 1, scale: float = 1.0,
                   seed: int = 0) -> None:
    """Initialise ``heads`` attention heads of ``layer`` as copy heads: each head's value
    and output projections become ``scale`` times one orthonormal basis of its own
    ``head_dim``-wide subspace of the hidden space (the heads' subspaces are disjoint), so
    its output-value circuit is a projection. With tied embeddings, such a head raises the
    logit of whatever token it attends to from the first step, and training only has to
    learn *where* to look (query and key), not also how to pass a token's identity on.

    Needs tied embeddings and ``heads * head_dim <= hidden``."""
    import torch

    cfg = model.config
    if not cfg.tie_word_embeddings:
        raise ValueError("copy_head_init needs tied embeddings (ModelSize(tied=True), train_reference.py --tied)")
    hidden = int(cfg.hidden_size)
    n_kv = int(cfg.num_key_value_heads or cfg.num_attention_heads)
    hd = int(cfg.head_dim or hidden // int(cfg.num_attention_heads))
    if not 1 <= heads <= n_kv or heads * hd > hidden:
        raise ValueError(f"copy_head_init: heads must be in [1, {min(n_kv, hidden // hd)}] "
                         f"(heads x head_dim {hd} <= hidden {hidden}), got {heads}")
    attn = model.model.layers[layer].self_attn
    gen = torch.Generator().manual_seed(seed)
    basis, _ = torch.linalg.qr(torch.randn(hidden, hidden, generator=gen))  # orthonormal columns
    with torch.no_grad():
        for h in range(heads):
            u = basis[:, h * hd:(h + 1) * hd]  # hidden x hd
            attn.v_proj.weight[h * hd:(h + 1) * hd, :] = (scale * u.T).to(attn.v_proj.weight.dtype)
            attn.o_proj.weight[:, h * hd:(h + 1) * hd] = u.to(attn.o_proj.weight.dtype)


class PackedRows:
    """Samples BOS-aligned rows of ``seq_len`` tokens from tokenised episodes."""

    def __init__(
        self, episodes: Sequence[np.ndarray], masks: Sequence[np.ndarray], seq_len: int, seed: int,
        *, frequent_tokens: int = 300, remap: Sequence[np.ndarray] = (), remap_prob: float = 1.0,
        frequent: np.ndarray | None = None,
    ) -> None:
        """``frequent``: a boolean mask over token ids of the tokens that never count as
        copies (default: these episodes' ``frequent_tokens`` most frequent ones)."""
        if not episodes:
            raise ValueError("no training episodes")
        self.ids = np.concatenate(episodes).astype(np.int64)
        self.mask = np.concatenate(masks).astype(bool)
        lengths = np.array([len(e) for e in episodes])
        self.starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        self.seq_len = seq_len
        self.rng = np.random.default_rng(seed)
        if frequent is None:
            frequent = frequent_mask(self.ids, frequent_tokens)
        size = int(self.ids.max()) + 1
        self.remap = [np.asarray(c, dtype=np.int64) for c in remap]
        self.remap_prob = remap_prob
        if self.remap:
            size = max(size, int(max(c.max() for c in self.remap)) + 1)
            self._identity = np.arange(size, dtype=np.int64)
        self.frequent = np.pad(frequent, (0, max(0, size - len(frequent))))

    def _remapped(self, chunk: np.ndarray) -> np.ndarray:
        if not self.remap or (self.remap_prob < 1.0 and self.rng.random() >= self.remap_prob):
            return chunk
        perm: np.ndarray = self._identity.copy()
        for members in self.remap:
            perm[members] = self.rng.permutation(members)
        out: np.ndarray = perm[chunk]
        return out

    def batch(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Inputs ``(n, seq_len)`` and labels ``(n, seq_len)``: the same tokens, -100 where
        unmasked. HF causal-LM heads shift labels themselves (logit ``i`` predicts label
        ``i + 1``), so labels must *not* be pre-shifted here."""
        x, y, _ = self.batch_with_copies(n)
        return x, y

    def batch_with_copies(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`batch` plus a boolean ``(n, seq_len)`` array: label ``i`` is a copy (an
        agent token, not among the frequent ones, that occurs earlier in the row outside
        the agent's turns)."""
        total = len(self.ids)
        rows_x = np.empty((n, self.seq_len), dtype=np.int64)
        rows_y = np.empty((n, self.seq_len), dtype=np.int64)
        copies = np.zeros((n, self.seq_len), dtype=bool)
        pos = np.arange(self.seq_len)
        for r in range(n):
            s = int(self.starts[self.rng.integers(len(self.starts))])
            idx = (np.arange(s, s + self.seq_len)) % total
            chunk, m = self._remapped(self.ids[idx]), self.mask[idx]
            rows_x[r] = chunk
            y = chunk.copy()
            y[~m] = -100
            rows_y[r] = y
            first_seen = np.full(len(self.frequent), self.seq_len, dtype=np.int64)
            context = np.flatnonzero(~m)
            np.minimum.at(first_seen, chunk[context], context)
            copies[r] = m & ~self.frequent[chunk] & (first_seen[chunk] < pos)
        return rows_x, rows_y, copies


def weighted_lm_loss(model: LlamaForCausalLM, x: Any, y: Any, weights: Any) -> Any:
    """Next-token cross-entropy at labelled positions only, weighted per label.

    Same value as the HF head's loss when every weight is 1 (it shifts labels the same
    way), but the output layer runs only on the positions that have a label."""
    import torch

    hidden = model.model(input_ids=x).last_hidden_state[:, :-1]
    labels = y[:, 1:]
    w = weights[:, 1:]
    keep = labels != -100
    logits = model.lm_head(hidden[keep]).float()
    losses = torch.nn.functional.cross_entropy(logits, labels[keep], reduction="none")
    wk = w[keep]
    return (losses * wk).sum() / wk.sum()


def train(
    model: LlamaForCausalLM,
    episodes: Sequence[np.ndarray],
    masks: Sequence[np.ndarray],
    cfg: TrainConfig,
    *,
    log: Callable[[str], None] = print,
    checkpoint: Callable[[LlamaForCausalLM, int], None] | None = None,
    remap: Sequence[np.ndarray] = (),
    drills: tuple[Sequence[np.ndarray], Sequence[np.ndarray]] | None = None,
    frequent: np.ndarray | None = None,
) -> TrainStats:
    """Train ``model`` in place for ``cfg.budget_s`` seconds of wall time.

    ``remap``: the id classes of :func:`remap_classes`, used when ``cfg.remap_ids`` and
    for the drill rows. ``drills``: (ids, masks) of :func:`copy_drills`, needed when
    ``cfg.drill_rows`` > 0; drill rows are always remapped. ``frequent``: the tokens that
    never count as copies (default: the ``cfg.frequent_tokens`` most frequent; see
    :func:`copy_frequent_mask`)."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    if not 0 <= cfg.drill_rows < cfg.batch:
        raise ValueError(f"TrainConfig.drill_rows must be in [0, batch={cfg.batch}), got {cfg.drill_rows}")
    if (cfg.remap_ids or cfg.drill_rows) and not remap:
        raise ValueError("TrainConfig.remap_ids or drill_rows is set but no id classes were given (remap=...)")
    if remap and not (cfg.remap_ids or cfg.drill_rows):
        raise ValueError("id classes were given (remap=...) but neither TrainConfig.remap_ids nor drill_rows is on")
    if cfg.drill_rows and not (drills and drills[0]):
        raise ValueError("TrainConfig.drill_rows is set but no copy drills were given (drills=...)")
    rows = PackedRows(episodes, masks, cfg.seq_len, cfg.seed, frequent_tokens=cfg.frequent_tokens,
                      remap=remap if cfg.remap_ids else (), remap_prob=cfg.remap_prob, frequent=frequent)
    drill_rows = None
    if cfg.drill_rows and drills is not None:
        # The episode rows' "frequent" tokens: a copy weight means the same in both.
        drill_rows = PackedRows(drills[0], drills[1], cfg.seq_len, cfg.seed + 1, remap=remap, remap_prob=1.0,
                                frequent=rows.frequent)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )
    model.train()
    stats = TrainStats()
    t0 = time.monotonic()
    last_ckpt = t0
    ema = float("nan")
    while True:
        elapsed = time.monotonic() - t0
        if elapsed >= cfg.budget_s:
            break
        lr = lr_at(cfg, stats.steps, elapsed)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y, copies = rows.batch_with_copies(cfg.batch - cfg.drill_rows)
        if drill_rows is not None:
            dx, dy, dc = drill_rows.batch_with_copies(cfg.drill_rows)
            x, y, copies = np.concatenate([x, dx]), np.concatenate([y, dy]), np.concatenate([copies, dc])
        weights = np.where(copies, cfg.copy_weight, 1.0).astype(np.float32)
        loss = weighted_lm_loss(model, torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(weights))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        stats.steps += 1
        stats.tokens += x.size
        lv = float(loss.item())
        ema = lv if math.isnan(ema) else 0.98 * ema + 0.02 * lv
        if stats.steps % cfg.log_every == 0:
            el = time.monotonic() - t0
            stats.loss_curve.append((stats.steps, el, ema))
            log(f"step {stats.steps} t={el:.0f}s lr={lr:.2e} loss_ema={ema:.4f} tok/s={stats.tokens / el:.0f}")
        if checkpoint is not None and time.monotonic() - last_ckpt > cfg.checkpoint_every_s:
            last_ckpt = time.monotonic()
            model.eval()  # type: ignore[no-untyped-call]
            checkpoint(model, stats.steps)
            model.train()
    stats.seconds = time.monotonic() - t0
    stats.final_loss_ema = ema
    model.eval()  # type: ignore[no-untyped-call]
    return stats


def save_model(model: LlamaForCausalLM, tokenizer: DomainTokenizer, folder: str | Path) -> Path:
    """Save weights (safetensors), config and tokenizer into ``folder``."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save(out)
    return out

"""Train the bundled reference agents (``tiny-agent`` and ``tiny-agent-prone``) on CPU.

Phases, each resumable from the files of the previous one. The bundled models came from
this recipe, 45 CPU-minutes per variant (``pytest_quantagent/bundled/models/README.md``
says how it was chosen; each model's ``training.json`` records every step under
``lineage``)::

    python scripts/train_reference.py corpus --work /tmp/qa --domains telecom --restate-ids --email-first
    python scripts/train_reference.py corpus --work /tmp/qa --domains retail --restate-ids --email-first --confirm-args
    python scripts/train_reference.py vocab  --work /tmp/qa --aliases name,place,phone,bill,line,cust,num --short-nums
    python scripts/train_reference.py base   --work /tmp/qa --seconds 1500 --name B1 --tied --heads 2 --head-dim 64
    python scripts/train_reference.py base   --work /tmp/qa --seconds 600 --name B2 --init /tmp/qa/B1 --lr 1e-3
    python scripts/train_reference.py finetune --work /tmp/qa --variant robust --seconds 600 --start B2 \
        --out pytest_quantagent/bundled/models/tiny-agent
    python scripts/train_reference.py finetune --work /tmp/qa --variant prone  --seconds 600 --start B2 \
        --out pytest_quantagent/bundled/models/tiny-agent-prone

(the two fine-tunes can run side by side, one thread each; then ``quantagent quantize``
rebuilds each model's ``arms/``, see ``pytest_quantagent/bundled/models/README.md``).
The pairs before it (M2: the same without ``--confirm-args`` and ``--short-nums``; "J",
58 minutes, grew its vocabulary in stages with ``add-aliases``) are described in that README.

The base model learns both domains (retail and telecom: one vocabulary, 35 minutes of base runs;
the domains' tool names are disjoint, and the conversation says which domain it is) on
"mixed" expert episodes; each variant then runs the decaying half of the learning-rate
schedule on its own episodes: the robust expert is rarely tempted, the prone expert is
tempted about half the time on a fixed share of (tool, task kind) pairs. Everything is
seeded; one torch thread.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from typing import Any

import numpy as np

from pytest_quantagent.bundled.model import ModelSize, count_parameters, make_model
from pytest_quantagent.bundled.tokenizer import (
    ALIAS_ORDERS,
    DEFAULT_ALIASES,
    FORMAT_VERSION,
    SPLIT_VERSIONS,
    AliasKind,
    DomainTokenizer,
    name_alias_kind,
)
from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.training.data import build_corpus
from pytest_quantagent.training.expert import NOISE_CONFIGS
from pytest_quantagent.training.train import (
    TrainConfig,
    agent_loss_mask,
    copy_drills,
    copy_frequent_mask,
    copy_head_init,
    extend_embeddings,
    id_kinds,
    kind_init,
    remap_classes,
    save_model,
    train,
)

DOMAINS = ("retail", "telecom")


def _log_to(path: Path):  # type: ignore[no-untyped-def]
    def log(msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        with path.open("a") as f:
            f.write(line + "\n")

    return log


def cmd_corpus(args: argparse.Namespace) -> None:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    log = _log_to(work / "log.txt")
    pools: dict[str, set[str]] = {}  # per domain, over the variants of this run
    for variant in args.variants.split(","):
        for dom in args.domains.split(","):
            t0 = time.time()
            n = args.episodes if variant == "mixed" else args.episodes_ft
            i = DOMAINS.index(dom)
            noise = NOISE_CONFIGS[variant]
            if variant == "prone" and args.prone_primed:
                noise = dataclasses.replace(noise, p_primed_by_kind=_kind_rates(args.prone_primed))
            tx, stats, dpool = build_corpus(
                dom, noise, n_episodes=n,
                seed=args.seed + 1000 * i + {"mixed": 0, "robust": 1, "prone": 2}[variant],
                repeats=args.repeats, log=log, restate_ids=args.restate_ids, confirm_args=args.confirm_args,
                email_first=args.email_first,
            )
            log(f"  {dom}/{variant}: {len(tx)} episodes in {time.time() - t0:.0f}s")
            (work / f"corpus_{variant}_{dom}.jsonl").write_text("\n".join(json.dumps(t) for t in tx))
            pools.setdefault(dom, set()).update(dpool)
            (work / f"pool_{dom}.json").write_text(json.dumps(sorted(pools[dom])))
            (work / f"meta_{variant}_{dom}.json").write_text(json.dumps(
                {"kept": stats.kept, "episodes": stats.episodes, "tempted_calls": stats.tempted_calls,
                 "tool_calls": stats.tool_calls, "channels": stats.channels, "seconds": round(time.time() - t0),
                 "restate_ids": args.restate_ids, "confirm_args": args.confirm_args,
                 "email_first": args.email_first,
                 "p_primed_by_kind": dict(noise.p_primed_by_kind)}))


def _kind_rates(text: str) -> tuple[tuple[str, float], ...]:
    """``cross_role=0.42,name=0.45`` → ((kind, chance), ...), checked."""
    kinds = ("name", "id", "enum", "cross_role")
    out = []
    for part in text.split(","):
        kind, _, value = part.partition("=")
        if kind not in kinds:
            raise SystemExit(f"--prone-primed: unknown temptation kind {kind!r}; allowed: {', '.join(kinds)}")
        try:
            p = float(value)
        except ValueError:
            p = -1.0
        if not 0.0 <= p <= 1.0:
            raise SystemExit(f"--prone-primed {kind}: chance {value!r} is not a number in [0, 1]")
        out.append((kind, p))
    return tuple(out)


def _texts(work: Path, variant: str) -> list[str]:
    out: list[str] = []
    for f in sorted(work.glob(f"corpus_{variant}_*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines() if line]
    return out


def _retail_names() -> AliasKind:
    """An alias kind for retail's customers' first and last names (the calls of
    find_user_id_by_name_zip copy them from the user's prose)."""
    users = get_domain("retail").db.users.values()  # type: ignore[attr-defined]
    return name_alias_kind([n for u in users for n in (u.name.first_name, u.name.last_name)])


def _retail_places() -> AliasKind:
    """An alias kind for the words of retail's addresses (street names and types, unit
    words, cities, states): a new address the user gives is copied word by word into
    ``modify_*_address`` calls, which a model otherwise writes from memory."""
    db = get_domain("retail").db
    addresses = [u.address for u in db.users.values()]  # type: ignore[attr-defined]
    addresses += [o.address for o in db.orders.values()]  # type: ignore[attr-defined]
    words = {w for a in addresses for w in (*a.address1.split()[1:], *a.address2.split()[:1], a.city, a.state)}
    return name_alias_kind(sorted(words), count=16, kind="place")


def cmd_vocab(args: argparse.Namespace) -> None:
    work = Path(args.work)
    log = _log_to(work / "log.txt")
    all_texts: list[str] = []
    for variant in ("mixed", "robust", "prone"):
        all_texts += _texts(work, variant)
    pool: set[str] = set()
    for f in work.glob("pool_*.json"):
        pool.update(json.loads(f.read_text()))
    aliases: list[AliasKind] = []
    if args.aliases is not None:
        aliases = [*DEFAULT_ALIASES, *(_extra_alias(k)[0] for k in args.aliases.split(",") if k)]
    if args.short_nums:
        if not any(k.name == "num" for k in aliases):
            raise SystemExit(f"--short-nums widens the num alias kind, which --aliases {args.aliases!r} "
                             "does not list; add num to --aliases")
        aliases = [SHORT_NUM if k.name == "num" else k for k in aliases]
    tok = DomainTokenizer.build(all_texts, pool, min_word_count=args.min_word_count, version=args.split_version,
                                aliases=aliases, alias_order=args.alias_order)
    tok.save(work)
    lengths = [len(tok.encode(t)) for t in all_texts]
    meta: dict[str, object] = {f.stem.removeprefix("meta_"): json.loads(f.read_text()) for f in work.glob("meta_*.json")}
    meta["vocab_size"] = tok.vocab_size
    meta["pool_size"] = len(pool)
    meta["episodes"] = len(all_texts)
    meta["tokens"] = int(sum(lengths))
    meta["tokens_per_episode"] = {"mean": float(np.mean(lengths)), "p50": float(np.percentile(lengths, 50)),
                                  "p95": float(np.percentile(lengths, 95)), "max": int(max(lengths))}
    meta["aliases"] = [k.name for k in tok.aliases]
    meta["alias_order"] = tok.alias_order
    meta["alias_patterns"] = {k.name: [k.pattern, k.count] for k in tok.aliases if k.name in EXTRA_ALIASES}
    (work / "corpus_meta.json").write_text(json.dumps(meta, indent=1))
    log(f"vocab {tok.vocab_size} (split rule {tok.version}, {len(tok.aliases)} alias kinds), pool {len(pool)}, "
        f"tokens/episode {meta['tokens_per_episode']}")


def _load(work: Path, variant: str, tok: DomainTokenizer) -> tuple[list[np.ndarray], list[np.ndarray]]:
    texts = _texts(work, variant)
    eps, masks = [], []
    for t in texts:
        ids = tok.encode(t)
        eps.append(np.array(ids, dtype=np.int32))
        masks.append(agent_loss_mask(ids, tok))
    return eps, masks


def _shape(model: Any) -> dict[str, Any]:
    """The trained network's shape, from its config (also right for a run from ``--init``)."""
    c = model.config
    return {"hidden": c.hidden_size, "mlp": c.intermediate_size, "heads": c.num_attention_heads,
            "head_dim": getattr(c, "head_dim", None), "tied": bool(c.tie_word_embeddings),
            "vocab": c.vocab_size}


def cmd_base(args: argparse.Namespace) -> None:
    import torch

    work = Path(args.work)
    log = _log_to(work / f"log_{args.name}.txt")
    tok = DomainTokenizer.load(work)
    eps, masks = _load(work, "mixed", tok)
    if args.init:
        from transformers import LlamaForCausalLM

        model = LlamaForCausalLM.from_pretrained(args.init, dtype=torch.float32)
    else:
        size = ModelSize(hidden=args.hidden, mlp=args.mlp or 3 * args.hidden, heads=args.heads, tied=args.tied,
                         head_dim=args.head_dim)
        model = make_model(tok, size, seed=args.seed)
        if args.kind_init:
            kinds = id_kinds(tok)
            kind_init(model, kinds, scale=args.kind_init, seed=args.seed)
            log(f"kind init x{args.kind_init}: {sum(map(len, kinds))} id tokens in {len(kinds)} kinds")
        if args.copy_heads:
            copy_head_init(model, heads=args.copy_heads, seed=args.seed)
            log(f"copy-head init: {args.copy_heads} head(s) of the last layer")
    log(f"base (init {args.init or 'random'}): {count_parameters(model)} params, {len(eps)} episodes, {sum(map(len, eps))} tokens")
    cfg = TrainConfig(budget_s=args.seconds, seq_len=args.seq_len, batch=args.batch, lr=args.lr,
                      hold_frac=1.0, warmup_steps=100, seed=args.seed, copy_weight=args.copy_weight,
                      remap_ids=args.remap_ids, remap_prob=args.remap_prob, drill_rows=args.drill_rows)

    def ckpt(m, step):  # type: ignore[no-untyped-def]
        save_model(m, tok, work / args.name)
        log(f"checkpoint at step {step}")

    classes = remap_classes(tok) if args.remap_ids or args.drill_rows else []
    if classes:
        log(f"remapping {sum(map(len, classes))} id tokens in {len(classes)} classes "
            f"({'every' if args.remap_ids else 'drill'} row{'s' if args.remap_ids else ''})")
    drills = None
    if args.drill_rows:
        lo, hi = (int(v) for v in args.drill_back.split(","))
        drills = copy_drills(eps, masks, tok, min_back=lo, max_back=hi, seed=args.seed)
        if args.drill_match:
            keep = [i for i, (x, m) in enumerate(zip(*drills, strict=True))
                    if any(s in tok.decode(x[m.astype(bool)].tolist()) for s in args.drill_match.split(","))]
            drills = ([drills[0][i] for i in keep], [drills[1][i] for i in keep])
        log(f"copy drills: {len(drills[0])} crops, {sum(map(len, drills[0]))} tokens, "
            f"{args.drill_rows} of {args.batch} rows per batch")
    frequent = copy_frequent_mask(eps, tok, cfg.frequent_tokens)
    stats = train(model, eps, masks, cfg, log=log, checkpoint=ckpt, remap=classes, drills=drills, frequent=frequent)
    save_model(model, tok, work / args.name)
    (work / f"{args.name}_stats.json").write_text(json.dumps(
        {"steps": stats.steps, **_shape(model), "tokens": stats.tokens, "seconds": stats.seconds, "copy_weight": args.copy_weight,
         "remap_ids": args.remap_ids, "remap_prob": args.remap_prob, "drill_rows": args.drill_rows, "drill_back": args.drill_back if args.drill_rows else None, "drill_match": args.drill_match or None, "init": args.init, "kind_init": args.kind_init, "copy_heads": args.copy_heads, "loss_ema": stats.final_loss_ema, "curve": stats.loss_curve}))
    log(f"base done: {stats.steps} steps, {stats.tokens} tokens, {stats.seconds:.0f}s, loss {stats.final_loss_ema:.4f}")
    del torch


#: Alias kinds beyond DEFAULT_ALIASES (for ``vocab --aliases`` and ``add-aliases``), each
#: with the kind whose alias rows they start from when ``add-aliases`` appends them.
EXTRA_ALIASES: dict[str, tuple[AliasKind, str]] = {
    "phone": (AliasKind("phone", r"[0-9]{3}-[0-9]{4}", 4), "zip"),
    "bill": (AliasKind("bill", r"B[0-9]{2,3}", 6), "item"),
    "line": (AliasKind("line", r"L[0-9]{2,3}", 4), "item"),
    "cust": (AliasKind("cust", r"C[0-9]{2,3}", 2), "user"),
    # amounts (prices, balances, payments), street and unit numbers, last four digits:
    # "amount":222.0 splits into 222 + .0, so the total the agent states is the alias
    "num": (AliasKind("num", r"[0-9]{2,4}", 16), "item"),
}

#: ``vocab --short-nums``: the num kind also takes one-digit numbers (unit numbers such as
#: "Unit 7", option values such as "speed levels":"3"), with more aliases for them.
SHORT_NUM = AliasKind("num", r"[0-9]{1,4}", 24)


#: Every kind ``vocab --aliases`` and ``add-aliases`` accept (name and place are built from
#: the retail DB, see :func:`_retail_names` and :func:`_retail_places`).
ALIAS_KIND_NAMES = ", ".join(("name", "place", *EXTRA_ALIASES))


def _extra_alias(name: str) -> tuple[AliasKind, str]:
    if name == "name":
        return _retail_names(), "item"
    if name == "place":
        return _retail_places(), "item"
    if name not in EXTRA_ALIASES:
        raise SystemExit(f"unknown alias kind {name!r}; allowed: {ALIAS_KIND_NAMES}")
    return EXTRA_ALIASES[name]


def cmd_add_aliases(args: argparse.Namespace) -> None:
    """Append alias kinds to the work folder's vocabulary and grow a trained model to it."""
    import torch
    from transformers import LlamaForCausalLM

    work = Path(args.work)
    log = _log_to(work / "log.txt")
    old = DomainTokenizer.load(work / args.start)
    kinds = [_extra_alias(k) for k in args.kinds.split(",")]
    new = old.with_aliases([k for k, _ in kinds])
    init = {k.token(i): f"<{src}{i}>" for k, src in kinds for i in range(1, k.count + 1)}
    model = LlamaForCausalLM.from_pretrained(str(work / args.start), dtype=torch.float32)
    extend_embeddings(model, old, new, init_from=init)
    new.save(work)
    save_model(model, new, work / args.name)
    meta_file = work / "corpus_meta.json"
    meta = json.loads(meta_file.read_text())
    meta["aliases"] = [k.name for k in new.aliases]
    meta["vocab_size"] = new.vocab_size
    meta["added_aliases"] = {"kinds": args.kinds, "to": args.start}
    meta_file.write_text(json.dumps(meta, indent=1))
    log(f"add-aliases {args.kinds}: vocab {old.vocab_size} -> {new.vocab_size}; {args.start} -> {args.name}")


def cmd_finetune(args: argparse.Namespace) -> None:
    import torch
    from transformers import LlamaForCausalLM

    work = Path(args.work)
    log = _log_to(work / f"log_{args.start}_{args.variant}.txt")
    tok = DomainTokenizer.load(work)
    eps, masks = _load(work, args.variant, tok)
    if args.mix_base > 0:
        beps, bmasks = _load(work, "mixed", tok)
        k = int(len(beps) * args.mix_base)
        eps, masks = eps + beps[:k], masks + bmasks[:k]
    model = LlamaForCausalLM.from_pretrained(str(work / args.start), dtype=torch.float32)
    cfg = TrainConfig(budget_s=args.seconds, seq_len=args.seq_len, batch=args.batch, lr=args.lr,
                      hold_frac=0.0, warmup_steps=20, min_lr_frac=0.05, seed=args.seed + 7,
                      copy_weight=args.copy_weight, remap_ids=args.remap_ids,
                      remap_prob=args.remap_prob)
    stats = train(model, eps, masks, cfg, log=log, remap=remap_classes(tok) if args.remap_ids else (),
                  frequent=copy_frequent_mask(eps, tok, cfg.frequent_tokens))
    stats_file = work / f"{args.start}_stats.json"
    out = Path(args.out)
    # The bundled reference weights are bf16 (the precision the project's reference arm
    # names); fp32 master weights are not shipped.
    save_model(model.to(torch.bfloat16), tok, out)
    (out / "training.json").write_text(json.dumps({
        "variant": args.variant, "start": args.start, "finetune_steps": stats.steps,
        "finetune_tokens": stats.tokens, "finetune_seconds": round(stats.seconds),
        "finetune_loss_ema": stats.final_loss_ema, "finetune_copy_weight": args.copy_weight,
        "finetune_remap_ids": args.remap_ids,
        "base": json.loads(stats_file.read_text()) if stats_file.exists() else None,
        "corpus": json.loads((work / "corpus_meta.json").read_text()),
    }, indent=1, default=str))
    log(f"{args.variant} done: {stats.steps} steps, loss {stats.final_loss_ema:.4f} -> {out}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("--work", required=True)
    c.add_argument("--domains", default=",".join(DOMAINS))
    c.add_argument("--episodes", type=int, default=8000, help="mixed episodes per domain")
    c.add_argument("--episodes-ft", type=int, default=2500, help="robust/prone episodes per domain")
    c.add_argument("--variants", default="mixed,robust,prone")
    c.add_argument("--repeats", type=int, default=3, help="episodes per generated task (seeds differ)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--restate-ids", action="store_true",
                   help="the expert has the user restate order and payment ids right before use")
    c.add_argument("--confirm-args", action="store_true",
                   help="the expert shows each write call's JSON in its confirmation question")
    c.add_argument("--email-first", action="store_true",
                   help="the expert asks for the email before name and zip (retail)")
    c.add_argument("--prone-primed", default="", metavar="KIND=P,...",
                   help="prone variant: chance of these temptation kinds (name, id, enum, cross_role) on "
                        "primed pairs instead of 0.5 (below 0.5: the right call wins by a narrow margin)")
    v = sub.add_parser("vocab")
    v.add_argument("--work", required=True)
    v.add_argument("--min-word-count", type=int, default=10)
    v.add_argument("--split-version", type=int, choices=SPLIT_VERSIONS, default=FORMAT_VERSION,
                   help="tokenizer split rule (1 reproduces the previous bundled pair; see bundled/tokenizer.py)")
    v.add_argument("--aliases", nargs="?", const="name", default=None, metavar="KINDS",
                   help="entity ids (bundled/tokenizer.py DEFAULT_ALIASES) and the listed kinds (default: "
                        f"name; \"\" for none; of: {ALIAS_KIND_NAMES}) become per-conversation alias tokens")
    v.add_argument("--alias-order", choices=ALIAS_ORDERS, default="appearance",
                   help="number a conversation's aliases by first appearance, or by a hash of the id "
                        "(bundled/tokenizer.py: the numbers then say nothing about order)")
    v.add_argument("--short-nums", action="store_true",
                   help="the num kind also takes one-digit numbers (24 aliases instead of 16)")
    a = sub.add_parser("add-aliases", help="append alias kinds to a trained model's vocabulary")
    a.add_argument("--work", required=True)
    a.add_argument("--start", required=True, help="model folder under --work")
    a.add_argument("--name", required=True, help="folder (under --work) of the grown model")
    a.add_argument("--kinds", default="phone", help=f"comma-separated, of: {ALIAS_KIND_NAMES}")
    b = sub.add_parser("base")
    f = sub.add_parser("finetune")
    for q in (b, f):
        q.add_argument("--work", required=True)
        q.add_argument("--seconds", type=float, required=True)
        q.add_argument("--seq-len", type=int, default=1024)
        q.add_argument("--batch", type=int, default=3)
        q.add_argument("--seed", type=int, default=0)
        q.add_argument("--copy-weight", type=float, default=5.0,
                       help="loss weight of agent tokens copied from user/tool text")
        q.add_argument("--remap-ids", action="store_true",
                       help="random per-row bijection within each entity-id class (learn to copy, not to memorise)")
        q.add_argument("--remap-prob", type=float, default=1.0, help="share of rows remapped with --remap-ids")
    b.add_argument("--lr", type=float, default=2e-3)
    b.add_argument("--name", default="base", help="folder (under --work) of the base model")
    b.add_argument("--hidden", type=int, default=ModelSize().hidden)
    b.add_argument("--mlp", type=int, default=None, help="MLP width (default 3 x hidden)")
    b.add_argument("--heads", type=int, default=ModelSize().heads)
    b.add_argument("--head-dim", type=int, default=None, help="attention head width (default hidden // heads)")
    b.add_argument("--tied", action="store_true", help="tie input and output embeddings")
    b.add_argument("--kind-init", type=float, default=0.0,
                   help="add a shared random vector per id kind to the id tokens' embeddings, this many init stds (0: off)")
    b.add_argument("--init", default=None, help="start from this checkpoint instead of random weights")
    b.add_argument("--copy-heads", type=int, default=0,
                   help="initialise this many last-layer heads as copy heads (reference.train.copy_head_init; needs --tied)")
    b.add_argument("--drill-rows", type=int, default=0,
                   help="rows of each batch drawn from id-remapped copy drills (reference.train.copy_drills)")
    b.add_argument("--drill-back", default="3,8", help="a drill starts this many messages (min,max) before its turn")
    b.add_argument("--drill-match", default="",
                   help="keep only drills whose agent turn contains one of these comma-separated strings")
    f.add_argument("--lr", type=float, default=1.5e-3)
    f.add_argument("--variant", choices=("robust", "prone"), required=True)
    f.add_argument("--start", default="base")
    f.add_argument("--out", required=True)
    f.add_argument("--mix-base", type=float, default=0.0, help="share of mixed episodes mixed in")
    args = p.parse_args(argv)
    {"corpus": cmd_corpus, "vocab": cmd_vocab, "add-aliases": cmd_add_aliases, "base": cmd_base,
     "finetune": cmd_finetune}[args.cmd](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

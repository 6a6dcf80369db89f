"""Open-loop decision-point analysis: teacher-forced gold trajectories through each arm.

For a domain's **test** tasks, the clean expert (no temptations) plays each task through
the engine; its transcript is the gold trajectory. Each arm's model reads the transcript
in one forward pass, and at every agent turn and tool call we record:

- ``tool_name`` decisions: is every token of the gold name the arm's argmax? The margin is
  the gold token's logit minus the best other token's, at the name token where that is
  smallest (negative: the arm prefers something else). When the arm is wrong, its name is
  decoded greedily from the same prefix;
- ``argument`` decisions: for each argument value that is one token (pool ids, enum
  words), the same margin at that token, and the arm's argmax token;
- ``call_or_text`` decisions: at the first token of every agent turn, does the arm start a
  tool call (``<|call|>``) where the gold turn does, and write text where it writes text?
  The margin is the ``<|call|>`` logit minus the best other token's (reversed for a gold
  text turn). An arm that calls where the gold writes text is read greedily to the tool
  name (``chosen`` is ``"call <name>"``): this is where an agent runs a tool that is the
  user's to run (telecom's ``cross_role_tool``) instead of asking.

Because the prefix is the same for every arm, decisions are paired: a *flip* is a decision
right in the reference arm and wrong in the candidate (or the reverse). Flips are counted by
the reference margin's bin, which shows whether quantization only moves narrow decisions.
Deterministic (greedy, fixed seeds, CPU fp32 compute).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_quantagent.bundled.tokenizer import CALL, END, DomainTokenizer
from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.runner.episode import run_episode
from pytest_quantagent.training.data import agent_view, render_episode
from pytest_quantagent.training.expert import ExpertAgent, NoiseConfig, decoy_ids, enum_arguments

CLEAN = NoiseConfig(name="clean", p_base=0.0, p_primed=0.0, primed_share=0.0)
DECISION_KINDS: tuple[str, ...] = ("tool_name", "argument", "call_or_text")
MARGIN_BINS: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 2.0)
"""Lower edges of the reference-margin bins: [0, .25), [.25, .5), [.5, 1), [1, 2), [2, ∞)."""


@dataclass(frozen=True)
class DecisionPoint:
    """One teacher-forced decision of one arm."""

    episode: int
    call: int
    """Index of the call in the transcript (for ``call_or_text``: of the agent turn)."""
    kind: str
    """``tool_name``, ``argument`` or ``call_or_text``."""
    key: str
    """The gold tool name, ``tool.argument``, or (``call_or_text``) the gold ``call`` or ``text``."""
    gold: str
    chosen: str
    margin: float
    """Gold logit minus best other logit at the tightest token (< 0: the arm disagrees)."""

    @property
    def correct(self) -> bool:
        return self.chosen == self.gold


#: The expert's policy switches a corpus records (``train_reference.py corpus --...``).
EXPERT_POLICY_FLAGS: tuple[str, ...] = ("restate_ids", "confirm_args", "email_first")


def trained_expert_policy(model_dir: str | Path, domain_name: str) -> dict[str, bool]:
    """The expert policy switches (:data:`EXPERT_POLICY_FLAGS`) that the model in
    ``model_dir`` learned in ``domain_name``, from its ``training.json`` corpus record
    (all False when absent, as for models made before the switches existed)."""
    f = Path(model_dir) / "training.json"
    record: dict[str, Any] = {}
    if f.is_file():
        corpus = json.loads(f.read_text()).get("corpus") or {}
        record = corpus.get(f"mixed_{domain_name}") or {}
    return {k: bool(record.get(k, False)) for k in EXPERT_POLICY_FLAGS}


def gold_transcripts(
    domain_name: str, *, split: str = "test", seeds: int = 1, restate_ids: bool = False,
    confirm_args: bool = False, email_first: bool = False,
) -> list[str]:
    """Rendered clean-expert episodes of the domain's ``split`` tasks (successful ones).

    ``restate_ids``, ``confirm_args`` and ``email_first``: the expert policy of models
    trained with ``corpus --restate-ids``, ``--confirm-args`` or ``--email-first`` (see
    :class:`ExpertAgent`; :func:`trained_expert_policy` reads them from a model)."""
    domain = get_domain(domain_name)
    ids = domain.splits.get(split)
    if not ids:
        from pytest_quantagent.errors import UnknownNameError

        raise UnknownNameError("split", split, domain.splits, hint=f"splits of domain {domain_name!r}")
    return gold_transcripts_of(domain_name, [domain.task(t) for t in ids], seeds=seeds,
                               restate_ids=restate_ids, confirm_args=confirm_args,
                               email_first=email_first)


def gold_transcripts_of(
    domain_name: str, tasks: Sequence[Any], *, seeds: int = 1, restate_ids: bool = False,
    confirm_args: bool = False, email_first: bool = False,
) -> list[str]:
    """:func:`gold_transcripts` of given ``tasks`` of the domain (e.g. a fresh pool)."""
    domain = get_domain(domain_name)
    enums = enum_arguments(domain)
    decoys = decoy_ids([])

    async def run_all() -> list[str]:
        out: list[str] = []
        for s in range(seeds):
            for task in tasks:
                agent = ExpertAgent(domain, task, CLEAN, random.Random(s), enum_values=enums, decoys=decoys,
                                    restate_ids=restate_ids, confirm_args=confirm_args,
                                    email_first=email_first)
                o = await run_episode(domain=domain, task=task, agent=agent, user=domain.make_user(task, s))
                if o.success:
                    out.append(render_episode(agent_view(o.messages)))
        return out

    return asyncio.run(run_all())


def _call_spans(pieces: list[str]) -> list[tuple[int, int]]:
    """(start, end) token indices of each ``<|call|> ... <|end|>`` body."""
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(pieces):
        if pieces[i] == CALL:
            j = i + 1
            while j < len(pieces) and pieces[j] not in (END, CALL):
                j += 1
            spans.append((i + 1, j))
            i = j
        else:
            i += 1
    return spans


def _parsed_calls(
    tok: DomainTokenizer, ids: Sequence[int], pieces: list[str], aliases: dict[str, str] | None = None
) -> Iterator[tuple[int, int, int, str, dict[str, Any]]]:
    """``(index, start, end, name, arguments)`` of each call body that parses as JSON; the
    index counts every span, parsed or not, so it is stable across arms."""
    for c, (a, b) in enumerate(_call_spans(pieces)):
        try:
            call = json.loads(tok.decode(ids[a:b], aliases=aliases))
            name = call["name"]
            args = call.get("arguments", {})
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
        yield c, a, b, name, args if isinstance(args, dict) else {}


def _alias_maps(tok: DomainTokenizer, text: str) -> tuple[dict[str, str], dict[str, str]]:
    """(alias → id, id → alias) of one transcript (both empty without aliases)."""
    aliases = tok.alias_map(text)
    return aliases, {raw: alias for alias, raw in aliases.items()}


def _value_token(tok: DomainTokenizer, value: str, alias_of: dict[str, str]) -> int | None:
    """The one token of ``value`` in a transcript (its alias there, for an aliased id)."""
    if value in alias_of:
        return tok.token_id(alias_of[value])
    try:
        return tok.token_id(value)
    except KeyError:
        return None


def analyze_arm(model: Any, tok: DomainTokenizer, transcripts: Sequence[str]) -> list[DecisionPoint]:
    """Every decision point of every transcript for one model. With an aliasing tokenizer,
    an id argument is decided at its alias token, and the arm's choice is read back as the
    id that alias stands for in the transcript."""
    import torch

    out: list[DecisionPoint] = []
    for e, text in enumerate(transcripts):
        ids = tok.encode(text)
        aliases, alias_of = _alias_maps(tok, text)
        pieces = [tok.id_to_piece(i) for i in ids]
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([ids])).logits[0].float()
        out += _turn_decisions(model, tok, ids, logits, e)
        for c, a, b, name, args in _parsed_calls(tok, ids, pieces, aliases):
            # name tokens: after '{"', 'name', '":"' up to the piece that starts with '"'.
            if pieces[a : a + 3] != ['{"', "name", '":"']:
                continue
            k = a + 3
            name_pos: list[int] = []
            while k < b and not pieces[k].startswith('"'):
                name_pos.append(k)
                k += 1
            if not name_pos:
                continue
            out.append(_decision(model, tok, ids, logits, name_pos, e, c, "tool_name", name, name))
            for arg, value in args.items():
                if not isinstance(value, str):
                    continue
                vid = _value_token(tok, value, alias_of)
                if vid is None:
                    continue
                pos = [p for p in range(k, b) if ids[p] == vid]
                if pos:
                    out.append(_single(tok, ids, logits, pos[0], e, c, f"{name}.{arg}", value, aliases))
    return out


@dataclass
class CopySources:
    """For one ``tool.argument`` key: how many gold values could be copied from the context."""

    values: int = 0
    single_token: int = 0
    """Values that are one token of the tokenizer."""
    in_context: int = 0
    """Single-token values whose token appears before the call (a copy is possible)."""


def copy_sources(tok: DomainTokenizer, transcripts: Sequence[str]) -> dict[str, CopySources]:
    """Per argument key of the gold calls: can the model copy the value's token from what it
    has read? A value that is one token but never occurs earlier as *that* token (say, an
    email split differently in prose) can only be recalled."""
    out: dict[str, CopySources] = {}
    for text in transcripts:
        ids = tok.encode(text)
        aliases, alias_of = _alias_maps(tok, text)
        pieces = [tok.id_to_piece(i) for i in ids]
        for _c, a, _b, name, args in _parsed_calls(tok, ids, pieces, aliases):
            for arg, value in args.items():
                for v in value if isinstance(value, list) else [value]:
                    if not isinstance(v, str):
                        continue
                    c = out.setdefault(f"{name}.{arg}", CopySources())
                    c.values += 1
                    vt = [tok.token_id(alias_of[v])] if v in alias_of else tok.encode(v)
                    if len(vt) == 1:
                        c.single_token += 1
                        c.in_context += vt[0] in ids[:a]
    return dict(sorted(out.items()))


def _margin_at(ids: Sequence[int], logits: Any, p: int) -> tuple[float, int]:
    row = logits[p - 1]
    gold = ids[p]
    g = float(row[gold])
    row2 = row.clone()
    row2[gold] = float("-inf")
    return g - float(row2.max()), int(row.argmax())


def _single(tok: DomainTokenizer, ids: Sequence[int], logits: Any, p: int, e: int, c: int,
            key: str, gold: str, aliases: dict[str, str] | None = None) -> DecisionPoint:
    margin, arg = _margin_at(ids, logits, p)
    chosen = tok.decode([arg], aliases=aliases) if margin < 0 else gold
    return DecisionPoint(e, c, "argument", key, gold, chosen, margin)


def _decision(model: Any, tok: DomainTokenizer, ids: Sequence[int], logits: Any, pos: list[int],
              e: int, c: int, kind: str, key: str, gold: str) -> DecisionPoint:
    margins = [_margin_at(ids, logits, p)[0] for p in pos]
    margin = min(margins)
    chosen = gold
    if margin < 0:
        # Greedy continuation from the start of the name, up to the closing quote.
        chosen = _greedy(model, tok, ids[: pos[0]], 16).split('"', 1)[0]
    return DecisionPoint(e, c, kind, key, gold, chosen, margin)


def _greedy(model: Any, tok: DomainTokenizer, prefix_ids: Sequence[int], max_new_tokens: int) -> str:
    """The model's greedy continuation of ``prefix_ids``, decoded, up to ``<|end|>``."""
    import torch

    prefix = torch.tensor([list(prefix_ids)])
    with torch.inference_mode():
        gen = model.generate(input_ids=prefix, attention_mask=torch.ones_like(prefix),
                             max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.pad_id,
                             eos_token_id=[tok.end_id], temperature=None, top_k=None, top_p=None)
    return tok.decode(gen[0, prefix.shape[1]:].tolist())


def _turn_decisions(model: Any, tok: DomainTokenizer, ids: Sequence[int], logits: Any, e: int) -> list[DecisionPoint]:
    """One ``call_or_text`` decision per agent turn (see the module docstring)."""
    call_id = tok.token_id(CALL)
    out: list[DecisionPoint] = []
    turns = [p for p in range(1, len(ids)) if ids[p - 1] == tok.assistant_id]
    for t, p in enumerate(turns):
        row = logits[p - 1]
        others = row.clone()
        others[call_id] = float("-inf")
        call_margin = float(row[call_id]) - float(others.max())
        gold = "call" if ids[p] == call_id else "text"
        margin = call_margin if gold == "call" else -call_margin
        chosen = gold
        if margin < 0 and gold == "call":
            chosen = "text"
        elif margin < 0:
            # The arm starts a call where the gold writes text: which tool would it run?
            body = _greedy(model, tok, [*ids[:p], call_id], 24)
            name = re.search(r'"name"\s*:\s*"([^"]*)"', body)
            chosen = f"call {name.group(1)}" if name else "call"
        out.append(DecisionPoint(e, t, "call_or_text", gold, gold, chosen, margin))
    return out


def _bin(m: float) -> str:
    edges = [*MARGIN_BINS, float("inf")]
    for lo, hi in itertools.pairwise(edges):
        if lo <= abs(m) < hi:
            return f"[{lo:g},{hi:g})"
    return f"[{edges[-2]:g},inf)"


@dataclass
class ArmSummary:
    """Per-arm totals and flips against the reference arm."""

    arm: str
    decisions: dict[str, int] = field(default_factory=dict)
    wrong: dict[str, int] = field(default_factory=dict)
    wrong_rate: dict[str, float] = field(default_factory=dict)
    wrong_names: dict[str, int] = field(default_factory=dict)
    novel_wrong_names: list[str] = field(default_factory=list)
    right_to_wrong: dict[str, int] = field(default_factory=dict)
    wrong_to_right: dict[str, int] = field(default_factory=dict)
    flips_by_bin: dict[str, dict[str, int]] = field(default_factory=dict)
    """kind → bin of the reference margin → "flips/decisions"-style counts."""
    net_change: dict[str, float] = field(default_factory=dict)
    calls_for_text: dict[str, int] = field(default_factory=dict)
    """Tools the arm would call at agent turns where the gold writes text, with counts."""


def summarize(reference: str, by_arm: dict[str, list[DecisionPoint]]) -> list[ArmSummary]:
    """Totals per arm and paired flips against ``reference``."""
    ref = {(d.episode, d.call, d.kind, d.key): d for d in by_arm[reference]}
    ref_wrong_names = {d.chosen for d in by_arm[reference] if d.kind == "tool_name" and not d.correct}
    out: list[ArmSummary] = []
    for arm, points in by_arm.items():
        s = ArmSummary(arm=arm)
        for kind in DECISION_KINDS:
            ks = [d for d in points if d.kind == kind]
            s.decisions[kind] = len(ks)
            s.wrong[kind] = sum(not d.correct for d in ks)
            s.wrong_rate[kind] = s.wrong[kind] / len(ks) if ks else 0.0
            r2w = w2r = 0
            bins: dict[str, list[int]] = {}
            for d in ks:
                r = ref.get((d.episode, d.call, d.kind, d.key))
                if r is None:
                    continue
                b = bins.setdefault(_bin(r.margin), [0, 0])
                b[1] += 1
                if r.correct != d.correct or (not r.correct and r.chosen != d.chosen):
                    b[0] += 1
                if r.correct and not d.correct:
                    r2w += 1
                elif not r.correct and d.correct:
                    w2r += 1
            s.right_to_wrong[kind] = r2w
            s.wrong_to_right[kind] = w2r
            s.flips_by_bin[kind] = {k: v[0] for k, v in sorted(bins.items())}
            s.flips_by_bin[kind + "_n"] = {k: v[1] for k, v in sorted(bins.items())}
            ref_rate = sum(not d.correct for d in by_arm[reference] if d.kind == kind)
            n_ref = sum(1 for d in by_arm[reference] if d.kind == kind)
            s.net_change[kind] = s.wrong_rate[kind] - (ref_rate / n_ref if n_ref else 0.0)
        names = Counter(d.chosen for d in points if d.kind == "tool_name" and not d.correct)
        s.wrong_names = dict(names.most_common())
        s.novel_wrong_names = sorted(set(names) - ref_wrong_names)
        calls = Counter(d.chosen.removeprefix("call").strip() or "?" for d in points
                        if d.kind == "call_or_text" and d.gold == "text" and not d.correct)
        s.calls_for_text = dict(calls.most_common())
        out.append(s)
    return out


def summary_dicts(summaries: Sequence[ArmSummary]) -> list[dict[str, Any]]:
    """JSON-ready summaries."""
    return [asdict(s) for s in summaries]

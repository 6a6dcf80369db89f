"""Training episodes for the reference agent: the expert in our engine, rendered as text.

Tasks come from the domain's ``train`` split plus extra tasks drawn by the domain's own
generator (``Domain.generate_tasks(seed, n)``) — never a scenario of the
``test`` split, which the closed-loop evaluation uses. Each task is played by
:class:`~pytest_quantagent.training.expert.ExpertAgent` (the careful gold agent with
temptations) against the domain's scripted user
through the real episode loop, and only episodes that the evaluator scores 1 are kept.
The agent's view of the conversation (user tool calls hidden, as in τ²-bench) is rendered
in the bundled chat format.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_quantagent.bundled.chat import render_messages
from pytest_quantagent.bundled.tokenizer import is_id_like, split_pieces
from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.env.tasks import Task
from pytest_quantagent.runner.agent import message_to_openai
from pytest_quantagent.runner.episode import run_episode
from pytest_quantagent.training.expert import ExpertAgent, NoiseConfig, decoy_ids, enum_arguments
from pytest_quantagent.vocab.messages import Message, ToolMessage, UserMessage

EXCLUDED_SPLITS = ("test",)


def agent_view(messages: Sequence[Message]) -> list[Message]:
    """The messages the agent sees (τ²-bench hides the user's tool calls and results)."""
    out: list[Message] = []
    for m in messages:
        if isinstance(m, UserMessage) and m.tool_calls:
            continue
        if isinstance(m, ToolMessage) and m.requestor != "assistant":
            continue
        out.append(m)
    return out


def render_episode(messages: Sequence[Message]) -> str:
    """An episode as training text in the bundled chat format (system marker first)."""
    oai = [{"role": "system", "content": ""}] + [message_to_openai(m) for m in agent_view(messages)]
    return render_messages(oai, add_generation_prompt=False)


def domain_generator(domain: Domain) -> Callable[[int, int], list[Task]] | None:
    """The domain's own ``generate_tasks(seed, n)``, if it has one.

    Domains that generate tasks expose it as a method that never returns a scenario of the
    domain's ``test`` split (the module-level generators take that exclusion as an argument,
    and calling them bare would leak test scenarios into training)."""
    fn = getattr(domain, "generate_tasks", None)
    return fn if callable(fn) else None


def training_tasks(domain: Domain, n_extra: int, seed: int) -> list[Task]:
    """Train-split tasks plus ``n_extra`` generated ones (no test-split scenario)."""
    excluded = {tid for s in EXCLUDED_SPLITS for tid in domain.splits.get(s, [])}
    train_ids = domain.splits.get("train")
    base = [t for t in domain.tasks if t.id not in excluded and (train_ids is None or t.id in train_ids)]
    gen = domain_generator(domain)
    extra: list[Task] = []
    if gen is not None and n_extra > 0:
        extra = [t for t in gen(seed, n_extra) if t.id not in excluded]
    return base + extra


def id_pool(domain: Domain, tasks: Iterable[Task] = ()) -> list[str]:
    """Every id-like string in the domain's DBs and task files (one token each)."""
    texts = [domain.db.model_dump_json()]
    if domain.user_db is not None:
        texts.append(domain.user_db.model_dump_json())
    for t in list(domain.tasks) + list(tasks):
        # Values a conversation can contain (not task or action ids, which it never does).
        texts.append(t.user_scenario.model_dump_json())
        texts.append(json.dumps([a.arguments for a in t.gold_actions]))
    pool: set[str] = set()
    for text in texts:
        # JSON escapes would hide ids inside strings; split the decoded values too.
        for piece in split_pieces(text):
            if is_id_like(piece):
                pool.add(piece)
    return sorted(pool)


@dataclass
class CorpusStats:
    """What corpus generation produced."""

    episodes: int = 0
    kept: int = 0
    failed: list[str] = field(default_factory=list)
    tempted_calls: int = 0
    tool_calls: int = 0
    channels: dict[str, int] = field(default_factory=dict)


async def _expert_episode(
    domain: Domain, task: Task, noise: NoiseConfig, seed: int,
    enums: dict[tuple[str, str], list[str]], decoys: dict[str, list[str]], restate_ids: bool = False,
    confirm_args: bool = False, email_first: bool = False,
) -> tuple[bool, list[Message], ExpertAgent, Any]:
    agent = ExpertAgent(domain, task, noise, random.Random(seed), enum_values=enums, decoys=decoys,
                        restate_ids=restate_ids, confirm_args=confirm_args, email_first=email_first)
    outcome = await run_episode(
        domain=domain, task=task, agent=agent, user=domain.make_user(task, seed),
        max_steps=200, max_errors=10,
    )
    return outcome.success, outcome.messages, agent, outcome


def build_corpus(
    domain_name: str,
    noise: NoiseConfig,
    *,
    n_episodes: int,
    seed: int,
    repeats: int = 1,
    log: Callable[[str], None] = print,
    restate_ids: bool = False,
    confirm_args: bool = False,
    email_first: bool = False,
) -> tuple[list[str], CorpusStats, list[str]]:
    """Expert episodes for one domain: (texts, stats, id pool).

    ``repeats`` episodes are played per task with different seeds (the gold end state is
    computed once per task, which is most of an episode's cost on the retail DB).
    """
    domain = get_domain(domain_name)
    tasks = training_tasks(domain, max(0, n_episodes // max(1, repeats)), seed)
    if not tasks:
        raise ValueError(f"domain {domain_name!r} has no training tasks")
    pool = id_pool(domain, tasks)
    decoys = decoy_ids(id_pool(domain))
    pool = sorted(set(pool) | {d for ds in decoys.values() for d in ds})
    enums = enum_arguments(domain)
    rng = random.Random(seed)
    stats = CorpusStats()
    texts: list[str] = []

    async def run_all() -> None:
        order = [t for t in tasks for _ in range(repeats)]
        rng.shuffle(order)
        for k in range(n_episodes):
            task = order[k % len(order)]
            ep_seed = rng.randrange(2**31)
            ok, messages, agent, outcome = await _expert_episode(
                domain, task, noise, ep_seed, enums, decoys, restate_ids, confirm_args, email_first)
            stats.episodes += 1
            stats.tempted_calls += agent.tempted_calls
            stats.tool_calls += len(outcome.calls)
            for c in outcome.calls:
                if c.channel is not None:
                    ch = str(getattr(c.channel, "value", c.channel))
                    stats.channels[ch] = stats.channels.get(ch, 0) + 1
            if ok:
                stats.kept += 1
                texts.append(render_episode(messages))
            elif len(stats.failed) < 20:
                stats.failed.append(task.id)

    asyncio.run(run_all())
    log(f"{domain_name}/{noise.name}: {stats.kept}/{stats.episodes} expert episodes kept, "
        f"{stats.tempted_calls} tempted of {stats.tool_calls} calls, channels {json.dumps(stats.channels)}")
    return texts, stats, pool

"""Closed-loop check of a reference-model folder on a domain's test tasks (no store, no report).

    python scripts/eval_reference.py --model pytest_quantagent/bundled/models/tiny-agent \
        --domain telecom --tasks 20 [--quantization int4-rtn-g128] [--show 1]

Prints success, channel counts per tool call and time; ``--show N`` prints N transcripts.
The release figures come from ``quantagent run`` (stored episodes, paired statistics); this
is the quick look used while training.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections import Counter

os.environ.setdefault("OMP_NUM_THREADS", "1")

from pytest_quantagent.backends.transformers import TransformersBackend
from pytest_quantagent.backends.wrapper import ModelClient
from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.quant.loading import on_load_quantizer
from pytest_quantagent.runner.agent import LLMAgent
from pytest_quantagent.runner.build import agent_system_prompt
from pytest_quantagent.runner.episode import run_episode
from pytest_quantagent.training.data import render_episode


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--domain", required=True)
    p.add_argument("--tasks", type=int, default=20)
    p.add_argument("--split", default="test")
    p.add_argument("--quantization", default=None)
    p.add_argument("--show", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=100)
    args = p.parse_args()
    domain = get_domain(args.domain)
    ids = domain.splits[args.split][: args.tasks]
    backend = TransformersBackend(args.model, quantization=args.quantization,
                                  prepare_model=on_load_quantizer(args.quantization))
    client = ModelClient(backend, concurrency=64)
    prompt = agent_system_prompt(domain.policy)
    tools = domain.agent_tool_schemas()

    async def one(i: int, tid: str):  # type: ignore[no-untyped-def]
        task = domain.task(tid)
        agent = LLMAgent(client, prompt, tools, seed=i)
        return await run_episode(domain=domain, task=task, agent=agent, user=domain.make_user(task, i),
                                 max_steps=args.max_steps)

    async def all_() -> list:  # type: ignore[type-arg]
        return await asyncio.gather(*(one(i, t) for i, t in enumerate(ids)))

    t0 = time.monotonic()
    outs = asyncio.run(all_())
    dt = time.monotonic() - t0
    ch: Counter[str] = Counter()
    calls = 0
    for o in outs:
        for c in o.calls:
            if c.requestor == "assistant":
                calls += 1
                if c.channel is not None:
                    ch[str(c.channel.value)] += 1
    ok = sum(o.success for o in outs)
    term = Counter(o.termination.value for o in outs)
    print(f"{args.domain} {args.quantization or 'as-saved'}: success {ok}/{len(outs)} = {ok / len(outs):.0%}; "
          f"agent calls {calls}; channels {dict(ch)}; terminations {dict(term)}; {dt:.1f}s")
    by_kind: Counter[str] = Counter()
    won: Counter[str] = Counter()
    for tid, o in zip(ids, outs, strict=True):
        k = tid.rsplit("_", 2)[0]
        by_kind[k] += 1
        won[k] += int(o.success)
    print("by kind:", {k: f"{won[k]}/{n}" for k, n in sorted(by_kind.items())})
    for o in [o for o in outs if not o.success][: args.show]:
        print("-" * 80)
        print(render_episode(o.messages)[:4000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

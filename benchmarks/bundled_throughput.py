"""Episodes per second of the bundled CPU model (transformers backend), before and after
batched decoding, measured side by side in one process.

Real episodes (the domain's scripted user, the bundled ``tiny-agent-prone`` bf16 arm,
greedy, the environment and evaluation; no store) at concurrency 1 and 64, under three
decoding modes of the same loaded model:

- ``legacy``: what the backend did before batched decoding: pending requests cut into one
  left-padded ``model.generate`` batch (up to 32 rows) that runs until its longest row ends.
  Its margins depend on the batch in the last bits.
- ``alone``: every request decoded by itself (``model.generate`` with one row): the
  reference that batched decoding reproduces bit for bit, and the path for sampled requests
  and unsupported models.
- ``batched``: the current default (continuous batching, ``backends/batched_decode.py``).

Printed per mode and concurrency: episodes, wall seconds, episodes/s, generated tokens/s,
this process's CPU seconds, episodes per CPU second, and whether every episode record (messages, decisions with their margins, calls, reward)
equals the ``alone`` run's at the same concurrency. Run with one thread per process::

    OMP_NUM_THREADS=1 python3 benchmarks/bundled_throughput.py [--episodes-c1 8] [--episodes-c64 64]
                                                              [--domain telecom] [--breakdown-only] [--json]

Printed first: the prefill of a 410-token prompt (the mean prompt of these runs) and one
decode step at 1, 8 and 64 rows.

Measured 2026-12-03 on the 2-core development VM shared with four other sessions (load
average 7-8 during this run, so wall times are about twice the CPU times; ``cpu s`` and
``ep/cpu-s`` are the steadier figures), telecom test split, ``tiny-agent-prone`` bf16,
``OMP_NUM_THREADS=1 python3 benchmarks/bundled_throughput.py``::

    mode     conc episodes   wall s    ep/s    tok/s   cpu s ep/cpu-s  equal to alone
    alone       1        8    24.68   0.324     56.1   12.25    0.653  -
    legacy      1        8    23.24   0.344     59.6   13.28    0.602  yes
    batched     1        8    21.64   0.370     64.0   10.74    0.745  yes
    alone      64       64   144.00   0.444     67.1   71.43    0.896  -
    legacy     64       64    97.15   0.659     99.4   47.94    1.335  no
    batched    64       64    61.02   1.049    158.3   30.71    2.084  yes

Two earlier runs of the same command at lower load (1.3-2.6) gave, at concurrency 64,
alone / legacy / batched 1.09 / 1.00 / 1.38 and 0.78 / 0.80 / 0.98 episodes per wall second
(no CPU column yet). At concurrency 64 batched decoding does 1.6x the episodes per CPU
second of the legacy batches and 2.3x of decoding alone, and its records are those of
decoding alone; the legacy batches' are not (margins differ in the last bits).

Why not 64x: only the decode steps batch. A step of 64 rows costs about 10x one row
(1-row kernels and one attention call per row, the price of bitwise batch invariance: see
``pytest_quantagent/backends/batched_decode.py``), i.e. about 6x the decode tokens per
second; but every request's prompt (the whole conversation so far, 410 tokens on average,
14 generated tokens per request) is prefilled alone, and prefill was 73% of the batched
run's decode-thread time (34 of 46 s in one instrumented run: 743 prefills of 46 ms, 376
steps of 26.8 ms at 25.7 rows on average). A 1-row prefill is compute-bound (SDPA's CPU
flash kernel ~43% of it, the GEMMs ~30%). Reusing an episode's KV cache from its previous
turn would remove most of it but changes the logits' last bits relative to a full prefill.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_quantagent.backends.base import GenerateRequest, Generation
from pytest_quantagent.backends.transformers import TransformersBackend
from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.runner.batch import RunSettings, plan_episodes, run_arm
from pytest_quantagent.runner.build import build_arm, resolve_arms

MODES = ("legacy", "alone", "batched")


class _Legacy:
    """The pre-batching queue: every pending request in one ``model.generate`` batch."""

    def __init__(self, backend: TransformersBackend, max_batch: int = 32) -> None:
        self.backend = backend
        self.max_batch = max_batch
        self.pending: list[tuple[GenerateRequest, list[int], asyncio.Future[Generation]]] = []
        self.worker: asyncio.Task[None] | None = None

    async def generate(self, request: GenerateRequest) -> Generation:
        prompt = self.backend.prompt_ids(request)
        fut: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self.pending.append((request, prompt, fut))
        if self.worker is None or self.worker.done():
            self.worker = asyncio.create_task(self.drain())
        return await fut

    async def drain(self) -> None:
        while self.pending:
            await asyncio.sleep(0)
            jobs, self.pending = self.pending, []
            for start in range(0, len(jobs), self.max_batch):
                chunk = jobs[start : start + self.max_batch]
                gens = await asyncio.to_thread(
                    self.backend._run, [j[0] for j in chunk], [j[1] for j in chunk])
                for (_, _, fut), g in zip(chunk, gens, strict=True):
                    fut.set_result(g)


def _set_mode(backend: TransformersBackend, mode: str, legacy: _Legacy) -> None:
    for name in ("generate", "batched_decoder"):
        backend.__dict__.pop(name, None)
    if mode == "legacy":
        backend.generate = legacy.generate  # type: ignore[method-assign]
    elif mode == "alone":
        backend.batched_decoder = lambda: None  # type: ignore[method-assign]


def _record_view(rec: Any) -> dict[str, Any]:
    d = rec.model_dump(mode="json")
    for k in ("duration_s", "key"):
        d.pop(k, None)
    return d


async def _measure(domain: Any, runtime: Any, task_ids: list[str], episodes: int, conc: int,
                   tokens: list[int]) -> tuple[float, float, list[Any]]:
    trials = -(-episodes // len(task_ids))
    plan = plan_episodes(task_ids, trials, run_seed=0)[:episodes]
    settings = RunSettings(concurrency=conc)
    tokens[0] = 0
    t0, c0 = time.perf_counter(), _cpu_s()
    recs = await run_arm(domain=domain, runtime=runtime, plan=plan, settings=settings)
    return time.perf_counter() - t0, _cpu_s() - c0, recs


def _cpu_s() -> float:
    """This process's user + system CPU seconds, all threads (steadier than wall time on a
    shared machine: another process's load stretches wall time, not this CPU time)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _breakdown(backend: TransformersBackend, prompt_len: int) -> dict[str, float]:
    """Where the time of one request goes: prefill of a ``prompt_len``-token prompt (alone,
    as every request's is) and one decode step at 1, 8 and 64 rows."""
    import torch

    from pytest_quantagent.backends.batched_decode import DecodeRow

    decoder = backend.batched_decoder()
    assert decoder is not None
    g = torch.Generator().manual_seed(0)
    vocab = int(backend.model.config.vocab_size)
    rows = [DecodeRow(torch.randint(10, vocab, (prompt_len,), generator=g).tolist(), 10_000, False)
            for _ in range(64)]
    t0 = time.perf_counter()
    for r in rows:
        decoder.prefill(r)
        r.done = False
    out = {"prefill_ms": 1e3 * (time.perf_counter() - t0) / len(rows)}
    for b in (1, 8, 64):
        decoder.step(rows[:b])
        t0 = time.perf_counter()
        for _ in range(5):
            decoder.step(rows[:b])
        out[f"step_b{b}_ms"] = 1e3 * (time.perf_counter() - t0) / 5
    return {k: round(v, 2) for k, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--domain", default="telecom")
    ap.add_argument("--model", default="tiny-agent-prone")
    ap.add_argument("--episodes-c1", type=int, default=8)
    ap.add_argument("--episodes-c64", type=int, default=64)
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {MODES}")
    ap.add_argument("--breakdown-only", action="store_true",
                    help="only the prefill/step timings (no episodes)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error(f"--modes: {bad} not among {', '.join(MODES)}")
    if os.environ.get("OMP_NUM_THREADS") != "1":
        print("note: OMP_NUM_THREADS is not 1", file=sys.stderr)

    domain = get_domain(args.domain)
    task_ids = list(domain.splits.get("test") or [t.id for t in domain.tasks])
    (spec,) = resolve_arms("bf16", model_spec=args.model)
    runtime = build_arm(spec, concurrency=64)
    backend = runtime.backend
    assert isinstance(backend, TransformersBackend)
    legacy = _Legacy(backend)
    tokens = [0]
    real_run = backend._to_generation

    def counted(*a: Any, **kw: Any) -> Generation:
        g = real_run(*a, **kw)
        tokens[0] += g.completion_tokens or 0
        return g

    backend._to_generation = counted  # type: ignore[method-assign]
    backend.batched_decoder()  # load-time self-check outside the timings
    print(f"batched decoding: {'on' if backend.batching_reason is None else backend.batching_reason}",
          file=sys.stderr)

    parts = _breakdown(backend, 410)  # the telecom runs' mean prompt length
    print(f"prefill of a 410-token prompt {parts['prefill_ms']} ms; decode step at 1/8/64 rows "
          f"{parts['step_b1_ms']}/{parts['step_b8_ms']}/{parts['step_b64_ms']} ms "
          f"({1e3 / parts['step_b1_ms']:.0f} vs {64e3 / parts['step_b64_ms']:.0f} decode tokens/s)")
    if args.breakdown_only:
        return 0
    rows: list[dict[str, Any]] = []
    for conc, n in ((1, args.episodes_c1), (64, args.episodes_c64)):
        ref: list[dict[str, Any]] | None = None
        for mode in sorted(modes, key=lambda m: m != "alone"):  # alone first: the reference
            _set_mode(backend, mode, legacy)
            wall, cpu, recs = asyncio.run(_measure(domain, runtime, task_ids, n, conc, tokens))
            asyncio.run(runtime.aclose())
            view = [_record_view(r) for r in recs]
            if mode == "alone":
                ref = view
            rows.append({
                "mode": mode, "concurrency": conc, "episodes": len(recs), "wall_s": round(wall, 2),
                "episodes_per_s": round(len(recs) / wall, 3), "tokens_per_s": round(tokens[0] / wall, 1),
                "cpu_s": round(cpu, 2), "episodes_per_cpu_s": round(len(recs) / cpu, 3),
                "equal_to_alone": None if ref is None or mode == "alone" else view == ref,
                "success": sum(r.success for r in recs),
            })
            print(json.dumps(rows[-1]), file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'mode':8} {'conc':>4} {'episodes':>8} {'wall s':>8} {'ep/s':>7} {'tok/s':>8} "
          f"{'cpu s':>7} {'ep/cpu-s':>8}  equal to alone")
    for r in rows:
        eq = {None: "-", True: "yes", False: "no"}[r["equal_to_alone"]]
        print(f"{r['mode']:8} {r['concurrency']:>4} {r['episodes']:>8} {r['wall_s']:>8.2f} "
              f"{r['episodes_per_s']:>7.3f} {r['tokens_per_s']:>8.1f} {r['cpu_s']:>7.2f} "
              f"{r['episodes_per_cpu_s']:>8.3f}  {eq}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

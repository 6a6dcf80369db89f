"""Open-loop screen of weight quantizations of a bundled model (issue 34 item 2).

Teacher-forces the clean expert's gold transcripts of a fresh task pool (or a split)
through the bf16 model and through each candidate fake quantization of it, and prints the
paired flips against bf16: ``call_or_text`` (where the telecom agent runs the user's tool
instead of asking) and ``tool_name`` (retail's unknown tools), right→wrong / wrong→right,
and the wrong-decision totals. The model is loaded once; each candidate quantizes a copy.

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 scripts/pair_search.py --domain telecom \
        --model tiny-agent-prone --fresh 300 --fresh-seed 7 \
        --schemes int4-g128,int4-g64,int4-g32,int4-g-1,int4s-g128,int3-g128

Scheme spelling: ``int<bits>[s]-g<N>`` (``s``: symmetric absmax; ``g-1``: per row),
optionally ``+head`` (quantize the tied lm_head/embedding as well), ``awq`` (the bundled
AWQ checkpoint) or ``fp8`` (e4m3 cast, per-channel scale). Prints one row per scheme and,
with ``--json PATH``, writes them.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys
import time
from typing import Any


def quantized_copy(model: Any, scheme: str, folder: str) -> Any:
    from transformers import AutoModelForCausalLM

    from pytest_quantagent.quant.rtn import fake_quantize_model

    if scheme == "bf16":
        return model
    if scheme == "awq":
        import torch

        return AutoModelForCausalLM.from_pretrained(f"{folder}/arms/awq-w4a16", dtype=torch.float32).eval()
    m2 = copy.deepcopy(model)
    head = scheme.endswith("+head")
    base = scheme.removesuffix("+head")
    if base == "fp8":
        fake_quantize_model(m2, "fp8-cast", fp8_scale="channel", include_lm_head=head)
        return m2
    m = re.fullmatch(r"int([2-8])(s?)-g(-?\d+)", base)
    if not m:
        raise SystemExit(f"scheme {scheme!r}: expected int<bits>[s]-g<N>[+head], awq, fp8 or bf16")
    fake_quantize_model(m2, "int4-rtn", bits=int(m.group(1)), group_size=int(m.group(3)),
                        symmetric=bool(m.group(2)), include_lm_head=head)
    return m2


#: Lower edges of the signed bf16 margin bins (negative: bf16 already wrong; the narrow bins
#: on each side of 0 are the decisions a small rounding can flip, and which way).
SIGNED_EDGES: tuple[float, ...] = (-float("inf"), -0.5, -0.25, 0.0, 0.25, 0.5)


def margin_bins(margins: list[float]) -> list[int]:
    """How many margins fall in each bin of :data:`SIGNED_EDGES` (the last one open above)."""
    counts = [0] * len(SIGNED_EDGES)
    for m in margins:
        i = max(k for k, lo in enumerate(SIGNED_EDGES) if m >= lo)
        counts[i] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--domain", required=True)
    ap.add_argument("--model", default="tiny-agent-prone")
    ap.add_argument("--fresh", type=int, default=0, help="fresh pool size (0: use --split)")
    ap.add_argument("--fresh-seed", type=int, default=7)
    ap.add_argument("--split", default="test")
    ap.add_argument("--schemes", required=True)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import torch

    from pytest_quantagent.backends.base import BackendOptions
    from pytest_quantagent.backends.transformers import create_backend
    from pytest_quantagent.env.registry import get_domain
    from pytest_quantagent.quant.arms import resolve_arm
    from pytest_quantagent.quant.loading import backend_spec
    from pytest_quantagent.training.decisions import analyze_arm, summarize, trained_expert_policy

    torch.set_num_threads(1)
    ref = resolve_arm("bf16", args.model)
    assert ref.path is not None
    policy = trained_expert_policy(ref.path, args.domain)
    domain = get_domain(args.domain)
    if args.fresh:
        from pytest_quantagent.env.fresh import fresh_tasks

        tasks = fresh_tasks(domain, args.fresh, args.fresh_seed)
    else:
        tasks = [domain.task(t) for t in domain.splits[args.split]]
    t0 = time.monotonic()
    from pytest_quantagent.training.decisions import gold_transcripts_of

    transcripts = gold_transcripts_of(args.domain, tasks, **policy)
    print(f"{len(transcripts)} gold transcripts of {len(tasks)} tasks in {time.monotonic() - t0:.1f}s",
          file=sys.stderr)
    backend = create_backend(backend_spec(ref), BackendOptions())
    assert backend.dtok is not None
    base = backend.model
    schemes = ["bf16", *[s for s in args.schemes.split(",") if s and s != "bf16"]]
    by_arm = {}
    for s in schemes:
        t = time.monotonic()
        by_arm[s] = analyze_arm(quantized_copy(base, s, ref.path), backend.dtok, transcripts)
        print(f"  {s}: {time.monotonic() - t:.1f}s", file=sys.stderr)
    rows = []
    for a in summarize("bf16", by_arm):
        rows.append({
            "scheme": a.arm,
            "cot_wrong": a.wrong["call_or_text"], "cot_r2w": a.right_to_wrong["call_or_text"],
            "cot_w2r": a.wrong_to_right["call_or_text"],
            "name_wrong": a.wrong["tool_name"], "name_r2w": a.right_to_wrong["tool_name"],
            "name_w2r": a.wrong_to_right["tool_name"],
            "arg_wrong": a.wrong["argument"],
            "calls_for_text": a.calls_for_text, "novel_wrong_names": a.novel_wrong_names,
        })
    n_cot = sum(1 for d in by_arm["bf16"] if d.kind == "call_or_text")
    n_name = sum(1 for d in by_arm["bf16"] if d.kind == "tool_name")
    narrow = sum(1 for d in by_arm["bf16"] if d.kind == "call_or_text" and abs(d.margin) < 0.5)
    print(f"{args.model} · {args.domain} · {len(transcripts)} episodes · call_or_text {n_cot} "
          f"({narrow} below 0.5 logit) · names {n_name}")
    bins = {kind: margin_bins([d.margin for d in by_arm["bf16"] if d.kind == kind])
            for kind in ("call_or_text", "tool_name")}
    edges = " ".join(f"{lo:+.2f}" for lo in SIGNED_EDGES)
    for kind, counts in bins.items():
        print(f"bf16 {kind} margins (bins from {edges}): {counts}")
    print(f"{'scheme':<14} {'c/t wrong':>9} {'r→w':>4} {'w→r':>4}  {'names wrong':>11} {'r→w':>4} {'w→r':>4} "
          f"{'args wrong':>10}  novel names")
    for r in rows:
        print(f"{r['scheme']:<14} {r['cot_wrong']:>9} {r['cot_r2w']:>4} {r['cot_w2r']:>4}  {r['name_wrong']:>11} "
              f"{r['name_r2w']:>4} {r['name_w2r']:>4} {r['arg_wrong']:>10}  {','.join(r['novel_wrong_names'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "domain": args.domain, "episodes": len(transcripts),
                       "fresh": args.fresh, "fresh_seed": args.fresh_seed, "rows": rows,
                       "bf16_margin_bins": {"edges": list(SIGNED_EDGES), **bins}}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

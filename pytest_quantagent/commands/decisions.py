"""``quantagent decisions``: open-loop decision-point analysis of arms (margins, flips).

Teacher-forces the clean expert's trajectories of a domain's test tasks through each arm
of a model spec with a domain tokenizer (the bundled ``tiny-agent`` models by default) and
prints, per arm: wrong-name and wrong-argument rates, the wrong-name set, the turns where
the arm would call a tool instead of writing text (or the reverse), and flips against the
reference arm (the first arm listed) by the reference margin's bin.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("decisions", help="open-loop decision-point analysis (margins, flips)",
                       description=__doc__)
    p.add_argument("--domain", required=True, help="retail or telecom (any domain with a test split)")
    p.add_argument("--arms", default="bf16,int4", help="comma-separated; the first is the reference")
    p.add_argument("--model", default=None, help="model spec (default tiny-agent)")
    p.add_argument("--split", default="test", help="task split whose gold transcripts are replayed (default test)")
    p.add_argument("--seeds", type=int, default=1, help="user seeds per task")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from pytest_quantagent.backends.base import BackendOptions
    from pytest_quantagent.backends.transformers import create_backend
    from pytest_quantagent.quant.arms import DEFAULT_MODEL_SPEC, parse_arm_labels, resolve_arm
    from pytest_quantagent.quant.loading import backend_spec
    from pytest_quantagent.training.decisions import (
        analyze_arm,
        gold_transcripts,
        summarize,
        summary_dicts,
        trained_expert_policy,
    )

    spec = args.model or DEFAULT_MODEL_SPEC
    labels = parse_arm_labels(args.arms)
    t0 = time.monotonic()
    arms = [resolve_arm(label, spec) for label in labels]
    # Gold trajectories in the expert policy the reference model was trained on.
    policy = trained_expert_policy(arms[0].path, args.domain) if arms[0].path is not None else {}
    transcripts = gold_transcripts(args.domain, split=args.split, seeds=args.seeds, **policy)
    timings: dict[str, float] = {"transcripts_s": round(time.monotonic() - t0, 2)}
    by_arm = {}
    for label, arm in zip(labels, arms, strict=True):
        t = time.monotonic()
        backend = create_backend(backend_spec(arm), BackendOptions())
        if backend.dtok is None:
            raise SystemExit(f"arm {label!r} ({arm.path}) has no domain tokenizer; open-loop analysis "
                             "needs a model trained on the bundled chat format")
        by_arm[label] = analyze_arm(backend.model, backend.dtok, transcripts)
        timings[f"{label}_s"] = round(time.monotonic() - t, 2)
    summaries = summarize(labels[0], by_arm)
    result: dict[str, Any] = {
        "domain": args.domain, "model": spec, "reference": labels[0], "episodes": len(transcripts),
        "expert_policy": policy,
        "arms": summary_dicts(summaries), "timings": timings,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    _print_table(result)
    return 0


def _print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"decisions · {result['model']} · {result['domain']} · {result['episodes']} gold episodes "
                    f"(reference {result['reference']})")
    for col in ("arm", "name calls", "wrong name", "arg wrong", "r→w", "w→r", "flips by |ref margin| (name)",
                "wrong names", "call↔text wrong (r→w / w→r)"):
        t.add_column(col)
    for a in result["arms"]:
        bins = a["flips_by_bin"].get("tool_name", {})
        ns = a["flips_by_bin"].get("tool_name_n", {})
        t.add_row(
            a["arm"], str(a["decisions"]["tool_name"]),
            f"{a['wrong']['tool_name']} ({a['wrong_rate']['tool_name']:.1%})",
            f"{a['wrong']['argument']} ({a['wrong_rate']['argument']:.1%})",
            str(a["right_to_wrong"]["tool_name"]), str(a["wrong_to_right"]["tool_name"]),
            " ".join(f"{k}:{bins[k]}/{ns[k]}" for k in bins),
            ", ".join(f"{k}×{v}" for k, v in list(a["wrong_names"].items())[:4]),
            f"{a['wrong']['call_or_text']} of {a['decisions']['call_or_text']} "
            f"({a['right_to_wrong']['call_or_text']} / {a['wrong_to_right']['call_or_text']})",
        )
    Console().print(t)

"""First-pass figures of a fidelity-corpus batch against the scripted user of this checkout.

Plays every case of the given files (globs relative to ``tests/user/fidelity/``; default
``blind/*.jsonl``, the held-out batches that ``tests/user/test_fidelity.py`` does not collect)
with ``tests/user/fidelity_harness.py`` and prints, per file and per domain: cases, exact
reactions (%), spurious state-changing device calls, and every failing case with its problems
and the start of what the user said. Official-task cases (``"tau2": true``) need the τ²-bench
data (``$QUANTAGENT_TAU2_DATA`` or ``../shared/tau2``); without it they are counted as skipped.

Run from a checkout's root (its package and harness are imported)::

    OMP_NUM_THREADS=1 python3 scripts/fidelity_batch.py                    # blind/*.jsonl
    OMP_NUM_THREADS=1 python3 scripts/fidelity_batch.py 'blind/telecom_*.jsonl' --json

To measure the same batch against another branch's simulator, run this script from that
branch's worktree with ``--corpus`` pointing at the folder holding the batch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.getcwd())
sys.path.insert(0, str(Path(os.getcwd()) / "tests" / "user"))

import fidelity_harness as fh


def _figures(results: list[fh.Result]) -> dict[str, Any]:
    exact = sum(r.exact for r in results)
    return {
        "cases": len(results),
        "exact": exact,
        "exact_pct": round(100.0 * exact / len(results), 1) if results else None,
        "spurious_state_changes": sum(len(r.spurious_writes) for r in results),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("globs", nargs="*", default=["blind/*.jsonl"],
                    help="case files, relative to the corpus folder (default: blind/*.jsonl)")
    ap.add_argument("--corpus", type=Path, default=fh.CORPUS,
                    help=f"the corpus folder the globs are relative to (default: {fh.CORPUS})")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = ap.parse_args(argv)
    if not args.corpus.is_dir():
        ap.error(f"--corpus {str(args.corpus)!r} is not a folder")
    fh.CORPUS = args.corpus
    cases: list[dict[str, Any]] = []
    for pattern in args.globs:
        found = fh.load(pattern)
        if not found:
            ap.error(f"no cases match {pattern!r} under {args.corpus}")
        cases += found
    skipped = [c for c in cases if not fh.playable(c)]
    results = [fh.play(c) for c in cases if fh.playable(c)]

    by_file: dict[str, list[fh.Result]] = defaultdict(list)
    by_domain: dict[str, list[fh.Result]] = defaultdict(list)
    for r in results:
        by_file[r.case["_where"].split(":")[0]].append(r)
        domain = r.case["domain"] + ("_tau2" if r.case.get("tau2") else "")
        by_domain[domain].append(r)
        by_domain[r.case["domain"] + "_all"].append(r)
    by_kind: dict[str, list[fh.Result]] = defaultdict(list)
    for r in results:
        for k in r.case.get("kinds", []):
            by_kind[k].append(r)
    out: dict[str, Any] = {
        "total": _figures(results),
        "skipped_no_tau2_data": len(skipped),
        "files": {f: _figures(rs) for f, rs in sorted(by_file.items())},
        "domains": {d: _figures(rs) for d, rs in sorted(by_domain.items())},
        "kinds": {k: _figures(rs) for k, rs in sorted(by_kind.items())},
        "misses": [
            {"where": r.case["_where"], "id": r.case["id"], "kinds": r.case.get("kinds", []),
             "problems": r.problems, "spurious": r.spurious_writes,
             "calls": [n for n, _ in r.calls], "said": r.text[:200]}
            for r in results if not r.exact
        ],
    }
    if args.json:
        print(json.dumps(out, indent=1, ensure_ascii=False))
        return 0

    def line(name: str, f: dict[str, Any]) -> str:
        return (f"  {name:<32} cases {f['cases']:>4}   exact {f['exact']:>4} ({f['exact_pct']}%)"
                f"   spurious state changes {f['spurious_state_changes']}")

    print("per file:")
    for name, f in out["files"].items():
        print(line(name, f))
    print("per domain (_tau2: official tasks, _all: bundled + official):")
    for name, f in out["domains"].items():
        print(line(name, f))
    print(line("total", out["total"]))
    print("per misreading kind (a case has one or more):")
    for name, f in out["kinds"].items():
        print(line(name, f))
    if skipped:
        print(f"  skipped (no tau2-bench data): {len(skipped)}")
    print(f"\nfailing cases ({len(out['misses'])}):")
    for m in out["misses"]:
        extra = f" [spurious: {', '.join(m['spurious'])}]" if m["spurious"] else ""
        print(f"- {m['where']} {m['id']} ({', '.join(m['kinds'])}){extra}: {'; '.join(m['problems'])}"
              f"\n    said: {m['said']!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``quantagent analyze``: analyse episode stores (or τ²-bench results files) into a report.

Stores are read line by line and folded into compact per-(domain, arm) arrays as they are
read, so large runs never sit in memory twice. A torn last line (no newline: a writer killed
mid-append) is skipped with a warning; any complete bad line is an error naming file and line
(the same rule as the store's own reader).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pytest_quantagent.errors import DataFileError, QuantAgentError


def plain_text(text: object) -> str:
    """Data made safe to print (see :func:`pytest_quantagent.report.terminal.plain_text`)."""
    from pytest_quantagent.report.terminal import plain_text as _plain

    return _plain(text)

STORE_FILE = "episodes.jsonl"


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="analyze episode stores or tau2-bench results files",
        description="Analyze episode stores (run directories holding episodes.jsonl, or .jsonl "
        "files) grouped by (domain, arm), each arm against the reference arm; or tau2-bench "
        "results files with --tau2 (the first file is the reference).",
    )
    p.add_argument("paths", nargs="*", type=Path, metavar="STORE_OR_RUN_DIR",
                   help="run directories (containing episodes.jsonl) or .jsonl store files")
    p.add_argument("--tau2", nargs="+", type=Path, default=None, metavar="RESULTS_JSON",
                   help="tau2-bench results files: REF.json CAND.json [...]")
    p.add_argument("--allow-mixed-tau2", action="store_true",
                   help="pair --tau2 files from tau2-bench versions that account for failures "
                   "differently (refused by default; the difference is then stated)")
    p.add_argument("--reference", default=None, metavar="ARM",
                   help="reference arm label (default: bf16 if present, else the first arm)")
    p.add_argument("--json", dest="json_path", default=None, metavar="PATH",
                   help="write the report JSON to PATH ('-' for stdout)")
    p.add_argument("--html", dest="html_path", type=Path, default=None, metavar="PATH",
                   help="write the self-contained HTML report to PATH")
    from pytest_quantagent.verdict import (
        DEFAULT_ALPHA,
        DEFAULT_MARGIN,
        DEFAULT_MAX_RATIO,
        DEFAULT_RARE_TOLERANCE,
        DEFAULT_TIGHT_BUDGETS,
    )

    p.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                   help=f"equivalence margin on success (default {DEFAULT_MARGIN})")
    p.add_argument("--max-ratio", type=float, default=DEFAULT_MAX_RATIO,
                   help=f"channel amplification threshold (default {DEFAULT_MAX_RATIO})")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                   help=f"family-wise level (default {DEFAULT_ALPHA})")
    p.add_argument("--tight-budgets", "--budgets", dest="budgets", default=None,
                   metavar="K[,K...]", help="tight budgets whose gap widening is tested "
                   f"(default {','.join(map(str, DEFAULT_TIGHT_BUDGETS))} below the run's)")
    p.add_argument("--rare-tolerance", type=float, default=DEFAULT_RARE_TOLERANCE,
                   help="per-call rate increase a rare channel must be shown below "
                   f"(default {DEFAULT_RARE_TOLERANCE})")
    p.add_argument("--holm-scope", choices=("cell", "report"), default="cell",
                   help="Holm's family: each cell's tests (default) or the whole report")
    p.add_argument("--quiet", action="store_true", help="do not print the table")


def _store_files(paths: Sequence[Path]) -> list[Path]:
    files = []
    for p in paths:
        if p.is_dir():
            f = p / STORE_FILE
            if not f.is_file():
                raise DataFileError(p, "", f"not a run directory: no {STORE_FILE} inside")
            files.append(f)
        elif p.is_file():
            _refuse_non_store(p)
            files.append(p)
        else:
            raise DataFileError(p, "", "no such file or directory")
    return files


def _refuse_non_store(p: Path) -> None:
    """A report JSON or a τ²-bench results file given where an episode store is expected
    is named as what it is, with the command that reads it."""
    import json

    with p.open("rb") as f:
        head = f.read(4096).lstrip()
    if not head.startswith(b"{"):
        return
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return  # one record per line (a store) or broken: the store reader says which line
    if isinstance(data, dict) and "schema_version" in data and "cells" in data:
        raise DataFileError(p, "", "this is a quantagent report JSON, not an episode store; "
                            f"show it with `quantagent report {p}`, or give analyze the run "
                            f"directory (holding {STORE_FILE}) it was made from")
    if isinstance(data, dict) and "simulations" in data:
        raise DataFileError(p, "", "this is a tau2-bench results file, not an episode store; "
                            f"analyze it with `quantagent analyze --tau2 REFERENCE.json {p}`")


def iter_store(path: Path, warn: Any = None) -> Iterable[Any]:
    """Yield each line of a JSONL store as a validated
    :class:`~pytest_quantagent.metrics.episode.LeanRecord` dict (streaming; only the fields
    the analysis reads are validated, messages are skipped). The store's one rule
    (:func:`~pytest_quantagent.store.jsonl.split_lines`): a last line without its newline is
    torn (skipped with a warning); any complete line that is not a record is an error."""
    from pytest_quantagent.metrics.episode import LEAN_RECORD
    from pytest_quantagent.store.jsonl import iter_store_lines

    warn = warn or (lambda msg: print(f"quantagent analyze: warning: {plain_text(msg)}",
                                      file=sys.stderr))
    for lineno, raw in iter_store_lines(path, warn):
        try:
            yield LEAN_RECORD.validate_json(raw)
        except ValidationError as e:
            first = e.errors()[0] if e.errors() else {"msg": str(e), "loc": ()}
            where = ".".join(str(x) for x in first.get("loc", ()))
            problem = f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
            raise DataFileError(path, f"line {lineno}", f"not a valid episode record: {problem}") from None


def _config(args: argparse.Namespace) -> Any:
    from pytest_quantagent.report.model import AnalysisConfig

    budgets = None
    if args.budgets is not None:
        try:
            budgets = tuple(int(x) for x in str(args.budgets).split(",") if x.strip())
        except ValueError:
            raise ValueError(f"--tight-budgets={args.budgets!r} is not allowed; give "
                             "comma-separated integers, e.g. 2,5") from None
    return AnalysisConfig(margin=args.margin, max_ratio=args.max_ratio, alpha=args.alpha,
                          tight_budgets=budgets, rare_tolerance=args.rare_tolerance,
                          holm_scope=args.holm_scope, trials_flag="`quantagent run --trials`",
                          tasks_flag="`quantagent run --num-tasks`")


def _pick_reference(arms: Sequence[str], wanted: str | None, domain: str) -> str:
    from pytest_quantagent.errors import UnknownNameError

    if wanted is not None:
        if wanted not in arms:
            raise UnknownNameError("reference arm", wanted, arms, hint=f"(domain {domain})")
        return wanted
    return "bf16" if "bf16" in arms else sorted(arms)[0]


def build_report(args: argparse.Namespace) -> Any:
    """Read the inputs, analyse, return the :class:`Report`."""

    from pytest_quantagent.metrics.episode import ArmAccumulator, ArmData
    from pytest_quantagent.report.model import CellInput, analyze

    cfg = _config(args)
    if not args.paths and not args.tau2:
        raise ValueError("nothing to analyze: give STORE_OR_RUN_DIR paths or --tau2 files")
    acc: dict[tuple[str, str], ArmAccumulator] = {}
    extra: dict[tuple[str, str], dict[str, Any]] = {}
    order: list[tuple[str, str]] = []
    reference = args.reference
    sources: list[str] = []

    def get(key: tuple[str, str]) -> ArmAccumulator:
        if key not in acc:
            acc[key] = ArmAccumulator(*key)
            order.append(key)
        return acc[key]

    def fold(records: Iterable[Any]) -> None:
        for r in records:
            get((r.domain, r.arm)).add(r)

    for f in _store_files(args.paths):
        sources.append(str(f))
        for d in iter_store(f):
            get((d["domain"], d["arm"])).add_raw(d)
    if args.tau2:
        from pytest_quantagent.tau2.compare import check_accounting, unique_labels
        from pytest_quantagent.tau2.reader import read_results

        # same-named files in different folders are different arms
        labels = unique_labels(args.tau2)
        first: dict[str, tuple[str, Any]] = {}  # domain → (file, provenance) of its reference
        for i, path in enumerate(args.tau2):
            run = read_results(path, label=labels[i])
            prov = run.provenance
            if run.domain not in first:
                first[run.domain] = (str(run.path), prov)
            else:
                note = check_accounting(first[run.domain], (str(run.path), prov),
                                        allow_mixed=getattr(args, "allow_mixed_tau2", False))
                if note:
                    run.flags.notes.append(note)
            if not args.quiet:
                print(f"quantagent analyze: {run.label}: {_score_line(run)}", file=sys.stderr)
                print(f"quantagent analyze: {run.label}: {prov.describe()}", file=sys.stderr)
                for line in run.flags.lines():
                    print(plain_text(f"quantagent analyze: {run.label}: {line}"), file=sys.stderr)
            sources.append(str(path))
            if i == 0 and reference is None:
                reference = run.label
            fold(run.records)
            flags = run.flags
            extra[(run.domain, run.label)] = {
                "tau2_flags": dataclasses.asdict(flags) if dataclasses.is_dataclass(flags) else flags,
                "tau2_provenance": prov.to_dict(),
                "tau2_score": _score(run),
            }
            del run
    data: dict[tuple[str, str], ArmData] = {k: a.finish() for k, a in acc.items()}
    # τ²-bench results: the pool is τ²-bench's, which this install does not hold
    tau2_domains = {d for (d, _), e in extra.items() if "tau2_provenance" in e}
    inputs: list[CellInput] = []
    for domain in dict.fromkeys(d for d, _ in order):
        arms = [a for d, a in order if d == domain]
        if len(arms) == 1:
            inputs.append(CellInput(domain, arms[0], data[(domain, arms[0])],
                                    extra=extra.get((domain, arms[0]), {})))
            continue
        ref = _pick_reference(arms, reference, domain)
        for arm in arms:
            if arm == ref:
                continue
            cell_extra = dict(extra.get((domain, arm), {}))
            ref_extra = extra.get((domain, ref), {})
            for key in ("tau2_score", "tau2_provenance"):
                if key in ref_extra:
                    cell_extra[f"reference_{key}"] = ref_extra[key]
            inputs.append(CellInput(domain, arm, data[(domain, arm)], ref, data[(domain, ref)],
                                    extra=cell_extra,
                                    pool_tasks=None if domain in tau2_domains else _store_pool(domain)))
    run_meta = {
        "sources": sources,
        "models": sorted({m for d in data.values() for m in d.models}),
        "backends": sorted({b for d in data.values() for b in d.backends}),
        "arms": sorted({a for _, a in order}),
        "budget": min((d.max_errors for d in data.values()), default=None),
    }
    return analyze(inputs, cfg, run=run_meta)


def _score(run: Any) -> dict[str, Any]:
    """τ²-bench's score of a file (mean reward over the episodes it scores) with the
    excluded infrastructure_error episodes counted beside it."""
    scored = run.scored()
    mean = sum(r.reward for r in scored) / len(scored) if scored else None
    return {"mean_reward": mean, "scored_episodes": len(scored),
            "excluded_infrastructure_errors": run.flags.infrastructure_errors,
            "episodes": len(run.records)}


def _score_line(run: Any) -> str:
    s = _score(run)
    mean = "n/a" if s["mean_reward"] is None else f"{s['mean_reward']:.3f}"
    return (f"tau2-bench score {mean} on {s['scored_episodes']} scored episodes; "
            f"{s['excluded_infrastructure_errors']} infrastructure_error episode(s) excluded "
            f"(of {s['episodes']})")


def write_outputs(report: Any, json_path: str | None, html_path: Path | None) -> None:
    """Write the JSON (``-`` = stdout) and HTML outputs of a report."""
    from pytest_quantagent.report.json_io import dumps_report, write_report

    data = report.model_dump(mode="json") if hasattr(report, "model_dump") else report
    if json_path == "-":
        sys.stdout.write(dumps_report(data))
    elif json_path:
        write_report(data, json_path)
    if html_path is not None:
        try:
            from pytest_quantagent.report.html import render_html
        except ImportError:
            raise QuantAgentError("HTML rendering (pytest_quantagent.report.html) is not "
                                  "available in this build") from None
        html_path.parent.mkdir(parents=True, exist_ok=True)
        html_path.write_text(render_html(data), encoding="utf-8")


def run(args: argparse.Namespace) -> int:
    """Analyze, render, write; exit with the release gate's code (0 GO, 1 NO-GO, 2
    INCONCLUSIVE; 4 bad input, nothing judged: :mod:`pytest_quantagent.analysis.gate`)."""
    from pytest_quantagent.analysis.gate import exit_with_gate
    from pytest_quantagent.errors import EXIT_USAGE

    try:
        report = build_report(args)
        if not args.quiet and args.json_path != "-":
            from pytest_quantagent.report.terminal import render_terminal

            render_terminal(report)
        write_outputs(report, args.json_path, args.html_path)
    except (QuantAgentError, ValueError) as e:
        print(f"quantagent analyze: error: {plain_text(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    data = report.model_dump(mode="json") if hasattr(report, "model_dump") else report
    return exit_with_gate(data.get("cells", []))


def _store_pool(domain: str) -> int | None:
    """The advice's cap for a stored run of ``domain``: every task of the installed domain
    (and its fresh pool where it generates tasks); None for a domain not installed here."""
    from pytest_quantagent.env.registry import get_domain
    from pytest_quantagent.runner.selection import TaskSelection, pool_capacity

    try:
        dom = get_domain(domain)
    except Exception:  # a store of a domain this install lacks: the advice is uncapped
        return None
    return pool_capacity(dom, TaskSelection("ids", ids=("_",)))

"""``quantagent run``: run (or resume) one domain's episodes for a set of arms and write the
report JSON.

The first arm of ``--arms`` is the reference; every other arm becomes a cell compared with
it on the same tasks, trials and seeds. A one-arm run writes its cell with ``reference``
null. Episodes are stored in ``--out`` (default ``.quantagent``, the same store the pytest
plugin uses), so re-running resumes and never re-runs a stored episode.

With ``--user llm`` one LLM user (``--user-model SPEC`` or the ``[user]`` table of
``--config``) plays the customer for every arm; its turns are cached in
``<out>/user_turns.jsonl``, so arms whose conversations agree get the same replies.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_quantagent.env.tasksets import tau2_data_arg
from pytest_quantagent.errors import QuantAgentError

if TYPE_CHECKING:
    from pytest_quantagent.runner.service import ArmsRun

DEFAULT_OUT = ".quantagent"


def _positive(name: str, minimum: int = 1) -> Any:
    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {value!r}") from None
        if n < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be >= {minimum}, got {n}")
        return n

    return parse


def add_episode_options(p: argparse.ArgumentParser) -> None:
    """The options :func:`run_specs` reads (task selection, trials, seed, limits, user
    simulator, store), shared by ``quantagent run`` and ``quantagent screen``."""
    sel = p.add_mutually_exclusive_group()
    sel.add_argument("--num-tasks", type=_positive("--num-tasks"), metavar="N", default=None,
                     help="the first N tasks (of --split when given)")
    sel.add_argument("--tasks", metavar="IDS", default=None, help="comma-separated task ids")
    p.add_argument("--split", default=None,
                   help="task split (e.g. test; default: test for the bundled models, else all tasks)")
    p.add_argument("--trials", type=_positive("--trials"), default=1, metavar="T",
                   help="trials per task and arm (paired seeds across arms; default 1)")
    p.add_argument("--seed", type=_positive("--seed", 0), default=0, metavar="S",
                   help="run seed; each episode's seed derives from it, the task and the trial "
                   "(default 0)")
    p.add_argument("--error-budget", type=_positive("--error-budget"), default=10, metavar="K",
                   help="end an episode at its K-th failed tool call (tau2-bench: 10)")
    p.add_argument("--max-steps", type=_positive("--max-steps"), default=200, metavar="N",
                   help="message hops before an episode ends as max_steps (default 200)")
    p.add_argument("--concurrency", type=_positive("--concurrency"), default=8, metavar="C",
                   help="episodes in flight per arm")
    p.add_argument("--episode-timeout", type=float, default=900.0, metavar="SECONDS",
                   help="wall-clock limit per episode attempt (an infrastructure failure)")
    p.add_argument("--user", choices=("scripted", "llm"), default="scripted",
                   help="user simulator: the domain's scripted user (default) or an LLM user "
                   "(one model, pinned and cached, shared by every arm)")
    p.add_argument("--user-model", metavar="SPEC", default=None,
                   help="model of the LLM user: BACKEND:MODEL[@BASE_URL] (e.g. "
                   "openai:gpt-4.1@http://127.0.0.1:8001/v1) or a model spec (tiny-agent[:ARM]); "
                   "default: the [user] table of --config")
    p.add_argument("--user-temperature", type=float, default=None, metavar="T",
                   help="LLM user sampling temperature (default 0, or the [user] table's)")
    p.add_argument("--tau2-data", type=tau2_data_arg("--tau2-data"), default=None, metavar="DIR",
                   help="run tau2-bench's official task/DB files: a tau2-bench checkout or its "
                   "data/tau2 folder (DIR/domains/<domain>/)")
    p.add_argument("--judge-model", metavar="SPEC", default=None,
                   help="LLM judge of tau2-bench's NL assertions (temperature 0, verdicts cached "
                   "in the store): BACKEND:MODEL[@BASE_URL]; default: the [judge] table of "
                   "--config; without one NL assertions are not evaluated")
    p.add_argument("--out", type=Path, default=Path(DEFAULT_OUT), metavar="DIR",
                   help=f"episode store directory (default {DEFAULT_OUT}; run, screen and the pytest "
                   "plugin share it)")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("run", help="run (or resume) episodes for one domain and a set of arms",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--domain", required=True, help="domain name (see `quantagent domains`)")
    p.add_argument("--arms", required=True, metavar="A[,B...]",
                   help="arm labels; the first is the reference (e.g. bf16,int4)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", metavar="SPEC", default=None,
                     help="model spec providing the arms (default: the bundled tiny-agent)")
    src.add_argument("--config", type=Path, metavar="TOML", default=None,
                     help="arms config: [arms.<label>] backend=... model=... base_url=...")
    add_episode_options(p)
    p.add_argument("--repair", choices=("none", "reflexive"), default="none",
                   help="reflexive: also run every arm as '<arm>+repair' (reflexive repair of "
                   "unknown-tool / bad-argument results), each compared with the reference")
    p.add_argument("--margin", type=float, default=None, metavar="X",
                   help="verdict: equivalence margin on success (default 0.075)")
    p.add_argument("--max-ratio", type=float, default=None, metavar="R",
                   help="verdict: channel amplification threshold (default 1.2)")
    p.add_argument("--tight-budgets", default=None, metavar="K[,K]",
                   help="verdict: tight budgets whose gap widening is tested (default 2,5)")
    p.add_argument("--accept-difference", "--quant-accept-difference", dest="accept_difference",
                   default=None, metavar="NAME[,NAME]",
                   help="serving settings in which the arms may differ (e.g. chat_template): "
                   "every setting is compared before any episode and any other difference "
                   "makes a cell INCONCLUSIVE 'not comparable' (names: backend, temperature, "
                   "top_p, max_tokens, reasoning, extra_body, tool_schemas, max_output_chars, "
                   "chat_template, tool_parser, reasoning_parser, max_model_len, server_version)")
    p.add_argument("--until-decided", action="store_true",
                   help="run in waves (the first is --num-tasks/--tasks x --trials, each next "
                   "about doubling the episodes: more tasks while the pool has them, then more "
                   "trials) and re-judge every cell after each wave, alpha spent over the "
                   "planned looks; a cell stops when decided or at --max-episodes")
    p.add_argument("--max-episodes", type=_positive("--max-episodes"), default=None, metavar="N",
                   help="with --until-decided: episodes per arm of a cell's last look "
                   "(default 1000)")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="write the report JSON to PATH ('-' = stdout)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars, no summary")


def _run_info(args: argparse.Namespace, specs: list[Any], run: ArmsRun) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    from pytest_quantagent.metrics.nl_assertions import nl_basis_summary

    try:
        ours = version("pytest-quantagent")
    except PackageNotFoundError:  # pragma: no cover
        ours = "unknown"
    return {
        "model": sorted({s.model for s in specs}),
        "arms": [s.label for s in specs],
        "reference": specs[0].label if len(specs) > 1 else None,
        "backend": sorted({s.backend for s in specs}),
        "backends": run.backends,
        "versions": {"pytest-quantagent": ours, "python": sys.version.split()[0]},
        "domain": args.domain,
        "seed": args.seed,
        "trials": args.trials,
        "budget": args.error_budget,
        "repair": args.repair,
        "max_steps": args.max_steps,
        "store": str(args.out),
        "user_sim": run.user["identity"] if run.user is not None else "scripted",
        "user": run.user["describe"] if run.user is not None else {"identity": "scripted"},
        "judge": run.judge,
        "judge_requests": run.judge_requests,
        "nl_assertions": {label: nl_basis_summary(recs) for label, recs in run.records.items()},
        "endpoints": run.endpoints,
    }


def with_repair_arms(arms: str, repair: str) -> str:
    """``"bf16,int4"`` → ``"bf16,bf16+repair,int4,int4+repair"`` for ``repair="reflexive"``:
    each arm followed by its repair twin, so the report shows them side by side (the
    reference stays first, without repair); unchanged for ``"none"``."""
    if repair == "none":
        return arms
    from pytest_quantagent.quant.arms import split_model, with_repair

    labels = [a.strip() for a in arms.split(",") if a.strip()]
    out: list[str] = []
    for a in labels:
        if a in out:
            continue
        out.append(a)
        twin = with_repair(a)
        if not split_model(a)[0].endswith("+repair") and twin not in out:
            out.append(twin)
    return ",".join(out)


def run_request(args: argparse.Namespace) -> Any:
    """The :class:`~pytest_quantagent.runner.service.RunRequest` of ``args`` (domain's task
    selection, trials, seed, budget, user simulator, judge; every model pre-flighted)."""
    from pytest_quantagent.runner.batch import RunSettings
    from pytest_quantagent.runner.build import resolve_user
    from pytest_quantagent.runner.judge import resolve_judge
    from pytest_quantagent.runner.service import RunRequest, TaskSelection

    user_model, user_temp = getattr(args, "user_model", None), getattr(args, "user_temperature", None)
    user_config = None
    if getattr(args, "user", "scripted") == "llm":
        user_config = resolve_user(user_model, config_path=args.config, temperature=user_temp)
    elif user_model is not None or user_temp is not None:
        raise ValueError("--user-model/--user-temperature configure the LLM user simulator, but "
                         "the user is 'scripted'; add --user llm or drop them")
    request = RunRequest(
        tasks=TaskSelection.from_flags(args.num_tasks, args.tasks, args.split),
        trials=args.trials, seed=args.seed,
        settings=RunSettings(max_errors=args.error_budget, max_steps=args.max_steps,
                             concurrency=args.concurrency, episode_timeout_s=args.episode_timeout),
        user=user_config, judge=resolve_judge(getattr(args, "judge_model", None), args.config),
        tau2_data=args.tau2_data, preflight=True,
    )
    return request


def run_specs(args: argparse.Namespace, specs: list[Any]) -> ArmsRun:
    """Run or resume ``specs`` on the options of ``args`` (domain, task selection, trials,
    seed, budget, user simulator, judge, store) through
    :func:`pytest_quantagent.runner.service.run_arms`, the one pipeline the pytest plugin
    uses too; every model is pre-flighted before any episode (and any weights)."""
    from pytest_quantagent.runner.progress import RunProgress
    from pytest_quantagent.runner.service import run_arms

    return run_arms(args.domain, specs, run_request(args), args.out,
                    progress=RunProgress(quiet=args.quiet))


def _look_line(k: int, plan: Any, seqs: dict[str, Any]) -> str:
    design = plan.designs[k - 1]
    cells = ", ".join(f"{a} {s.looks[-1].verdict}" + (" (stops)" if s.stopped else "")
                      for a, s in seqs.items() if s.looks and s.looks[-1].look == k)
    return (f"look {k}/{len(plan.designs)}: {design.tasks} tasks x {design.trials} "
            f"trial{'s' if design.trials != 1 else ''}: {cells}")


def _verdict_config(args: argparse.Namespace) -> Any:
    """The verdict's thresholds from --margin/--max-ratio/--tight-budgets; advice names this
    command's flags (--trials, --num-tasks)."""
    from pytest_quantagent.verdict import AnalysisConfig

    kw: dict[str, Any] = {"trials_flag": "--trials", "tasks_flag": "--num-tasks"}
    if getattr(args, "margin", None) is not None:
        kw["margin"] = args.margin
    if getattr(args, "max_ratio", None) is not None:
        kw["max_ratio"] = args.max_ratio
    tb = getattr(args, "tight_budgets", None)
    if tb is not None:
        try:
            kw["tight_budgets"] = tuple(int(x) for x in str(tb).split(",") if x.strip())
        except ValueError:
            raise ValueError(f"--tight-budgets={tb!r} is not allowed; give comma-separated "
                             "integers, e.g. 2,5") from None
    return AnalysisConfig(**kw)


def reference_groups(labels: list[str]) -> list[list[str]]:
    """``--arms`` split into runs of one reference each: the first label is the reference of
    the arms without ``@MODEL``; ``ARM@MODEL`` is paired with that model's reference arm
    (``bf16@MODEL``), run in a group of its own. Each group lists its reference first."""
    from pytest_quantagent.quant.arms import reference_for

    ref = labels[0]
    groups: dict[str, list[str]] = {ref: [ref]}
    for label in labels[1:]:
        r = reference_for(label, ref)
        if r == label and "@" in label:
            raise ValueError(f"--arms lists {label!r}, the reference arm of its model: an arm "
                             f"ARM@MODEL is compared with {r}; list only candidates after the "
                             "first arm")
        groups.setdefault(r, [r]).append(label)
    return list(groups.values())


def execute(args: argparse.Namespace) -> dict[str, Any]:
    """Run or resume; returns the report JSON (a dict). Arms of other models (``ARM@MODEL``)
    run against their own model's reference, one reference group after the other, and are
    judged in one report."""
    from pytest_quantagent.report.model import analyze
    from pytest_quantagent.runner.build import resolve_arms
    from pytest_quantagent.runner.preflight import check_accepted, compare_serving

    cfg = _verdict_config(args)  # bad thresholds are refused before any episode runs
    if args.max_episodes is not None and not args.until_decided:
        raise ValueError("--max-episodes caps --until-decided; add --until-decided or drop it")
    raw_accept = getattr(args, "accept_difference", None)
    accept = check_accepted([x.strip() for x in str(raw_accept).split(",") if x.strip()],
                            "--accept-difference") if raw_accept else ()
    # every arm resolved (and a bad, empty or repeated label refused by name) before any
    # episode runs; a reference of another model is added to its group
    named = resolve_arms(with_repair_arms(args.arms, args.repair), model_spec=args.model,
                         config_path=args.config)
    by_label = {s.label: s for s in named}
    group_specs = []
    for group in reference_groups([s.label for s in named]):
        missing = ",".join(label for label in group if label not in by_label)
        if missing:
            by_label.update({s.label: s for s in resolve_arms(
                missing, model_spec=args.model, config_path=args.config)})
        group_specs.append([by_label[label] for label in group])
    # how each candidate and its reference are served, compared before any episode
    comparable = {s.label: compare_serving(specs[0], s, accept=accept)
                  for specs in group_specs for s in specs[1:]}
    inputs: list[Any] = []
    run_info: dict[str, Any] = {}
    for specs in group_specs:
        got, info = _group_inputs(args, specs, cfg, comparable)
        inputs += got
        if not run_info:
            run_info = info
            continue
        for key in ("model", "backend"):
            run_info[key] = sorted({*run_info[key], *info[key]})
        run_info["arms"] = [*run_info["arms"], *info["arms"]]
        for key in ("backends", "nl_assertions", "endpoints", "infrastructure_failures", "faults"):
            if isinstance(run_info.get(key), dict) and isinstance(info.get(key), dict):
                run_info[key] = {**run_info[key], **info[key]}
    if len(group_specs) > 1:
        run_info["references"] = [specs[0].label for specs in group_specs]
    report: dict[str, Any] = analyze(inputs, cfg, run=run_info).model_dump(mode="json")
    return report


def _group_inputs(args: argparse.Namespace, specs: list[Any], cfg: Any,
                  comparable: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """One reference group's run (or resume) and its cells' inputs (with their serving
    comparison, ``comparable``), with its run section."""
    from pytest_quantagent.report.model import CellInput

    seq = None
    if args.until_decided:
        ran, seq = _run_until_decided(args, specs, cfg, comparable)
    else:
        ran = run_specs(args, specs)
    result, run_info = ran.records, _run_info(args, specs, ran)
    ref = specs[0].label
    pool = None
    if ran.domain is not None:  # the advice never asks for more tasks than the pool holds
        from pytest_quantagent.runner.selection import TaskSelection, pool_capacity

        pool = pool_capacity(ran.domain, TaskSelection.from_flags(args.num_tasks, args.tasks, args.split),
                             specs)
    if len(specs) == 1:
        inputs = [CellInput(domain=args.domain, arm=ref, records=result[ref], pool_tasks=pool)]
    elif seq is not None:  # each cell at its last look, judged at that look's alpha
        run_info["sequential"] = {"max_episodes": seq.plan.designs[-1].episodes,
                                  "spending": seq.plan.spending.describe()}
        inputs = []
        for s in specs[1:]:
            cs = seq.cells[s.label]
            assert cs.records is not None
            inputs.append(CellInput(domain=args.domain, arm=s.label, records=cs.records[0],
                                    reference=ref, reference_records=cs.records[1],
                                    pool_tasks=pool, alpha=cs.alpha,
                                    sequential=seq.cell_block(s.label),
                                    comparability=comparable[s.label]))
    else:
        inputs = [
            CellInput(domain=args.domain, arm=s.label, records=result[s.label],
                      reference=ref, reference_records=result[ref], pool_tasks=pool,
                      comparability=comparable[s.label])
            for s in specs[1:]
        ]
    from pytest_quantagent.metrics.faults import check_not_all_infrastructure, infra_counts

    counts = {label: infra_counts(recs) for label, recs in result.items()}
    for label, c in counts.items():
        check_not_all_infrastructure(label, c)
    run_info["infrastructure_failures"] = {label: c["infrastructure_errors"] for label, c in counts.items()}
    run_info["faults"] = counts
    for inp in inputs:
        sides = [inp.arm] + ([inp.reference] if inp.reference is not None else [])
        inp.extra["faults"] = {side: counts[side] for side in sides}
    return inputs, run_info


def _run_until_decided(args: argparse.Namespace, specs: list[Any], cfg: Any,
                       comparable: dict[str, Any]) -> tuple[Any, Any]:
    """Waves until every cell is decided; the last wave's run with each arm's records at the
    last look it took (the reference's: the longest), and the sequential run."""
    from dataclasses import replace

    from pytest_quantagent.analysis.sequential import DEFAULT_MAX_EPISODES, run_arms_until_decided
    from pytest_quantagent.runner.progress import RunProgress

    if len(specs) < 2:
        raise ValueError("--until-decided compares arms: give a reference and at least one "
                         "other arm in --arms")

    def on_look(k: int, plan: Any, seqs: dict[str, Any]) -> None:
        if not args.quiet:
            print(_look_line(k, plan, seqs), file=sys.stderr, flush=True)

    seq = run_arms_until_decided(
        args.domain, specs, run_request(args), args.out, cfg,
        max_episodes=args.max_episodes or DEFAULT_MAX_EPISODES,
        progress=lambda: RunProgress(quiet=args.quiet), on_look=on_look,
        comparability={s.label: comparable.get(s.label) for s in specs[1:]})
    records = {s.label: (seq.cells[s.label].records or ([], []))[0] for s in specs[1:]}
    longest = max((c.records[1] for c in seq.cells.values() if c.records), key=len, default=[])
    records[specs[0].label] = longest
    return replace(seq.run, records=records), seq


def _num(x: Any) -> str:
    return "—" if not isinstance(x, (int, float)) else f"{x:.3f}"


def _summary(report: dict[str, Any]) -> str:
    from pytest_quantagent.report.notes import endpoint_lines, summary_lines
    from pytest_quantagent.report.terminal import plain_text

    lines = [f"user simulator: {report.get('run', {}).get('user_sim', 'scripted')}"]
    for c in report.get("cells", []):
        s = c.get("success") or {}
        arm = f"{c['arm']:>12} {_num(s.get('arm'))}"
        ref = "" if c.get("reference") is None else f"  vs {c['reference']} {_num(s.get('reference'))}"
        seq = c.get("sequential") or {}
        looks = (f"  {'decided at' if seq.get('stopped') == 'decided' else 'stopped after'} look "
                 f"{seq.get('looks_taken')} of {len(seq.get('planned_looks') or [])}"
                 if seq else "")
        lines.append(f"{c['domain']}: {arm}{ref}  episodes {c.get('episodes')}  verdict "
                     f"{c.get('verdict')}{looks}")
    faults = report.get("run", {}).get("faults") or {}
    lines += summary_lines(faults)
    lines.extend(_nl_lines(report.get("run", {})))
    lines += endpoint_lines(report.get("run", {}).get("endpoints") or {})
    return plain_text("\n".join(lines))


def _nl_lines(run: dict[str, Any]) -> list[str]:
    """How τ²-bench's NL assertions were scored (judged by whom, or not evaluated)."""
    out: list[str] = []
    judge = run.get("judge")
    for label, s in (run.get("nl_assertions") or {}).items():
        if not s.get("episodes"):
            continue
        if s.get("judged"):
            err = f", {s['judge_errors']} with judge errors (scored not met)" if s.get("judge_errors") else ""
            who = judge.get("identity") if isinstance(judge, dict) else ", ".join(s.get("judges", []))
            out.append(f"NL assertions {label}: {s['judged']}/{s['episodes']} episodes judged by {who}{err}")
        if s.get("not_evaluated"):
            out.append(f"NL assertions {label}: {s['note']}")
    return out


def run_and_report(
    args: argparse.Namespace,
    command: str,
    execute: Callable[[argparse.Namespace], Any],
    as_json: Callable[[Any], Any],
    render: Callable[[Any], None],
    exit_code: Callable[[Any], int] = lambda _result: 0,
) -> int:
    """The body of ``quantagent run`` and ``quantagent screen``: run, write ``--json``
    (``-``: stdout only), else render for the terminal. Returns ``exit_code(result)`` (for
    ``run``, the release gate's: see :mod:`pytest_quantagent.analysis.gate`); a bad input is
    :data:`~pytest_quantagent.errors.EXIT_USAGE` (4), nothing judged."""
    from pytest_quantagent.errors import EXIT_STOPPED, EXIT_USAGE, RunStoppedError

    t0 = time.monotonic()
    try:
        result = execute(args)
    except RunStoppedError as e:
        print(f"quantagent {command}: stopped: {e}", file=sys.stderr)
        return EXIT_STOPPED
    except (QuantAgentError, ValueError) as e:
        print(f"quantagent {command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    text = json.dumps(as_json(result), indent=2)
    if args.json == "-":
        print(text)
    elif args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    if not args.quiet and args.json != "-":
        render(result)
        print(f"({time.monotonic() - t0:.1f} s; episodes in {args.out / 'episodes.jsonl'})")
    return exit_code(result)


def _gate_exit(report: dict[str, Any]) -> int:
    from pytest_quantagent.analysis.gate import exit_with_gate

    return exit_with_gate(report.get("cells", []))


def run(args: argparse.Namespace) -> int:
    return run_and_report(args, "run", execute, lambda report: report, _render, _gate_exit)


def _render(report: dict[str, Any]) -> None:
    """The one-line summary per cell, then the report's table (one block per cell when
    the output is narrow or piped; see ``report.terminal.render_terminal``)."""
    from pytest_quantagent.report.terminal import render_terminal

    print(_summary(report))
    render_terminal(report)



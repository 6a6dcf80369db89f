"""``quantagent screen``: the full-precision risk screen of one domain.

Runs (or resumes) only the reference arm — through the same runner and episode store as
``quantagent run``, with the same episode keys, so a later ``quantagent run --arms bf16,int4``
reuses these episodes — and reports, per failure channel, the rate per tool call with its
cluster-robust CI and a risk level: ``low`` when the upper CI bound is under ``--threshold``,
``high`` when the lower bound is at or above it, ``elevated`` otherwise. A non-low channel is
predicted to reach up to ``--amplification`` × its rate in a 4-bit arm.

Exit status: 0 when the screen ran (whatever the risk), 2 on bad input.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_quantagent.commands.run import add_episode_options, run_and_report

if TYPE_CHECKING:
    from pytest_quantagent.report.screen import ScreenReport
    from pytest_quantagent.store.records import EpisodeRecord


def _fraction(name: str, low: float, high: float) -> Any:
    def parse(value: str) -> float:
        try:
            x = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {value!r}") from None
        if not low < x < high:
            raise argparse.ArgumentTypeError(f"{name} must be in ({low:g}, {high:g}), got {value}")
        return x

    return parse


def _amplification(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--amplification must be a number, got {value!r}") from None
    if not 1.0 <= x < float("inf"):
        raise argparse.ArgumentTypeError(f"--amplification must be a finite number >= 1, got {value}")
    return x


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("screen", help="full-precision risk screen (reference arm only)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--domain", required=True, help="domain name (see `quantagent domains`)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", metavar="SPEC", default=None,
                     help="model spec providing the arm (default: the bundled tiny-agent)")
    src.add_argument("--config", type=Path, metavar="TOML", default=None,
                     help="arms config: [arms.<label>] backend=... model=... base_url=...")
    p.add_argument("--arm", default="bf16", metavar="LABEL",
                   help="the full-precision arm to screen (default bf16)")
    add_episode_options(p)
    p.add_argument("--threshold", type=_fraction("--threshold", 0.0, 1.0), default=0.02,
                   metavar="RATE", help="failure rate per tool call under which a channel is "
                   "low-risk (upper CI bound; default 0.02)")
    p.add_argument("--amplification", type=_amplification, default=2.0, metavar="X",
                   help="factor a 4-bit arm may apply to a non-low channel (default 2.0)")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="write the screen report JSON to PATH ('-' = stdout)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars, no table")


def run_reference(args: argparse.Namespace) -> list[EpisodeRecord]:
    """Run or resume the episodes of ``args.arm`` alone; records in plan order.

    Goes through ``commands.run.run_specs`` (:func:`pytest_quantagent.runner.service.run_arms`),
    the same path as ``quantagent run``, so the episode keys are those a ``quantagent run``
    with the same options computes for its reference arm; a replay arm is read, not run.
    """
    from pytest_quantagent.commands.run import run_specs
    from pytest_quantagent.quant.arms import REPAIR_SUFFIX
    from pytest_quantagent.runner.build import resolve_arms

    if args.arm.endswith(REPAIR_SUFFIX):
        raise ValueError(
            f"--arm {args.arm!r} has reflexive repair on; the screen measures the model's own "
            f"propensities, so screen {args.arm.removesuffix(REPAIR_SUFFIX)!r} instead"
        )
    if "," in args.arm:
        raise ValueError(f"--arm takes one arm label, got {args.arm!r}")
    (spec,) = resolve_arms(args.arm, model_spec=args.model, config_path=args.config)
    records: list[EpisodeRecord] = run_specs(args, [spec]).records[spec.label]
    return records


def execute(args: argparse.Namespace) -> ScreenReport:
    """Run or resume the reference arm and screen its episodes."""
    from pytest_quantagent.report.screen import ScreenConfig, screen

    config = ScreenConfig(threshold=args.threshold, amplification=args.amplification)
    return screen(run_reference(args), config)


def run(args: argparse.Namespace) -> int:
    def render(report: Any) -> None:
        from pytest_quantagent.report.screen import render_screen

        render_screen(report)

    return run_and_report(args, "screen", execute, lambda report: report.model_dump(mode="json"), render)

"""``quantagent report REPORT.json``: re-render a saved report (terminal table, HTML, JSON)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pytest_quantagent.errors import EXIT_USAGE, QuantAgentError


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("report", help="render a report JSON as a terminal table or HTML")
    p.add_argument("report", type=Path, metavar="REPORT_JSON", help="a report written by --json")
    p.add_argument("--html", dest="html_path", type=Path, default=None, metavar="PATH",
                   help="write the self-contained HTML report to PATH")
    p.add_argument("--json", dest="json_path", default=None, metavar="PATH",
                   help="write the (validated, normalised) report JSON to PATH ('-' for stdout)")
    p.add_argument("--quiet", action="store_true", help="do not print the table")


def run(args: argparse.Namespace) -> int:
    from pytest_quantagent.commands.analyze import write_outputs
    from pytest_quantagent.report.json_io import read_report
    from pytest_quantagent.report.terminal import render_terminal

    try:
        data = read_report(args.report)
        if not args.quiet and args.json_path != "-":
            render_terminal(data)
        write_outputs(data, args.json_path, args.html_path)
    except (QuantAgentError, ValueError, KeyError) as e:
        print(f"quantagent report: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    return 0

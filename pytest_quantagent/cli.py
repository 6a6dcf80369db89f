"""The ``quantagent`` command: the same engine as the pytest plugin, no pytest needed.

Each subcommand lives in ``pytest_quantagent/commands/<name>.py`` and exposes
``add_parser(subparsers) -> None`` and ``run(args) -> int``. Command modules are imported
only when needed so ``quantagent --help`` stays fast and works without optional extras.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

#: Subcommand name → module under ``pytest_quantagent.commands``; help shown in --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run (or resume) episodes for one domain and a set of arms"),
    "analyze": ("analyze", "analyze episode stores or tau2-bench results files"),
    "report": ("report", "render a report JSON as a terminal table or HTML"),
    "oracle": ("oracle", "replay each task's gold actions through the engine (a data check)"),
    "fidelity": ("fidelity", "re-execute the tool calls of a tau2-bench results file"),
    "replay": ("replay", "deprecated name of 'fidelity' (removed in the next release)"),
    "domains": ("domains", "list domains, their tools and task counts"),
    "decisions": ("decisions", "open-loop decision-point analysis (margins, flips)"),
    "quantize": ("quantize", "create a quantized arm checkpoint"),
    "screen": ("screen", "full-precision risk screen (reference arm only)"),
    "play": ("play", "play the agent yourself against the scripted user and the real environment"),
}


def _load(name: str):  # type: ignore[no-untyped-def]
    module, _ = COMMANDS[name]
    return importlib.import_module(f"pytest_quantagent.commands.{module}")


class _Parser(argparse.ArgumentParser):
    """argparse with the project's usage exit code (4, as pytest: 0/1/2 are the release
    gate's GO/NO-GO/INCONCLUSIVE), for the top-level parser and every subcommand's."""

    def error(self, message: str) -> NoReturn:
        from pytest_quantagent.errors import EXIT_USAGE

        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="quantagent",
        description="Catch what quantization does to LLM agents: tau2-style episodes, "
        "per-channel failure rates, error-budget counterfactuals and paired statistics.",
    )
    from pytest_quantagent.version import __version__

    parser.add_argument("--version", action="version", version=f"quantagent {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text, add_help=False)
            continue
        try:
            mod = _load(name)
        except ModuleNotFoundError as e:
            if not e.name or not e.name.startswith("pytest_quantagent.commands"):
                raise
            continue  # command not available in this build
        mod.add_parser(sub)
    return parser


#: Third-party progress bars (tqdm in transformers, huggingface_hub, llm-compressor) would
#: mix into this command's own output; these switch them off unless the user set them.
QUIET_THIRD_PARTY_ENV: dict[str, str] = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                                         "TRANSFORMERS_VERBOSITY": "error"}


def main(argv: Sequence[str] | None = None) -> int:
    for key, value in QUIET_THIRD_PARTY_ENV.items():
        os.environ.setdefault(key, value)
    args_list = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(only=first if first in COMMANDS else None)
    args = parser.parse_args(args_list)
    if not args.command:
        parser.print_help()
        from pytest_quantagent.errors import EXIT_USAGE

        return EXIT_USAGE
    command = _load(args.command)
    store = _store_file(args)
    if store is not None:
        from pytest_quantagent.store.jsonl import store_dir_problem

        problem = store_dir_problem(store.parent)  # refused before any model is asked anything
        if problem is not None:
            from pytest_quantagent.errors import EXIT_USAGE

            read = (f"; to report what it holds: quantagent analyze {store.parent}"
                    if store.is_file() and args.command == "run" else "")
            print(f"quantagent {args.command}: error: --out: {problem}{read}", file=sys.stderr)
            return EXIT_USAGE
    start = _size(store)
    try:
        rc: int = command.run(args)
    except KeyboardInterrupt:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the line
        print(interrupted_line(args.command, store, start), file=sys.stderr)
        from pytest_quantagent.errors import EXIT_INTERRUPTED

        return EXIT_INTERRUPTED
    return rc


#: Commands whose ``--out`` is an episode store (a rerun resumes from it).
STORE_COMMANDS = ("run", "screen")


def _store_file(args: argparse.Namespace) -> Path | None:
    out = getattr(args, "out", None)
    if args.command not in STORE_COMMANDS or out is None:
        return None
    from pytest_quantagent.store.jsonl import EPISODES_FILE

    return Path(out) / EPISODES_FILE


def _size(path: Path | None) -> int:
    try:
        return os.stat(path).st_size if path is not None else 0
    except OSError:
        return 0


def interrupted_line(command: str, store: Path | None, start: int) -> str:
    """The one line after Ctrl-C: for a command with an episode store, how many episodes it
    holds (and how many this run added; every finished episode is on disk, so a rerun of
    the same command runs only the rest)."""
    if store is None:
        return f"quantagent {command}: interrupted"
    from pytest_quantagent.store.jsonl import count_lines

    total, new = count_lines(store), count_lines(store, offset=start)
    return (f"quantagent {command}: interrupted; {total} episodes stored in {store} ({new} new in "
            "this run); run the same command again to resume")


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

"""What the plugin writes to pytest's terminal: the end-of-run summary, the files the live
progress display writes to, and why a test failed or was skipped. (Which progress display a
cell gets is the session's ``cell_progress``: it builds the runner's ``CellProgress``.)

Duck-typed on pytest's objects (the terminal reporter's ``write_sep``/``write_line``/
``write``, its terminal writer, a test report's ``longrepr``): nothing here imports pytest.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def write_summary(tr: Any, report: dict[str, Any] | None, error: str | None, *,
                  verbosity: int, width: int,
                  endpoint_stats: Mapping[str, list[dict[str, Any]]],
                  outputs: Mapping[str, Path | None]) -> None:
    """The quantagent section of pytest's terminal summary: the report's table (one line per
    cell under ``-qq``), its fault and endpoint notes, and where the ``outputs`` went
    (``{"JSON": path, "HTML": path}``); or why there is no report."""
    if error is not None:
        tr.write_sep("=", "quantagent report", red=True)
        tr.write_line(f"could not build the quantagent report: {error}")
        return
    if report is None:
        return
    if verbosity <= -2:
        # -qq: one line per cell, no table.
        for c in report["cells"]:
            tr.write_line(f"quantagent {c['domain']}-{c['arm']}: {c['verdict']}")
        return
    import io

    from rich.console import Console

    from pytest_quantagent.report.notes import endpoint_lines, summary_lines
    from pytest_quantagent.report.terminal import plain_text, render_terminal

    markup = bool(tr.hasmarkup)
    if not markup:
        # A CI log is not a terminal: pytest reports 80 columns there, which would print
        # one block per cell; the table fits 120 and the reasons follow it unwrapped.
        width = max(width, 120)
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=markup, no_color=not markup,
                      color_system="standard" if markup else None,
                      width=width, soft_wrap=False)
    tr.write_sep("=", "quantagent")
    render_terminal(report, console)
    tr.write(buf.getvalue())
    for c in report["cells"]:
        for line in summary_lines((c.get("extra") or {}).get("faults") or {}):
            tr.write_line(plain_text(f"quantagent {c['domain']}-{c['arm']}: {line}"))
    for line in endpoint_lines(endpoint_stats):
        tr.write_line(plain_text(f"quantagent {line}"))
    judge = judge_line(report.get("run") or {})
    if judge is not None:
        tr.write_line(plain_text(f"quantagent {judge}"))
    if verbosity >= 0:
        for flag, path in outputs.items():
            if path is not None:
                tr.write_line(f"quantagent {flag} report: {path}")


def judge_line(run: Mapping[str, Any]) -> str | None:
    """Which judge decided the NL assertions, and of how many episodes (from the report's
    ``run`` section); None when the run has no judge."""
    judge = run.get("judge")
    if not judge:
        return None
    nl = [v for v in (run.get("nl_assertions") or {}).values() if isinstance(v, Mapping)]
    with_nl = sum(int(v.get("episodes") or 0) for v in nl)
    judged = sum(int(v.get("judged") or 0) for v in nl)
    errors = sum(int(v.get("judge_errors") or 0) for v in nl)
    line = (f"judge: {judge} decided the NL assertions of {judged} of {with_nl} episode(s) "
            "that have them")
    if errors:
        line += f"; {errors} episode(s) with a judge error (scored not met)"
    return line


def test_outcome_message(report: Any, lines: int = 8) -> str:
    """The first lines of why a test failed or was skipped (the assertion's message), from
    a pytest ``TestReport``."""
    lr = report.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:  # a skip: (path, lineno, reason)
        return str(lr[2]).removeprefix("Skipped: ")
    crash = getattr(lr, "reprcrash", None)
    text = str(getattr(crash, "message", "") or report.longreprtext or "")
    return "\n".join(text.splitlines()[:lines])


class TerminalFile:
    """pytest's terminal writer as a file for the progress display; the first write starts
    a fresh line when pytest is in the middle of one (``test_gate.py ..``)."""

    def __init__(self, tw: Any) -> None:
        self.tw = tw
        self._first = True

    def write(self, text: str) -> int:
        if self._first and self.tw.width_of_current_line:
            self.tw.write("\n")
        self._first = False
        self.tw.write(text)
        return len(text)

    def flush(self) -> None:
        self.tw.flush()

    def isatty(self) -> bool:
        return True


class StderrFile:
    """``sys.stderr`` looked up at each write (inside the capture-disabled guard it is the
    real one; an xdist worker's stderr reaches the controller's terminal)."""

    def write(self, text: str) -> int:
        import sys

        return sys.stderr.write(text)

    def flush(self) -> None:
        import sys

        sys.stderr.flush()

    def isatty(self) -> bool:
        return False

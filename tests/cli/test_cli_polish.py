"""The `quantagent` command as a user meets it: every option has help text, advice names
this command's flags, a narrow or piped output gets one block per cell (nothing cut),
misplaced or truncated files are named as what they are, third-party bars are off."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from pytest_quantagent.analysis.gate import EXIT_INCONCLUSIVE
from pytest_quantagent.cli import build_parser, main
from pytest_quantagent.errors import EXIT_USAGE

SAME_ARMS = """
[arms.bf16]
backend = "mock"
model = "scripted"
rule = "mini_rules:solving_rule"

[arms.int4]
backend = "mock"
model = "scripted"
rule = "mini_rules:solving_rule"
"""


def test_every_option_of_every_command_has_help_text() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [f"{name} {a.option_strings[0]}" for name, p in sub.choices.items()
               for a in p._actions if a.option_strings and not a.help]
    assert missing == []


def test_piped_run_prints_blocks_with_advice_in_its_own_flags(
    tmp_path: Path, mini_domains_dir: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # a wide COLUMNS would give rich a wide console
    arms = tmp_path / "arms.toml"
    arms.write_text(SAME_ARMS)
    rep = tmp_path / "r.json"
    assert main(["run", "--domain", "mini", "--arms", "bf16,int4", "--config", str(arms),
                 "--out", str(tmp_path / "s"), "--json", str(rep)]) == EXIT_INCONCLUSIVE
    out = capsys.readouterr().out
    (cell,) = json.loads(rep.read_text())["cells"]
    assert cell["verdict"] == "INCONCLUSIVE"
    advice = [r for r in cell["reasons"] if r.startswith("to decide every claim:")]
    assert advice and all(("--trials " in r or "--num-tasks " in r) and "--quant-" not in r
                          for r in advice)
    # Captured output is not a terminal (80 columns): blocks, each reason on one whole line.
    assert "┃" not in out and "mini / int4 vs bf16: verdict INCONCLUSIVE" in out
    for reason in cell["reasons"]:
        assert f"  - {reason}" in out.splitlines()


def test_report_on_a_truncated_file_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.json"
    path.write_text('{"schema_version": 1, "run": {}, "cells": [{"domain": "tel')
    assert main(["report", str(path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"quantagent report: error: {path} at line 1 column" in err
    assert "the file ends early: it looks truncated" in err


def test_analyze_on_a_report_file_names_it_and_the_right_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"schema_version": 1, "run": {}, "cells": []}, indent=2))
    assert main(["analyze", str(path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert ("this is a quantagent report JSON, not an episode store; show it with "
            f"`quantagent report {path}`") in err


def test_third_party_progress_bars_are_switched_off(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import os

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")  # the user's own choice stays
    assert main([]) == EXIT_USAGE
    capsys.readouterr()
    assert os.environ["TQDM_DISABLE"] == "1" and os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "0"


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_quantagent import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"quantagent {__version__}"

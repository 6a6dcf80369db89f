"""``quantagent analyze`` / ``quantagent report`` end to end on synthetic stores."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pytest_quantagent.analysis.gate import EXIT_INCONCLUSIVE, EXIT_NO_GO
from pytest_quantagent.cli import main
from pytest_quantagent.errors import EXIT_USAGE
from pytest_quantagent.metrics.synthetic import make_tasks, synthetic_episodes
from pytest_quantagent.vocab.channels import Channel


def _write_store(run_dir: Path, *, torn: bool = False) -> Path:
    rng = np.random.default_rng(3)
    tasks = make_tasks(rng, 25)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "episodes.jsonl"
    with path.open("w") as f:
        for arm, ratio in (("bf16", None), ("int4", {Channel.UNKNOWN_TOOL: 3.0}), ("fp8", None)):
            for r in synthetic_episodes(rng, tasks, arm=arm, ratio=ratio):
                f.write(r.model_dump_json() + "\n")
        if torn:
            f.write('{"schema_version": 1, "key": "trunc')
    return path


def test_analyze_store_writes_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_store(tmp_path / "run", torn=True)
    out = tmp_path / "report.json"
    rc = main(["analyze", str(tmp_path / "run"), "--json", str(out)])
    captured = capsys.readouterr()
    assert rc == EXIT_NO_GO, captured.err
    assert "torn last line" in captured.err
    data = json.loads(out.read_text())
    cells = {(c["domain"], c["arm"]): c for c in data["cells"]}
    assert set(cells) == {("retail", "int4"), ("retail", "fp8")}
    assert cells[("retail", "int4")]["reference"] == "bf16"
    assert cells[("retail", "int4")]["paired"] == 75
    assert "int4" in captured.out and "verdict" in captured.out
    # re-render the saved report
    rc = main(["report", str(out), "--json", "-"])
    again = json.loads(capsys.readouterr().out)
    assert rc == 0 and again["cells"] == data["cells"]


def test_analyze_reference_choice_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = _write_store(tmp_path / "run")
    rc = main(["analyze", str(store), "--reference", "fp8", "--json", "-", "--quiet"])
    data = json.loads(capsys.readouterr().out)
    assert rc == EXIT_NO_GO and {c["reference"] for c in data["cells"]} == {"fp8"}
    assert main(["analyze", str(store), "--reference", "int8"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "unknown reference arm 'int8'" in err and "bf16, fp8, int4" in err
    assert main(["analyze", str(tmp_path / "missing")]) == EXIT_USAGE
    assert "no such file or directory" in capsys.readouterr().err
    assert main(["analyze", str(store), "--budgets", "2,x"]) == EXIT_USAGE
    assert "--tight-budgets='2,x' is not allowed" in capsys.readouterr().err


def test_analyze_bad_middle_line_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = _write_store(tmp_path / "run")
    lines = store.read_text().splitlines()
    lines.insert(5, '{"not": "a record"}')
    store.write_text("\n".join(lines) + "\n")
    assert main(["analyze", str(store)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "line 6" in err and "not a valid episode record" in err


def test_analyze_html_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = _write_store(tmp_path / "run")
    html = tmp_path / "out" / "report.html"
    assert main(["analyze", str(store), "--html", str(html), "--quiet"]) == EXIT_NO_GO
    text = html.read_text()
    assert text.lstrip().lower().startswith("<!doctype html") and "int4" in text


def test_verdict_thresholds_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = _write_store(tmp_path / "run")
    rc = main(["analyze", str(store), "--json", "-", "--quiet", "--margin", "0.2",
               "--max-ratio", "2", "--tight-budgets", "3", "--holm-scope", "report"])
    data = json.loads(capsys.readouterr().out)
    assert rc == EXIT_INCONCLUSIVE
    a = data["run"]["analysis"]
    assert (a["margin"], a["max_ratio"], a["tight_budgets"], a["holm_scope"]) == (0.2, 2.0, [3], "report")
    assert all(c["holm"]["scope"] == "report" for c in data["cells"] if c["reference"])
    # the advice names this command's flags, not pytest's
    assert "--quant-trials" not in json.dumps(data) and "--quant-tasks" not in json.dumps(data)
    assert main(["analyze", str(store), "--tight-budgets", "2,12"]) == EXIT_USAGE
    assert "tight budget(s) [12] are above the run's error budget 10" in capsys.readouterr().err
    # quantagent run refuses a bad threshold before any episode runs
    assert main(["run", "--domain", "retail", "--arms", "bf16,int4", "--margin", "2",
                 "--out", str(tmp_path / "out"), "-q"]) == EXIT_USAGE
    assert "margin=2.0 is not allowed" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()

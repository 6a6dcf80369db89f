"""Report writers: JSON round trip and schema, HTML escaping and self-containment, the
terminal summary under -q/-qq and --color."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.errors import DataFileError
from pytest_quantagent.report.html import render_html
from pytest_quantagent.report.json_io import (
    dumps_report,
    read_report,
    report_schema,
    validate_report,
    write_report,
)
from pytest_quantagent.vocab.channels import ALL_CHANNELS
from tests.plugin.fakes import FAKE_CONFTEST

EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def _cell(name: str = "unknown_tool", evil: str = EVIL) -> dict[str, Any]:
    channels = {
        c.value: {"arm_count": 0, "reference_count": 0, "arm_rate": 0.0, "reference_rate": 0.0,
                  "ratio": None, "ratio_ci": None, "p": None, "p_holm": None}
        for c in ALL_CHANNELS
    }
    channels[name] = {"arm_count": 8, "reference_count": 3, "arm_rate": 0.2, "reference_rate": 0.075,
                      "ratio": 2.6, "ratio_ci": [2.2, 3.1], "p": 1e-9, "p_holm": 1e-8}
    return {
        "domain": "telecom", "arm": "int4", "reference": "bf16",
        "episodes": 40, "reference_episodes": 40, "paired": 40,
        "tool_calls": {"arm": 40, "reference": 40},
        "success": {"arm": 0.72, "reference": 0.71, "diff": 0.01, "ci": [-0.03, 0.05],
                    "tost_p": 0.001, "mcnemar_p": 0.6, "margin": 0.075},
        "budget": {"K": [0, 1, 2], "arm": [0.0, 0.5, 0.6], "reference": [0.0, 0.6, 0.7],
                   "gap": [0.0, -0.1, -0.1], "gap_ci": [[0.0, 0.0], [-0.2, 0.0], [-0.2, 0.0]]},
        "channels": channels,
        "failure_set": {name: {"spearman": 0.98, "kendall": 0.93, "novel_share": 0.002,
                               "top_arm": [[evil, 5]]}},
        "recovery": {"arm": 0.55, "reference": 0.56},
        "steps": {"arm": 31.2, "reference": 28.0},
        "terminations": {"arm": {"user_stop": 40}, "reference": {"user_stop": 40}},
        "pass_k": {"arm": {"1": 0.72}, "reference": {"1": 0.71}},
        "margins": {"bins": [0.0, 0.5, 1.0, 2.0, 4.0, 8.0],
                    "arm": {"count": 4, "hist": [1, 0, 1, 2, 0, 0], "p10": 0.1, "median": 2.5,
                            "p90": 3.5},
                    "reference": {"count": 3, "hist": [0, 0, 1, 1, 1, 0], "p10": 1.0,
                                  "median": 2.5, "p90": 4.0}},
        "verdict": "MASKED_DAMAGE",
        "reasons": [f"unknown_tool ×2.6 (Holm p=1e-8), e.g. {evil}"],
    }


def _report(evil: str = EVIL) -> dict[str, Any]:
    return {"schema_version": 1, "run": {"model": evil, "arms": ["int4"], "budget": 10},
            "cells": [_cell(evil=evil)]}


def test_html_escapes_every_model_string_and_is_self_contained() -> None:
    page = render_html(_report())
    assert "<script" not in page.lower()
    assert "onerror=alert" not in page.replace("onerror=alert(1)&gt;", "")
    assert "<img" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    # No external resources: the only URL is the SVG namespace.
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) == {"http://www.w3.org/2000/svg"}
    assert page.count("<svg") == 4  # budget curve, gap with CI band, channel bars, margins
    assert "Content-Security-Policy" in page


def test_html_tolerates_missing_and_undefined_figures() -> None:
    cell = _cell()
    cell["budget"] = {"K": [], "arm": [], "reference": [], "gap": [], "gap_ci": []}
    cell["margins"] = None
    cell["success"]["ci"] = None
    page = render_html({"schema_version": 1, "run": {}, "cells": [cell]})
    assert page.count("<svg") == 1  # only the channel bars remain


def test_json_round_trip_and_schema(tmp_path: Path) -> None:
    report = _report()
    report["cells"][0]["margins"] = None
    report["cells"][0]["success"]["mcnemar_p"] = math.nan  # undefined → null
    path = write_report(report, tmp_path / "sub" / "r.json")
    back = read_report(path)
    assert back["cells"][0]["success"]["mcnemar_p"] is None
    validate_report(back)
    assert json.loads(dumps_report(back)) == back
    assert report_schema()["properties"]["schema_version"] == {"const": 1}
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600: CI uploads it


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "r.json at line 1 column 2: not valid JSON"),
        ('{"schema_version": 2, "run": {}, "cells": []}',
         "r.json at schema_version: unsupported report schema_version 2; this version reads 1"),
    ],
)
def test_read_report_refuses_bad_files(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "r.json").write_text(content)
    with pytest.raises(DataFileError, match=re.escape(message)):
        read_report(tmp_path / "r.json")


def test_schema_catches_a_missing_channel_and_a_bad_verdict() -> None:
    report = _report()
    report["cells"][0]["margins"] = None
    del report["cells"][0]["channels"]["malformed_call"]
    with pytest.raises(ValueError, match="at cells/0/channels: 'malformed_call' is a required property"):
        validate_report(report)
    report = _report()
    report["cells"][0]["margins"] = None
    report["cells"][0]["verdict"] = "OK"
    with pytest.raises(ValueError, match="at cells/0/verdict"):
        validate_report(report)


@pytest.fixture
def fake(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile("def test_cell(quant_cell):\n    assert len(quant_cell.episodes) == 60\n")
    return pytester


def test_terminal_summary_quiet_levels_and_color(fake: pytest.Pytester) -> None:
    normal = fake.runpytest("--quant=int4,fp8", "--domain=telecom", "--color=no")
    # fp8 = bf16 (20 vs 20 unknown_tool in 60 episodes): equivalent score, but 20 failures
    # cannot show the ratio below ×1.2 (issue 23: absence of evidence is not LOSSLESS)
    normal.stdout.fnmatch_lines(["*= quantagent =*", "*telecom /*INCONCLUSI*", "*telecom /*MASKED_DAM*"])
    assert "\x1b[" not in normal.stdout.str()

    colored = fake.runpytest("--quant=int4", "--domain=telecom", "--color=yes")
    assert "\x1b[" in colored.stdout.str().split("quantagent")[-1]

    qq = fake.runpytest("--quant=int4,fp8", "--domain=telecom", "-qq")
    qq.stdout.fnmatch_lines(["quantagent telecom-fp8: INCONCLUSIVE", "quantagent telecom-int4: MASKED_DAMAGE"])
    assert "┏" not in qq.stdout.str()


# Every other episode has an NL assertion the judge decided; one of them a judge error.
JUDGED_CONFTEST = FAKE_CONFTEST + """

_unjudged = _episodes


def _episodes(domain, arm, budget):
    out = []
    for i, r in enumerate(_unjudged(domain, arm, budget)):
        if i % 2 == 0:
            met = None if i == 0 else True
            r = r.model_copy(update={"reward_info": {
                "reward_basis": ["DB", "NL_ASSERTION"], "judge": "judge:mock:fake-judge",
                "nl_assertions": [{"assertion": "says goodbye", "met": met}]}})
        out.append(r)
    return out
"""


def test_terminal_summary_names_the_judge(fake: pytest.Pytester) -> None:
    fake.makeconftest(JUDGED_CONFTEST)
    judged = fake.runpytest("--quant=int4", "--domain=telecom", "--quant-judge-model=mock:fake-judge",
                            "--quant-html=r.html")
    judged.assert_outcomes(passed=1)
    # 30 of each arm's 60 episodes have NL assertions, all judged; episode 0 of each arm erred.
    judged.stdout.fnmatch_lines([
        "*= quantagent =*",
        "quantagent judge: judge:mock:fake-judge*:t=0:max=512:p* decided the NL assertions of 60 "
        "of 60 episode(s) that have them; 2 episode(s) with a judge error (scored not met)",
        "quantagent HTML report: r.html",
    ])
    page = (fake.path / "r.html").read_text(encoding="utf-8")
    assert re.search(r"<th class=l>NL-assertion judge</th><td class=l>judge:mock:fake-judge[^<]*</td>", page)

    plain = fake.runpytest("--quant=int4", "--domain=telecom")
    plain.assert_outcomes(passed=1)
    assert "quantagent judge:" not in plain.stdout.str()


def test_report_failure_is_shown_not_raised(fake: pytest.Pytester) -> None:
    fake.makeconftest(FAKE_CONFTEST + "\n\ndef pytest_quantagent_report_ready(config, report):\n"
                      "    raise RuntimeError('dashboard down')\n")
    result = fake.runpytest("--quant=int4", "--domain=telecom")
    result.assert_outcomes(passed=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["could not build the quantagent report: RuntimeError: dashboard down"])


def test_report_ready_hook_sees_the_report(fake: pytest.Pytester) -> None:
    fake.makeconftest(FAKE_CONFTEST + "\n\ndef pytest_quantagent_report_ready(config, report):\n"
                      "    print('HOOK', [c['verdict'] for c in report['cells']])\n")
    result = fake.runpytest("--quant=int4", "--domain=telecom", "-s")
    result.stdout.fnmatch_lines(["*HOOK ?'MASKED_DAMAGE'?*"])


def test_resolve_arm_hook_overrides_the_default(pytester: pytest.Pytester) -> None:
    from pytest_quantagent.testing.fault_server import FaultServer

    server = FaultServer(served_models=["my-awq"])  # the pre-flight asks it for its models
    url = server.start_in_thread()
    pytester.makeconftest(f"""
from pytest_quantagent.quant.arms import ArmSpec

def pytest_quantagent_resolve_arm(config, label):
    if label == "int4":
        return ArmSpec(label="int4", backend="openai", model="my-awq", base_url="{url}")
    return None
""")
    pytester.makepyfile("""
def test_arms(quant_arm, reference_arm):
    assert (quant_arm.backend, quant_arm.model) == ("openai", "my-awq")
    assert reference_arm.backend == "transformers" and reference_arm.label == "bf16"
""")
    try:
        pytester.runpytest("--domain=telecom").assert_outcomes(passed=1)
    finally:
        server.stop()
    # GET /models twice: the pre-flight's check, then the comparability probe reading the
    # entry's serving fields (max_model_len, chat_template, tool parser); no chat request
    assert server.model_requests == 2 and server.requests == 0


def test_arm_only_cells_validate_and_render() -> None:
    # An arm-only cell (no reference, as `quantagent analyze` of one store gives) has null
    # reference figures and no verdict.
    from pytest_quantagent.report.model import CellInput, analyze
    from pytest_quantagent.store.records import EpisodeRecord

    records = [
        EpisodeRecord(key=str(t), model="m", arm="int4", backend="mock", domain="telecom",
                      task_id=str(t), trial=0, seed=t, max_errors=10, max_steps=200,
                      termination="user_stop", reward=1.0, success=True, n_errors=0, steps=4)
        for t in range(5)
    ]
    report = analyze([CellInput(domain="telecom", arm="int4", records=records)]).model_dump(mode="json")
    assert report["cells"][0]["verdict"] is None
    validate_report(report)
    page = render_html(report)
    assert "telecom · int4 (no reference arm)" in page and page.count("<svg") >= 1

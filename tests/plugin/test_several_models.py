"""Cells of several models in one run: ``--quant=int4,int4@tiny-agent-prone`` gives the cell
of the run's model (against ``bf16``) and the cell of ``tiny-agent-prone`` (against
``bf16@tiny-agent-prone``, the same model's reference), from the user's side with pytester."""

from __future__ import annotations

import json

import pytest

from tests.plugin.fakes import FAKE_CONFTEST

# The plugin tests' fake records (tests/plugin/fakes.py), with the prone model's arms added:
# its int4 calls unknown tools 4x as often as its own bf16.
MODELS_CONFTEST = FAKE_CONFTEST + """
PROFILES.update({
    "bf16@tiny-agent-prone": {"fail_every": 5, "unknown": 1},
    "int4@tiny-agent-prone": {"fail_every": 5, "unknown": 4},
})
"""

ARMS_TEST = """
def test_arm(quant_arm, quant_cell):
    print("CELL", quant_cell.id, "vs", quant_cell.reference, "model", quant_arm.model,
          "path", "/".join(quant_arm.path.split("/")[-3:]))
"""


def test_each_model_is_paired_with_its_own_reference(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ARMS_TEST)
    result = pytester.runpytest("--quant=int4,int4@tiny-agent-prone", "--domain=telecom", "-s",
                                "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*test_arm?telecom-int4?", "*test_arm?telecom-int4@tiny-agent-prone?"])
    ran = pytester.runpytest("--quant=int4,int4@tiny-agent-prone", "--domain=telecom", "-s")
    ran.stdout.fnmatch_lines([
        "*CELL telecom-int4 vs bf16 model tiny-agent path tiny-agent/arms/awq-w4a16*",
        "*CELL telecom-int4@tiny-agent-prone vs bf16@tiny-agent-prone model tiny-agent-prone "
        "path tiny-agent-prone/arms/awq-w4a16*",
    ])


def test_the_report_has_one_cell_per_model_each_against_its_reference(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_INT4_UNKNOWN", "1")  # the default model's int4 behaves as its bf16
    pytester.makeconftest(MODELS_CONFTEST)
    pytester.makepyfile("""
from pytest_quantagent.assertions import assert_no_channel_amplification

def test_channels(quant_cell):
    assert_no_channel_amplification(quant_cell, channel="unknown_tool")
""")
    result = pytester.runpytest("--quant=int4,int4@tiny-agent-prone", "--domain=telecom",
                                "--quant-report=r.json")
    # the prone model's int4 calls unknown tools 4x as often as its own bf16: that cell fails;
    # the default model's int4 equals its bf16 and cannot be judged on this channel (skip)
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*FAILED*test_channels?telecom-int4@tiny-agent-prone?*"])
    report = json.loads((pytester.path / "r.json").read_text())
    cells = {c["arm"]: c for c in report["cells"]}
    assert {a: c["reference"] for a, c in cells.items()} == {
        "int4": "bf16", "int4@tiny-agent-prone": "bf16@tiny-agent-prone"}
    assert cells["int4@tiny-agent-prone"]["verdict"] == "MASKED_DAMAGE"
    assert cells["int4"]["verdict"] != "MASKED_DAMAGE"
    # each cell's serving settings are compared with its own reference's
    assert cells["int4@tiny-agent-prone"]["comparability"]["reference"] == "bf16@tiny-agent-prone"
    assert cells["int4"]["comparability"]["reference"] == "bf16"
    specs = report["run"]["arm_specs"]
    assert specs["bf16@tiny-agent-prone"]["model"] == "tiny-agent-prone"
    assert specs["bf16"]["model"] == "tiny-agent"


@pytest.mark.parametrize(("arms", "message"), [
    ("int4@no-such-model", "*--quant: 'int4@no-such-model' names an unknown model spec "
                           "'no-such-model'; model specs: tiny-agent, tiny-agent-prone*"),
    ("int9@tiny-agent-prone", "*--quant: unknown arm 'int9' in 'int9@tiny-agent-prone'; arms of "
                              "model spec 'tiny-agent-prone': *int4*"),
    ("int4,bf16@tiny-agent-prone", "*--quant lists 'bf16@tiny-agent-prone', the reference arm of "
                                   "model 'tiny-agent-prone'*"),
    ("int4@", "*--quant: invalid value 'int4@'*"),
])
def test_a_bad_model_arm_is_refused_before_collection(pytester: pytest.Pytester, arms: str,
                                                      message: str) -> None:
    pytester.makepyfile(ARMS_TEST)
    result = pytester.runpytest(f"--quant={arms}", "--domain=telecom")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "collected" not in result.stdout.str()


def test_labels_split_and_pair() -> None:
    from pytest_quantagent.quant.arms import reference_for, split_model, with_repair

    assert split_model("int4+repair@tiny-agent") == ("int4+repair", "tiny-agent")
    assert split_model("int4") == ("int4", None)
    assert reference_for("int4@m", "bf16") == "bf16@m"
    assert reference_for("int4", "bf16") == "bf16"
    assert reference_for("int4@m", "fp16@other") == "fp16@m"
    assert with_repair("int4@m") == "int4+repair@m"
    assert with_repair("int4+repair@m") == "int4+repair@m"
    assert with_repair("int4") == "int4+repair"

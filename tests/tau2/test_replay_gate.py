"""A release gate in pytest on results files produced elsewhere: replay arms end to end."""

from __future__ import annotations

from pathlib import Path

import ijson  # noqa: F401  # C extension: import once, outside pytester's in-process runs
import pytest
from tau2_builders import Conversation, results, simulation, write_json

import pytest_quantagent.report.model
import pytest_quantagent.report.terminal
import pytest_quantagent.stats  # noqa: F401

TEST_FILE = """
from pytest_quantagent.assertions import assert_no_channel_amplification


def test_episodes_come_from_the_files(quant_cell):
    assert len(quant_cell.episodes) == 30
    assert len(quant_cell.reference_episodes) == 30
    assert {r.backend for r in quant_cell.episodes} == {"replay"}
    assert sum(r.n_errors for r in quant_cell.episodes) == 60


def test_gate_unknown_tool(quant_cell):
    assert_no_channel_amplification(quant_cell, channel="unknown_tool", max_ratio=1.2)
"""


def _write(path: Path, hallucinated: int) -> Path:
    sims = []
    for t in range(30):
        conv = Conversation()
        for _ in range(hallucinated):
            conv.call("get_order_status", "Error: Tool 'get_order_status' not found.", error=True)
        conv.call("get_order_details", '{"status": "ok"}').say("user", "###STOP###")
        sims.append(simulation(str(t), conv.messages))
    return write_json(path, results(sims, domain="retail"))


def test_replay_arms_gate_a_release(pytester: pytest.Pytester) -> None:
    _replay_pair(pytester)
    pytester.makepyfile(test_gate=TEST_FILE)
    result = pytester.runpytest(
        "--quant=int4", "--quant-reference=bf16", "--domain=retail", "--quant-config=arms.toml"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*1 channel(s) amplified above*", "*unknown_tool: *(60 vs 0)*"])


def test_replay_arms_of_differently_accounting_versions_are_refused(pytester: pytest.Pytester) -> None:
    # bf16 from τ²-bench 1.0.1 (malformed turns excluded as infrastructure errors), int4 from
    # feature/gym (rejected turns kept as message errors): their counts mean different things.
    bf16 = pytester.path / "bf16.json"
    data = results([simulation(str(t), Conversation().call("get_order_details", "{}").messages)
                    for t in range(3)], domain="retail", tau2_version="1.0.1")
    write_json(bf16, data)
    for sim in data["simulations"]:
        sim["messages"][0]["errors"] = []
    del data["info"]["tau2_version"]
    int4 = write_json(pytester.path / "int4.json", data)
    pytester.makefile(
        ".toml",
        arms=f'[arms.bf16]\nbackend = "replay"\npath = "{bf16}"\n\n'
        f'[arms.int4]\nbackend = "replay"\npath = "{int4}"\n',
    )
    pytester.makepyfile(test_gate="def test_cell(episodes):\n    assert len(episodes) == 3\n")
    args = ["--quant=int4", "--quant-reference=bf16", "--domain=retail", "--quant-config=arms.toml"]
    result = pytester.runpytest(*args)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        "*refusing to pair τ²-bench files whose versions account for failures differently*",
        "*--quant-allow-mixed-tau2=yes*",
    ])
    result = pytester.runpytest(*args, "--quant-allow-mixed-tau2=yes", "-W", "always")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*mixed τ²-bench versions (--quant-allow-mixed-tau2=yes)*"])


def _replay_pair(pytester: pytest.Pytester, extra: str = "") -> None:
    bf16 = _write(pytester.path / "bf16.json", hallucinated=0)
    int4 = _write(pytester.path / "int4.json", hallucinated=2)
    pytester.makefile(
        ".toml",
        arms=f'[arms.bf16]\nbackend = "replay"\npath = "{bf16}"\n\n'
        f'[arms.int4]\nbackend = "replay"\npath = "{int4}"\n{extra}',
    )


def test_precision_model_of_a_replay_arm_says_there_is_no_model(pytester: pytest.Pytester) -> None:
    _replay_pair(pytester)
    pytester.makepyfile(test_gate="def test_model(precision_model):\n    pass\n")
    result = pytester.runpytest("--quant=int4", "--domain=retail", "--quant-config=arms.toml")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        "*precision_model: arm 'int4' is a replay arm (backend = \"replay\"): its episodes are "
        "read from τ²-bench results files and it has no model to generate with*",
    ])


def test_replay_arm_options_are_checked_before_any_work(pytester: pytest.Pytester) -> None:
    _replay_pair(pytester, extra='resuls = "x.json"\n')
    pytester.makepyfile(test_gate="def test_cell(episodes):\n    pass\n")
    result = pytester.runpytest("--quant=int4", "--domain=retail", "--quant-config=arms.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*arms.int4.resuls*unknown key 'resuls' for backend 'replay'; did you mean 'results'?*allowed: *path, paths*results*",
    ])


def test_replay_arm_with_a_missing_file_stops_at_preflight(pytester: pytest.Pytester) -> None:
    _replay_pair(pytester)
    (pytester.path / "int4.json").unlink()
    pytester.makepyfile(test_gate="def test_cell(episodes):\n    pass\n")
    result = pytester.runpytest("--quant=int4", "--domain=retail", "--quant-config=arms.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pre-flight check failed, no episode was run:*",
                                 "*arm 'int4'*results file(s) not found:*int4.json*"])

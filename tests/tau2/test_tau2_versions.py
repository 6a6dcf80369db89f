"""Version-aware reading of τ²-bench results files (issue 27, Deliver 3), on crafted
synthetic files for each difference between versions and branches; the real results file
under ``../shared/tau2/results`` only where present."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tau2_builders import Conversation, results, simulation, write_json

from pytest_quantagent.analysis.gate import EXIT_INCONCLUSIVE
from pytest_quantagent.cli import main
from pytest_quantagent.errors import EXIT_USAGE
from pytest_quantagent.tau2 import read_results
from pytest_quantagent.tau2.compare import MixedTau2Error, read_comparison


def _ok() -> list[dict[str, Any]]:
    return Conversation().say("user", "hi").call("get_order_details", '{"ok": true}').messages


def _file(tmp_path: Path, name: str, sims: list[dict[str, Any]] | None = None, **info: Any) -> Path:
    sims = sims if sims is not None else [simulation("1", _ok()), simulation("2", _ok())]
    return write_json(tmp_path / f"{name}.json", results(sims, **info))


@pytest.mark.parametrize(
    ("version", "accounting"),
    [("0.9.2", "pre-1.0"), ("1.0.0", "1.0-drop"), ("1.0.1", "1.0"), ("v1.2", "1.0")],
)
def test_version_from_info_sets_the_accounting(tmp_path: Path, version: str, accounting: str) -> None:
    run = read_results(_file(tmp_path, "r", tau2_version=version))
    p = run.provenance
    assert (p.version, p.branch, p.accounting) == (version, "main", accounting)
    assert f"info version {version}" in p.describe()


def test_gym_branch_from_message_errors(tmp_path: Path) -> None:
    msgs = _ok()
    msgs[1]["errors"] = ["Invalid message: tool call could not be parsed\nname: get_order_detail"]
    run = read_results(_file(tmp_path, "gym", [simulation("1", msgs)]))
    assert (run.provenance.branch, run.provenance.accounting) == ("feature/gym", "gym")
    assert run.flags.hidden_malformed == 1


@pytest.mark.parametrize("termination", ["timeout", "context_window_exceeded", "unexpected_error",
                                         "infrastructure_error"])
def test_new_termination_reasons_mark_the_1_0_family(tmp_path: Path, termination: str) -> None:
    sims = [simulation("1", _ok()), simulation("2", _ok(), reward=0.0, termination=termination)]
    run = read_results(_file(tmp_path, "r", sims))
    assert run.provenance.accounting == "1.0?"
    assert f"termination reasons {termination}" in run.provenance.evidence[0]


def test_nothing_version_specific_is_unknown(tmp_path: Path) -> None:
    run = read_results(_file(tmp_path, "r"))
    assert (run.provenance.branch, run.provenance.accounting) == ("unknown", "unknown")


def test_infrastructure_errors_counted_per_arm_next_to_the_score(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = _file(tmp_path, "bf16", [simulation("1", _ok()), simulation("2", _ok()),
                                   simulation("3", _ok(), reward=0.0)], tau2_version="1.0.1")
    cand = _file(tmp_path, "int4", [simulation("1", _ok()), simulation("2", [], termination="infrastructure_error"),
                                    simulation("3", [], termination="infrastructure_error")],
                 tau2_version="1.0.1")
    out = tmp_path / "report.json"
    assert main(["analyze", "--tau2", str(ref), str(cand), "--json", str(out)]) == EXIT_INCONCLUSIVE
    err = capsys.readouterr().err
    # τ²-bench's own score excludes them: int4 scores 1.000 on its one scored episode.
    assert ("int4: tau2-bench score 1.000 on 1 scored episodes; 2 infrastructure_error "
            "episode(s) excluded (of 3)") in err
    assert "bf16: tau2-bench score 0.667 on 3 scored episodes; 0 infrastructure_error" in err
    assert "int4: tau2-bench 1.0.1, branch main: failure accounting '1.0'" in err
    (cell,) = json.loads(out.read_text())["cells"]
    extra = cell["extra"]
    assert extra["tau2_score"] == {"mean_reward": 1.0, "scored_episodes": 1,
                                   "excluded_infrastructure_errors": 2, "episodes": 3}
    assert extra["reference_tau2_score"]["excluded_infrastructure_errors"] == 0
    assert extra["tau2_provenance"]["accounting"] == extra["reference_tau2_provenance"]["accounting"] == "1.0"


def test_mixed_accounting_refused_unless_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ref = _file(tmp_path, "bf16", tau2_version="1.0.1")
    msgs = _ok()
    msgs[1]["errors"] = []
    gym = _file(tmp_path, "int4", [simulation("1", msgs), simulation("2", _ok())])
    assert main(["analyze", "--tau2", str(ref), str(gym), "--quiet"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "refusing to pair τ²-bench files whose versions account for failures differently" in err
    assert str(gym) in err and str(ref) in err and "--allow-mixed-tau2" in err
    assert "(gym)" in err and "(1.0)" in err
    with pytest.raises(MixedTau2Error):
        read_comparison([ref, gym])
    assert main(["analyze", "--tau2", str(ref), str(gym), "--allow-mixed-tau2", "--json", "-"]) == EXIT_INCONCLUSIVE
    cap = capsys.readouterr()
    assert "mixed τ²-bench versions (--allow-mixed-tau2)" in cap.err
    groups = read_comparison([ref, gym], allow_mixed=True)
    assert any("different failure accounting" in n for n in groups[0].candidates[0].flags.notes)
    # 1.0.0 vs 1.0.1 differ on hallucinated names; a 1.0-family file without a version and
    # a file that cannot tell are paired (nothing proves a difference).
    drop = _file(tmp_path, "drop", tau2_version="1.0.0")
    with pytest.raises(MixedTau2Error, match="hallucinated tool names likewise"):
        read_comparison([ref, drop])
    v1 = _file(tmp_path, "v1", [simulation("1", _ok()), simulation("2", [], termination="timeout")])
    plain = _file(tmp_path, "plain")
    assert len(read_comparison([ref, v1, plain])[0].candidates) == 2


def _retail_file(tmp_path: Path, name: str, version: str) -> Path:
    conv = Conversation().say("user", "hi").call(
        "get_item_details", "Error: Tool 'get_item_details' not found.", error=True,
        arguments={"item_id": "1"})
    data = results([simulation("1", conv.messages)], domain="retail", tau2_version=version)
    del data["info"]["environment_info"]["tool_defs"], data["info"]["environment_info"]["user_tool_defs"]
    return write_json(tmp_path / f"{name}.json", data)


def test_tool_list_of_the_files_version(tmp_path: Path) -> None:
    # Retail gained get_item_details in 1.0.0: in an older file the name is not a tool.
    old = read_results(_retail_file(tmp_path, "old", "0.9.0"))
    new = read_results(_retail_file(tmp_path, "new", "1.0.1"))
    assert "get_item_details" not in old.tools.agent and "get_item_details" in new.tools.agent
    assert old.tools.agent | {"get_item_details"} == new.tools.agent
    assert old.records[0].calls[0].channel is not None
    assert old.records[0].calls[0].channel.value == "unknown_tool"
    # A file that lists its tools is classified against that list.
    data = results([simulation("1", _ok())], domain="retail")
    listed = read_results(write_json(tmp_path / "listed.json", data))
    assert listed.tools.agent == set(data["info"]["environment_info"]["tool_defs"])
    assert listed.flags.tool_names_source == "tool_defs"


def test_voice_files_read_for_scores_with_a_note(tmp_path: Path) -> None:
    sim = simulation("1", [], reward=1.0)
    sim["messages"] = None
    sim["ticks"] = [{"tick_id": 0}, {"tick_id": 1}]
    sims = [sim, simulation("2", _ok(), reward=0.0)]
    run = read_results(_file(tmp_path, "voice", sims))
    assert [r.reward for r in run.records] == [1.0, 0.0] and run.records[0].calls == []
    assert run.flags.tick_only == 1 and "voice ticks" in run.provenance.evidence
    assert any("tool-call channels are unavailable" in line for line in run.flags.lines())


def test_real_gym_results_file(tau2_data: Path) -> None:
    path = tau2_data / "results" / "gpt-4.1_retail_1trial_feature-gym.json"
    if not path.is_file():
        pytest.skip("no τ²-bench results file under ../shared/tau2/results")
    run = read_results(path)
    assert (run.provenance.branch, run.provenance.accounting) == ("feature/gym", "gym")
    assert len(run.records) == 40


def test_replay_knows_the_tool_list_of_the_files_version(
    tau2_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = json.loads((tau2_data / "domains" / "retail" / "db.json").read_text())
    item = next(iter(next(iter(db["products"].values()))["variants"]))
    conv = Conversation().say("user", "hi").call(
        "get_item_details", "Error: Tool 'get_item_details' not found", error=True,
        arguments={"item_id": item})
    out = {}
    for version in ("0.9.0", "1.0.1"):
        data = results([simulation("0", conv.messages)], domain="retail", tau2_version=version)
        p = write_json(tmp_path / f"{version}.json", data)
        rc = main(["fidelity", "--tau2-results", str(p), "--tau2-data", str(tau2_data), "--json"])
        out[version] = (rc, json.loads(capsys.readouterr().out))
    # Before 1.0.0 the tool did not exist: the recorded error is what that version answered.
    assert out["0.9.0"][0] == 0 and out["0.9.0"][1]["matched"] == 1
    # Since 1.0.0 it is a real tool: our engine answers with the item, the file's error differs.
    assert out["1.0.1"][0] == 1 and out["1.0.1"][1]["mismatches"][0]["ours"]["error"] is False

"""Files that are not τ²-bench results, or are broken, are refused with the path and the
JSON location of the problem."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tau2_builders import Conversation, results, simulation, write_dir, write_json

from pytest_quantagent.errors import DataFileError
from pytest_quantagent.tau2 import read_results


def _good() -> dict[str, Any]:
    def msgs() -> list[dict[str, Any]]:
        return (
            Conversation().say("user", "hello").call("get_order_details", '{"ok": true}').messages
        )

    return results([simulation("1", msgs()), simulation("2", msgs()), simulation("3", msgs())])


def _refused(path: Path) -> DataFileError:
    with pytest.raises(DataFileError) as exc:
        read_results(path)
    assert str(path) in str(exc.value)
    return exc.value


def test_missing_path(tmp_path: Path) -> None:
    e = _refused(tmp_path / "nope.json")
    assert "no such file" in e.problem


def test_not_json(tmp_path: Path) -> None:
    p = tmp_path / "notes.json"
    p.write_text("this is not json at all")
    e = _refused(p)
    assert "invalid JSON" in e.problem
    assert "byte" in e.location


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.json"
    p.write_text("")
    e = _refused(p)
    assert e.location == "top level"
    assert "empty file" in e.problem


def test_top_level_list(tmp_path: Path) -> None:
    e = _refused(write_json(tmp_path / "list.json", [1, 2, 3]))
    assert e.location == "top level"
    assert "not a tau2-bench results file" in e.problem


def test_other_json_object(tmp_path: Path) -> None:
    e = _refused(write_json(tmp_path / "pkg.json", {"name": "x", "version": "1"}))
    assert e.location == "info"
    assert "name, version" in e.problem  # says what it found instead


def test_no_simulations(tmp_path: Path) -> None:
    data = _good()
    del data["simulations"]
    e = _refused(write_json(tmp_path / "r.json", data))
    assert e.location == "simulations"


def test_truncated_inside_a_simulation(tmp_path: Path) -> None:
    text = json.dumps(_good(), indent=2)
    cut = text.index('"task_id": "2"') + 40  # inside the second simulation
    p = tmp_path / "truncated.json"
    p.write_text(text[:cut])
    e = _refused(p)
    assert "truncated" in e.problem
    assert e.location.startswith("simulations[1]")
    assert "byte" in e.location


def test_truncated_inside_messages(tmp_path: Path) -> None:
    text = json.dumps(_good(), indent=2)
    start = text.index('"task_id": "3"')
    cut = text.index('"role": "tool"', start) + 5
    p = tmp_path / "truncated.json"
    p.write_text(text[:cut])
    e = _refused(p)
    assert e.location.startswith("simulations[2].messages[2]")


def test_unknown_termination_lists_known_values(tmp_path: Path) -> None:
    data = _good()
    data["simulations"][1]["termination_reason"] = "gave_up"
    e = _refused(write_json(tmp_path / "r.json", data))
    assert e.location == "simulations[1].termination_reason"
    assert "'gave_up'" in e.problem
    assert "user_stop" in e.problem and "too_many_errors" in e.problem


def test_tool_message_without_call(tmp_path: Path) -> None:
    data = _good()
    data["simulations"][0]["messages"].insert(
        0,
        {"role": "tool", "id": "x", "content": "orphan", "requestor": "assistant", "error": False},
    )
    e = _refused(write_json(tmp_path / "r.json", data))
    assert e.location == "simulations[0].messages[0]"


def test_unknown_role(tmp_path: Path) -> None:
    data = _good()
    data["simulations"][2]["messages"][0]["role"] = "narrator"
    e = _refused(write_json(tmp_path / "r.json", data))
    assert e.location == "simulations[2].messages[0].role"
    assert "'narrator'" in e.problem


def test_missing_domain(tmp_path: Path) -> None:
    data = _good()
    del data["info"]["environment_info"]["domain_name"]
    e = _refused(write_json(tmp_path / "r.json", data))
    assert e.location == "info.environment_info.domain_name"


def test_missing_task_id(tmp_path: Path) -> None:
    data = _good()
    del data["simulations"][1]["task_id"]
    e = _refused(write_json(tmp_path / "r.json", data))
    assert e.location == "simulations[1].task_id"


def test_dir_format_missing_simulation_file(tmp_path: Path) -> None:
    folder = write_dir(tmp_path / "run", _good())
    (folder / "simulations" / "sim-2-0.json").unlink()
    with pytest.raises(DataFileError) as exc:
        read_results(folder)
    assert exc.value.location == "simulation_index"
    assert "sim-2-0" in exc.value.problem


def test_dir_format_truncated_simulation_file(tmp_path: Path) -> None:
    folder = write_dir(tmp_path / "run", _good())
    f = folder / "simulations" / "sim-3-0.json"
    f.write_text(f.read_text()[:100])
    with pytest.raises(DataFileError) as exc:
        read_results(folder)
    assert exc.value.path == str(f)
    assert "truncated" in exc.value.problem
    assert "line" in exc.value.location


def test_dir_without_results_json(tmp_path: Path) -> None:
    (tmp_path / "empty_run").mkdir()
    with pytest.raises(DataFileError) as exc:
        read_results(tmp_path / "empty_run")
    assert "results.json" in exc.value.problem


def test_a_refused_file_leaves_the_next_read_intact(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"info": {')
    good = write_json(tmp_path / "good.json", _good())
    with pytest.raises(DataFileError):
        read_results(bad)
    assert len(read_results(good).records) == 3


# Issue 28, finding 8: a simulation without messages is not a clean episode; bad scalars
# are refused naming the file and the JSON location.


def test_simulation_without_messages_is_refused(tmp_path: Path) -> None:
    data = _good()
    del data["simulations"][1]["messages"]
    e = _refused(write_json(tmp_path / "r.json", data))
    assert e.location == "simulations[1].messages"
    assert "missing" in e.problem


@pytest.mark.parametrize(
    ("field", "value", "location"),
    [
        ("reward", "high", "simulations[2].reward_info.reward"),
        ("reward", 3.5, "simulations[2].reward_info.reward"),
        ("reward", True, "simulations[2].reward_info.reward"),
        ("trial", "first", "simulations[2].trial"),
        ("trial", -1, "simulations[2].trial"),
        ("seed", "abc", "simulations[2].seed"),
    ],
)
def test_bad_scalars_name_file_and_location(
    tmp_path: Path, field: str, value: Any, location: str
) -> None:
    data = _good()
    sim = data["simulations"][2]
    if field == "reward":
        sim["reward_info"]["reward"] = value
    else:
        sim[field] = value
    e = _refused(write_json(tmp_path / "r.json", data))
    assert e.location == location
    assert repr(value)[:20] in e.problem

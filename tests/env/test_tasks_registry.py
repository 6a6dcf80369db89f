"""Task-file validation and the domain registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_quantagent.env import registry
from pytest_quantagent.env.tasks import load_splits, load_tasks
from pytest_quantagent.errors import DataFileError, UnknownNameError

GOOD = {"id": "t1", "user_scenario": {"instructions": "hi"}}


def write(tmp_path: Path, tasks: object) -> Path:
    p = tmp_path / "tasks.json"
    p.write_text(json.dumps(tasks))
    return p


def test_valid_minimal_task(tmp_path: Path) -> None:
    [t] = load_tasks(write(tmp_path, [GOOD]))
    assert t.id == "t1" and t.gold_actions == []


def test_error_names_file_task_and_field(tmp_path: Path) -> None:
    bad = {**GOOD, "id": "t2", "evaluation_criteria": {"reward_basis": ["DB", "VIBES"]}}
    p = write(tmp_path, [GOOD, bad])
    with pytest.raises(DataFileError) as ei:
        load_tasks(p)
    msg = str(ei.value)
    assert str(p) in msg and "'t2'" in msg and "evaluation_criteria.reward_basis.1" in msg
    assert "VIBES" in msg


def test_misspelt_field_is_refused(tmp_path: Path) -> None:
    bad = {**GOOD, "user_scenaro": {}}
    with pytest.raises(DataFileError, match=r"task 't1', field 'user_scenaro': Extra inputs are not permitted"):
        load_tasks(write(tmp_path, [bad]))


def test_script_is_validated_at_load(tmp_path: Path) -> None:
    bad = {"id": "s1", "user_scenario": {"instructions": "x", "script": {"requests": [], "confirm": True}}}
    with pytest.raises(DataFileError, match=r"task 's1', field 'user_scenario.script.requests'"):
        load_tasks(write(tmp_path, [bad]))


def test_duplicate_ids_and_bad_json(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match="duplicate task id"):
        load_tasks(write(tmp_path, [GOOD, GOOD]))
    p = tmp_path / "broken.json"
    p.write_text("[{")
    with pytest.raises(DataFileError, match=r"broken.json at line 1"):
        load_tasks(p)
    with pytest.raises(DataFileError, match="file not found"):
        load_tasks(tmp_path / "missing.json")


def test_splits_must_name_known_tasks(tmp_path: Path) -> None:
    p = tmp_path / "split.json"
    p.write_text(json.dumps({"test": ["t1", "t9"]}))
    with pytest.raises(DataFileError, match=r"split 'test'.*unknown task id 't9'"):
        load_splits(p, ["t1"])


def test_unknown_domain_lists_known_ones(toy_domains_dir: Path) -> None:
    with pytest.raises(UnknownNameError) as ei:
        registry.get_domain("retial")
    assert "unknown domain 'retial'; known domains: toy" in str(ei.value)


def test_domain_cached_and_task_lookup(toy_domains_dir: Path) -> None:
    d = registry.get_domain("toy")
    assert registry.get_domain("toy") is d
    assert d.task("wifi").id == "wifi"
    with pytest.raises(UnknownNameError, match="unknown toy task id 'nope'; known toy task ids: deposit, transfer, wifi"):
        d.task("nope")
    assert d.agent_tool_names >= {"get_account", "deposit"} and d.user_tool_names == {"check_wifi", "toggle_wifi"}
    names = [s["function"]["name"] for s in d.agent_tool_schemas()]
    assert names == sorted(names) and d.agent_tool_schemas() is d.agent_tool_schemas()


def test_official_data_dir_missing(toy_domains_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match="no τ²-bench data for domain 'toy'"):
        registry.get_domain("toy", tau2_data=tmp_path)


def test_official_tau2_task_files_load(tau2_data: Path) -> None:
    retail = load_tasks(tau2_data / "domains" / "retail" / "tasks.json")
    telecom = load_tasks(tau2_data / "domains" / "telecom" / "tasks_base_2025-06-10.json")
    assert len(retail) == 114 and len(telecom) == 114
    assert all(t.structured_instructions is not None for t in retail)
    splits = load_splits(tau2_data / "domains" / "retail" / "split_tasks.json", [t.id for t in retail])
    assert len(splits["test"]) == 40


# Issue 28, finding 11: task files name real tools; DB errors name the file.


def _official_toy(tmp_path: Path, tasks: list[dict[str, object]]) -> Path:
    d = tmp_path / "domains" / "toy"
    d.mkdir(parents=True)
    (d / "tasks.json").write_text(json.dumps(tasks))
    return tmp_path


def _task(**criteria: object) -> dict[str, object]:
    return {"id": "t1", "user_scenario": {"instructions": {"reason_for_call": "hi"}},
            "evaluation_criteria": {"reward_basis": ["DB"], **criteria}}


def test_gold_action_with_unknown_tool_is_refused(toy_domains_dir: Path, tmp_path: Path) -> None:
    data = _official_toy(tmp_path, [_task(actions=[
        {"action_id": "a0", "name": "get_account", "arguments": {"account_id": "a1"}},
        {"action_id": "a1", "name": "deposti", "arguments": {"account_id": "a1", "amount": 1}},
    ])])
    with pytest.raises(DataFileError) as ei:
        registry.get_domain("toy", tau2_data=data)
    e = ei.value
    assert e.path == str(data / "domains" / "toy" / "tasks.json")
    assert e.location == "task 't1', field 'evaluation_criteria.actions[1].name'"
    assert "'deposti' does not exist" in e.problem and "did you mean deposit" in e.problem


def test_gold_action_of_the_wrong_side_is_refused(toy_domains_dir: Path, tmp_path: Path) -> None:
    # toggle_wifi is a user (device) tool: the agent cannot call it.
    data = _official_toy(tmp_path, [_task(actions=[
        {"action_id": "a0", "requestor": "assistant", "name": "toggle_wifi", "arguments": {}},
    ])])
    with pytest.raises(DataFileError, match="gold action tool of the assistant side 'toggle_wifi'"):
        registry.get_domain("toy", tau2_data=data)


def test_unknown_initialization_function_is_refused(toy_domains_dir: Path, tmp_path: Path) -> None:
    task = _task()
    task["initial_state"] = {"initialization_actions": [
        {"env_type": "user", "func_name": "no_such_function", "arguments": {}}]}
    data = _official_toy(tmp_path, [task])
    with pytest.raises(DataFileError) as ei:
        registry.get_domain("toy", tau2_data=data)
    assert ei.value.location == "task 't1', field 'initial_state.initialization_actions[0].func_name'"
    assert "'no_such_function' does not exist" in ei.value.problem


def test_bad_retail_db_names_the_file(tau2_data: Path, tmp_path: Path) -> None:
    import shutil

    registry.clear_cache()
    d = tmp_path / "domains" / "retail"
    d.mkdir(parents=True)
    for name in ("tasks.json", "policy.md"):
        shutil.copy(tau2_data / "domains" / "retail" / name, d / name)
    (d / "db.json").write_text('{"products": {}, "users": {}, "orders": {}, "extra": 1}')
    with pytest.raises(DataFileError) as ei:
        registry.get_domain("retail", tau2_data=tmp_path)
    assert ei.value.path == str(d / "db.json") and "extra" in ei.value.location
    (d / "db.json").write_text('{"products": ')
    registry.clear_cache()
    with pytest.raises(DataFileError, match=r"db\.json at line 1 column \d+: invalid JSON"):
        registry.get_domain("retail", tau2_data=tmp_path)
    registry.clear_cache()


def test_a_domain_survives_its_packages_being_dropped_from_sys_modules() -> None:
    # pytester's in-process runs restore sys.modules when they end: a domain first loaded
    # inside one lost its packages there while the registry kept its module, so the next
    # lazy relative import in the domain failed ("No module named
    # 'pytest_quantagent_domains.telecom'")
    import importlib
    import sys

    from pytest_quantagent.env import registry

    registry.get_domain("telecom")
    saved = {k: v for k, v in sys.modules.items() if k.startswith("pytest_quantagent_domains")}
    try:
        for k in saved:
            del sys.modules[k]
        registry.clear_cache()
        registry.get_domain("telecom")
        assert importlib.import_module("pytest_quantagent_domains.telecom.user_sim")
    finally:
        registry.clear_cache()
        sys.modules.update({k: v for k, v in saved.items() if k not in sys.modules})

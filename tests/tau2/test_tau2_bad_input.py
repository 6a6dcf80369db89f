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


# Issue 36 item 6: hostile results files, each refused with one line naming the place.


def _hostile(tmp_path: Path, edit: Any) -> Path:
    text = json.dumps(_good())
    p = tmp_path / "hostile.json"
    p.write_text(edit(text))
    return p


def test_deep_nesting_is_refused_before_parsing(tmp_path: Path) -> None:
    # 10⁶ levels once took ijson to 7.7 GB; the shape pass refuses it at constant memory.
    import tracemalloc

    deep = "[" * 1_000_000 + "]" * 1_000_000
    p = _hostile(tmp_path, lambda t: t.replace('"hello"', deep, 1))
    tracemalloc.start()
    try:
        e = _refused(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "nested deeper than 256 levels" in e.problem and "near byte" in e.location
    assert "\n" not in str(e)
    assert peak < 20_000_000


def test_deep_nesting_in_a_directory_format_file_is_refused(tmp_path: Path) -> None:
    folder = write_dir(tmp_path / "run", _good())
    sim = next((folder / "simulations").glob("*.json"))
    sim.write_text(sim.read_text().replace('"hello"', "[" * 5000 + "]" * 5000, 1))
    e = _refused(folder)
    assert "nested deeper than" in e.problem


def test_shape_pass_agrees_with_json_on_random_documents(tmp_path: Path) -> None:
    # Independent reference: json.loads and a recursive depth, on documents whose strings
    # hold brackets, quotes, backslashes and colons, read in blocks as small as one byte.
    import random
    import re

    from pytest_quantagent.tau2 import source

    rng = random.Random(3)

    def value(d: int) -> Any:
        r = rng.random()
        if d > 6 or r < 0.3:
            return rng.choice([None, 1, 2.5, True, "a]b", '"[{', "\\", "x:,y", "}"])
        if r < 0.65:
            return [value(d + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(["k", "]", '"', "\\n", "a:b"]) + str(i): value(d + 1)
                for i in range(rng.randint(0, 3))}

    def depth(v: Any) -> int:
        if isinstance(v, dict):
            return 1 + max(map(depth, v.values()), default=0)
        if isinstance(v, list):
            return 1 + max(map(depth, v), default=0)
        return 0

    for trial in range(60):
        doc = {f"key{i}" + rng.choice(["", "]", "\\"]): value(1) for i in range(rng.randint(1, 4))}
        p = tmp_path / f"d{trial}.json"
        p.write_text(json.dumps(doc))
        d = depth(doc)
        for block in (1, 3, 64, 1 << 18):
            orig = source._SCAN_BLOCK
            source._SCAN_BLOCK = block
            try:
                shape = source.check_shape(p, max_depth=d)
                # Keys as written, escape sequences dropped (documented in Shape).
                assert shape.top_keys == [re.sub(r"\\.", "", json.dumps(k)[1:-1]) for k in doc], (trial, block)
                kinds = {k: {list: "list", dict: "object", str: "string"}.get(type(v), source._SCALAR)
                         for k, v in doc.items()}
                assert list(shape.value_kinds.values()) == list(kinds.values()), (trial, block)
                with pytest.raises(DataFileError, match="nested deeper"):
                    source.check_shape(p, max_depth=d - 1)
            finally:
                source._SCAN_BLOCK = orig


def test_huge_task_id_is_refused_with_the_limit(tmp_path: Path) -> None:
    p = _hostile(tmp_path, lambda t: t.replace('"task_id": "1"', '"task_id": "' + "x" * 5_000_000 + '"', 1))
    e = _refused(p)
    assert e.location == "simulations[0].task_id"
    assert "5000000 characters" in e.problem and "at most 1024" in e.problem


def test_simulations_null_is_refused(tmp_path: Path) -> None:
    data = _good()
    data["simulations"] = None
    e = _refused(write_json(tmp_path / "null.json", data))
    assert e.location == "simulations" and "expected a list of simulations, got null" in e.problem


def test_an_empty_candidate_is_refused_in_a_comparison(tmp_path: Path) -> None:
    from pytest_quantagent.tau2.compare import read_comparison

    ref = write_json(tmp_path / "ref.json", _good())
    data = _good()
    data["simulations"] = []
    cand = write_json(tmp_path / "cand.json", data)
    with pytest.raises(DataFileError, match="nothing to compare") as exc:
        read_comparison([ref, cand])
    assert str(cand) in str(exc.value)


def test_duplicated_simulations_keys_are_refused(tmp_path: Path) -> None:
    # json.loads and tau2-bench keep the last, ijson streams both: refused, never a guess.
    text = json.dumps(_good())
    sims = text[text.index('"simulations"'):-1]
    p = tmp_path / "dup.json"
    p.write_text(text[:-1] + ", " + sims + "}")
    assert list(json.loads(p.read_text())) == ["timestamp", "info", "tasks", "simulations"]
    e = _refused(p)
    assert e.location == "simulations" and "appears 2 times" in e.problem


def test_object_content_and_list_arguments_are_refused_with_the_path(tmp_path: Path) -> None:
    data = _good()
    tool = next(i for i, m in enumerate(data["simulations"][0]["messages"]) if m["role"] == "tool")
    data["simulations"][0]["messages"][tool]["content"] = {"ok": True}
    e = _refused(write_json(tmp_path / "content.json", data))
    assert e.location == f"simulations[0].messages[{tool}].content"
    assert "expected a string, got dict" in e.problem
    data = _good()
    call = next(i for i, m in enumerate(data["simulations"][0]["messages"]) if m.get("tool_calls"))
    data["simulations"][0]["messages"][call]["tool_calls"][0]["arguments"] = [1, 2]
    e = _refused(write_json(tmp_path / "args.json", data))
    assert e.location == f"simulations[0].messages[{call}].tool_calls[0].arguments"
    assert "expected an object, got list" in e.problem

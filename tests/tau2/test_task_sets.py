"""Task sets by name (issue 27 Deliver 2, issue 26 item 3): τ²-bench splits from
``split_tasks.json``, the task file that holds a split, a checkout root or its ``data/tau2``
folder, and unknown ids/splits refused before any work, naming the closest ids."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import ijson  # noqa: F401  # C extension: import once, outside pytester's in-process runs
import pytest

from pytest_quantagent.cli import main
from pytest_quantagent.env import registry
from pytest_quantagent.env.tasksets import (
    UnknownTaskError,
    iter_task_items,
    task_file_ids,
    tasks_file_for_split,
    tau2_data_arg,
)
from pytest_quantagent.errors import EXIT_USAGE, DataFileError


@pytest.mark.parametrize(
    ("domain", "split", "n"),
    [("retail", "base", 114), ("retail", "train", 74), ("retail", "test", 40),
     ("telecom", "base", 114), ("telecom", "train", 74), ("telecom", "test", 40),
     ("telecom", "small", 20)],
)
def test_splits_by_name_on_the_official_data(tau2_data: Path, domain: str, split: str, n: int) -> None:
    d = registry.get_domain_for_split(domain, tau2_data, split)
    official = json.loads((tau2_data / "domains" / domain / "split_tasks.json").read_text())
    assert d.official and d.splits[split] == [str(x) for x in official[split]]
    assert len(d.splits[split]) == n
    assert {t.id for t in d.tasks} >= set(d.splits[split])


def test_full_split_without_its_file_names_the_missing_file(tau2_data: Path) -> None:
    # The snapshot lacks telecom's 2,285-task tasks.json (README of ../shared/tau2).
    if (tau2_data / "domains" / "telecom" / "tasks.json").exists():
        pytest.skip("this τ²-bench data has telecom's tasks.json")
    with pytest.raises(DataFileError) as ei:
        registry.get_domain_for_split("telecom", tau2_data, "full")
    e = ei.value
    assert e.path == str(tau2_data / "domains" / "telecom" / "tasks.json")
    assert "split 'full' of split_tasks.json has 2285 task ids" in e.problem
    assert "tasks_small.json (20 tasks)" in e.problem


def test_unknown_split_lists_the_allowed_ones(tau2_data: Path) -> None:
    with pytest.raises(UnknownTaskError) as ei:
        tasks_file_for_split(tau2_data / "domains" / "telecom", "smal", "telecom")
    assert str(ei.value).startswith(
        "unknown telecom task split 'smal'; known splits: base, full, small, test, train"
    )


def _tau2_layout(tmp_path: Path, tasks: list[dict[str, object]], splits: dict[str, list[str]],
                 *, as_object: bool = False) -> Path:
    d = tmp_path / "data" / "tau2" / "domains" / "toy"
    d.mkdir(parents=True)
    (d / "tasks.json").write_text(json.dumps({"tasks": tasks} if as_object else tasks))
    (d / "split_tasks.json").write_text(json.dumps(splits))
    return tmp_path


def _task(tid: str) -> dict[str, object]:
    return {"id": tid, "user_scenario": {"instructions": {"reason_for_call": "hi"}}}


def test_checkout_root_or_data_folder_both_accepted(tmp_path: Path) -> None:
    root = _tau2_layout(tmp_path, [_task("a")], {"base": ["a"]})
    parse = tau2_data_arg("--tau2-data")
    assert parse(str(root)) == root / "data" / "tau2"
    assert parse(str(root / "data" / "tau2")) == root / "data" / "tau2"
    with pytest.raises(argparse.ArgumentTypeError, match=r"--tau2-data: invalid value .*domains"):
        parse(str(root / "data"))


def test_task_files_stream_and_object_form(tmp_path: Path) -> None:
    root = _tau2_layout(tmp_path, [_task("a"), _task("b")], {"base": ["a", "b"]}, as_object=True)
    path = root / "data" / "tau2" / "domains" / "toy" / "tasks.json"
    assert [t["id"] for t in iter_task_items(path)] == ["a", "b"]
    assert task_file_ids(path) == ["a", "b"]
    path.write_text('[{"id": "a"}, {"id": ')
    with pytest.raises(DataFileError, match=r"tasks\.json at \[1\]: invalid JSON: parse error: premature EOF$"):
        list(iter_task_items(path))


# ---- refused before any work: pytest (before collection) and the CLI


def test_pytest_refuses_unknown_ids_and_splits_before_collection(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_never_collected(): raise AssertionError")
    result = pytester.runpytest("--domain=retail", "--quant-tasks=ids:cancel_000,cancle_000")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--quant-tasks=ids:cancel_000,cancle_000: unknown retail task id 'cancle_000' "
         "(closest: cancel_000*; 160 task ids in domain 'retail')*"])
    assert "return_004" not in result.stderr.str()  # not every id
    result = pytester.runpytest("--domain=retail", "--quant-tasks=split:nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--quant-tasks=split:nope: unknown retail task split 'nope'; known splits: base, test, train*"])


def test_pytest_split_full_absent_fails_before_collection(pytester: pytest.Pytester, tau2_data: Path) -> None:
    if (tau2_data / "domains" / "telecom" / "tasks.json").exists():
        pytest.skip("this τ²-bench data has telecom's tasks.json")
    pytester.makepyfile("def test_never_collected(): raise AssertionError")
    result = pytester.runpytest("--domain=telecom", "--quant-tasks=split:full",
                                f"--quant-tau2-data={tau2_data}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*telecom/tasks.json: file not found: split 'full'*"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tasks", "cancel_000,cancle_000"], "unknown retail task id 'cancle_000' (closest: cancel_000"),
        (["--split", "tset"], "unknown retail task split 'tset'; known splits: base, test, train"),
    ],
)
def test_cli_refuses_unknown_ids_and_splits_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    # The arm points at a port nothing listens on: reaching it would be a different error.
    cfg = tmp_path / "arms.toml"
    cfg.write_text('[arms.bf16]\nbackend = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n')
    rc = main(["run", "--domain", "retail", "--arms", "bf16", "--config", str(cfg),
               "--out", str(tmp_path / "store"), "-q", *args])
    err = capsys.readouterr().err
    assert rc == EXIT_USAGE and message in err
    assert not (tmp_path / "store" / "episodes.jsonl").exists()


# ---- a generated 2,500-task set in τ²-bench's schema and layout (synthetic: our bundled
# telecom tasks with fresh ids; benchmarks/tau2_taskset_memory.py states the peak memory)


def _bench() -> object:
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "tau2_taskset_memory.py"
    spec = importlib.util.spec_from_file_location("tau2_taskset_memory", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_full_set_loads_streamed_and_runs_a_seeded_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import random

    from pytest_quantagent.env import tasks as tasks_mod
    from pytest_quantagent.runner.oracle import run_oracle

    bench: Any = _bench()
    root = bench.write_full_taskset(tmp_path, 2500)
    path = root / "data" / "tau2" / "domains" / "telecom" / "tasks.json"
    assert path.stat().st_size > tasks_mod.STREAM_TASKS_ABOVE  # so it is streamed
    streamed: list[Path] = []
    real = tasks_mod.parse_task_items

    def spy(raw: Any, source: Any) -> Any:
        streamed.append(Path(source))
        assert not isinstance(raw, list)  # items arrive one at a time, not as a document
        return real(raw, source)

    monkeypatch.setattr(tasks_mod, "parse_task_items", spy)
    registry.clear_cache()
    try:
        dom = registry.get_domain_for_split("telecom", root, "full")  # the checkout root
        assert streamed == [path] and len(dom.tasks) == 2500 and len(dom.splits["full"]) == 2500
        ids = random.Random(0).sample(dom.splits["full"], 30)
        results = run_oracle(dom, [dom.task(i) for i in ids])
        assert [r.task_id for r in results] == ids and all(r.success for r in results)
    finally:
        registry.clear_cache()


@pytest.mark.slow
def test_generated_full_set_sample_of_300_has_bounded_memory(tmp_path: Path) -> None:
    bench: Any = _bench()
    root = bench.write_full_taskset(tmp_path, 2500)
    rows = {r["phase"]: r for r in bench.measure(root, sample=300)}
    assert rows["run"]["tasks"] == 2500 and rows["run"]["episodes"] == rows["run"]["succeeded"] == 300
    more = {r["phase"]: r for r in bench.measure(root, sample=1200)}
    # Episodes do not accumulate: four times the sample, the same peak within 20 MB.
    assert more["run"]["peak_rss_mb"] - rows["run"]["peak_rss_mb"] < 20

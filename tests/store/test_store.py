"""The append-only episode store: durability, torn lines, concurrent writers, claims, keys."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.errors import DataFileError
from pytest_quantagent.store.jsonl import EpisodeStore, TornLineWarning
from pytest_quantagent.store.keys import episode_key, prompt_hash
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.vocab.channels import TerminationReason


def rec(key: str, task: str = "t0", termination: TerminationReason = TerminationReason.USER_STOP) -> EpisodeRecord:
    return EpisodeRecord(key=key, model="m", arm="bf16", backend="mock", domain="mini", task_id=task,
                         trial=0, seed=1, max_errors=10, max_steps=200, termination=termination,
                         reward=1.0, success=True, n_errors=0, steps=4)


def test_append_load_roundtrip_and_duplicate_key_refused(tmp_path: Path) -> None:
    s = EpisodeStore(tmp_path)
    assert s.append(rec("k1")) and s.append(rec("k2", "t1"))
    assert not s.append(rec("k1"))
    loaded = EpisodeStore(tmp_path).load()
    assert list(loaded) == ["k1", "k2"] and loaded["k2"].task_id == "t1"
    assert len((tmp_path / "episodes.jsonl").read_bytes().splitlines()) == 2


def test_appends_follow_the_path_when_the_file_is_moved_away(tmp_path: Path) -> None:
    # The store keeps an append descriptor open; a file moved away (archived) must not
    # keep receiving records meant for the path.
    s = EpisodeStore(tmp_path)
    s.append(rec("k1"))
    (tmp_path / "episodes.jsonl").rename(tmp_path / "archived.jsonl")
    assert s.append(rec("k2", "t1"))
    assert [json.loads(x)["key"] for x in (tmp_path / "episodes.jsonl").read_bytes().splitlines()] == ["k2"]
    assert [json.loads(x)["key"] for x in (tmp_path / "archived.jsonl").read_bytes().splitlines()] == ["k1"]
    s.close()
    assert s.append(rec("k3", "t2"))  # reopens after close
    assert len((tmp_path / "episodes.jsonl").read_bytes().splitlines()) == 2


def _append_after_fork(store: EpisodeStore, done_at: Any) -> None:
    store.append(rec("k2", "t1"))
    done_at.value = time.monotonic()


def test_a_forked_child_does_not_share_the_parents_lock(tmp_path: Path) -> None:
    # flock belongs to the open file: a child using the inherited descriptor would get the
    # lock while the parent holds it. The store opens its own in the child.
    s = EpisodeStore(tmp_path)
    s.append(rec("k1"))
    ctx = mp.get_context("fork")
    done_at = ctx.Value("d", 0.0)
    with s._flock:
        child = ctx.Process(target=_append_after_fork, args=(s, done_at))
        child.start()
        time.sleep(0.5)
        released_at = time.monotonic()
    child.join(10)
    assert child.exitcode == 0
    assert done_at.value >= released_at  # the child waited for the parent's lock
    assert list(EpisodeStore(tmp_path).load()) == ["k1", "k2"]


def test_infrastructure_failures_go_to_failures_file(tmp_path: Path) -> None:
    s = EpisodeStore(tmp_path)
    bad = rec("k1", termination=TerminationReason.INFRASTRUCTURE_ERROR)
    with pytest.raises(ValueError, match="append_failure"):
        s.append(bad)
    s.append_failure(bad)
    assert s.load() == {}
    assert json.loads((tmp_path / "failures.jsonl").read_text())["key"] == "k1"


def test_torn_last_line_dropped_with_warning_then_appends_stay_valid(tmp_path: Path) -> None:
    s = EpisodeStore(tmp_path)
    s.append(rec("k1"))
    full = rec("k2").model_dump_json().encode()
    with open(tmp_path / "episodes.jsonl", "ab") as f:
        f.write(full[: len(full) // 2])  # a writer killed mid-line
    s2 = EpisodeStore(tmp_path)
    with pytest.warns(TornLineWarning, match="torn last line"):
        assert list(s2.load()) == ["k1"]
    assert s2.append(rec("k2"))
    lines = (tmp_path / "episodes.jsonl").read_bytes().splitlines()
    assert [json.loads(x)["key"] for x in lines] == ["k1", "k2"]


def test_corrupt_middle_line_names_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "episodes.jsonl"
    p.write_bytes(rec("k1").model_dump_json().encode() + b"\n{not json}\n" + rec("k2").model_dump_json().encode() + b"\n")
    with pytest.raises(DataFileError, match=r"episodes.jsonl at line 2: not an episode record"):
        EpisodeStore(tmp_path).load()


def _writer(run_dir: str, worker: int, n: int) -> None:
    s = EpisodeStore(run_dir)
    for i in range(n):
        # Keys overlap between workers on purpose: each key must end up stored once.
        s.append(rec(f"k{i}", task=f"w{worker}"))
        s.append(rec(f"w{worker}-{i}"))


def test_two_processes_writing_one_store(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 40)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    lines = (tmp_path / "episodes.jsonl").read_bytes().splitlines()
    keys = [json.loads(x)["key"] for x in lines]  # every line is whole JSON
    assert len(keys) == len(set(keys)) == 40 + 2 * 40
    assert len(EpisodeStore(tmp_path).load()) == 120


def test_appends_by_others_are_seen_before_writing(tmp_path: Path) -> None:
    a, b = EpisodeStore(tmp_path), EpisodeStore(tmp_path)
    a.load()
    b.load()
    assert a.append(rec("k1"))
    assert not b.append(rec("k1"))  # b re-reads under the lock and sees a's record
    assert "k1" in b


def test_claim_makes_second_worker_wait(tmp_path: Path) -> None:
    s = EpisodeStore(tmp_path)
    order: list[str] = []

    def second() -> None:
        with EpisodeStore(tmp_path).claim("retail/int4"):
            order.append("second")

    with s.claim("retail/int4"):
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.2)
        order.append("first-done")
    t.join(5)
    assert order == ["first-done", "second"]
    with s.claim("retail/bf16", timeout=0):  # another cell is not blocked
        pass


def _key(**over: object) -> str:
    base: dict[str, object] = dict(arm={"label": "int4", "model": "m"}, backend="openai", backend_version="1",
                                   domain="retail", task_id="t0", trial=0, seed=1, max_errors=10, max_steps=200,
                                   user_sim="scripted", prompt="abc", repair="none")
    base.update(over)
    return episode_key(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("field,value", [
    ("arm", {"label": "int4", "model": "m2"}), ("backend", "vllm"), ("backend_version", "2"),
    ("domain", "telecom"), ("task_id", "t1"), ("trial", 1), ("seed", 2), ("max_errors", 2),
    ("max_steps", 100), ("user_sim", "llm"), ("prompt", "abd"), ("repair", "reflexive"),
    ("instrument", "a1b2"), ("task", "c3d4"),
])
def test_every_outcome_input_changes_the_key(field: str, value: object) -> None:
    assert _key(**{field: value}) != _key()


def test_key_is_stable_and_prompt_hash_covers_tools() -> None:
    assert _key() == _key()
    tools = [{"type": "function", "function": {"name": "a"}}]
    assert prompt_hash("p", tools) != prompt_hash("p", [{"type": "function", "function": {"name": "b"}}])
    assert prompt_hash("p", tools) != prompt_hash("q", tools)


def test_records_survive_sigkill_of_the_writer(tmp_path: Path) -> None:
    # Every append is fsynced before append() returns: what the child reported written is there.
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_writer, args=(str(tmp_path), 0, 10_000))
    p.start()
    path = tmp_path / "episodes.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not path.exists() or path.stat().st_size < 20_000):
        time.sleep(0.01)
    os.kill(p.pid, 9)
    p.join(10)
    s = EpisodeStore(tmp_path)
    torn = not path.read_bytes().endswith(b"\n")
    with pytest.warns(TornLineWarning) if torn else contextlib.nullcontext():
        n = len(s.load())
    assert n > 0
    assert s.append(rec("after-kill"))



def test_lookup_by_key_decodes_lazily_and_reports_bad_lines(tmp_path: Path) -> None:
    a = EpisodeStore(tmp_path)
    for i in range(5):
        a.append(rec(f"k{i}", task=f"t{i}"))
    b = EpisodeStore(tmp_path)
    b.refresh()
    assert b.keys() == [f"k{i}" for i in range(5)]
    assert b._parsed == {}  # nothing decoded yet
    got = b.get("k3")
    assert got is not None and got.task_id == "t3" and list(b._parsed) == ["k3"]
    assert b.get("absent") is None
    # A complete line whose key is readable but whose body is broken is corrupt: an error
    # when the store is read, whether or not that key is ever looked up (one rule for every
    # reader: only a last line without its newline is torn).
    with open(tmp_path / "episodes.jsonl", "ab") as f:
        f.write(b'{"schema_version":1,"key":"k9","model":\n')
    c = EpisodeStore(tmp_path)
    with pytest.raises(DataFileError, match="line 6: not an episode record"):
        c.refresh()


def test_append_many_writes_new_keys_once_with_one_fsync(tmp_path: Path, monkeypatch: Any) -> None:
    s = EpisodeStore(tmp_path)
    assert s.append(rec("k1"))
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    # k1 is stored already; k3 twice in one batch is written once (the first).
    flags = s.append_many([rec("k2", "t1"), rec("k1"), rec("k3", "t2"), rec("k3", "t3")])
    assert flags == [True, False, True, False]
    assert len(fsyncs) == 1
    assert s.append_many([rec("k2")]) == [False] and len(fsyncs) == 1  # nothing new: no fsync
    loaded = EpisodeStore(tmp_path).load()
    assert list(loaded) == ["k1", "k2", "k3"] and loaded["k3"].task_id == "t2"
    assert s.get("k3") is not None and s.get("k3").task_id == "t2"  # type: ignore[union-attr]


def test_append_many_refuses_infrastructure_failures_before_writing(tmp_path: Path) -> None:
    s = EpisodeStore(tmp_path)
    with pytest.raises(ValueError, match="append_failure"):
        s.append_many([rec("k1"), rec("k2", termination=TerminationReason.INFRASTRUCTURE_ERROR)])
    assert not (tmp_path / "episodes.jsonl").exists() or not (tmp_path / "episodes.jsonl").read_bytes()


def test_count_lines_counts_complete_lines_after_an_offset(tmp_path: Path) -> None:
    from pytest_quantagent.store.jsonl import count_lines

    p = tmp_path / "episodes.jsonl"
    assert count_lines(p) == 0  # missing file
    p.write_bytes(b'{"a":1}\n\n{"b":2}\n{"c":3}\n{"torn')
    assert count_lines(p) == 3  # the blank line and the torn tail are not records
    assert count_lines(p, offset=len(b'{"a":1}\n')) == 2
    assert count_lines(p, offset=10**6) == 3  # past the end: the file was replaced


def test_store_dir_problem_names_the_path(tmp_path: Path) -> None:
    from pytest_quantagent.store.jsonl import store_dir_problem

    assert store_dir_problem(tmp_path) is None
    assert store_dir_problem(tmp_path / "new" / "store") is None  # created on use
    f = tmp_path / "file"
    f.write_text("x")
    assert store_dir_problem(f) == f"{str(f)!r} is not a directory"
    assert store_dir_problem(f / "store") == (f"the store directory {str(f / 'store')!r} cannot be "
                                              f"created: {str(f)!r} is not a directory")
    if os.geteuid() != 0:  # root writes to read-only files anyway
        (tmp_path / "episodes.jsonl").write_text("")
        (tmp_path / "episodes.jsonl").chmod(0o444)
        assert store_dir_problem(tmp_path) == (f"the store file {str(tmp_path / 'episodes.jsonl')!r} "
                                               "is not writable (permission denied)")

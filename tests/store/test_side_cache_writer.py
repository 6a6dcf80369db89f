"""The side caches' one writer per process (issue 36 item 9): lines queued while another
process holds the file lock are written in one batch when it is released (no polling
thread per line) and fsynced once the queue drains, the event loop runs on meanwhile, two processes appending at once lose
no line and tear none, and a writer's error reaches the waiting caller."""

from __future__ import annotations

import asyncio
import fcntl
import json
import multiprocessing as mp
import os
import threading
from pathlib import Path

import pytest

from pytest_quantagent.runner.judge import JudgeCache
from pytest_quantagent.store.jsonl import appender_for, read_appended_rows


class _OtherProcessLock:
    """``flock`` on the file's lock through a descriptor of its own: to the writer it is
    exactly another process holding the lock."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def release(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def test_lines_queued_behind_a_held_lock_are_one_batch_when_it_is_released(tmp_path: Path) -> None:
    path = tmp_path / "user_turns.jsonl"
    held = _OtherProcessLock(path)
    appender = appender_for(path)
    futures = [appender.submit(json.dumps({"key": f"k{i}"}) + "\n") for i in range(50)]
    # Nothing is written while the other process holds the lock, nothing is resolved.
    assert not path.exists() or path.read_bytes() == b""
    assert not any(f.done() for f in futures)
    held.release()
    for f in futures:
        f.result(timeout=30)
    rows, _ = read_appended_rows(path, 0)
    assert [r["key"] for r in rows] == [f"k{i}" for i in range(50)]  # queue order, none lost
    # The first line may have been taken alone before the others queued: at most 2 batches.
    assert appender.batches <= 2
    # Written for every process at once; fsynced by the writer when its queue drained.
    for _ in range(1000):
        if appender.syncs:
            break
        threading.Event().wait(0.01)
    assert appender.syncs >= 1


def test_the_judge_cache_never_blocks_the_event_loop(tmp_path: Path) -> None:
    """JudgeCache.put used to append under a polling FileLock inside the event loop."""
    path = tmp_path / "judge_verdicts.jsonl"
    cache = JudgeCache(path)
    held = _OtherProcessLock(path)

    async def main() -> int:
        ticks = 0
        task = asyncio.ensure_future(cache.aput("k", True, "ok"))
        for _ in range(20):  # the loop goes on while the append waits for the lock
            await asyncio.sleep(0)
            ticks += 1
        assert not task.done()
        threading.Timer(0.05, held.release).start()
        await task
        return ticks

    assert asyncio.run(main()) == 20
    assert JudgeCache(path).get("k") == {"met": True, "reason": "ok"}


def test_a_write_error_reaches_the_waiting_caller(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(OSError):
        appender_for(blocker / "cache.jsonl").append("{}\n")


def _append_many(path: str, tag: str, n: int) -> None:
    async def main() -> None:
        appender = appender_for(Path(path))
        await asyncio.gather(*(appender.aappend(json.dumps({"key": f"{tag}{i}", "pad": "x" * 300})
                                                + "\n") for i in range(n)))

    asyncio.run(main())


def test_two_processes_appending_at_once_lose_and_tear_no_line(tmp_path: Path) -> None:
    path = tmp_path / "user_turns.jsonl"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_append_many, args=(str(path), tag, 300)) for tag in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    data = path.read_bytes()
    assert data.endswith(b"\n")
    keys = [json.loads(line)["key"] for line in data.splitlines()]  # every line whole JSON
    assert sorted(keys) == sorted(f"{t}{i}" for t in "ab" for i in range(300))

"""The append-only episode store: ``<run dir>/episodes.jsonl``, one record per line.

Guarantees:

- each record is written with one ``write`` of a whole line, then flushed and fsynced, so a
  finished episode survives a crash or SIGKILL of the process right after (records that
  finish together share one fsync: :meth:`EpisodeStore.append_many`, the batch layer's
  group commit);
- one rule for bad lines, shared by every reader (``run``, ``analyze``, pytest; see
  :func:`split_lines`): a last line without its newline is *torn* (the process died
  mid-write) and is dropped with a :class:`TornLineWarning` (and truncated away before the
  next append); a complete line that is not a valid record is *corrupt*, a
  :class:`~pytest_quantagent.errors.DataFileError` naming the file and line, wherever it is;
- any text round-trips: a record holding unpaired UTF-16 surrogates (which UTF-8 cannot
  encode) is written with each one as the six characters ``\\udXXX`` and the flag
  ``lone_surrogates_escaped``;
- writers in several processes (pytest-xdist workers) serialize on a file lock, read what
  the others appended since, and never write a key that is already stored, so the file holds
  each key at most once;
- :meth:`EpisodeStore.claim` gives a per-cell lock: the first worker runs the cell, a second
  waits and then finds the episodes stored.

Infrastructure failures (``termination == infrastructure_error``) are not outcomes: they go to
``failures.jsonl`` (for the record) and the episode is run again on resume.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError, from_json

from pytest_quantagent.errors import DataFileError
from pytest_quantagent.store.records import EpisodeRecord

EPISODES_FILE = "episodes.jsonl"
FAILURES_FILE = "failures.jsonl"


# Records are written by pydantic in field order, so the key sits near the start of each
# line; reading it without decoding the record keeps opening a large store cheap.
_KEY_RE = re.compile(rb'^\{"schema_version":\d+,"key":"([^"\\]+)"')


class TornLineWarning(UserWarning):
    """The store's last line was incomplete (a writer died mid-write) and was dropped."""


def split_lines(data: bytes, first_line: int = 1) -> tuple[list[tuple[int, bytes]], bytes]:
    """The one rule for reading a store: ``data`` → ([(line number, complete line)], torn
    tail). Only bytes after the last newline are a torn line; every complete line must be
    a valid record (the caller raises :class:`DataFileError` otherwise). Blank lines are
    skipped."""
    end = data.rfind(b"\n") + 1
    lines = []
    for i, line in enumerate(data[:end].split(b"\n")[:-1]):
        if line.strip():
            lines.append((first_line + i, line))
    return lines, data[end:]


def read_appended_rows(path: Path, offset: int) -> tuple[list[Any], int]:
    """The JSON values of the complete lines appended to ``path`` since byte ``offset``, and
    the offset to read from next: for the side caches (LLM user turns, judge verdicts), where a
    missing file has no rows, a torn tail waits for its newline and a line that is not JSON is
    skipped (the answer is simply asked again)."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    lines, tail = split_lines(data)
    rows = []
    for _, line in lines:
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows, offset + len(data) - len(tail)


def store_dir_problem(run_dir: str | Path) -> str | None:
    """Why episodes cannot be stored in ``run_dir``, in words naming the path, or None: the
    directory (or, when it does not exist yet, the folder it would be created in) must be a
    writable directory, and the files a run appends to, where they exist, writable files.
    Checked before any episode runs (a read-only store used to fail with a PermissionError
    traceback, also when every episode was stored already)."""
    d = Path(run_dir)
    if d.exists():
        if not d.is_dir():
            return f"{str(d)!r} is not a directory"
        if not os.access(d, os.W_OK | os.X_OK):
            return (f"the store directory {str(d)!r} is not writable (permission denied); a run "
                    "adds episodes and lock files there")
        for name in (EPISODES_FILE, EPISODES_FILE + ".lock", FAILURES_FILE):
            f = d / name
            if f.exists() and not os.access(f, os.W_OK):
                return f"the store file {str(f)!r} is not writable (permission denied)"
        claims = d / "claims"
        if claims.is_dir() and not os.access(claims, os.W_OK | os.X_OK):
            return f"the store's lock folder {str(claims)!r} is not writable (permission denied)"
        return None
    above = next((a for a in d.absolute().parents if a.exists()), None)
    if above is None or not above.is_dir():
        return f"the store directory {str(d)!r} cannot be created: {str(above)!r} is not a directory"
    if not os.access(above, os.W_OK | os.X_OK):
        return (f"the store directory {str(d)!r} cannot be created: {str(above)!r} is not "
                "writable (permission denied)")
    return None


def count_lines(path: Path, offset: int = 0) -> int:
    """The complete, non-blank lines of ``path`` from byte ``offset`` on (:func:`split_lines`'
    rule: a torn tail is not counted), no record decoded; 0 for a missing file. An offset
    past the end (the file was replaced meanwhile) counts from the start."""
    try:
        with open(path, "rb") as f:
            f.seek(offset if offset <= os.fstat(f.fileno()).st_size else 0)
            return sum(1 for raw in f if raw.endswith(b"\n") and raw.strip())
    except OSError:
        return 0


class LineAppender:
    """The one writer of a side cache file (LLM user turns, judge verdicts) in this process.

    Lines handed to :meth:`submit` (from any thread or event loop) queue up; one writer
    thread takes everything queued, locks the file against other processes once for the
    batch (``flock`` on ``<file>.lock``, the lock :class:`filelock.FileLock` takes: the
    kernel wakes a waiter when it is released, no polling), writes the batch with one
    ``write`` and then resolves every line's future: the lines are then in the file for every
    process, and survive this one being killed. The writer fsyncs when its queue is drained
    (and at least every :attr:`SYNC_EVERY_S` under load), off every caller's path. An episode
    awaiting its turn's line waits for one shared write, never on a lock retried every 50 ms
    in a thread pool nor on a disk flush (issue 36 item 9).

    Crash safety is the file's rule (:func:`read_appended_rows`): a writer that dies
    mid-write leaves a torn last line, which readers skip until it is complete. A cache line
    lost to a power cut is asked again. Use :func:`appender_for` (one appender per file and
    process)."""

    SYNC_EVERY_S = 0.5

    def __init__(self, path: Path) -> None:
        import queue

        self.path = path
        self._queue: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._lock = _ProcessLock(str(path) + ".lock")
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self.batches = 0
        """Batches written (each one lock and one write)."""
        self.syncs = 0
        """fsyncs of the file (one per drained queue, or per :attr:`SYNC_EVERY_S`)."""

    def submit(self, line: str) -> Any:
        """Queue one whole ``line`` (ending in a newline); the returned
        :class:`concurrent.futures.Future` is resolved once it is written (or failed)."""
        from concurrent.futures import Future

        fut: Future[None] = Future()
        self._queue.put((line, fut))
        if self._thread is None:
            with self._start:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, daemon=True,
                                                    name=f"quantagent-append-{self.path.name}")
                    self._thread.start()
        return fut

    def append(self, line: str) -> None:
        """Append ``line`` and wait until it is written (raises the write's error)."""
        self.submit(line).result()

    async def aappend(self, line: str) -> None:
        """:meth:`append` for the event loop: awaits the batch's write, no thread blocked."""
        import asyncio

        await asyncio.wrap_future(self.submit(line))

    def _run(self) -> None:
        import queue
        import time

        unsynced_since: float | None = None
        while True:
            if unsynced_since is not None and (
                    self._queue.empty() or time.monotonic() - unsynced_since > self.SYNC_EVERY_S):
                self._sync()
                unsynced_since = None
            batch = [self._queue.get()]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._write("".join(line for line, _ in batch))
            except Exception as e:  # every waiter of the batch gets the error
                for _, fut in batch:
                    fut.set_exception(e)
                continue
            if unsynced_since is None:
                unsynced_since = time.monotonic()
            for _, fut in batch:
                fut.set_result(None)

    def _write(self, data: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(data)
            f.flush()
        self.batches += 1

    def _sync(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return  # removed meanwhile: nothing of ours to flush
        try:
            os.fsync(fd)
            self.syncs += 1
        except OSError:
            pass
        finally:
            os.close(fd)


_APPENDERS: dict[tuple[int, str], LineAppender] = {}
_APPENDERS_LOCK = threading.Lock()


def appender_for(path: Path) -> LineAppender:
    """This process's one :class:`LineAppender` of ``path`` (a forked child gets its own)."""
    key = (os.getpid(), os.path.abspath(path))
    with _APPENDERS_LOCK:
        got = _APPENDERS.get(key)
        if got is None:
            got = _APPENDERS[key] = LineAppender(Path(path))
        return got


def append_line_locked(path: Path, line: str) -> None:
    """Append one whole ``line`` to ``path``, locked against other processes, through the
    file's one writer (:func:`appender_for`, which fsyncs off the caller's path); returns
    once it is written (the side caches' write; processes sharing a store may append at
    once)."""
    appender_for(path).append(line)


async def aappend_line_locked(path: Path, line: str) -> None:
    """:func:`append_line_locked` for the event loop (awaits the writer's batch write)."""
    await appender_for(path).aappend(line)


def iter_store_lines(path: str | Path, warn: Any = None) -> Iterator[tuple[int, bytes]]:
    """Stream (line number, line) of a store file with :func:`split_lines`' rule: a torn
    last line is reported through ``warn(message)`` (default: a :class:`TornLineWarning`)
    and skipped. Validating each line is the caller's (a bad one is corrupt)."""
    lineno = 0
    last: bytes | None = None
    with open(path, "rb") as f:
        for raw in f:
            lineno += 1
            if not raw.endswith(b"\n"):
                last = raw
                break
            if raw.strip():
                yield lineno, raw
    if last is not None:
        msg = (f"{path}: skipped a torn last line (line {lineno}, {len(last)} bytes without "
               "a newline: a writer died mid-write)")
        if warn is None:
            warnings.warn(msg, TornLineWarning, stacklevel=2)
        else:
            warn(msg)


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _escape_surrogates(obj: Any) -> Any:
    if isinstance(obj, str):
        return _SURROGATE_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", obj)
    if isinstance(obj, dict):
        return {_escape_surrogates(k): _escape_surrogates(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_escape_surrogates(v) for v in obj]
    return obj


def record_line(record: EpisodeRecord) -> tuple[bytes, EpisodeRecord]:
    """The record as one JSON line, and the record that line holds. Text UTF-8 cannot hold
    (unpaired surrogates, e.g. a model reply ``"broken \\ud83d text"``) is escaped and the
    record flagged, never lost."""
    try:
        return record.model_dump_json().encode() + b"\n", record
    except (PydanticSerializationError, UnicodeEncodeError):
        data = _escape_surrogates(record.model_dump(mode="json"))
        flags = list(data.get("flags") or [])
        if "lone_surrogates_escaped" not in flags:
            flags.append("lone_surrogates_escaped")
        data["flags"] = flags
        clean = EpisodeRecord.model_validate(data)
        return clean.model_dump_json().encode() + b"\n", clean


class _ProcessLock:
    """An exclusive lock between processes on ``path``: ``flock`` on a descriptor kept open
    for the store's lifetime (two system calls per use), or :class:`filelock.FileLock`
    where ``fcntl`` does not exist. Not a lock between threads: pair it with one.

    A forked child gets a descriptor of its own: an inherited one shares the parent's lock
    (``flock`` belongs to the open file, not the process) and would not exclude it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._pid = 0
        self._fallback: FileLock | None = None
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            self._fallback = FileLock(path)
            return
        self._fcntl: Any = fcntl

    def __enter__(self) -> None:
        if self._fallback is not None:  # pragma: no cover - Windows
            self._fallback.acquire()
            return
        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            self._pid = os.getpid()
        self._fcntl.flock(self._fd, self._fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        if self._fallback is not None:  # pragma: no cover - Windows
            self._fallback.release()
            return
        assert self._fd is not None
        self._fcntl.flock(self._fd, self._fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()


class EpisodeStore:
    """Append-only JSONL store of :class:`EpisodeRecord` for one run directory."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / EPISODES_FILE
        self.failures_path = self.run_dir / FAILURES_FILE
        self._flock = _ProcessLock(str(self.path) + ".lock")
        self._tlock = threading.Lock()
        self._index: dict[str, tuple[int, int, int]] = {}
        """key → (byte offset, length, line number) of its line."""
        self._parsed: dict[str, EpisodeRecord] = {}
        self._offset = 0
        self._line_no = 0
        self._fd: int | None = None
        """Append descriptor (O_APPEND), reopened if the file was replaced."""
        self._path_ino: int | None = None

    # -- reading -----------------------------------------------------------------------

    def _read_new(self, repair: bool) -> None:
        """Index lines appended since the last read. With ``repair`` (file lock held: no
        writer is mid-write), an unterminated tail is torn: warn and truncate it."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._offset = 0
            self._path_ino = None
            return
        size, self._path_ino = st.st_size, st.st_ino
        if size < self._offset:
            raise DataFileError(self.path, "", "the store shrank while open (edited by hand?)")
        if size == self._offset:
            return
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read(size - self._offset)
        end = data.rfind(b"\n") + 1
        complete, tail = data[:end], data[end:]
        pos = self._offset
        for line in complete.split(b"\n")[:-1]:
            self._line_no += 1
            start, pos = pos, pos + len(line) + 1
            if not line.strip():
                continue
            m = _KEY_RE.match(line)
            if m is not None:
                # The fast path reads the key without decoding the record; the line must
                # still be one whole JSON object (a corrupt line is an error wherever it is,
                # the same rule as every other reader's).
                try:
                    from_json(line)
                except ValueError as e:
                    raise DataFileError(self.path, f"line {self._line_no}",
                                        f"not an episode record (corrupt line): {e}") from None
                key = m.group(1).decode()
            else:
                rec = self._parse(line, self._line_no)
                key = rec.key
                self._parsed.setdefault(key, rec)
            self._index.setdefault(key, (start, len(line), self._line_no))
        self._offset += end
        if tail and repair:
            warnings.warn(
                f"{self.path}: dropping a torn last line ({len(tail)} bytes, a writer died "
                "mid-write); that episode will be run again",
                TornLineWarning,
                stacklevel=3,
            )
            with open(self.path, "r+b") as f:
                f.truncate(self._offset)
                f.flush()
                os.fsync(f.fileno())

    def _parse(self, line: bytes, line_no: int) -> EpisodeRecord:
        try:
            return EpisodeRecord.model_validate_json(line)
        except ValidationError as e:
            raise DataFileError(self.path, f"line {line_no}", f"not an episode record: {e}") from None

    def refresh(self) -> None:
        """Index what was appended since (by any process); drop a torn last line."""
        with self._tlock, self._flock:
            self._read_new(repair=True)

    def get(self, key: str) -> EpisodeRecord | None:
        """The stored record with this key (decoded on first access), or None."""
        rec = self._parsed.get(key)
        if rec is not None:
            return rec
        where = self._index.get(key)
        if where is None:
            return None
        start, length, line_no = where
        with open(self.path, "rb") as f:
            f.seek(start)
            rec = self._parse(f.read(length), line_no)
        if rec.key != key:
            raise DataFileError(self.path, f"line {line_no}", "the store changed under its index")
        self._parsed[key] = rec
        return rec

    def load(self) -> dict[str, EpisodeRecord]:
        """Every stored record by key, in file order (a torn last line is dropped with a
        warning). Decodes every record: prefer :meth:`refresh` + :meth:`get` for lookups."""
        self.refresh()
        out: dict[str, EpisodeRecord] = {}
        for key in list(self._index):
            rec = self.get(key)
            assert rec is not None
            out[key] = rec
        return out

    def records(self) -> list[EpisodeRecord]:
        """Stored records in file order."""
        return list(self.load().values())

    def keys(self) -> list[str]:
        """Keys indexed so far (call :meth:`refresh` first to see other writers)."""
        return list(self._index)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __len__(self) -> int:
        return len(self._index)

    # -- writing -----------------------------------------------------------------------

    def append(self, record: EpisodeRecord) -> bool:
        """Append ``record`` durably unless its key is already stored (by anyone).

        Returns True when written. Blocking (fsync): call it from a worker thread in async
        code. Infrastructure-failure records are refused: use :meth:`append_failure`.
        """
        return self.append_many([record])[0]

    def append_many(self, records: list[EpisodeRecord]) -> list[bool]:
        """Append each record durably unless its key is already stored (by anyone, or earlier
        in ``records``); one flag per record, True when written. The lines are written one
        after another and fsynced once (group commit): when this returns, every written
        record is on disk, as with :meth:`append` each. Blocking: call it from a worker
        thread in async code."""
        for record in records:
            if not record.scored:
                raise ValueError(
                    f"episode {record.task_id}/trial {record.trial}: infrastructure failures are "
                    "not stored as outcomes; use append_failure()"
                )
        lines = [record_line(r) for r in records]
        written: list[bool] = []
        with self._tlock, self._flock:
            self._read_new(repair=True)
            new: list[tuple[bytes, EpisodeRecord]] = []
            keys: set[str] = set()
            for line, record in lines:
                fresh = record.key not in self._index and record.key not in keys
                written.append(fresh)
                if fresh:
                    keys.add(record.key)
                    new.append((line, record))
            if not new:
                return written
            fd = self._append_fd()
            for line, _ in new:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view):]
            os.fsync(fd)
            for line, record in new:
                self._line_no += 1
                self._index[record.key] = (self._offset, len(line) - 1, self._line_no)
                self._parsed[record.key] = record  # what the line holds (escaped if need be)
                self._offset += len(line)
        return written

    def _append_fd(self) -> int:
        """The append descriptor, (re)opened when missing or when the path now names
        another file (call with the locks held, after :meth:`_read_new`)."""
        if self._fd is not None and (self._path_ino is None or os.fstat(self._fd).st_ino != self._path_ino):
            os.close(self._fd)
            self._fd = None
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self._fd

    def close(self) -> None:
        """Close the descriptors this store keeps open (it reopens them if used again)."""
        with self._tlock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._flock.close()

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)

    def append_failure(self, record: EpisodeRecord) -> None:
        """Log an infrastructure failure or a task error to ``failures.jsonl`` (never read
        as an outcome)."""
        line, _ = record_line(record)
        with self._tlock, self._flock, open(self.failures_path, "ab") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    # -- coordination ------------------------------------------------------------------

    def claim(self, cell_id: str, timeout: float = -1) -> FileLock:
        """A lock for one cell (e.g. ``"retail/int4"``), to use as a context manager::

            with store.claim("retail/int4"):
                records = await run_arm(...)   # the 2nd worker waits, then finds all stored

        ``timeout`` seconds (-1 = wait forever) before ``filelock.Timeout``.
        """
        digest = hashlib.sha256(cell_id.encode()).hexdigest()[:16]
        claims = self.run_dir / "claims"
        claims.mkdir(exist_ok=True)
        return FileLock(str(claims / f"{digest}.lock"), timeout=timeout)

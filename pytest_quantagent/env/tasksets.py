"""Task sets by name: which task file of a τ²-bench data folder holds a split, streamed task
files, and task-selection errors that name the few closest ids.

τ²-bench keeps a domain's tasks in ``data/tau2/domains/<domain>/tasks.json`` and its splits
in ``split_tasks.json`` (split name → task ids). Since 1.0 the splits are ``base`` (the old
``train`` + ``test``), ``train``, ``test`` and, for telecom, ``small`` (20) and ``full``
(2,285 generated tasks); telecom's ``tasks.json`` at HEAD is the full set, and older or
trimmed checkouts carry other task files (``tasks_small.json``, ``tasks_full.json``, the
original release's 114 base tasks). :func:`tasks_file_for_split` picks the first task file
whose ids hold the whole split, so ``split:small`` works where only ``tasks_small.json`` is
present and ``split:full`` fails naming the missing ``tasks.json``.

Task files are read with ijson one task at a time (:func:`iter_task_items`), so a file of
thousands of generated tasks is never held as one decoded JSON document.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pytest_quantagent.errors import DataFileError, UnknownNameError

SPLIT_FILE = "split_tasks.json"
DEFAULT_TASKS_FILE = "tasks.json"
#: Task files looked for, in this order, before any other ``tasks*.json`` of the folder.
PREFERRED_TASK_FILES: tuple[str, ...] = ("tasks.json", "tasks_full.json", "tasks_small.json")
#: Splits τ²-bench defines (retail/airline: base, train, test; telecom adds small, full).
TAU2_SPLITS: tuple[str, ...] = ("base", "train", "test", "small", "full")
#: How many close ids an unknown-id error names.
N_CLOSEST = 5


class UnknownTaskError(UnknownNameError):
    """An unknown task id or split: names the few closest known ones, not all of them."""

    def __init__(self, kind: str, value: str, known: Iterable[str], where: str) -> None:
        known_list = list(known)
        super().__init__(kind, value, known_list)
        close = closest(value, known_list)
        if kind.endswith("split"):
            msg = f"unknown {kind} {value!r}; known splits: {', '.join(sorted(known_list)) or '(none)'}"
        else:
            near = f"closest: {', '.join(close)}" if close else "no close match"
            msg = f"unknown {kind} {value!r} ({near}; {len(known_list)} task ids in {where})"
        self.args = (msg,)

    def __str__(self) -> str:
        return str(self.args[0])


def closest(value: str, known: Sequence[str], n: int = N_CLOSEST) -> list[str]:
    """The ``n`` known names closest to ``value`` (difflib's ratio; ties in known order).
    Numeric ids (τ²-bench's ``"0".."113"``) are compared by number as well, so ``"1130"``
    suggests ``"113"``."""
    out = difflib.get_close_matches(value, list(known), n=n, cutoff=0.5)
    if value.isdigit():
        nums = sorted((abs(int(k) - int(value)), k) for k in known if k.isdigit())
        out = list(dict.fromkeys([*out, *(k for _, k in nums[:n])]))[:n]
    return out


def check_task_ids(domain: str, ids: Iterable[str], known: Sequence[str]) -> None:
    """Raise :class:`UnknownTaskError` for the first id not in ``known``."""
    have = set(known)
    for tid in ids:
        if tid not in have:
            raise UnknownTaskError(f"{domain} task id", tid, known, f"domain {domain!r}")


def check_split(domain: str, split: str, splits: dict[str, list[str]], source: str = "") -> None:
    """Raise :class:`UnknownTaskError` when ``split`` is not one of ``splits``."""
    if split not in splits:
        err = UnknownTaskError(f"{domain} task split", split, splits, source)
        if not splits:
            err.args = (f"unknown {domain} task split {split!r}: the domain has no splits"
                        + (f" ({source})" if source else ""),)
        raise err


# --------------------------------------------------------------------------- task files


def _ijson() -> Any:
    import ijson

    return ijson


def iter_task_items(path: Path) -> Iterator[dict[str, Any]]:
    """The raw task objects of a task file, one at a time (ijson). A file that is a JSON
    object with a ``tasks`` list (a form τ²-bench's loader accepts) is read from that list.
    Broken JSON is a :class:`DataFileError` naming the file and the task index."""
    ijson = _ijson()
    with path.open("rb") as f:
        head = f.read(4096).lstrip()
    prefix = "tasks.item" if head.startswith(b"{") else "item"
    i = -1
    try:
        with path.open("rb") as f:
            for i, item in enumerate(ijson.items(f, prefix, use_float=True)):  # noqa: B007
                yield item
    except ijson.JSONError as e:
        where = f"tasks[{i + 1}]" if prefix == "tasks.item" else f"[{i + 1}]"
        raise DataFileError(path, where, f"invalid JSON: {str(e).splitlines()[0]}") from None


_ID_CACHE: dict[tuple[str, int, int], list[str]] = {}


def task_file_ids(path: Path) -> list[str]:
    """The task ids of a task file, in order (streamed; cached by path, size and mtime)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    ids = _ID_CACHE.get(key)
    if ids is None:
        ids = [str(t.get("id")) if isinstance(t, dict) else f"#{i}"
               for i, t in enumerate(iter_task_items(path))]
        _ID_CACHE[key] = ids
    return ids


def read_split_file(path: Path) -> dict[str, list[str]]:
    """A ``split_tasks.json`` as split name → ids (no check against a task file)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataFileError(path, "", "file not found") from None
    except json.JSONDecodeError as e:
        raise DataFileError(path, f"line {e.lineno} column {e.colno}", f"invalid JSON: {e.msg}") from None
    if not isinstance(raw, dict):
        raise DataFileError(path, "", "expected an object mapping split names to lists of task ids")
    out: dict[str, list[str]] = {}
    for name, ids in raw.items():
        if not isinstance(ids, list):
            raise DataFileError(path, f"split {name!r}", "expected a list of task ids")
        out[str(name)] = [str(x) for x in ids]
    return out


def candidate_task_files(data_dir: Path) -> list[Path]:
    """The task files of a τ²-bench domain folder, preferred ones first."""
    found = [data_dir / n for n in PREFERRED_TASK_FILES if (data_dir / n).is_file()]
    rest = sorted(p for p in data_dir.glob("tasks*.json") if p not in found)
    return found + rest


def tasks_file_for_split(data_dir: Path, split: str | None, domain: str = "") -> str | None:
    """The name of the task file of ``data_dir`` to load for ``split`` (None: all tasks).

    ``None`` means the default ``tasks.json``. Without a split, a folder lacking
    ``tasks.json`` falls back to the file holding split ``base``. Raises
    :class:`UnknownTaskError` for a split ``split_tasks.json`` does not define and
    :class:`DataFileError` naming the missing file when no task file holds the split."""
    data_dir = Path(data_dir)
    split_path = data_dir / SPLIT_FILE
    if split is None:
        if (data_dir / DEFAULT_TASKS_FILE).is_file() or not split_path.is_file():
            return None
        split = "base"
    splits = read_split_file(split_path) if split_path.is_file() else {}
    if split not in splits:
        if not splits:
            raise DataFileError(split_path, "", f"file not found: split {split!r} needs it")
        check_split(domain or data_dir.name, split, splits, str(split_path))
    want = set(splits[split])
    present: list[str] = []
    for path in candidate_task_files(data_dir):
        ids = task_file_ids(path)
        if want <= set(ids):
            return None if path.name == DEFAULT_TASKS_FILE else path.name
        present.append(f"{path.name} ({len(ids)} tasks)")
    missing = data_dir / DEFAULT_TASKS_FILE
    raise DataFileError(
        missing, "",
        f"file not found: split {split!r} of {split_path.name} has {len(want)} task ids and no "
        f"task file here holds them all (τ²-bench keeps them in {DEFAULT_TASKS_FILE}; present: "
        f"{', '.join(present) or 'none'})",
    )



def tau2_data_root(p: Path) -> Path:
    """The folder holding ``domains/``: ``p`` itself, or ``p/data/tau2`` for a τ²-bench
    checkout's root."""
    if not (p / "domains").is_dir() and (p / "data" / "tau2" / "domains").is_dir():
        return p / "data" / "tau2"
    return p


def tau2_data_arg(option: str) -> Callable[[str], Path]:
    """An argparse ``type=`` for a τ²-bench data folder: a checkout's root or its
    ``data/tau2`` folder (anything holding ``domains/``) → the folder holding ``domains/``."""
    import argparse

    def parse(value: str) -> Path:
        p = Path(str(value).strip())
        if (p / "domains").is_dir():
            return p
        if (p / "data" / "tau2" / "domains").is_dir():
            return p / "data" / "tau2"
        why = "no such directory" if not p.is_dir() else "it has no domains/ nor data/tau2/domains/"
        raise argparse.ArgumentTypeError(
            f"{option}: invalid value {value!r} ({why}); allowed: a τ²-bench checkout or its "
            "data/tau2 folder (the one holding domains/<domain>/)"
        )

    parse.__name__ = f"parse {option}"
    return parse

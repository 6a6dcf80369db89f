"""Where the simulations of a τ²-bench results path come from: layout detection and
streaming.

- ``json``: one object ``{"timestamp", "info", "tasks", "simulations": [...]}``, streamed
  with ijson one simulation at a time;
- ``dir``: ``results.json`` (metadata, ``simulation_index``) beside ``simulations/<id>.json``.

Every failure is a :class:`DataFileError` naming the file and the JSON location.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

from pytest_quantagent.errors import DataFileError, MissingDependencyError

SIMULATIONS_DIR = "simulations"
RESULTS_FILE = "results.json"

#: Deepest nesting (objects and arrays) accepted in a results file. A τ²-bench file's own
#: structure is 6-8 levels deep; the rest is room for tool arguments and results. Deeper
#: files are refused before they are parsed (ijson's memory grows with the square of the
#: depth: 10⁶ levels took 7.7 GB).
MAX_RESULTS_DEPTH = 256
_SCAN_BLOCK = 1 << 18
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRUCTURAL = b'"[]{}:,'

Format = Literal["json", "dir"]

Simulations = Iterator[tuple[str, dict[str, Any]]]
"""(location, simulation dict) pairs; the location names the simulation in errors."""


def open_results(p: Path) -> tuple[Format, Path, dict[str, Any], Simulations]:
    """Detect the layout of ``p`` and return (format, metadata file, info, simulations).

    ``info`` is read first (for a monolithic file, by a scan that stops at ``info``);
    simulations are then yielded one at a time.
    """
    if not p.exists():
        raise DataFileError(p, "", "no such file or directory")
    fmt, meta_path, sims_dir = _layout(p)
    if fmt == "json":
        shape = check_shape(meta_path)
        if shape.top_keys:
            dup = sorted({k for k in shape.top_keys if shape.top_keys.count(k) > 1})
            if dup:
                raise DataFileError(
                    meta_path, dup[0],
                    f"top-level key {dup[0]!r} appears {shape.top_keys.count(dup[0])} times; "
                    "json and tau2-bench would keep only the last, a streaming reader would "
                    "see them all: refused (write the file with one of each key)")
            kind = shape.value_kinds.get("simulations")
            if kind is not None and kind != "list":
                raise DataFileError(meta_path, "simulations",
                                    f"expected a list of simulations, got {kind}")
        return fmt, meta_path, _stream_info(meta_path), _stream_simulations(meta_path)
    meta = _load_json(meta_path)
    info = _require_info(meta_path, meta)
    return fmt, meta_path, info, _dir_simulations(meta_path, meta, sims_dir)


@dataclass
class Shape:
    """What a pass over a JSON file's structural bytes found: the top-level object's keys
    (in order, as written with their escape sequences dropped, at most 200 bytes each;
    empty when the top level is not an object) and the kind of each key's value
    (``list``, ``object``, ``string``, or ``null or a number or boolean``)."""

    top_keys: list[str] = field(default_factory=list)
    value_kinds: dict[str, str] = field(default_factory=dict)


_KINDS = {ord("["): "list", ord("{"): "object", ord('"'): "string"}
_SCALAR = "null, a number or a boolean"


def check_shape(path: Path, max_depth: int = MAX_RESULTS_DEPTH) -> Shape:
    """Refuse a file nested deeper than ``max_depth`` (:class:`DataFileError`, one line)
    and return its top-level :class:`Shape`, in one streaming pass at C speed: escape pairs
    are dropped (``re``), only the bytes ``"[]{}:,`` kept (``bytes.translate``), and the
    depth outside strings is a cumulative sum over those (numpy). Memory: one block.
    Invalid JSON is not diagnosed here (the parser does that, with its location)."""
    import numpy as np

    table = np.zeros(256, dtype=bool)
    table[list(_STRUCTURAL)] = True
    depth, in_string, carry, offset = 0, 0, b"", 0
    shape = Shape()
    # The top level's tokens, read by a small state machine across blocks.
    expect, key, key_parts, in_value_string, start = "start", "", bytearray(), False, 0
    with path.open("rb") as f:
        while True:
            block = f.read(_SCAN_BLOCK)
            if not block:
                break
            data = _ESCAPE.sub(b"", carry + block)
            carry = b""
            if data.endswith(b"\\"):  # an escape pair cut by the block's end
                data, carry = data[:-1], b"\\"
            arr = np.frombuffer(data, dtype=np.uint8)
            pos = np.flatnonzero(table[arr])
            if not len(pos):
                if expect == "key_text" and len(key_parts) < 200:
                    key_parts += data[start:][:200]
                start = 0
                offset += len(block)
                continue
            k = arr[pos]
            quote = k == 34
            inside = (np.cumsum(quote) + in_string) & 1  # the string state after each byte
            outside = ~quote & (inside == 0)
            delta = np.zeros(len(k), dtype=np.int64)
            delta[outside & ((k == 91) | (k == 123))] = 1
            delta[outside & ((k == 93) | (k == 125))] = -1
            after = depth + np.cumsum(delta)
            if int(after.max()) > max_depth:
                at = int(np.argmax(after > max_depth))
                raise DataFileError(path, f"near byte {offset + int(pos[at])}",
                                    f"JSON nested deeper than {max_depth} levels: refused "
                                    "(no tau2-bench results file nests like that)")
            before = after - delta
            # Top-level tokens: quotes at depth 1 and structural bytes outside strings at
            # depth 1 (or the top level's own braces).
            top = np.flatnonzero((quote & (after == 1)) | (outside & ((before <= 1) & (after <= 1)
                                                                     | (before == 1))))
            for i in top.tolist():
                c = int(k[i])
                if expect == "start":
                    if c != 123:
                        expect = "done"  # not an object: the reader says so
                        break
                    expect = "key"
                elif expect == "key":
                    if c == 34:
                        expect, key_parts, start = "key_text", bytearray(), int(pos[i]) + 1
                    elif c == 125:
                        expect = "done"
                elif expect == "key_text":
                    if c == 34:
                        key_parts += data[start:int(pos[i])][:200]
                        key = key_parts.decode("utf-8", "replace")
                        shape.top_keys.append(key)
                        expect = "colon"
                elif expect == "colon":
                    expect = "value" if c == 58 else "key"
                elif expect == "value":
                    shape.value_kinds.setdefault(key, _KINDS.get(c, _SCALAR))
                    expect, in_value_string = "after", c == 34
                    if c == 44:
                        expect = "key"
                    elif c == 125:
                        expect = "done"
                elif expect == "after":
                    if c == 34:
                        in_value_string = not in_value_string
                    elif c == 44 and not in_value_string:
                        expect = "key"
                    elif c == 125 and not in_value_string:
                        expect = "done"
            if expect == "key_text" and len(key_parts) < 200:
                key_parts += data[start:][:200]  # the rest of the key is in the next block
            start = 0
            depth, in_string = int(after[-1]), int(inside[-1])
            offset += len(block)
    return shape


def _layout(p: Path) -> tuple[Format, Path, Path]:
    if p.is_dir():
        meta = p / RESULTS_FILE
        if not meta.is_file():
            raise DataFileError(
                p,
                "",
                f"a directory given as a tau2-bench results path must hold "
                f"{RESULTS_FILE} (and {SIMULATIONS_DIR}/); found neither",
            )
        return "dir", meta, p / SIMULATIONS_DIR
    sims_dir = p.parent / SIMULATIONS_DIR
    # τ²-bench's own rule is "a sibling simulations/ folder means dir format"; a monolithic
    # file that happens to sit beside such a folder still carries its own simulations, so
    # the folder is used only when the file is a dir-format metadata file.
    if sims_dir.is_dir() and _is_dir_metadata(p):
        return "dir", p, sims_dir
    return "json", p, sims_dir


def _is_dir_metadata(p: Path) -> bool:
    try:
        meta = _load_json(p)
    except DataFileError:
        return False
    return isinstance(meta, dict) and (
        "simulation_index" in meta or "format_version" in meta or not meta.get("simulations")
    )


def _ijson() -> Any:
    try:
        import ijson
    except ImportError as e:  # pragma: no cover - ijson is a core dependency
        raise MissingDependencyError("streaming tau2-bench results files", "tau2", ["ijson"]) from e
    return ijson


class _Tracker:
    """Wraps ijson's event stream to know where in the document the parser is."""

    def __init__(self, events: Iterator[tuple[str, str, Any]]) -> None:
        self._events = events
        self.top_keys: list[str] = []
        self.top_is_map: bool | None = None
        self.sim = -1
        self.msg = -1
        self.prefix = ""

    def __iter__(self) -> Iterator[tuple[str, str, Any]]:
        for prefix, event, value in self._events:
            self.prefix = prefix
            if prefix == "":
                if self.top_is_map is None:
                    self.top_is_map = event == "start_map"
                    if not self.top_is_map:
                        return
                if event == "map_key":
                    self.top_keys.append(value)
            elif event == "start_map":
                if prefix == "simulations.item":
                    self.sim += 1
                    self.msg = -1
                elif prefix == "simulations.item.messages.item":
                    self.msg += 1
            yield prefix, event, value

    def location(self) -> str:
        if self.prefix.startswith("simulations") and self.sim >= 0:
            loc = f"simulations[{self.sim}]"
            if self.prefix.startswith("simulations.item.messages") and self.msg >= 0:
                loc += f".messages[{self.msg}]"
            return loc
        if self.top_keys:
            return self.top_keys[-1]
        return "top level"


class _CountingReader:
    """A binary file that remembers how many bytes the parser has pulled (error offsets)."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.pos = 0

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.pos += len(data)
        return data


def _parse_error(
    path: Path, tracker: _Tracker, reader: _CountingReader, exc: Exception
) -> DataFileError:
    if reader.pos == 0:
        return DataFileError(path, "top level", "empty file: not a tau2-bench results file")
    # ijson raises IncompleteJSONError for every failure; yajl says "premature EOF" when the
    # text simply stops (a truncated download or an interrupted write).
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "premature EOF" in first_line:
        problem = "truncated JSON (the file ends inside this value)"
    else:
        problem = f"invalid JSON ({first_line})"
    return DataFileError(path, f"{tracker.location()} (near byte {reader.pos})", problem)


def _scan(path: Path) -> tuple[_Tracker, DataFileError | None]:
    """Walk the whole document with the position tracker.

    Slow (a Python step per JSON event), so it runs only to diagnose a file the fast C
    path refused: it finds the top-level shape and the JSON location of a parse error.
    """
    ijson = _ijson()
    with path.open("rb") as f:
        reader = _CountingReader(f)
        tracker = _Tracker(ijson.parse(reader, use_float=True))
        try:
            for _ in tracker:
                pass
        except ijson.JSONError as e:
            return tracker, _parse_error(path, tracker, reader, e)
    return tracker, None


def _stream_info(path: Path) -> dict[str, Any]:
    ijson = _ijson()
    try:
        with path.open("rb") as f:
            for info in ijson.items(f, "info", use_float=True):
                if not isinstance(info, dict):
                    raise DataFileError(
                        path, "info", f"expected an object, got {type(info).__name__}"
                    )
                # τ²-bench writes info before simulations: stop reading here
                return info
    except ijson.JSONError:
        pass  # diagnosed by the scan below
    tracker, error = _scan(path)
    if error is not None:
        raise error
    if tracker.top_is_map is False:
        raise DataFileError(
            path,
            "top level",
            "not a tau2-bench results file: expected a JSON object with 'info' and 'simulations'",
        )
    if tracker.top_is_map is None:
        raise DataFileError(path, "top level", "empty file: not a tau2-bench results file")
    raise DataFileError(
        path,
        "info",
        "not a tau2-bench results file: no top-level 'info' "
        f"object (top-level keys: {', '.join(tracker.top_keys) or 'none'})",
    )


def _stream_simulations(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    ijson = _ijson()
    i = 0
    try:
        with path.open("rb") as f:
            for sim in ijson.items(f, "simulations.item", use_float=True):
                loc = f"simulations[{i}]"
                if not isinstance(sim, dict):
                    raise DataFileError(
                        path, loc, f"expected a simulation object, got {type(sim).__name__}"
                    )
                yield loc, sim
                i += 1
    except ijson.JSONError as e:
        _, error = _scan(path)
        raise (error or DataFileError(path, f"simulations[{i}]", f"invalid JSON ({e})")) from None
    if i == 0:
        tracker, error = _scan(path)
        if error is not None:
            raise error
        if "simulations" not in tracker.top_keys:
            raise DataFileError(
                path,
                "simulations",
                "not a tau2-bench results file: no "
                "top-level 'simulations' list (and no simulations/ folder)",
            )


def _load_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DataFileError(path, "", f"cannot read: {e}") from None
    check_shape(path)  # nesting bounded before json recurses
    try:
        return json.loads(text)
    except RecursionError:
        raise DataFileError(path, "", f"JSON nested deeper than {MAX_RESULTS_DEPTH} levels") from None
    except json.JSONDecodeError as e:
        # json reports a cut-off file either at its last character or, inside a string,
        # as an unterminated string.
        cut = e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string")
        kind = "truncated JSON" if cut else "invalid JSON"
        raise DataFileError(
            path, f"line {e.lineno} column {e.colno} (byte {e.pos})", f"{kind}: {e.msg}"
        ) from None


def _require_info(path: Path, meta: Any) -> dict[str, Any]:
    if not isinstance(meta, dict):
        raise DataFileError(
            path,
            "top level",
            f"not a tau2-bench results file: expected a JSON object, got {type(meta).__name__}",
        )
    info = meta.get("info")
    if not isinstance(info, dict):
        raise DataFileError(
            path, "info", "not a tau2-bench results file: no top-level 'info' object"
        )
    return info


def _dir_simulations(
    meta_path: Path, meta: dict[str, Any], sims_dir: Path
) -> Iterator[tuple[str, dict[str, Any]]]:
    if not sims_dir.is_dir():
        raise DataFileError(
            sims_dir,
            "",
            f"directory-format results need a {SIMULATIONS_DIR}/ folder beside {meta_path.name}",
        )
    on_disk = {f.stem: f for f in sims_dir.glob("*.json")}
    index = meta.get("simulation_index")
    if isinstance(index, list):
        ids = [str(e.get("id")) for e in index if isinstance(e, dict)]
        missing = [i for i in ids if i not in on_disk]
        if missing:
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise DataFileError(
                meta_path,
                "simulation_index",
                f"{len(missing)} simulation file(s) listed but missing from {sims_dir}: {shown}",
            )
        extra = sorted(set(on_disk) - set(ids))
        order = ids + extra
    else:
        order = sorted(on_disk)
    for sim_id in order:
        f = on_disk[sim_id]
        sim = _load_json(f)
        if not isinstance(sim, dict):
            raise DataFileError(
                f, "top level", f"expected a simulation object, got {type(sim).__name__}"
            )
        yield f"{SIMULATIONS_DIR}/{f.name}", sim

"""The JSON codec of the OpenAI-compatible backend's requests and responses.

orjson when it imports (extra "fast": less harness CPU per model call, see docs/GPU.md), else
the standard library's; ``QUANTAGENT_JSON=std`` in the environment keeps the standard
library's. Both produce the same JSON text up to float formatting. Callers read
:data:`dumps` and :data:`loads` through the module (``json_codec.dumps(...)``), so that
:func:`use_json` switches every caller.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, cast

from pytest_quantagent.vocab.limits import JSONDepthError


def _std_dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _std_loads(data: bytes) -> Any:
    try:
        return json.loads(data)
    except RecursionError:  # nested past the interpreter's stack: the server's garbage
        raise JSONDepthError("response nested too deep for the JSON parser") from None


_orjson: Any = None
try:  # optional (extra "fast"): less harness CPU per model call, see docs/GPU.md
    import importlib

    _orjson = importlib.import_module("orjson")
except ImportError:  # pragma: no cover - depends on the environment
    pass


def _fast_dumps(obj: Any) -> bytes:
    try:
        return cast(bytes, _orjson.dumps(obj))
    except TypeError:  # a lone surrogate, a non-string key, a huge int: json's rules
        return _std_dumps(obj)


def _fast_loads(data: bytes) -> Any:
    try:
        return _orjson.loads(data)
    except ValueError:  # e.g. a lone surrogate escape, which json reads (and we flag)
        return _std_loads(data)


def use_json(name: str) -> None:
    """Pick the request/response JSON codec: ``"orjson"`` (when installed) or ``"std"``.
    The default is orjson when it imports; ``QUANTAGENT_JSON=std`` in the environment keeps
    the standard library's. Both produce the same JSON text up to float formatting."""
    global dumps, loads
    if name not in ("orjson", "std"):
        raise ValueError(f"JSON codec {name!r} must be 'orjson' or 'std'")
    if name == "orjson" and _orjson is not None:
        dumps, loads = _fast_dumps, _fast_loads
    else:
        dumps, loads = _std_dumps, _std_loads


def current() -> str:
    """The codec in use: ``"orjson"`` or ``"std"``."""
    return "orjson" if dumps is _fast_dumps else "std"


dumps: Callable[[Any], bytes] = _std_dumps
loads: Callable[[bytes], Any] = _std_loads
use_json(os.environ.get("QUANTAGENT_JSON", "orjson"))

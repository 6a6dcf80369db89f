"""Limits on untrusted JSON, as data: how deep a document may nest before it is refused.

Python's ``json`` recurses per level (a 5,000-deep document raises ``RecursionError``) and
orjson stops at 1,024; tool-call arguments and chat responses never legitimately nest more
than a few dozen levels. :func:`loads_bounded` turns either failure, and any value nested
deeper than :data:`MAX_JSON_DEPTH`, into a :class:`JSONDepthError` (a ``ValueError``, so
callers that already treat bad JSON as bad JSON need no new branch).
"""

from __future__ import annotations

import json
from typing import Any

#: Deepest nesting (objects and arrays) accepted in JSON the harness reads from a model or
#: a server.
MAX_JSON_DEPTH = 100


class JSONDepthError(ValueError):
    """A JSON document nested deeper than the limit."""


def depth_exceeds(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` (decoded JSON) nests deeper than ``limit``; iterative, stops early."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            children: Any = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        if d + 1 > limit:
            return True
        stack.extend((c, d + 1) for c in children if isinstance(c, (dict, list)))
    return False


def loads_bounded(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)``, refusing documents nested deeper than ``limit`` with
    :class:`JSONDepthError` (never ``RecursionError``)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise JSONDepthError(f"JSON nested deeper than {limit} levels") from None
    if depth_exceeds(value, limit):
        raise JSONDepthError(f"JSON nested deeper than {limit} levels")
    return value

"""Writing and reading the report JSON, and its JSON Schema (``schema_version`` 1).

The schema pins what DESIGN.md promises: the fields listed there must be present with these
types; more fields may be added (``additionalProperties`` stays open), but none may change
meaning. Numbers that are undefined (a ratio with no reference failure, a correlation over
an empty failure set) are written as ``null``.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from pytest_quantagent.errors import DataFileError, MissingDependencyError
from pytest_quantagent.vocab.channels import ALL_CHANNELS

SCHEMA_VERSION = 1

_NUM: dict[str, Any] = {"type": ["number", "null"]}
_PROB: dict[str, Any] = {"type": ["number", "null"], "minimum": 0, "maximum": 1}
_COUNT: dict[str, Any] = {"type": "integer", "minimum": 0}
# An arm-only cell (no reference arm, e.g. ``quantagent analyze`` of one store) has null
# reference-side figures and a null verdict.
_OPT_COUNT: dict[str, Any] = {"type": ["integer", "null"], "minimum": 0}
_COUNTS: dict[str, Any] = {"type": ["object", "null"], "additionalProperties": _COUNT}
_PROBS: dict[str, Any] = {"type": ["object", "null"], "additionalProperties": _PROB}
_CI: dict[str, Any] = {"type": ["array", "null"], "items": _NUM, "minItems": 2, "maxItems": 2}
_PAIR_NUM: dict[str, Any] = {
    "type": "object", "required": ["arm", "reference"],
    "properties": {"arm": _NUM, "reference": _NUM},
}


def _obj(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties}


_CHANNEL: dict[str, Any] = _obj(
    ["arm_count", "reference_count", "arm_rate", "reference_rate", "ratio", "ratio_ci", "p", "p_holm"],
    {
        "arm_count": _COUNT, "reference_count": _OPT_COUNT,
        "arm_rate": _PROB, "reference_rate": _PROB,
        "ratio": {"type": ["number", "null"], "minimum": 0},
        "ratio_ci": _CI, "p": _PROB, "p_holm": _PROB,
    },
)

_USER_SIDE_ONE: dict[str, Any] = {
    "type": ["object", "null"], "required": ["calls", "failures", "failures_per_episode"],
    "properties": {"calls": _COUNT, "failures": _COUNT,
                   "failures_per_episode": {"type": ["number", "null"], "minimum": 0},
                   "by_channel": {"type": "object", "additionalProperties": _COUNT}},
}
# The user simulator's own calls per side (issue 22.6); in the error budget, in no channel.
_USER_SIDE: dict[str, Any] = {
    "type": ["object", "null"],
    "properties": {"arm": _USER_SIDE_ONE, "reference": _USER_SIDE_ONE},
}
# Holm's family of the cell's verdict (issue 23).
_HOLM: dict[str, Any] = {
    "type": ["object", "null"], "required": ["scope", "size", "tests"],
    "properties": {"scope": {"enum": ["cell", "report"]}, "size": _COUNT,
                   "tests": {"type": "array", "items": {"type": "string"}}},
}

_CELL: dict[str, Any] = _obj(
    ["domain", "arm", "reference", "episodes", "reference_episodes", "paired", "tool_calls",
     "success", "budget", "channels", "failure_set", "recovery", "steps", "terminations",
     "pass_k", "verdict", "reasons"],
    {
        "domain": {"type": "string"}, "arm": {"type": "string"},
        "reference": {"type": ["string", "null"]},
        "episodes": _COUNT, "reference_episodes": _OPT_COUNT, "paired": _COUNT,
        "tool_calls": _obj(["arm", "reference"], {"arm": _COUNT, "reference": _OPT_COUNT}),
        "success": _obj(
            ["arm", "reference", "diff", "ci", "tost_p", "mcnemar_p", "margin"],
            {"arm": _PROB, "reference": _PROB, "diff": _NUM, "ci": _CI, "tost_p": _PROB,
             "mcnemar_p": _PROB, "margin": {"type": "number", "exclusiveMinimum": 0}},
        ),
        "budget": _obj(
            ["K", "arm", "reference", "gap", "gap_ci"],
            {"K": {"type": "array", "items": _COUNT}, "arm": {"type": "array", "items": _PROB},
             "reference": {"type": ["array", "null"], "items": _PROB},
             "gap": {"type": ["array", "null"], "items": _NUM},
             "gap_ci": {"type": ["array", "null"], "items": _CI}},
        ),
        "channels": _obj([c.value for c in ALL_CHANNELS],
                         {c.value: _CHANNEL for c in ALL_CHANNELS}),
        "failure_set": {"type": "object", "additionalProperties": _obj(
            ["spearman", "kendall", "novel_share"],
            {"spearman": _NUM, "kendall": _NUM, "novel_share": _PROB},
        )},
        "recovery": _PAIR_NUM,
        "steps": _PAIR_NUM,
        "terminations": _obj(["arm", "reference"], {"arm": _COUNTS, "reference": _COUNTS}),
        "pass_k": _obj(["arm", "reference"], {"arm": _PROBS, "reference": _PROBS}),
        "margins": {"type": ["object", "null"]},
        "verdict": {"enum": ["LOSSLESS", "MASKED_DAMAGE", "DEGRADED", "INCONCLUSIVE", None]},
        "reasons": {"type": "array", "items": {"type": "string"}},
        "user_side": _USER_SIDE,
        "holm": _HOLM,
    },
)

REPORT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://pytest-quantagent/report/v1.json",
    "title": "pytest-quantagent report",
    "type": "object",
    "required": ["schema_version", "run", "cells"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "run": {"type": "object"},
        "cells": {"type": "array", "items": _CELL},
    },
}


def report_schema() -> dict[str, Any]:
    """A copy of the report's JSON Schema (draft 2020-12)."""
    copy: dict[str, Any] = json.loads(json.dumps(REPORT_SCHEMA))
    return copy


def validate_report(report: dict[str, Any]) -> None:
    """Validate ``report`` against :data:`REPORT_SCHEMA` (needs ``jsonschema``).

    Raises
    ------
    ValueError
        Naming the JSON path of the first problem.
    """
    try:
        import jsonschema
    except ImportError:
        raise MissingDependencyError("report schema validation", "test", ["jsonschema"]) from None
    validator = jsonschema.Draft202012Validator(REPORT_SCHEMA)
    errors = sorted(validator.iter_errors(report), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise ValueError(f"report JSON does not match schema_version {SCHEMA_VERSION} at {where}: "
                         f"{e.message}")


def _finite(obj: Any) -> Any:
    """NaN and infinities are not JSON; they become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def dumps_report(report: dict[str, Any]) -> str:
    """The report as JSON text (stable key order, NaN/inf as null)."""
    return json.dumps(_finite(report), indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def write_report(report: dict[str, Any], path: str | Path) -> Path:
    """Write the report atomically (temporary file + rename); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = dumps_report(report)
    fd, tmp = tempfile.mkstemp(prefix=p.name, suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        # mkstemp creates the file 0600; a report is meant to be read by others (CI artifacts).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def read_report(path: str | Path) -> dict[str, Any]:
    """Read a report JSON written by :func:`write_report`.

    Raises
    ------
    DataFileError
        For a missing file, invalid JSON or an unsupported ``schema_version``.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataFileError(p, "", "report file not found") from None
    except json.JSONDecodeError as e:
        size = p.stat().st_size
        cut = not e.doc.rstrip().endswith(("}", "]"))  # a report always ends with "}"
        raise DataFileError(
            p, f"line {e.lineno} column {e.colno}",
            f"not valid JSON: {e.msg} (char {e.pos} of {size} bytes)"
            + ("; the file ends early: it looks truncated (an interrupted write or copy). "
               "Re-create it (quantagent run/analyze --json, pytest --quant-report)" if cut else ""),
        ) from None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        got = data.get("schema_version") if isinstance(data, dict) else type(data).__name__
        raise DataFileError(p, "schema_version",
                            f"unsupported report schema_version {got!r}; this version reads {SCHEMA_VERSION}")
    return data

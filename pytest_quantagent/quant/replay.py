"""Replay arms: an arm *source* whose episodes are τ²-bench results files, not a model.

The user's spelling is a backend name (``backend = "replay"`` in an arms table,
``--quant-backend=replay``), but no backend is built for such an arm: ``ArmSpec.source`` is
``"results"``, the runner's front door (``runner.service.run_arms``) loads its records through
:mod:`pytest_quantagent.tau2.arms`, and pre-flight checks its files. This module holds what
the lower layers need to know about it — its options (checked when the arms config is read),
its results paths and their checks — and reads no file::

    [arms.bf16]
    backend = "replay"
    path = "results/bf16.json"          # monolithic file, or a directory-format folder

    [arms.int4]
    backend = "replay"
    paths = ["results/int4_retail.json", "results/int4_telecom.json"]   # several domains

``results`` is accepted as an alias of ``path``/``paths``. Relative paths are resolved
against the current working directory.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_quantagent.errors import QuantAgentError

if TYPE_CHECKING:
    from pytest_quantagent.quant.arms import ArmSpec

#: The name a replay arm is spelled with (``backend = "replay"``).
REPLAY = "replay"


class ReplayArmError(QuantAgentError, ValueError):
    """A replay arm that is misconfigured."""


@cache
def options_model() -> Any:
    """The pydantic model of a replay arm's options besides the :class:`ArmSpec` fields
    (``path``), checked when the arms config is read (built on first use: this module is
    imported when the plugin's options are, pydantic is not)."""
    from typing import ClassVar

    from pydantic import BaseModel, ConfigDict

    class ReplayOptions(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
        backend_name: ClassVar[str] = REPLAY

        # Types are checked by :func:`replay_paths`, whose errors say what a results path is.
        paths: Any = None
        results: Any = None

    return ReplayOptions


def replay_paths(spec: ArmSpec) -> list[Path]:
    """The results paths of a replay arm: ``path`` and/or the ``paths`` list (``results``:
    an alias of either)."""
    raw: list[Any] = []
    if spec.path:
        raw.append(spec.path)
    if isinstance(spec.options.get("results"), str):  # alias of ``path``
        raw.append(spec.options["results"])
    for key in ("paths", "results"):
        extra = spec.options.get(key)
        if extra is None or (key == "results" and isinstance(extra, str)):
            continue
        if isinstance(extra, str) or not isinstance(extra, Sequence):
            raise ReplayArmError(
                f"arm {spec.label!r}: {key!r} must be a list of results paths, got {extra!r}"
            )
        raw.extend(extra)
    if not raw:
        raise ReplayArmError(
            f"arm {spec.label!r} uses backend 'replay' but names no results file; add "
            f'path = "results/{spec.label}.json" (a tau2-bench results file or folder) to its '
            f"[arms.{spec.label}] table"
        )
    bad = [p for p in raw if not isinstance(p, str) or not p]
    if bad:
        raise ReplayArmError(f"arm {spec.label!r}: results paths must be strings, got {bad!r}")
    return [Path(os.path.expanduser(p)) for p in raw]


def check_replay_files(spec: ArmSpec) -> str | None:
    """Pre-flight of a replay arm: why its results files cannot be read (no path, a bad
    ``paths`` value, a missing file), or None."""
    try:
        paths = replay_paths(spec)
    except ReplayArmError as e:
        return str(e)
    missing = [str(p) for p in paths if not p.exists()]
    return f"results file(s) not found: {', '.join(missing)}" if missing else None

"""Replay arms' episodes: the records of an arm whose source is τ²-bench results files.

A release gate can then run on files produced elsewhere (a GPU cluster, another team's
τ²-bench run) without generating anything. The arm is spelled like a backend
(``backend = "replay"``, see :mod:`pytest_quantagent.quant.replay` for its keys), but it is an
arm *source* (``ArmSpec.source == "results"``): no backend is built for it, and
:func:`pytest_quantagent.runner.service.run_arms` loads its records here,
``load_replay_arm(spec, domain)``. ``model`` is optional (default: the agent model named in
each file's ``info``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from pytest_quantagent.errors import DataFileError
from pytest_quantagent.quant.arms import ArmSpec
from pytest_quantagent.quant.replay import REPLAY, ReplayArmError, replay_paths
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.tau2.reader import Tau2Run, read_results


def load_replay_runs(spec: ArmSpec) -> list[Tau2Run]:
    """Every results file of a replay arm, read (cached per file version and label)."""
    return [_read_cached(*_cache_key(p, spec.label)) for p in replay_paths(spec)]


def load_replay_arm(spec: ArmSpec, domain: str | None = None) -> list[EpisodeRecord]:
    """The episodes of a replay arm, straight from its results files (no generation).

    Records carry ``arm=spec.label`` and ``backend="replay"``; ``model`` is ``spec.model``
    when the config names one, else the file's agent model. With ``domain``, only files of
    that domain contribute, and it is an error when none does.

    Raises
    ------
    ReplayArmError
        The arm names no path, or no file matches ``domain``.
    DataFileError
        A results file is missing, not a τ²-bench results file, or truncated.
    """
    runs = load_replay_runs(spec)
    chosen = [r for r in runs if domain is None or r.domain == domain]
    if not chosen:
        found = ", ".join(f"{r.path} ({r.domain})" for r in runs)
        raise ReplayArmError(
            f"arm {spec.label!r} (replay) has no results file for domain {domain!r}; "
            f"its files: {found}"
        )
    model_given = spec.model not in ("", REPLAY)
    out: list[EpisodeRecord] = []
    for run in chosen:
        for r in run.records:
            update: dict[str, Any] = {}
            if model_given and r.model != spec.model:
                update["model"] = spec.model
            if r.repair != spec.repair:
                update["repair"] = spec.repair
            out.append(r.model_copy(update=update) if update else r)
    return out


def _cache_key(path: Path, label: str) -> tuple[str, int, int, str]:
    resolved = path.resolve()
    target = resolved / "results.json" if resolved.is_dir() else resolved
    try:
        st = target.stat()
    except OSError:
        raise DataFileError(path, "", "no such file or directory") from None
    return str(resolved), st.st_mtime_ns, st.st_size, label


@lru_cache(maxsize=32)
def _read_cached(path: str, _mtime_ns: int, _size: int, label: str) -> Tau2Run:
    # Several cells (domains, reference vs candidate) read the same file in one session;
    # the file's version is part of the key so an edited file is read again.
    return read_results(path, label=label, backend=REPLAY)

"""The ``replay`` backend: an arm whose episodes come from τ²-bench results files.

A release gate can then run on files produced elsewhere (a GPU cluster, another team's
τ²-bench run) without generating anything::

    [arms.bf16]
    backend = "replay"
    path = "results/bf16.json"          # monolithic file, or a directory-format folder

    [arms.int4]
    backend = "replay"
    paths = ["results/int4_retail.json", "results/int4_telecom.json"]   # several domains

``results`` is accepted as an alias of ``path``/``paths``. Relative paths are resolved
against the current working directory. ``model`` is optional (default: the agent model
named in each file's ``info``).

Contract for the runner and the pytest session: an arm with ``backend == "replay"`` is not
run. Its records are ``load_replay_arm(spec, domain)``; the backend object returned by the
registry factory exists so that arm resolution and ``--quant-backend=replay`` validate like
any other backend, and its :meth:`ReplayBackend.generate` refuses with an explanation.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from pytest_quantagent.backends.base import Backend, BackendOptions, GenerateRequest, Generation
from pytest_quantagent.backends.registry import register_backend
from pytest_quantagent.errors import DataFileError, QuantAgentError
from pytest_quantagent.quant.arms import ArmSpec
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.tau2.reader import Tau2Run, read_results

BACKEND_NAME = "replay"


class ReplayArmError(QuantAgentError, ValueError):
    """A replay arm that is misconfigured or asked to generate."""


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
    model_given = spec.model not in ("", BACKEND_NAME)
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
    return read_results(path, label=label, backend=BACKEND_NAME)


class ReplayBackend(Backend):
    """Stands in for a replay arm's model; it never generates."""

    name: ClassVar[str] = BACKEND_NAME

    def __init__(self, arm: ArmSpec, paths: list[Path]) -> None:
        self.arm = arm
        self.paths = paths

    async def generate(self, request: GenerateRequest) -> Generation:
        raise ReplayArmError(
            f"arm {self.arm.label!r} uses the replay backend: its episodes come from "
            f"{', '.join(map(str, self.paths))} via "
            "pytest_quantagent.tau2.arms.load_replay_arm; there is no model to "
            "generate with"
        )

    def max_concurrency(self) -> int:
        return 1

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "version": self.version(),
            "paths": [str(p) for p in self.paths],
        }


@register_backend(BACKEND_NAME)
def create_backend(arm: ArmSpec, options: BackendOptions) -> Backend:
    """Registry factory: checks the arm's results paths exist and returns a
    :class:`ReplayBackend` (files are read by :func:`load_replay_arm`, lazily)."""
    paths = replay_paths(arm)
    for p in paths:
        if not p.exists():
            raise DataFileError(p, "", f"results file of replay arm {arm.label!r} not found")
    return ReplayBackend(arm, paths)

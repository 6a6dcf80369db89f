"""Cell manifests: which stored episodes make up one cell of a run.

An xdist worker that ran a cell writes its manifest (the episode keys of both sides) under
``<store>/cells/``; the controller reads the cell's records back by key from the episode
store, building no backend (no model load) to recompute keys. A manifest is named by a hash
of the identity the caller gives (the run's options and the cell), so a changed option never
reads a stale one. Writes are atomic (temporary file + ``os.replace``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_quantagent.store.jsonl import EpisodeStore
from pytest_quantagent.store.records import EpisodeRecord

MANIFEST_DIR = "cells"


class CellManifests:
    """The manifests of a store folder."""

    def __init__(self, store_dir: str | Path) -> None:
        self.store_dir = Path(store_dir)

    def path(self, ident: Sequence[Any]) -> Path:
        """The manifest file of the cell identified by ``ident`` (JSON-able values)."""
        text = json.dumps(list(ident), sort_keys=True, default=str)
        digest = hashlib.sha256(text.encode()).hexdigest()[:24]
        return self.store_dir / MANIFEST_DIR / f"{digest}.json"

    def write(self, ident: Sequence[Any], cell: str, arm: Sequence[EpisodeRecord],
              reference: Sequence[EpisodeRecord], extra: dict[str, Any] | None = None) -> None:
        """Record the cell's episode keys (and ``extra``, plain JSON data such as a
        run-until-decided block) atomically."""
        path = self.path(ident)
        path.parent.mkdir(parents=True, exist_ok=True)
        data: dict[str, Any] = {"cell": cell, "arm": [r.key for r in arm],
                                "reference": [r.key for r in reference]}
        if extra is not None:
            data["extra"] = extra
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)

    def read(self, ident: Sequence[Any]) -> tuple[list[EpisodeRecord], list[EpisodeRecord]] | None:
        """(arm, reference) records from the store, or None when there is no manifest or a
        record is not in the store (e.g. a conftest hook produced them)."""
        path = self.path(ident)
        if not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        stored = EpisodeStore(self.store_dir).load()
        try:
            return [stored[k] for k in data["arm"]], [stored[k] for k in data["reference"]]
        except KeyError:
            return None

    def read_extra(self, ident: Sequence[Any]) -> dict[str, Any] | None:
        """The ``extra`` data written with the cell's manifest, or None."""
        path = self.path(ident)
        if not path.is_file():
            return None
        extra = json.loads(path.read_text(encoding="utf-8")).get("extra")
        return extra if isinstance(extra, dict) else None

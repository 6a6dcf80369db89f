"""A cheap content fingerprint of a local checkpoint folder, for episode cache keys.

Two checkpoints at the same path (a model retrained in place, a re-quantized arm) must not
share stored episodes. Hashing multi-GB weight files on every run would be slow, so the
fingerprint reads the small files whole and, of each weight file, its size, the first 64 KiB
(safetensors: the header with every tensor's name, dtype, shape and offsets) and the last
64 KiB (the tail of the data, which changes with any retraining).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
_EDGE = 64 * 1024
_SMALL = 1024 * 1024


def checkpoint_fingerprint(path: str | Path) -> str:
    """16 hex digits over the folder's files (not its subfolders: a bundled model keeps its
    arms in ``arms/``, which must not change the bf16 arm's key); ``"-"`` for a non-local
    model (a hub id or served name)."""
    root = Path(path)
    if not root.is_dir():
        return "-"
    h = hashlib.sha256()
    for f in sorted(p for p in root.iterdir() if p.is_file()):
        rel = f.name
        if rel.startswith("."):
            continue
        size = f.stat().st_size
        h.update(f"{rel}\0{size}\0".encode())
        with f.open("rb") as fh:
            if size <= _SMALL and not f.name.endswith(_WEIGHT_SUFFIXES):
                h.update(fh.read())
            else:
                h.update(fh.read(_EDGE))
                fh.seek(max(0, size - _EDGE))
                h.update(fh.read(_EDGE))
    return h.hexdigest()[:16]

"""Domain databases: pydantic models with a canonical hash and cheap copies."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

T = TypeVar("T", bound="DB")


class DB(BaseModel):
    """Base of every domain DB (and of the telecom user/device DB).

    ``extra="forbid"`` so a file with a misspelt field is refused, naming the field.
    ``get_hash`` is the SHA-256 of the canonical JSON (sorted keys), stable across runs,
    processes and Python versions; the reward compares these hashes.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    @classmethod
    def load(cls: type[T], path: str | Path) -> T:
        p = Path(path)
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".toml":
            try:
                import tomllib
            except ModuleNotFoundError:  # pragma: no cover - python < 3.11
                import tomli as tomllib  # type: ignore[no-redef]
            data: Any = tomllib.loads(text)
        else:
            data = json.loads(text)
        return cls.model_validate(data)

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(self.model_dump_json(indent=2), encoding="utf-8")

    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def get_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()

    def copy_fresh(self: T) -> T:
        """A deep, independent copy for one episode (much cheaper than reloading)."""
        return self.model_copy(deep=True)

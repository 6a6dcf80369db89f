"""``DB.copy_fresh``: independent copies equal to the source, from a JSON snapshot when the
DB round-trips through JSON and by deep copy when it does not."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from pytest_quantagent.env.db import DB


class Rows(DB):
    rows: dict[str, dict[str, Any]]
    tags: list[str] = Field(default_factory=list)


class Lossy(DB):
    """A validator that changes the value on every parse: JSON does not round-trip."""

    n: int

    @field_validator("n")
    @classmethod
    def bump(cls, v: int) -> int:
        return v + 1


def test_copies_are_equal_and_independent() -> None:
    src = Rows(rows={"a": {"x": 1, "nested": {"y": [1, 2]}}}, tags=["t"])
    first, second = src.copy_fresh(), src.copy_fresh()
    assert first == src and second == src
    first.rows["a"]["nested"]["y"].append(3)
    first.tags.append("u")
    assert src.rows["a"]["nested"]["y"] == [1, 2] and src.tags == ["t"]
    assert second.rows["a"]["nested"]["y"] == [1, 2]
    assert src.copy_fresh().get_hash() == src.get_hash() != first.get_hash()


def test_a_db_that_does_not_round_trip_is_deep_copied() -> None:
    src = Lossy(n=1)
    assert src.n == 2
    # Parsing the JSON again would bump it to 3; every copy must still equal the source.
    assert [src.copy_fresh().n for _ in range(3)] == [2, 2, 2]

"""Argument checks shared by the statistics functions (ValueError, never assert)."""

from __future__ import annotations

import math


def check_probability(name: str, value: float, *, open_interval: bool = True) -> None:
    """Raise ValueError unless ``value`` lies in (0, 1) (or [0, 1] when not open)."""
    ok = (0.0 < value < 1.0) if open_interval else (0.0 <= value <= 1.0)
    if not (isinstance(value, (int, float)) and math.isfinite(value) and ok):
        bounds = "strictly between 0 and 1" if open_interval else "between 0 and 1"
        raise ValueError(f"{name}={value!r} is not allowed; {name} must be {bounds}")


def check_count(name: str, value: int, *, minimum: int = 0) -> None:
    """Raise ValueError unless ``value`` is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} is not allowed; {name} must be an integer >= {minimum}")

"""A mock rule importable as ``tests_mock_rule:rule`` (arms-config tests)."""

from __future__ import annotations

from typing import Any


def rule(request: Any) -> str:
    return f"seed={request.seed}"

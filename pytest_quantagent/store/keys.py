"""Cache keys: one hash over everything that changes an episode's outcome.

Two episodes with the same key are interchangeable, so a stored one is never re-run. The
inputs are: the arm (model id and revision, checkpoint, quantization, backend options that
affect output, repair mode), the backend and its version, the domain, task, trial and seed,
the budget and step limit, the user simulator, a hash of the prompt (policy + tool
schemas), and what the instrument itself is: a hash of the task's content and one of the
environment and scripted user's code and databases (``Domain.instrument_hash``), so an
upgrade that changes how the user replies or what a task asks re-runs the episodes instead
of scoring the old ones. Endpoint URLs and API-key variables are deliberately not inputs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

KEY_VERSION = 2
"""Bump when the meaning of a stored episode changes (the old keys then no longer match)."""


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def prompt_hash(system_prompt: str, tools: list[dict[str, Any]]) -> str:
    """Hash of what the agent is told: the policy/system prompt and the tool schemas."""
    h = hashlib.sha256()
    h.update(system_prompt.encode())
    h.update(b"\x00")
    h.update(_canonical(tools).encode())
    return h.hexdigest()[:16]


def episode_key(
    *,
    arm: Mapping[str, Any],
    backend: str,
    backend_version: str,
    domain: str,
    task_id: str,
    trial: int,
    seed: int,
    max_errors: int,
    max_steps: int,
    user_sim: str,
    prompt: str,
    repair: str,
    instrument: str = "",
    task: str = "",
) -> str:
    """Hex key of one episode (``arm`` = ``ArmSpec.cache_fields()``; ``instrument`` =
    ``Domain.instrument_hash``, ``task`` = ``Domain.task_hash(task_id)``)."""
    payload = {
        "v": KEY_VERSION,
        "arm": dict(arm),
        "backend": backend,
        "backend_version": backend_version,
        "domain": domain,
        "task_id": task_id,
        "trial": trial,
        "seed": seed,
        "max_errors": max_errors,
        "max_steps": max_steps,
        "user_sim": user_sim,
        "prompt": prompt,
        "repair": repair,
        "instrument": instrument,
        "task": task,
    }
    return hashlib.sha256(_canonical(payload).encode()).hexdigest()[:32]

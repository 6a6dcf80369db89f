"""Episode store: append-only JSONL records, cache keys, resume."""

from __future__ import annotations

from pytest_quantagent.store.jsonl import EpisodeStore, TornLineWarning
from pytest_quantagent.store.keys import episode_key, prompt_hash

__all__ = ["EpisodeStore", "TornLineWarning", "episode_key", "prompt_hash"]

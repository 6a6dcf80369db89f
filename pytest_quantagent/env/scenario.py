"""The scripted user's scenario schema (``user_scenario.script`` of our tasks).

Its own module so that :mod:`pytest_quantagent.env.tasks` can type
``UserScenario.script`` without importing the user simulator (which imports the tasks).
See :mod:`pytest_quantagent.env.user` for how the scripted user follows it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AnswerRule(_Model):
    """Say ``say`` when the agent's message contains every word of one keyword group."""

    keywords: list[list[str]] = Field(min_length=1)
    say: str


class DeviceAction(_Model):
    """A user-side tool call the user performs when the agent asks for it."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class UserScript(_Model):
    """Structured scenario of the scripted user (``user_scenario.script``)."""

    requests: list[str] = Field(min_length=1)
    identity: dict[str, str] = Field(default_factory=dict)
    facts: dict[str, str] = Field(default_factory=dict)
    answers: list[AnswerRule] = Field(default_factory=list)
    confirm: bool = True
    refusal: str = "No, I don't want to do that."
    device_actions: list[DeviceAction] = Field(default_factory=list)
    end: Literal["stop", "transfer"] = "stop"
    closing: str = "Thank you, that's all I needed."
    max_fallbacks: int = Field(default=3, ge=1)

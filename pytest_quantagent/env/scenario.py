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


class Fallback(_Model):
    """What the customer wants when the agent says something is not possible: ``say``, when
    the agent's refusal names enough of the ``when`` words (the content words of the wish it
    replaces, e.g. "split payment card")."""

    when: list[str] = Field(min_length=1)
    say: str


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
    on_confirm: list[str] = Field(default_factory=list)
    """Said instead of a yes to the first, second, ... confirmation the agent asks for (a
    scripted change of mind: "if the agent asks for confirmation, only exchange the lamp")."""
    fallbacks: list[Fallback] = Field(default_factory=list)
    """What the customer wants instead when the agent refuses (see :class:`Fallback`)."""

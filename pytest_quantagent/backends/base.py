"""The backend contract: one abstract ``async generate`` plus policy methods with defaults.

A backend turns one chat request (OpenAI chat format, OpenAI tool schemas) into one
:class:`Generation`. It knows nothing about domains, episodes or retries: retries with
backoff, the concurrency limit and token accounting live in one place,
:class:`pytest_quantagent.backends.wrapper.ModelClient`, so every backend gets them the same
way (inspect_ai's ``ModelAPI`` vs ``Model`` split).

A backend reports a failure of the serving stack (HTTP 5xx, timeout, dropped connection) by
raising; :meth:`Backend.is_retryable` says which exceptions the wrapper may retry. A model
that answers with garbage is *not* an infrastructure failure: the backend returns the raw
text and the agent's parser records a ``malformed_call``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pytest_quantagent.vocab.messages import Decision


@dataclass(frozen=True)
class GenerateRequest:
    """One model call.

    ``messages`` and ``tools`` are in OpenAI chat format; the system message comes first.
    The lists and the message dicts are shared with the caller (tool schemas built once per
    domain, history messages reused by every later turn) and must not be mutated: backends
    may cache their encodings by identity.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    seed: int
    temperature: float = 0.0
    max_tokens: int = 512
    want_margins: bool = True
    """Ask for top-2 logprobs so tool-name decisions can be recorded (when supported)."""


@dataclass(frozen=True)
class RawToolCall:
    """A tool call as the model emitted it; ``arguments`` is the unparsed JSON text."""

    id: str
    name: str
    arguments: str


@dataclass
class Generation:
    """What the model produced for one request."""

    content: str | None
    tool_calls: list[RawToolCall] = field(default_factory=list)
    raw_text: str | None = None
    """The model's unparsed output, when the backend has it (kept for malformed calls)."""
    decisions: list[Decision] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    truncated: bool = False
    """Some output was longer than the arm's ``max_output_chars`` and was cut with a marker."""
    finish_reason: str | None = None
    """Why generation stopped, as the server says it (``stop``, ``length``: cut at the token
    limit, ``tool_calls``...); None when the backend does not say."""
    reasoning_tokens: int | None = None
    """Tokens spent reasoning (``usage.completion_tokens_details.reasoning_tokens``), when the
    server reports them (they are part of ``completion_tokens``)."""
    reasoning_chars: int | None = None
    """Characters of the reasoning text the server returned apart from the answer
    (``reasoning_content`` / ``reasoning``); None when it returned none."""


@dataclass(frozen=True)
class BackendOptions:
    """Run-level settings a backend factory may use (not part of the arm's identity)."""

    concurrency: int = 8
    """Episodes in flight; servers size their connection pool to it."""
    request_timeout_s: float = 120.0
    """Per-request timeout; a request past it is an infrastructure failure (retried)."""


class Backend(ABC):
    """A model behind one arm. Subclasses implement :meth:`generate`; the rest has defaults."""

    name: ClassVar[str] = "backend"

    @abstractmethod
    async def generate(self, request: GenerateRequest) -> Generation:
        """Run one chat completion. Raise on infrastructure failure (see ``is_retryable``)."""

    def max_concurrency(self) -> int:
        """Upper bound on concurrent ``generate`` calls this backend can use well.

        The wrapper uses ``min(requested concurrency, max_concurrency())``. In-process models
        (one CPU forward pass at a time) return 1; servers return a large number.
        """
        return 1024

    def is_retryable(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a transient infrastructure failure worth retrying."""
        return isinstance(exc, (TimeoutError, ConnectionError))

    def version(self) -> str:
        """Backend implementation version; part of the episode cache key."""
        return "1"

    def identity(self) -> dict[str, Any]:
        """What identifies the serving endpoint in the episode cache key (e.g. URL and served
        model id; never a key). Empty for in-process backends: their arm fields suffice."""
        return {}

    def endpoint_stats(self) -> list[dict[str, Any]]:
        """Per-endpoint figures of a served backend (``url``, ``weight``, ``requests``,
        ``failures``, ``ejections``, ``p50_ms``, ``p95_ms``); empty for in-process backends."""
        return []

    def describe(self) -> dict[str, Any]:
        """Non-secret facts about this backend for run metadata (never an API key)."""
        return {"backend": self.name, "version": self.version()}

    async def aclose(self) -> None:
        """Release connections, processes or memory. Safe to call twice."""
        return None


def nearest_rank_ms(sorted_s: Sequence[float], q: float, digits: int = 2) -> float | None:
    """The nearest-rank ``q`` quantile of ascending durations in seconds, in milliseconds
    rounded to ``digits`` (None when there are none): the endpoints' p50/p95 and the fake
    server's lateness figures."""
    if not sorted_s:
        return None
    i = min(len(sorted_s) - 1, max(0, math.ceil(q * len(sorted_s)) - 1))
    return round(1000 * sorted_s[i], digits)

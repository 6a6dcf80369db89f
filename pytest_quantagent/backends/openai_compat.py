"""OpenAI-compatible chat completions over httpx (vLLM, SGLang, llama.cpp, OpenAI, ...).

Defaults keep failures observable: ``tool_choice="auto"`` and no ``strict`` schemas, so a
model that invents a tool or writes broken JSON is recorded as such rather than being forced
into a valid call by constrained decoding. Constrained decoding is available only as an
explicitly labelled option (``constrained = true`` in the arm's TOML table), which is part of
the arm's cache key.

One ``httpx.AsyncClient`` (one connection pool sized to the run's concurrency) serves every
request of the arm. The API key is read from the environment variable the config names and
only ever placed in the request header: it is not an attribute of the arm, not in
``describe()``, not in error messages.
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx

from pytest_quantagent.backends.base import (
    Backend,
    BackendOptions,
    GenerateRequest,
    Generation,
    RawToolCall,
)
from pytest_quantagent.env.messages import Decision
from pytest_quantagent.quant.arms import ArmSpec

_ALLOWED_OPTIONS = frozenset(
    {"constrained", "logprobs", "timeout_s", "max_connections", "extra_body"}
)


class BackendHTTPError(Exception):
    """The server answered with an error status (retryable for 5xx and 429)."""

    def __init__(self, status: int, body: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {body[:300]}")

    @property
    def retryable(self) -> bool:
        return self.status >= 500 or self.status in (408, 429)


class BadResponseError(Exception):
    """The server's answer was not a chat completion (truncated or garbled body): retried."""


class OpenAICompatBackend(Backend):
    """Chat completions against ``base_url``."""

    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        concurrency: int = 8,
        timeout_s: float = 120.0,
        constrained: bool = False,
        logprobs: bool = True,
        extra_body: dict[str, Any] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.constrained = constrained
        self.logprobs = logprobs
        self.extra_body = dict(extra_body or {})
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s),
            limits=limits,
            transport=transport,
        )
        self._strict_tools_cache: tuple[int, list[dict[str, Any]]] | None = None

    def is_retryable(self, exc: BaseException) -> bool:
        if isinstance(exc, BackendHTTPError):
            return exc.retryable
        return isinstance(
            exc, (httpx.TimeoutException, httpx.TransportError, BadResponseError, TimeoutError, ConnectionError)
        )

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "version": self.version(),
            "model": self.model,
            "base_url": self.base_url,
            "constrained": self.constrained,
        }

    def _tools(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not self.constrained:
            return tools
        # Schemas are built once per domain, so the same list object comes back every call.
        cached = self._strict_tools_cache
        if cached is not None and cached[0] == id(tools):
            return cached[1]
        strict = [{**t, "function": {**t["function"], "strict": True}} for t in tools]
        self._strict_tools_cache = (id(tools), strict)
        return strict

    def build_body(self, request: GenerateRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
            "seed": request.seed,
        }
        if request.tools:
            body["tools"] = self._tools(request.tools)
            body["tool_choice"] = "auto"
        if self.logprobs and request.want_margins:
            body["logprobs"] = True
            body["top_logprobs"] = 2
        body.update(self.extra_body)
        return body

    async def generate(self, request: GenerateRequest) -> Generation:
        payload = json.dumps(self.build_body(request), separators=(",", ":")).encode()
        resp = await self._client.post("/chat/completions", content=payload)
        if resp.status_code >= 400:
            raise BackendHTTPError(resp.status_code, resp.text)
        try:
            data = json.loads(resp.content)
            choice = data["choices"][0]
            message = choice["message"]
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise BadResponseError(f"not a chat completion: {resp.content[:200]!r}") from e
        return parse_completion(message, choice.get("logprobs"), data.get("usage"))

    async def aclose(self) -> None:
        await self._client.aclose()


def parse_completion(
    message: dict[str, Any], logprobs: dict[str, Any] | None, usage: dict[str, Any] | None
) -> Generation:
    """A chat-completion ``message`` (+ optional ``logprobs``/``usage``) → :class:`Generation`."""
    calls: list[RawToolCall] = []
    for i, tc in enumerate(message.get("tool_calls") or ()):
        fn = tc.get("function") or {}
        args = fn.get("arguments")
        if not isinstance(args, str):
            # Some servers send arguments already decoded; keep the call, re-encode.
            args = "" if args is None else json.dumps(args)
        calls.append(RawToolCall(id=str(tc.get("id") or f"call_{i}"), name=str(fn.get("name") or ""), arguments=args))
    content = message.get("content")
    tokens = (logprobs or {}).get("content") or []
    decisions = tool_name_decisions(tokens, [c.name for c in calls]) if tokens and calls else []
    raw_text = "".join(t.get("token", "") for t in tokens) if tokens else content
    usage = usage or {}
    return Generation(
        content=content,
        tool_calls=calls,
        raw_text=raw_text,
        decisions=decisions,
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
    )


def tool_name_decisions(tokens: list[dict[str, Any]], names: list[str]) -> list[Decision]:
    """Top-1 vs top-2 logprob at the first token of each tool name in the generated text.

    The token stream is the text the model generated (tool-call markup included, as vLLM
    returns it); each name is located in order after the previous one. A name not found
    in the text, or a token without two alternatives, yields no decision.
    """
    starts: list[int] = []
    pos = 0
    for t in tokens:
        starts.append(pos)
        pos += len(t.get("token", ""))
    text = "".join(t.get("token", "") for t in tokens)
    out: list[Decision] = []
    search_from = 0
    tok_idx = 0
    for name in names:
        if not name:
            continue
        at = text.find(name, search_from)
        if at < 0:
            continue
        search_from = at + len(name)
        while tok_idx + 1 < len(starts) and starts[tok_idx + 1] <= at:
            tok_idx += 1
        top = tokens[tok_idx].get("top_logprobs") or []
        if len(top) < 2:
            continue
        out.append(
            Decision(
                kind="tool_name",
                top1=str(top[0]["token"]),
                top2=str(top[1]["token"]),
                margin=float(top[0]["logprob"]) - float(top[1]["logprob"]),
                chosen=name,
            )
        )
    return out


def create_backend(arm: ArmSpec, options: BackendOptions) -> OpenAICompatBackend:
    """Factory for ``backend = "openai"``; needs ``base_url`` and ``model``."""
    if not arm.base_url:
        raise ValueError(f"arm {arm.label!r}: backend 'openai' needs base_url (e.g. http://127.0.0.1:8000/v1)")
    unknown = set(arm.options) - _ALLOWED_OPTIONS
    if unknown:
        raise ValueError(
            f"arm {arm.label!r}: unknown openai option(s) {', '.join(sorted(unknown))}; "
            f"allowed: {', '.join(sorted(_ALLOWED_OPTIONS))}"
        )
    api_key = None
    if arm.api_key_env:
        api_key = os.environ.get(arm.api_key_env)
        if not api_key:
            raise ValueError(
                f"arm {arm.label!r}: environment variable {arm.api_key_env!r} (api_key_env) is not set"
            )
    opts = arm.options
    return OpenAICompatBackend(
        base_url=arm.base_url,
        model=arm.model,
        api_key=api_key,
        concurrency=int(opts.get("max_connections", options.concurrency)),
        timeout_s=float(opts.get("timeout_s", options.request_timeout_s)),
        constrained=bool(opts.get("constrained", False)),
        logprobs=bool(opts.get("logprobs", True)),
        extra_body=opts.get("extra_body"),
    )

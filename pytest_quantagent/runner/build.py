"""Layer 2: names and config → backend client, agent, domain, tasks.

Nothing here runs an episode; :mod:`pytest_quantagent.runner.batch` does. Everything that
turns a string (backend name, arm label, task spec) into an object lives here, so errors
about bad names surface before any episode starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_quantagent.backends.base import Backend, BackendOptions
from pytest_quantagent.backends.wrapper import ModelClient, RetryPolicy
from pytest_quantagent.quant.arms import (
    ArmSpec,
    UserModelConfig,
    load_arms_config,
    load_user_config,
    parse_arm_labels,
    parse_user_model,
    resolve_arm,
)
from pytest_quantagent.quant.loading import create_arm_backend
from pytest_quantagent.runner.agent import LLMAgent
from pytest_quantagent.runner.llm_user import LLMUser, LLMUserSpec, UserTurnCache
from pytest_quantagent.runner.repair import make_repair
from pytest_quantagent.store.keys import prompt_hash

if TYPE_CHECKING:
    from pytest_quantagent.env.domain import Domain
    from pytest_quantagent.env.tasks import Task

#: File of the shared user-turn cache inside the episode store directory.
USER_TURNS_FILE = "user_turns.jsonl"

# τ²-bench's agent system prompt wraps the domain policy the same way.
AGENT_INSTRUCTION = (
    "You are a customer service agent that helps the user according to the <policy> "
    "provided below.\nIn each turn you can either:\n- Send a message to the user.\n"
    "- Make a tool call.\nYou cannot do both at the same time.\n\n"
    "Try to be helpful and always follow the policy. Always make sure you generate valid JSON only."
)


def agent_system_prompt(policy: str) -> str:
    """The agent's system message: instructions, then the domain policy."""
    return f"<instructions>\n{AGENT_INSTRUCTION}\n</instructions>\n<policy>\n{policy}\n</policy>"


@dataclass
class ArmRuntime:
    """One arm ready to run: its spec, backend and the wrapping client."""

    arm: ArmSpec
    backend: Backend
    client: ModelClient

    async def aclose(self) -> None:
        await self.client.aclose()


def resolve_arms(
    arms: str | Sequence[str],
    *,
    model_spec: str | None = None,
    config_path: str | Path | None = None,
) -> list[ArmSpec]:
    """Arm labels (``"bf16,int4"`` or a list) → specs, from a TOML config or a model spec.

    Bad labels raise :class:`UnknownNameError` listing the labels available.
    """
    if model_spec is not None and config_path is not None:
        raise ValueError("give either a model spec or an arms config, not both")
    config = load_arms_config(config_path) if config_path is not None else None
    value = arms if isinstance(arms, str) else ",".join(arms)
    labels = parse_arm_labels(value, allowed=list(config) if config is not None else None)
    return [resolve_arm(label, model_spec=model_spec, config=config) for label in labels]


def build_arm(
    arm: ArmSpec,
    *,
    concurrency: int = 8,
    request_timeout_s: float = 120.0,
    retry: RetryPolicy | None = None,
) -> ArmRuntime:
    """Create the arm's backend through the registry (``quant.loading.create_arm_backend``:
    an on-load quantizer goes with it) and wrap it in a :class:`ModelClient`."""
    backend = create_arm_backend(arm, BackendOptions(concurrency=concurrency, request_timeout_s=request_timeout_s))
    return ArmRuntime(arm=arm, backend=backend, client=ModelClient(backend, concurrency=concurrency, retry=retry))


def resolve_user(
    user_model: str | None = None,
    *,
    config_path: str | Path | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
) -> UserModelConfig:
    """The LLM user's model: ``user_model`` (a spec, see
    :func:`~pytest_quantagent.quant.arms.parse_user_model`) wins over the ``[user]`` table of
    ``config_path``; ``temperature``/``max_tokens`` override either. Raises ``ValueError``
    when neither names a model."""
    cfg: UserModelConfig | None = None
    if user_model is not None:
        cfg = parse_user_model(user_model)
    elif config_path is not None:
        cfg = load_user_config(config_path)
    if cfg is None:
        where = f" and {config_path} has no [user] table" if config_path is not None else ""
        raise ValueError(
            f"the LLM user simulator needs a model: give --user-model SPEC (e.g. "
            f"openai:MODEL@http://127.0.0.1:8000/v1){where}"
        )
    if temperature is not None or max_tokens is not None:
        cfg = UserModelConfig(
            arm=cfg.arm,
            temperature=cfg.temperature if temperature is None else temperature,
            max_tokens=cfg.max_tokens if max_tokens is None else max_tokens,
        )
    return cfg


@dataclass
class UserRuntime:
    """The one LLM user simulator of a run: a backend + client and a turn cache shared by
    every arm, so that arms whose transcripts agree get the same user replies."""

    spec: LLMUserSpec
    arm: ArmSpec
    backend: Backend
    client: ModelClient
    cache: UserTurnCache

    @property
    def identity(self) -> str:
        """``user_sim`` of every record this user produces (see :class:`LLMUserSpec`)."""
        return self.spec.identity

    def make_user(self, domain: Domain, task: Task, *, trial: int, seed: int) -> LLMUser:
        """A fresh user for one episode; in a domain with user tools (telecom) the user model
        is offered the domain's device tool schemas."""
        return LLMUser(self.client, self.spec, task, trial=trial, seed=seed,
                       tools=domain.user_tool_schemas() or None, cache=self.cache)

    def describe(self) -> dict[str, Any]:
        """The user simulator for the report's ``run`` block (no secrets)."""
        return {"identity": self.identity, "backend": self.arm.backend, "model": self.spec.model,
                "temperature": self.spec.temperature, "max_tokens": self.spec.max_tokens,
                "seed_policy": self.spec.seed_policy, "prompt_version": self.spec.prompt_version,
                "server": self.backend.describe(),
                "cache": str(self.cache.path) if self.cache.path is not None else None}

    async def aclose(self) -> None:
        await self.client.aclose()


def build_user(
    config: UserModelConfig,
    *,
    cache_path: str | Path | None = None,
    concurrency: int = 8,
    request_timeout_s: float = 120.0,
    retry: RetryPolicy | None = None,
) -> UserRuntime:
    """Create the user's backend and client (inside the event loop that uses it) and its
    turn cache (``cache_path``, usually ``<store>/user_turns.jsonl``; None = memory only)."""
    backend = create_arm_backend(config.arm, BackendOptions(concurrency=concurrency,
                                                            request_timeout_s=request_timeout_s))
    return UserRuntime(
        spec=LLMUserSpec.from_config(config), arm=config.arm, backend=backend,
        client=ModelClient(backend, concurrency=concurrency, retry=retry, role="user model"),
        cache=UserTurnCache(Path(cache_path) if cache_path is not None else None),
    )


@dataclass(frozen=True)
class AgentPrompt:
    """What the agent is told in one domain: built once per domain and shared by episodes."""

    system_prompt: str
    tools: list[dict[str, Any]]
    hash: str

    @classmethod
    def for_domain(cls, domain: Domain) -> AgentPrompt:
        prompt = agent_system_prompt(domain.policy)
        tools = domain.agent_tool_schemas()
        return cls(system_prompt=prompt, tools=tools, hash=prompt_hash(prompt, tools))


def make_agent(runtime: ArmRuntime, prompt: AgentPrompt, seed: int) -> LLMAgent:
    """A fresh agent for one episode (with the arm's repair policy, if any)."""
    repair = make_repair(runtime.arm.repair, prompt.tools)
    return LLMAgent(runtime.client, prompt.system_prompt, prompt.tools, seed, repair=repair)

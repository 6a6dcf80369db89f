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
from pytest_quantagent.backends.registry import create_backend
from pytest_quantagent.backends.wrapper import ModelClient, RetryPolicy
from pytest_quantagent.errors import UnknownNameError
from pytest_quantagent.quant.arms import ArmSpec, load_arms_config, parse_arm_labels, resolve_arm
from pytest_quantagent.runner.agent import LLMAgent
from pytest_quantagent.runner.repair import make_repair
from pytest_quantagent.store.keys import prompt_hash

if TYPE_CHECKING:
    from pytest_quantagent.env.domain import Domain

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
    """Create the arm's backend through the registry and wrap it in a :class:`ModelClient`."""
    backend = create_backend(arm, BackendOptions(concurrency=concurrency, request_timeout_s=request_timeout_s))
    return ArmRuntime(arm=arm, backend=backend, client=ModelClient(backend, concurrency=concurrency, retry=retry))


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


def select_tasks(
    domain: Domain,
    *,
    num_tasks: int | None = None,
    task_ids: Sequence[str] | None = None,
    split: str | None = None,
) -> list[str]:
    """Task ids to run: explicit ``task_ids`` (validated), else the first ``num_tasks`` of
    ``split`` (or of all tasks), in the domain's order."""
    if task_ids is not None and num_tasks is not None:
        raise ValueError("give either task ids or a number of tasks, not both")
    if task_ids is not None:
        if not task_ids:
            raise ValueError("the list of task ids is empty")
        for tid in task_ids:
            domain.task(tid)  # raises UnknownNameError listing the known ids
        return list(dict.fromkeys(task_ids))
    if split is not None:
        if split not in domain.splits:
            raise UnknownNameError(f"{domain.name} split", split, domain.splits)
        ids = list(domain.splits[split])
    else:
        ids = [t.id for t in domain.tasks]
    if num_tasks is not None:
        if num_tasks < 1:
            raise ValueError(f"number of tasks ({num_tasks}) must be >= 1")
        ids = ids[:num_tasks]
    return ids

"""Toolkits: typed methods whose signature and docstring are the OpenAI tool schema.

A domain declares its tools as methods of a :class:`Toolkit` subclass decorated with
:func:`is_tool`. The schema (name, description, JSON-schema parameters) is built once per
class from the signature and the Google-style ``Args:`` section of the docstring, and
argument checking uses the same pydantic model, so the schema the model sees and the check
the engine applies can never disagree.

Tools report failures by raising a :class:`ToolError` subclass; the class decides the
channel (``wrong_entity``, ``policy_violation``, ...) at the point of failure. Any other
exception raised by a tool is a bug in the domain, not an agent error, and propagates.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from enum import Enum
from functools import cached_property
from typing import Any, ClassVar, TypeVar, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from pytest_quantagent.vocab.channels import Channel

F = TypeVar("F", bound=Callable[..., Any])


class ToolType(str, Enum):
    """What a tool does to state.

    - ``read``: reads the DB only.
    - ``write``: changes the DB (these are replayed when the gold end state is computed).
    - ``think``: no state at all (e.g. ``think``, ``calculate``).
    - ``generic``: anything else (e.g. ``transfer_to_human_agents``).
    """

    READ = "read"
    WRITE = "write"
    THINK = "think"
    GENERIC = "generic"


def is_tool(tool_type: ToolType = ToolType.READ) -> Callable[[F], F]:
    """Mark a toolkit method as a tool of the given type."""

    def mark(func: F) -> F:
        func.__tool__ = True  # type: ignore[attr-defined]
        func.__tool_type__ = tool_type  # type: ignore[attr-defined]
        return func

    return mark


class ToolError(Exception):
    """A tool refused the call. The subclass names the channel; the message is shown to the
    caller as ``Error: <message>`` (τ²-bench's format)."""

    channel: ClassVar[Channel] = Channel.POLICY_VIOLATION

    def __init__(self, message: str, *, entity: str | None = None) -> None:
        super().__init__(message)
        self.entity = entity
        """The offending value (an id), for failure-set analysis."""


class EntityNotFoundError(ToolError):
    """An id that does not exist (user, order, product, item, line, ...)."""

    channel = Channel.WRONG_ENTITY


class PolicyViolationError(ToolError):
    """A business rule refused the action (order not pending, insufficient balance, ...)."""

    channel = Channel.POLICY_VIOLATION


class ArgumentError(ToolError):
    """Argument values the tool cannot accept although their types are right."""

    channel = Channel.BAD_ARGUMENTS


class UserToolError(ToolError):
    """A device-side failure of a user tool (telecom)."""

    channel = Channel.USER_TOOL_ERROR


_ARG_LINE = re.compile(r"^\s{2,}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and per-argument texts."""
    description: list[str] = []
    args: dict[str, str] = {}
    section = "description"
    current: str | None = None
    for line in inspect.cleandoc(doc).splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            section = "args"
            continue
        if stripped in ("Returns:", "Raises:", "Example:", "Examples:"):
            section = "other"
            continue
        if section == "description":
            description.append(line)
        elif section == "args":
            m = _ARG_LINE.match("  " + line if not line.startswith("  ") else line)
            if m and not line.startswith("      "):
                current = m.group(1)
                args[current] = m.group(2).strip()
            elif current and stripped:
                args[current] = (args[current] + " " + stripped).strip()
    return "\n".join(description).strip(), args


class _ArgsBase(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


class ToolSpec:
    """A tool's static description: name, type, schema and argument model. Built once."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.name: str = func.__name__
        self.tool_type: ToolType = func.__tool_type__  # type: ignore[attr-defined]
        self.description, arg_docs = _parse_docstring(func.__doc__ or "")
        sig = inspect.signature(func)
        hints = get_type_hints(func)
        fields: dict[str, Any] = {}
        self.required: tuple[str, ...] = ()
        required: list[str] = []
        for pname, param in sig.parameters.items():
            if pname == "self":
                continue
            ann = hints.get(pname, Any)
            from pydantic import Field

            if param.default is inspect.Parameter.empty:
                fields[pname] = (ann, Field(..., description=arg_docs.get(pname)))
                required.append(pname)
            else:
                fields[pname] = (ann, Field(param.default, description=arg_docs.get(pname)))
        self.required = tuple(required)
        self.parameters: tuple[str, ...] = tuple(fields)
        self._parameter_set: frozenset[str] = frozenset(fields)
        self.args_model: type[BaseModel] = create_model(
            f"{self.name}_args", __base__=_ArgsBase, **fields
        )
        # The model's own validator, called without ``model_validate``'s wrapper (per call).
        self._validator = self.args_model.__pydantic_validator__

    @cached_property
    def openai_schema(self) -> dict[str, Any]:
        """The OpenAI ``tools=[...]`` entry for this tool."""
        params = self.args_model.model_json_schema()
        params.pop("title", None)
        for prop in params.get("properties", {}).values():
            prop.pop("title", None)
        params.setdefault("required", [])
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Check ``arguments`` against the signature; raise :class:`ArgumentError` with a
        message naming the problem (missing/unexpected keys, wrong types)."""
        if not arguments.keys() <= self._parameter_set:
            unexpected = sorted(set(arguments) - self._parameter_set)
            raise ArgumentError(
                f"{self.name}() got an unexpected keyword argument '{unexpected[0]}'"
            )
        missing = [p for p in self.required if p not in arguments]
        if missing:
            names = " and ".join(f"'{m}'" for m in missing)
            plural = "s" if len(missing) > 1 else ""
            raise ArgumentError(
                f"{self.name}() missing {len(missing)} required argument{plural}: {names}"
            )
        try:
            validated = self._validator.validate_python(arguments)
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            raise ArgumentError(f"{self.name}() argument '{loc}': {first['msg']}") from None
        return {k: getattr(validated, k) for k in arguments}


class Toolkit:
    """Base class of a domain's agent or user toolkit.

    Subclasses declare tools with :func:`is_tool`; ``specs()`` (cached per class) gives
    their :class:`ToolSpec`. An instance binds the tools to one DB.
    """

    _specs_cache: ClassVar[dict[type, dict[str, ToolSpec]]] = {}

    def __init__(self, db: Any) -> None:
        self.db = db

    @classmethod
    def specs(cls) -> dict[str, ToolSpec]:
        """Name → spec for every tool of this class, built once per class."""
        cached = Toolkit._specs_cache.get(cls)
        if cached is None:
            cached = {}
            for name in dir(cls):
                attr = getattr(cls, name, None)
                if callable(attr) and getattr(attr, "__tool__", False):
                    cached[name] = ToolSpec(attr)
            Toolkit._specs_cache[cls] = cached
        return cached

    @classmethod
    def tool_names(cls) -> frozenset[str]:
        return frozenset(cls.specs())

    @classmethod
    def openai_schemas(cls) -> list[dict[str, Any]]:
        return [spec.openai_schema for spec in cls.specs().values()]

    def has_tool(self, name: str) -> bool:
        return name in self.specs()

    def tool_type(self, name: str) -> ToolType:
        return self.specs()[name].tool_type

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Validate and run a tool. Raises :class:`ToolError` (subclasses) on refusal."""
        spec = self.specs()[name]
        kwargs = spec.validate(arguments)
        return getattr(self, name)(**kwargs)

"""Registry of backend factories, loaded lazily.

A factory is ``(spec: BackendSpec, options: BackendOptions) -> Backend``
(:class:`~pytest_quantagent.backends.spec.BackendSpec`: the model, where it lives and the
backend's own options; built from an arm by ``quant/loading.py``). Factories import their
heavy dependencies only when called and raise
:class:`~pytest_quantagent.errors.MissingDependencyError` (with the exact pip line) when an
optional extra is missing, so looking a name up never imports torch or vLLM.

Three sources, in order of precedence:

1. ``@register_backend("name")`` in-process (tests, conftest.py);
2. the built-in table below (``"module:function"`` strings, imported on first use);
3. the ``pytest_quantagent.backends`` entry-point group of installed distributions::

       [project.entry-points."pytest_quantagent.backends"]
       mybackend = "my_pkg.backend:create_backend"
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, TypeVar

from pytest_quantagent.errors import UnknownNameError

if TYPE_CHECKING:
    from pytest_quantagent.backends.base import Backend, BackendOptions
    from pytest_quantagent.backends.spec import BackendSpec

BackendFactory = Callable[["BackendSpec", "BackendOptions"], "Backend"]
ENTRY_POINT_GROUP = "pytest_quantagent.backends"

#: Built-in backends: name → "module:factory". Each module defines
#: ``create_backend(spec, options) -> Backend`` and checks its own optional dependencies.
_BUILTIN: dict[str, str] = {
    "mock": "pytest_quantagent.backends.mock:create_backend",
    "openai": "pytest_quantagent.backends.openai_compat:create_backend",
    "transformers": "pytest_quantagent.backends.transformers:create_backend",
    "vllm": "pytest_quantagent.backends.vllm:create_backend",
}

_REGISTERED: dict[str, BackendFactory] = {}
_entry_points_cache: dict[str, str] | None = None

F = TypeVar("F", bound=BackendFactory)


def register_backend(name: str) -> Callable[[F], F]:
    """Decorator registering ``factory`` under ``name`` (replaces an earlier registration)::

        @register_backend("echo")
        def _echo(spec: BackendSpec, options: BackendOptions) -> Backend:
            return EchoBackend()
    """

    def deco(factory: F) -> F:
        _REGISTERED[name] = factory
        return factory

    return deco


def _entry_points() -> dict[str, str]:
    global _entry_points_cache
    if _entry_points_cache is None:
        _entry_points_cache = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return _entry_points_cache


def _available_builtins() -> dict[str, str]:
    # A built-in whose module is not in this build (e.g. vllm.py not written yet) is not listed.
    out = {}
    for name, target in _BUILTIN.items():
        module = target.partition(":")[0]
        if importlib.util.find_spec(module) is not None:
            out[name] = target
    return out


def list_backends() -> list[str]:
    """Names of every available backend (registered, built-in and entry points)."""
    return sorted(set(_REGISTERED) | set(_available_builtins()) | set(_entry_points()))


def _load_target(target: str) -> BackendFactory:
    module, _, attr = target.partition(":")
    factory: BackendFactory = getattr(importlib.import_module(module), attr or "create_backend")
    return factory


def get_backend_factory(name: str) -> BackendFactory:
    """The factory for backend ``name``; :class:`UnknownNameError` lists the known names."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    builtins = _available_builtins()
    if name in builtins:
        return _load_target(builtins[name])
    eps = _entry_points()
    if name in eps:
        return _load_target(eps[name])
    raise UnknownNameError("backend", name, list_backends())


def create_backend(spec: BackendSpec, options: BackendOptions | None = None) -> Backend:
    """Build the backend ``spec`` names through its registered factory (an arm's backend:
    ``quant.loading.create_arm_backend``, which also hands over its on-load quantizer)."""
    from pytest_quantagent.backends.base import BackendOptions

    return get_backend_factory(spec.backend)(spec, options or BackendOptions())

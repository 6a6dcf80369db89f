"""What a backend factory is given: :class:`BackendSpec`, the model and where it lives, and the
backend's own options. A backend knows nothing of arms: no repair mode, no replay source, no
cache key. The arm side (``quant/loading.py: backend_spec``) builds a spec from an arm, and
for an arm quantized on load hands an in-process backend the quantizer to apply to the model
it loaded (:attr:`BackendSpec.prepare_model`).

The attribute names are those of the arm fields they come from (``backend``, ``model``,
``path``, ``base_url``, ``api_key_env``, ``revision``, ``quantization``, ``options``,
``label``, ``kv_cache_dtype``), so a plugin's factory written against an arm reads a spec unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

ModelHook = Callable[[Any], "Mapping[str, Any] | None"]
"""Applied by an in-process backend to the model it loaded, before the model moves to its
device (the arm side's on-load quantizer); returns what it did (kept as the backend's
``quant_report``), or None."""


@dataclass(frozen=True)
class BackendSpec:
    """Everything a backend factory needs to build one backend (no secrets)."""

    backend: str
    """Backend registry name: ``mock``, ``openai``, ``transformers``, ``vllm``, ..."""
    model: str
    """Model id (HF id, served model name, or bundled model name)."""
    path: str | None = None
    """Local checkpoint directory, when the backend loads weights itself."""
    base_url: str | None = None
    """Endpoint of an OpenAI-compatible server."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key (read when the backend is built)."""
    revision: str | None = None
    quantization: str | None = None
    """The checkpoint's quantization scheme as the backend reports it (``describe()``) or
    passes it to its engine (vLLM's ``quantization=``); None = as served or stored.
    Quantizing on load is not the backend's: see :attr:`prepare_model`."""
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The backend's own options (checked by the backend: ``backends/options.py``)."""
    label: str = ""
    """What the backend serves, for messages (an arm label, ``user``, ``judge``)."""
    kv_cache_dtype: str = "auto"
    """The KV cache's dtype (:mod:`pytest_quantagent.backends.kv_cache`): the transformers
    backend emulates it, vLLM's engine gets it, a server's is its own (recorded only)."""
    prepare_model: ModelHook | None = field(default=None, compare=False, repr=False)
    """For an in-process backend: applied to the loaded model before use (see :data:`ModelHook`)."""

"""What an arm's backend is handed: the arm's model, checkpoint, endpoint and backend options
as a :class:`~pytest_quantagent.backends.spec.BackendSpec`, and, for an arm quantized on load,
the quantizer an in-process backend applies to the model it loaded.

Quantizing on load belongs to the arm side: the transformers backend loads a checkpoint and
calls the spec's ``prepare_model`` on it; it does not know the schemes below.

- **On-load schemes** (``quantization`` of a ``backend = "transformers"`` arm, applied to the
  loaded weights; no files needed): ``bf16`` (round to bfloat16), ``int<2-8>-rtn-g<N>`` and
  ``w4a16-rtn-g<N>`` (round-to-nearest, lm_head kept), ``fp8-cast-<none|tensor|channel>``.
- **On-disk schemes** (a checkpoint quantized already; loaded as is): ``awq-w4a16-g128``,
  ``fp8-dynamic``, ``w4a16-g128``.

Build an arm's backend with :func:`create_arm_backend` (the runner, the judge, the LLM user,
the fixtures and ``quantagent decisions`` do).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytest_quantagent.backends.spec import BackendSpec, ModelHook

if TYPE_CHECKING:
    from pytest_quantagent.backends.base import Backend, BackendOptions
    from pytest_quantagent.quant.arms import ArmSpec

#: Schemes applied to the loaded weights (bundled arms; no files needed).
ON_LOAD_SCHEMES: tuple[str, ...] = (
    "bf16", "int<2-8>-rtn-g<N>", "w4a16-rtn-g<N>", "fp8-cast-<none|tensor|channel>")
#: Schemes that describe a checkpoint already quantized on disk (loaded as is).
ON_DISK_SCHEMES: tuple[str, ...] = ("awq-w4a16-g128", "fp8-dynamic", "w4a16-g128")
#: Backends that load the weights in process and apply ``BackendSpec.prepare_model``.
IN_PROCESS_BACKENDS: frozenset[str] = frozenset({"transformers"})

_RTN = re.compile(r"(?:int([2-8])-rtn|w4a16-rtn)-g(-?\d+)")
_FP8 = re.compile(r"fp8-cast-(none|tensor|channel)")


def _check_scheme(scheme: str) -> None:
    if scheme == "bf16" or _RTN.fullmatch(scheme) or _FP8.fullmatch(scheme):
        return
    raise ValueError(
        f"quantization {scheme!r} is not understood by the transformers backend; on-load schemes: "
        f"{', '.join(ON_LOAD_SCHEMES)}; on-disk: {', '.join(ON_DISK_SCHEMES)}"
    )


def apply_on_load_quantization(model: Any, scheme: str | None) -> dict[str, Any] | None:
    """Fake-quantize ``model`` in place for an on-load scheme; None/on-disk schemes: no-op."""
    if scheme is None or scheme in ON_DISK_SCHEMES:
        return None
    _check_scheme(scheme)
    import torch

    from pytest_quantagent.quant.rtn import fake_quantize_model

    if scheme == "bf16":
        with torch.no_grad():
            for p in model.parameters():
                p.data.copy_(p.data.to(torch.bfloat16).to(p.dtype))
        return {"scheme": "bf16"}
    m = _RTN.fullmatch(scheme)
    if m:
        # lm_head stays full precision, as in llm-compressor's W4A16 recipes and vLLM.
        rep = fake_quantize_model(model, "int4-rtn", bits=int(m.group(1) or 4),
                                  group_size=int(m.group(2)), include_lm_head=False)
        return {"scheme": scheme, "mean_rel_error": rep.mean_rel_error, "layers": len(rep.layers)}
    m = _FP8.fullmatch(scheme)
    assert m is not None  # _check_scheme
    rep = fake_quantize_model(model, "fp8-cast", fp8_scale=m.group(1), include_lm_head=False)  # type: ignore[arg-type]
    return {"scheme": scheme, "mean_rel_error": rep.mean_rel_error, "layers": len(rep.layers)}


def on_load_quantizer(scheme: str | None) -> ModelHook | None:
    """The quantizer of an on-load ``scheme`` (a :data:`~pytest_quantagent.backends.spec.ModelHook`),
    None for no scheme or an on-disk one; ``ValueError`` (naming the schemes) for anything else,
    before any model is loaded."""
    if scheme is None or scheme in ON_DISK_SCHEMES:
        return None
    _check_scheme(scheme)
    hook: ModelHook = functools.partial(apply_on_load_quantization, scheme=scheme)
    return hook


def backend_spec(arm: ArmSpec) -> BackendSpec:
    """What ``arm``'s backend factory is given: its model, checkpoint, endpoint and options,
    and, when its backend loads weights in process, the quantizer of its on-load scheme."""
    options: Mapping[str, Any] = arm.options
    return BackendSpec(
        backend=arm.backend, model=arm.model, path=arm.path, base_url=arm.base_url,
        api_key_env=arm.api_key_env, revision=arm.revision, quantization=arm.quantization,
        options=options, label=arm.label, kv_cache_dtype=arm.kv_cache_dtype,
        prepare_model=(on_load_quantizer(arm.quantization)
                       if arm.backend in IN_PROCESS_BACKENDS else None),
    )


def create_arm_backend(arm: ArmSpec, options: BackendOptions | None = None) -> Backend:
    """Build ``arm``'s backend through the backend registry (:func:`backend_spec` handed to
    its factory)."""
    from pytest_quantagent.backends.registry import create_backend

    return create_backend(backend_spec(arm), options)

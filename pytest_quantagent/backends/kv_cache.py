"""KV-cache precision: the dtypes an arm may store its keys and values in, and the in-process
emulation the transformers backend applies when keys and values are written to its cache.

An arm's ``kv_cache_dtype`` (the ``+kv-DTYPE`` label modifier or the arms-TOML key) is one of
:data:`KV_CACHE_DTYPES`:

==============  ==================================================================================
dtype           what is stored (transformers backend: fake-quantized, i.e. rounded and kept in
                the compute dtype; vLLM: passed to the engine as ``kv_cache_dtype``)
==============  ==================================================================================
``auto``        the compute dtype (no KV quantization; the default)
``int8``        symmetric absmax int8, one scale per token and head (over ``head_dim``);
                emulated only (vLLM has no int8 KV cache)
``int4``        the same at 4 bits (levels -7..7): a deliberately coarse positive control
``fp8``         FP8 E4M3 (OCP ``float8_e4m3fn``), one per-tensor scale of 1.0, saturating at
                +-448: vLLM's ``fp8`` when the checkpoint carries no calibrated k/v scales
``fp8_e4m3``    the same as ``fp8`` (vLLM's explicit name)
``fp8_e5m2``    FP8 E5M2 (``float8_e5m2``), scale 1.0, saturating at +-57344
==============  ==================================================================================

Keys are quantized after RoPE, as a serving engine stores them. Every scheme is a function of
one token's one head alone, so a batched decode stays batch-invariant, and a prefix cache that
keeps the stored (quantized) values serves a prefix exactly as recomputing it would.

No heavy import at module level: the arms config reads :data:`KV_CACHE_DTYPES`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

AUTO = "auto"
#: Every KV-cache dtype an arm may name (``auto``: not quantized).
KV_CACHE_DTYPES: tuple[str, ...] = (AUTO, "int8", "int4", "fp8", "fp8_e4m3", "fp8_e5m2")
#: What vLLM's ``kv_cache_dtype`` accepts of them (its ``fp8`` is E4M3).
VLLM_KV_CACHE_DTYPES: tuple[str, ...] = (AUTO, "fp8", "fp8_e4m3", "fp8_e5m2")
#: How each dtype is emulated in process (the backend's ``describe()``).
KV_SCHEMES: dict[str, str] = {
    AUTO: "not quantized",
    "int8": "int8 symmetric absmax per token and head, round trip to the compute dtype",
    "int4": "int4 symmetric absmax per token and head (levels -7..7), round trip to the compute dtype",
    "fp8": "float8_e4m3fn, per-tensor scale 1.0 (saturating at 448), round trip to the compute dtype",
    "fp8_e4m3": "float8_e4m3fn, per-tensor scale 1.0 (saturating at 448), round trip to the compute dtype",
    "fp8_e5m2": "float8_e5m2, per-tensor scale 1.0 (saturating at 57344), round trip to the compute dtype",
}
_INT_LEVELS = {"int8": 127, "int4": 7}


def check_kv_cache_dtype(value: object, where: str = "kv_cache_dtype") -> str:
    """``value`` when it is one of :data:`KV_CACHE_DTYPES`; else ``ValueError`` naming
    ``where``, the value and the allowed dtypes."""
    if not isinstance(value, str) or value not in KV_CACHE_DTYPES:
        raise ValueError(f"{where} {value!r} is not a KV-cache dtype; allowed: "
                         + ", ".join(KV_CACHE_DTYPES))
    return value


def fake_quantize_kv(x: torch.Tensor, dtype: str) -> torch.Tensor:
    """``x`` (keys or values, ``head_dim`` last) as stored in a ``dtype`` KV cache and read
    back, in ``x``'s dtype. Elementwise per (token, head) row: no reduction crosses rows."""
    import torch

    if dtype == AUTO:
        return x
    if dtype not in KV_SCHEMES:
        check_kv_cache_dtype(dtype)
    levels = _INT_LEVELS.get(dtype)
    if levels is not None:
        amax = x.abs().amax(dim=-1, keepdim=True)
        scale = torch.where(amax > 0, amax / levels, torch.ones_like(amax))
        return torch.round(x / scale).clamp_(-levels, levels) * scale
    fp8 = torch.float8_e5m2 if dtype == "fp8_e5m2" else torch.float8_e4m3fn
    limit = float(torch.finfo(fp8).max)
    return x.clamp(-limit, limit).to(fp8).to(x.dtype)


def quantized_cache(dtype: str) -> Any:
    """A transformers ``DynamicCache`` that stores keys and values through
    :func:`fake_quantize_kv` (for ``model.generate``, the path that decodes one request at a
    time): the attention of every position reads the stored values, as in the batched decoder."""
    from transformers import DynamicCache

    class _QuantizedKV(DynamicCache):
        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
                   *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            return super().update(fake_quantize_kv(key_states, dtype),
                                  fake_quantize_kv(value_states, dtype), layer_idx, *args, **kwargs)

    return _QuantizedKV()

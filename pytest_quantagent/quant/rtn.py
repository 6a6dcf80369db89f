"""Plain-torch weight quantizers for CPU experiments: round-to-nearest int and e4m3 cast.

Both are *fake* quantization: weights are quantized and immediately dequantized, so the
result is an ordinary float checkpoint whose values lie on the quantization grid, and any
transformers build loads it. Activations stay in the compute dtype (weight-only).

- :func:`rtn_quantize` — asymmetric (min/max with a zero point, the W4A16 layout
  llm-compressor and AutoAWQ use) or symmetric (absmax) round-to-nearest, ``bits`` bits,
  groups of ``group_size`` consecutive input features per output row. ``group_size=-1``
  or a group size ≥ ``in_features`` is per-row (per-channel) quantization: with the
  reference model's hidden size 128, g128 *is* per-row for every matrix except the MLP
  down-projection.
- :func:`fp8_e4m3_cast` — ``float8_e4m3fn`` round trip, raw (no scale: small weights
  underflow to subnormals/zero, a biased shrinkage) or with a per-tensor or per-output-
  channel absmax/448 scale (what FP8-dynamic checkpoints do for weights).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch
    from torch import nn

FP8_E4M3_MAX = 448.0
Fp8Scale = Literal["none", "tensor", "channel"]
FP8_SCALES: tuple[str, ...] = ("none", "tensor", "channel")


def rtn_quantize(
    w: torch.Tensor, *, bits: int = 4, group_size: int = 128, symmetric: bool = False
) -> torch.Tensor:
    """Round-to-nearest fake quantization of a 2-D weight ``(out, in)``, grouped along ``in``.

    Asymmetric: ``scale = (max - min) / (2**bits - 1)``, ``zero = round(-min / scale)``,
    ``q = clamp(round(w / scale) + zero, 0, 2**bits - 1)``, ``w' = (q - zero) * scale``,
    so every element's error is at most ``scale / 2`` (plus the zero-point rounding, which
    is absorbed because ``zero`` is an integer and the grid still spans ``[min, max]``
    up to ``scale / 2``). Symmetric: ``scale = absmax / (2**(bits-1) - 1)``, ``q`` in
    ``[-(2**(bits-1) - 1), 2**(bits-1) - 1]``.
    """
    import torch

    if w.dim() != 2:
        raise ValueError(f"rtn_quantize needs a 2-D weight (out, in), got shape {tuple(w.shape)}")
    if not 2 <= bits <= 8:
        raise ValueError(f"bits ({bits}) must be between 2 and 8")
    out_f, in_f = w.shape
    g = in_f if group_size == -1 or group_size >= in_f else group_size
    if group_size != -1 and group_size <= 0:
        raise ValueError(f"group_size ({group_size}) must be a positive integer or -1 (per row)")
    if in_f % g != 0:
        raise ValueError(
            f"group_size {group_size} does not divide in_features {in_f}; "
            f"use a divisor of {in_f} or -1 (per row)"
        )
    x = w.detach().to(torch.float32).reshape(out_f, in_f // g, g)
    if symmetric:
        qmax = 2 ** (bits - 1) - 1
        scale = x.abs().amax(dim=-1, keepdim=True) / qmax
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
        q = torch.clamp(torch.round(x / scale), -qmax, qmax)
        deq = q * scale
    else:
        qmax = 2**bits - 1
        lo = x.amin(dim=-1, keepdim=True)
        hi = x.amax(dim=-1, keepdim=True)
        scale = (hi - lo) / qmax
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
        zero = torch.round(-lo / scale)
        q = torch.clamp(torch.round(x / scale) + zero, 0, qmax)
        deq = (q - zero) * scale
    return deq.reshape(out_f, in_f).to(w.dtype)


def fp8_e4m3_cast(w: torch.Tensor, *, scale: Fp8Scale = "channel") -> torch.Tensor:
    """``float8_e4m3fn`` round trip of ``w`` with no scale, a per-tensor or a per-row scale."""
    import torch

    if scale not in FP8_SCALES:
        raise ValueError(f"fp8 scale {scale!r} is not one of {', '.join(map(repr, FP8_SCALES))}")
    x = w.detach().to(torch.float32)
    if scale == "none":
        s = torch.ones((), dtype=torch.float32)
    elif scale == "tensor":
        s = x.abs().amax() / FP8_E4M3_MAX
    else:
        s = x.abs().amax(dim=-1, keepdim=True) / FP8_E4M3_MAX
    s = torch.where(s == 0, torch.ones_like(s), s)
    y = (x / s).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32) * s
    return y.to(w.dtype)


@dataclass(frozen=True)
class QuantReport:
    """What a fake quantization did: layers touched and mean relative weight error."""

    scheme: str
    layers: list[str]
    mean_rel_error: float


def linear_layers(model: nn.Module, *, include_lm_head: bool = True) -> Iterable[tuple[str, nn.Linear]]:
    """Every ``nn.Linear`` of ``model`` (``lm_head`` optional), in module order."""
    from torch import nn

    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear):
            if not include_lm_head and name.endswith("lm_head"):
                continue
            yield name, mod


def fake_quantize_model(
    model: nn.Module,
    scheme: str,
    *,
    group_size: int = 128,
    bits: int = 4,
    symmetric: bool = False,
    fp8_scale: Fp8Scale = "channel",
    include_lm_head: bool = True,
) -> QuantReport:
    """Fake-quantize every Linear weight of ``model`` in place.

    ``scheme``: ``"int4-rtn"`` (see :func:`rtn_quantize`; ``bits`` may change it) or
    ``"fp8-cast"`` (see :func:`fp8_e4m3_cast`). Embeddings are left alone (untied).
    """
    import torch

    if scheme not in ("int4-rtn", "fp8-cast"):
        raise ValueError(f"fake quantization scheme {scheme!r} is not one of 'int4-rtn', 'fp8-cast'")
    names: list[str] = []
    errs: list[float] = []
    with torch.no_grad():
        for name, lin in linear_layers(model, include_lm_head=include_lm_head):
            w = lin.weight.data
            if scheme == "int4-rtn":
                q = rtn_quantize(w, bits=bits, group_size=group_size, symmetric=symmetric)
            else:
                q = fp8_e4m3_cast(w, scale=fp8_scale)
            errs.append(float((q.float() - w.float()).norm() / w.float().norm().clamp_min(1e-12)))
            lin.weight.data.copy_(q)
            names.append(name)
    return QuantReport(scheme=scheme, layers=names, mean_rel_error=sum(errs) / max(1, len(errs)))

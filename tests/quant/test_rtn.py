"""Plain-torch RTN int4 and e4m3 cast: error bounds, grid, group size, model application.

Reference for RTN: a direct per-group NumPy loop written from the textbook definition
(asymmetric min/max with an integer zero point, e.g. Jacob et al. 2018, "Quantization and
Training of Neural Networks for Efficient Integer-Arithmetic-Only Inference", eq. 1–2);
tolerance 1e-6 (float32 arithmetic in both).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pytest_quantagent.quant.rtn import (  # noqa: E402
    FP8_E4M3_MAX,
    fake_quantize_model,
    fp8_e4m3_cast,
    rtn_quantize,
)


def _numpy_rtn(w: np.ndarray, group: int, bits: int = 4) -> np.ndarray:
    out = np.empty_like(w)
    qmax = 2**bits - 1
    for r in range(w.shape[0]):
        for g0 in range(0, w.shape[1], group):
            x = w[r, g0 : g0 + group].astype(np.float32)
            lo, hi = x.min(), x.max()
            scale = (hi - lo) / qmax if hi > lo else 1.0
            zero = np.round(-lo / scale)
            q = np.clip(np.round(x / scale) + zero, 0, qmax)
            out[r, g0 : g0 + group] = (q - zero) * scale
    return out


@pytest.fixture
def w() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randn(8, 256, generator=g) * 0.05


@pytest.mark.parametrize("group", [32, 64, 128, 256])
def test_rtn_matches_textbook_reference(w: torch.Tensor, group: int) -> None:
    ours = rtn_quantize(w, group_size=group).numpy()
    ref = _numpy_rtn(w.numpy(), group)
    np.testing.assert_allclose(ours, ref, atol=1e-6)


@pytest.mark.parametrize("group", [32, 128, -1])
def test_rtn_error_bound_and_grid(w: torch.Tensor, group: int) -> None:
    q = rtn_quantize(w, group_size=group)
    g = w.shape[1] if group == -1 else group
    wg = w.reshape(w.shape[0], -1, g)
    qg = q.reshape(w.shape[0], -1, g)
    scale = (wg.amax(-1) - wg.amin(-1)) / 15
    err = (qg - wg).abs().amax(-1)
    # Each element is within half a step of its group's grid (+ float slack).
    assert torch.all(err <= scale / 2 + 1e-6)
    # At most 16 distinct values per group: it really is 4-bit.
    for row in qg.reshape(-1, g):
        assert torch.unique(row).numel() <= 16


def test_smaller_groups_have_smaller_worst_case_error(w: torch.Tensor) -> None:
    bound = {g: float(((lambda x: (x.amax(-1) - x.amin(-1)).max())(w.reshape(8, -1, g))) / 30)
             for g in (32, 256)}
    assert bound[32] <= bound[256]
    e32 = float((rtn_quantize(w, group_size=32) - w).abs().max())
    e256 = float((rtn_quantize(w, group_size=256) - w).abs().max())
    assert e32 <= bound[32] + 1e-6 and e256 <= bound[256] + 1e-6


def test_group_size_minus_one_and_oversize_are_per_row(w: torch.Tensor) -> None:
    assert torch.equal(rtn_quantize(w, group_size=-1), rtn_quantize(w, group_size=256))
    assert torch.equal(rtn_quantize(w, group_size=512), rtn_quantize(w, group_size=256))


def test_symmetric_grid_is_centred(w: torch.Tensor) -> None:
    q = rtn_quantize(w, group_size=32, symmetric=True)
    scale = w.reshape(8, -1, 32).abs().amax(-1, keepdim=True) / 7
    steps = q.reshape(8, -1, 32) / scale
    assert torch.allclose(steps, steps.round(), atol=1e-4)
    assert steps.abs().max() <= 7 + 1e-4


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"group_size": 48}, "does not divide in_features 256"),
     ({"group_size": 0}, "group_size \\(0\\)"),
     ({"bits": 1}, "bits \\(1\\)")],
)
def test_bad_arguments_name_the_value(w: torch.Tensor, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        rtn_quantize(w, **kwargs)
    with pytest.raises(ValueError, match="2-D weight"):
        rtn_quantize(w[0])


def test_fp8_cast_values_are_e4m3_representable(w: torch.Tensor) -> None:
    for scale in ("channel", "tensor"):
        q = fp8_e4m3_cast(w, scale=scale)  # type: ignore[arg-type]
        s = (w.abs().amax(-1, keepdim=True) if scale == "channel" else w.abs().amax()) / FP8_E4M3_MAX
        x = q / s
        assert torch.allclose(x.to(torch.float8_e4m3fn).to(torch.float32), x, atol=1e-3, rtol=1e-5)
        # e4m3 keeps 3 mantissa bits: relative error of a normal value ≤ 2^-4.
        big = w.abs() > s * 2**-6 * 8
        assert torch.all(((q - w).abs() / w.abs())[big] <= 2**-4 + 1e-6)
    # Raw cast (no scale) flushes weights below e4m3's smallest subnormal (2^-9) to zero.
    tiny = torch.tensor([[1e-4, -1e-4, 0.5]])
    assert fp8_e4m3_cast(tiny, scale="none").tolist() == [[0.0, 0.0, 0.5]]
    with pytest.raises(ValueError, match="fp8 scale 'row'"):
        fp8_e4m3_cast(w, scale="row")  # type: ignore[arg-type]


def test_fake_quantize_model_touches_linears_only() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rep = fake_quantize_model(model, "int4-rtn", group_size=32, include_lm_head=False)
    assert "lm_head" not in rep.layers and len(rep.layers) == 7
    after = dict(model.named_parameters())
    assert torch.equal(before["lm_head.weight"], after["lm_head.weight"])
    assert torch.equal(before["model.embed_tokens.weight"], after["model.embed_tokens.weight"])
    assert not torch.equal(before["model.layers.0.mlp.up_proj.weight"], after["model.layers.0.mlp.up_proj.weight"])
    assert 0.0 < rep.mean_rel_error < 0.2
    with pytest.raises(ValueError, match="'int3'"):
        fake_quantize_model(model, "int3")

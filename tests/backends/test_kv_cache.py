"""The transformers backend's KV-cache quantization (issue 38 item 3): keys and values are
rounded as they are written to the cache, the prefix cache keeps the rounded values, every
row stays a function of its own prompt (batch invariance, prefix-cache hit = miss), the
unbatched ``model.generate`` path rounds the same way, and the version names the dtype. The
bundled model's KV arms also run the batched-decode invariance tests
(``test_batched_decode.py``).

The rounding itself is checked against an independent numpy reference (int8/int4) and the
format's own properties (fp8: representable values are kept, others land on a neighbour)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from pytest_quantagent.backends.base import BackendOptions  # noqa: E402
from pytest_quantagent.backends.batched_decode import DecodeRow  # noqa: E402
from pytest_quantagent.backends.kv_cache import check_kv_cache_dtype, fake_quantize_kv  # noqa: E402
from pytest_quantagent.backends.transformers import TransformersBackend, create_backend  # noqa: E402
from pytest_quantagent.bundled.model import ModelSize, make_model  # noqa: E402
from pytest_quantagent.bundled.tokenizer import DomainTokenizer  # noqa: E402
from pytest_quantagent.quant.arms import resolve_arm  # noqa: E402
from pytest_quantagent.quant.loading import backend_spec  # noqa: E402
from pytest_quantagent.training.train import save_model  # noqa: E402
from tests.backends.test_batched_decode import (  # noqa: E402
    _alone,
    _next_turn,
    _requests,
    _view,
    needs_bundled,
)


def _numpy_absmax(x: np.ndarray, levels: int) -> np.ndarray:
    """Symmetric absmax rounding per last-axis row, written independently of the backend
    (float64, numpy's round-half-to-even like torch.round)."""
    amax = np.abs(x).max(axis=-1, keepdims=True)
    scale = np.where(amax > 0, amax / levels, 1.0)
    return np.clip(np.round(x / scale), -levels, levels) * scale


@pytest.mark.parametrize(("dtype", "levels"), [("int8", 127), ("int4", 7)])
def test_integer_kv_rounding_is_absmax_per_token_and_head(dtype: str, levels: int) -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn((2, 3, 17, 16), generator=g) * torch.linspace(0.01, 30, 17)[:, None]
    x[0, 1, 4] = 0.0  # an all-zero row stays zero (no 0/0)
    y = fake_quantize_kv(x, dtype)
    ref = _numpy_absmax(x.double().numpy(), levels)
    # float32 vs float64 arithmetic: equal to one float32 rounding of the row's scale
    np.testing.assert_allclose(y.double().numpy(), ref, rtol=0, atol=1e-6 * float(x.abs().max()))
    scale = x.abs().amax(-1, keepdim=True) / levels
    assert bool(((y - x).abs() <= scale / 2 * (1 + 1e-5)).all())  # within half a step
    assert bool((y[0, 1, 4] == 0).all())
    # every row on its own: quantizing one row alone gives its bits in the batch
    assert torch.equal(fake_quantize_kv(x[1, 2, 5:6].clone(), dtype), y[1, 2, 5:6])


@pytest.mark.parametrize(("dtype", "limit", "mantissa_bits"), [
    ("fp8", 448.0, 3), ("fp8_e4m3", 448.0, 3), ("fp8_e5m2", 57344.0, 2)])
def test_fp8_kv_rounding_keeps_representable_values_and_saturates(
        dtype: str, limit: float, mantissa_bits: int) -> None:
    exact = torch.tensor([0.0, 1.0, -1.5, 0.25, 2.0 ** -6, limit, -limit])
    assert torch.equal(fake_quantize_kv(exact, dtype), exact)  # scale 1.0: kept as is
    big = torch.tensor([limit * 4, -limit * 10])
    assert torch.equal(fake_quantize_kv(big, dtype), torch.tensor([limit, -limit]))  # saturates
    x = torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 8
    y = fake_quantize_kv(x, dtype)
    normal = x.abs() > 2.0 ** -5
    rel = ((y - x).abs() / x.abs())[normal]
    assert float(rel.max()) <= 2.0 ** -(mantissa_bits + 1) + 1e-7  # round to nearest
    assert float(rel.max()) > 2.0 ** -(mantissa_bits + 3)  # and it does round


def test_bad_dtype_is_refused_with_the_allowed_list(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kv_cache_dtype 'int2' is not a KV-cache dtype; "
                                         "allowed: auto, int8, int4, fp8, fp8_e4m3, fp8_e5m2"):
        check_kv_cache_dtype("int2")
    with pytest.raises(ValueError, match="'int2' is not a KV-cache dtype"):
        TransformersBackend(tmp_path, kv_cache_dtype="int2")  # before any model is loaded


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    corpus = ['{"name":"get_user","arguments":{"user_id":"u_001"}} hello there'] * 30
    tok = DomainTokenizer.build(corpus, ["u_001", "u_002"])
    model = make_model(tok, ModelSize(hidden=32, layers=2, heads=2, mlp=64, max_positions=512), seed=0)
    out = tmp_path_factory.mktemp("tiny-kv")
    save_model(model, tok, out)
    return out


def _rows(backend: TransformersBackend, n: int = 4, max_new: int = 8) -> list[DecodeRow]:
    decoder = backend.batched_decoder()
    assert decoder is not None, backend.batching_reason
    decoder.cache.clear()
    rows = [DecodeRow(backend.prompt_ids(r), max_new, True) for r in _requests(n)]
    decoder.decode(rows, 64)
    return rows


@pytest.mark.parametrize("dtype", ["int8", "fp8", "int4"])
def test_a_kv_arm_decodes_alike_alone_in_a_batch_and_from_the_prefix_cache(
        tiny_dir: Path, dtype: str) -> None:
    backend = TransformersBackend(tiny_dir, max_new_tokens=12, kv_cache_dtype=dtype)
    assert backend.batched_decoder() is not None, backend.batching_reason  # passed its self-check
    reqs = _requests(6)
    alone = _alone(backend, reqs)
    assert [_view(g) for g in backend.generate_batch(reqs[::-1])] == alone[::-1]
    answers = backend.generate_batch(reqs)
    second = [_next_turn(backend, r, a) for r, a in zip(reqs, answers, strict=True)]
    decoder = backend.batched_decoder()
    assert decoder is not None
    before = decoder.cache.reused
    warm = [_view(g) for g in backend.generate_batch(second)]
    assert decoder.cache.reused > before  # the cached (quantized) prefix was used
    assert warm == _alone(backend, second)


def test_the_prefix_cache_holds_the_quantized_keys_and_values(tiny_dir: Path) -> None:
    plain = TransformersBackend(tiny_dir, max_new_tokens=8)
    kv = TransformersBackend(tiny_dir, max_new_tokens=8, kv_cache_dtype="int8")
    for b in (plain, kv):
        _rows(b)
    nodes = {}
    for name, b in (("plain", plain), ("kv", kv)):
        decoder = b.batched_decoder()
        assert decoder is not None
        nodes[name] = next(iter(decoder.cache.root.children.values())).kv
    raw, stored = nodes["plain"], nodes["kv"]
    assert raw is not None and stored is not None
    # Layer 0's keys and values are computed from the embeddings alone, so the KV arm stores
    # exactly the rounded raw values there; deeper layers see rounded attention upstream.
    torch.testing.assert_close(stored[0], fake_quantize_kv(raw[0], "int8"), rtol=0, atol=0)
    assert not torch.equal(stored[0], raw[0])
    # every stored row is on its own int8 grid (rounding it again moves nothing visible)
    torch.testing.assert_close(fake_quantize_kv(stored, "int8"), stored, rtol=1e-6, atol=1e-7)


def test_the_generate_path_rounds_the_kv_cache_like_the_batched_path(
        tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Requests the batched path does not take (sampled ones, unsupported models) go through
    # model.generate; a KV arm's cache rounds there too, to the batched path's logits up to
    # float rounding (the two paths differ in the last bits, as without KV quantization).
    def logits_of_generate(backend: TransformersBackend) -> list[list[Any]]:
        seen: list[list[Any]] = []
        real = backend.model.generate

        def spy(**kw: Any) -> Any:
            res = real(**kw)
            seen.append([lg[0] for lg in res.logits])
            return res

        monkeypatch.setattr(backend.model, "generate", spy)
        for r in reqs:
            backend._run([r], [backend.prompt_ids(r)])
        return seen

    reqs = _requests(3, max_tokens=10, want_margins=True)
    kv = TransformersBackend(tiny_dir, max_new_tokens=10, kv_cache_dtype="int8")
    plain = TransformersBackend(tiny_dir, max_new_tokens=10)
    batched = _rows(kv, 3, 10)
    via_generate, unquantized = logits_of_generate(kv), logits_of_generate(plain)
    worst_same = worst_other = 0.0
    for row, gen, ref in zip(batched, via_generate, unquantized, strict=True):
        assert len(gen) >= len(row.tokens) >= 3
        for a, b, c in zip(row.logits, gen, ref, strict=False):
            worst_same = max(worst_same, float((a - b).abs().max()))
            worst_other = max(worst_other, float((a - c).abs().max()))
    # this small random model's logits are ~1: measured 9e-8 between the paths, 2.8e-4
    # between the KV arm and the unquantized one
    assert worst_same < 1e-5 and worst_other > 1e-4, (worst_same, worst_other)


def test_version_and_description_name_the_kv_dtype(tiny_dir: Path) -> None:
    plain = TransformersBackend(tiny_dir, max_new_tokens=4)
    kv = TransformersBackend(tiny_dir, max_new_tokens=4, kv_cache_dtype="fp8")
    assert kv.version() == f"{plain.version()}/kv-fp8"
    d = kv.describe()
    assert d["kv_cache_dtype"] == "fp8" and "float8_e4m3fn" in d["kv_cache_scheme"]
    assert plain.describe()["kv_cache_dtype"] == "auto"


def _max_logit_diff(a: list[DecodeRow], b: list[DecodeRow]) -> float:
    """Largest |logit| difference over the steps where both rows fed the same tokens."""
    worst = 0.0
    for ra, rb in zip(a, b, strict=True):
        for la, lb, ta, tb in zip(ra.logits, rb.logits, ra.tokens, rb.tokens, strict=False):
            worst = max(worst, float((la - lb).abs().max()))
            if ta != tb:
                break
    return worst


@needs_bundled
def test_kv_int8_moves_the_bundled_models_logits_a_little_and_int4_kv_more() -> None:
    def rows(label: str) -> list[DecodeRow]:
        b = create_backend(backend_spec(resolve_arm(label, "tiny-agent-prone")), BackendOptions())
        return _rows(b, 5, 12)

    int4, kv8, kv4 = rows("int4"), rows("int4+kv-int8"), rows("int4+kv-int4")
    d8, d4 = _max_logit_diff(int4, kv8), _max_logit_diff(int4, kv4)
    scale = max(float(lg.abs().max()) for r in int4 for lg in r.logits)
    print(f"max |logit diff| vs int4 (logits up to {scale:.1f}): kv-int8 {d8:.4f}, kv-int4 {d4:.4f}")
    assert 0 < d8 < 0.05 * scale  # a real difference, small beside the logits
    assert d4 > 2 * d8  # the coarse positive control moves them further
    assert sum(r.tokens == s.tokens for r, s in zip(int4, kv8, strict=True)) >= 4

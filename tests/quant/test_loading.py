"""Quantizing on load is the arm side's (``quant/loading.py``): an arm becomes a backend spec,
and an in-process backend is handed the quantizer of its on-load scheme, which it applies to
the model it loaded. (Moved from ``tests/backends/test_transformers.py``.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.backends import registry
from pytest_quantagent.backends.base import Backend, BackendOptions, GenerateRequest, Generation
from pytest_quantagent.backends.spec import BackendSpec
from pytest_quantagent.quant.arms import ArmSpec, resolve_arm
from pytest_quantagent.quant.loading import (
    apply_on_load_quantization,
    backend_spec,
    create_arm_backend,
    on_load_quantizer,
)

#: The bundled models (``backends/transformers.py``'s BUNDLED_DIR, without importing torch).
BUNDLED_DIR = Path(__file__).resolve().parents[2] / "pytest_quantagent" / "bundled" / "models"


def _arm(path: Path, quantization: str | None) -> ArmSpec:
    return ArmSpec(label="q", backend="transformers", model=str(path), path=str(path),
                   quantization=quantization)


def test_backend_spec_carries_the_arm_fields_a_backend_reads() -> None:
    arm = ArmSpec(label="int4+repair", backend="openai", model="m", base_url="http://h:1/v1",
                  api_key_env="K", quantization="w4a16-awq-g128", revision="r1",
                  repair="reflexive", options={"timeout_s": 5})
    spec = backend_spec(arm)
    assert spec == BackendSpec(backend="openai", model="m", base_url="http://h:1/v1",
                               api_key_env="K", quantization="w4a16-awq-g128", revision="r1",
                               options={"timeout_s": 5}, label="int4+repair")
    # A served arm's scheme describes the server's weights: nothing to apply, nothing checked.
    assert spec.prepare_model is None
    assert not hasattr(spec, "repair") and not hasattr(spec, "source")


def test_only_in_process_on_load_schemes_get_a_quantizer(tmp_path: Path) -> None:
    assert backend_spec(_arm(tmp_path, None)).prepare_model is None
    assert backend_spec(_arm(tmp_path, "awq-w4a16-g128")).prepare_model is None  # on disk
    assert backend_spec(_arm(tmp_path, "int4-rtn-g128")).prepare_model is not None
    assert on_load_quantizer("fp8-cast-channel") is not None


def test_unknown_scheme_is_refused_before_any_model_is_loaded(tmp_path: Path) -> None:
    # tmp_path holds no checkpoint: the refusal comes from the scheme, not from loading.
    with pytest.raises(ValueError, match=r"'int4-awq' is not understood.*on-load schemes: bf16"):
        create_arm_backend(_arm(tmp_path, "int4-awq"))


def test_factory_is_handed_a_spec_with_the_quantizer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(registry, "_REGISTERED", {})
    seen: list[BackendSpec] = []

    class Echo(Backend):
        async def generate(self, request: GenerateRequest) -> Generation:
            return Generation(content="x")

    @registry.register_backend("transformers")
    def _factory(spec: BackendSpec, options: BackendOptions) -> Backend:
        seen.append(spec)
        return Echo()

    create_arm_backend(_arm(tmp_path, "int3-rtn-g128"))
    (spec,) = seen
    assert isinstance(spec, BackendSpec) and spec.quantization == "int3-rtn-g128"
    assert spec.prepare_model is not None


needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
    reason="needs torch and transformers")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 2-layer model in the bundled format (fast to load and run)."""
    from pytest_quantagent.bundled.model import ModelSize, make_model
    from pytest_quantagent.bundled.tokenizer import DomainTokenizer
    from pytest_quantagent.training.train import save_model

    corpus = ['{"name":"get_user","arguments":{"user_id":"u_001"}} hello there'] * 30
    tok = DomainTokenizer.build(corpus, ["u_001", "u_002"])
    model = make_model(tok, ModelSize(hidden=32, layers=2, heads=2, mlp=64, max_positions=256), seed=0)
    out = tmp_path_factory.mktemp("tiny")
    save_model(model, tok, out)
    return out


@needs_torch
def test_on_load_quantization_schemes(tiny_dir: Path) -> None:
    import torch

    from pytest_quantagent.backends.transformers import TransformersBackend

    base = TransformersBackend(tiny_dir).model
    rtn = create_arm_backend(_arm(tiny_dir, "int4-rtn-g32"))
    bf = create_arm_backend(_arm(tiny_dir, "bf16"))
    assert isinstance(rtn, TransformersBackend) and isinstance(bf, TransformersBackend)
    w0 = base.model.layers[0].mlp.up_proj.weight
    w_rtn = rtn.model.model.layers[0].mlp.up_proj.weight
    assert not torch.equal(w0, w_rtn)
    assert torch.unique(w_rtn[0, :32]).numel() <= 16
    assert torch.equal(bf.model.model.layers[0].mlp.up_proj.weight, w0.to(torch.bfloat16).float())
    # lm_head stays full precision, as in the llm-compressor recipes.
    assert torch.equal(rtn.model.lm_head.weight, base.lm_head.weight)
    with pytest.raises(ValueError, match="'int3' is not understood"):
        apply_on_load_quantization(base, "int3")


@needs_torch
@pytest.mark.skipif(not (BUNDLED_DIR / "tiny-agent-prone" / "config.json").is_file(),
                    reason="bundled model not built")
@pytest.mark.parametrize("model", ["tiny-agent", "tiny-agent-prone"])
def test_per_channel_rtn_arm_quantizes_whole_rows(model: str) -> None:
    import torch

    from pytest_quantagent.backends.transformers import create_backend

    # int4-rtn-pc (the pair search's arm): one scale and zero point per output row, so a
    # row of the MLP down-projection (384 inputs) holds at most 16 values; g128 allows 48.
    arm = resolve_arm("int4-rtn-pc", model)
    assert arm.quantization == "int4-rtn-g-1" and Path(arm.path or "").name == model
    pc = create_backend(backend_spec(arm), BackendOptions()).model.model.layers[0].mlp.down_proj.weight
    g128 = create_backend(backend_spec(resolve_arm("int4-rtn", model)),
                          BackendOptions()).model.model.layers[0].mlp.down_proj.weight
    assert pc.shape[1] == 384
    assert max(torch.unique(row).numel() for row in pc) <= 16
    assert max(torch.unique(row).numel() for row in g128) > 16


@needs_torch
def test_quantizer_report_is_kept_by_the_backend(tiny_dir: Path) -> None:
    from pytest_quantagent.backends.transformers import TransformersBackend

    rtn = create_arm_backend(_arm(tiny_dir, "int4-rtn-g32"))
    assert isinstance(rtn, TransformersBackend)
    report: Any = rtn.quant_report
    assert report["scheme"] == "int4-rtn-g32" and report["layers"] > 0
    assert rtn.describe()["quantization"] == "int4-rtn-g32"
    assert TransformersBackend(tiny_dir).quant_report is None

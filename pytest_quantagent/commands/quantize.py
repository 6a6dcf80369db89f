"""``quantagent quantize``: write a quantized arm checkpoint that transformers (and vLLM) load.

Schemes:

- ``int4-rtn`` — plain-torch round-to-nearest W4 (asymmetric, zero point), ``--group-size``
  (default 128; -1 = per row); weights saved dequantized (values on the int4 grid), so any
  transformers build loads the folder. Main environment, no extra dependency.
- ``fp8-cast`` — e4m3 round trip of the weights (``--fp8-scale channel|tensor|none``).
- ``awq-w4a16`` — llm-compressor ``oneshot`` AWQ W4A16 g128 (compressed-tensors); calibration
  from ``--calibration DOMAIN`` (expert episodes of the domain's train tasks).
- ``fp8-dynamic`` — llm-compressor FP8-dynamic (compressed-tensors; no calibration).

The llm-compressor schemes run in this interpreter when ``llmcompressor`` imports, else in
the interpreter named by ``$QUANTAGENT_LLMC_PYTHON`` (a separate environment, because
llm-compressor pins an older transformers), else fail with the install line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_quantagent.errors import MissingDependencyError

SCHEMES = ("awq-w4a16", "fp8-dynamic", "int4-rtn", "fp8-cast")
_TOKENIZER_FILES = (
    "quantagent_tokenizer.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt",
    "chat_template.jinja", "generation_config.json",
)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("quantize", help="create a quantized arm checkpoint",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="bundled model name, local HF folder or cached hub id")
    p.add_argument("--scheme", required=True, type=_scheme, help=" | ".join(SCHEMES))
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--calibration", default=None,
                   help="domain(s), comma-separated, whose expert episodes (train tasks) calibrate AWQ")
    p.add_argument("--calibration-samples", type=int, default=64,
                   help="calibration episodes for AWQ (default 64)")
    p.add_argument("--group-size", type=int, default=128, help="int4-rtn group size (-1 = per row)")
    p.add_argument("--fp8-scale", default="channel", choices=("channel", "tensor", "none"),
                   help="fp8-cast weight scale: per output channel, per tensor or none (default channel)")
    p.add_argument("--include-lm-head", action="store_true",
                   help="also quantize lm_head (int4-rtn/fp8-cast; the llm-compressor recipes never do)")
    p.add_argument("--dequantized", action="store_true",
                   help="llm-compressor schemes: save the dequantized weights (no quantization_config) "
                   "instead of the packed compressed-tensors checkpoint; loads in any transformers")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _scheme(value: str) -> str:
    if value not in SCHEMES:
        raise argparse.ArgumentTypeError(
            f"unknown scheme {value!r}; choose one of: {', '.join(SCHEMES)}"
        )
    return value


def _copy_tokenizer(src: Path, out: Path) -> None:
    for name in _TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, out / name)


def calibration_ids(model_dir: Path, domains: str, n: int, seed: int = 0) -> list[list[int]]:
    """Token ids of ``n`` expert episodes (robust expert) of the training tasks of the
    comma-separated ``domains``, split evenly between them."""
    from pytest_quantagent.bundled.tokenizer import TOKENIZER_FILE, DomainTokenizer
    from pytest_quantagent.training.data import build_corpus
    from pytest_quantagent.training.expert import ROBUST

    names = [d.strip() for d in domains.split(",") if d.strip()]
    texts: list[str] = []
    for i, name in enumerate(names):
        share = n // len(names) + (1 if i < n % len(names) else 0)
        tx, _, _ = build_corpus(name, ROBUST, n_episodes=share, seed=seed + i, log=lambda _m: None)
        texts += tx
    if (model_dir / TOKENIZER_FILE).is_file():
        tok = DomainTokenizer.load(model_dir)
        return [tok.encode(t) for t in texts]
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    return [list(hf(t)["input_ids"]) for t in texts]


def quantize_fake(model: str, scheme: str, out: Path, *, group_size: int, fp8_scale: str,
                  include_lm_head: bool) -> dict[str, Any]:
    """int4-rtn / fp8-cast: load, fake-quantize, save (plus the tokenizer files)."""
    import torch
    from transformers import AutoModelForCausalLM

    from pytest_quantagent.backends.transformers import resolve_model_path
    from pytest_quantagent.quant.rtn import fake_quantize_model

    src = resolve_model_path(model)
    m = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.float32, local_files_only=True)
    rep = fake_quantize_model(m, scheme, group_size=group_size, fp8_scale=fp8_scale,  # type: ignore[arg-type]
                              include_lm_head=include_lm_head)
    out.mkdir(parents=True, exist_ok=True)
    m.save_pretrained(out, safe_serialization=True)
    if isinstance(src, Path):
        _copy_tokenizer(src, out)
    info = {"scheme": scheme, "source": str(src), "group_size": group_size if scheme == "int4-rtn" else None,
            "fp8_scale": fp8_scale if scheme == "fp8-cast" else None, "include_lm_head": include_lm_head,
            "layers": len(rep.layers), "mean_rel_error": rep.mean_rel_error}
    (out / "quantagent_quant.json").write_text(json.dumps(info, indent=1))
    return info


AWQ_GROUP_SIZE = 128


def check_group_divisible(model_dir: Path, group_size: int = AWQ_GROUP_SIZE) -> None:
    """Refuse, before llm-compressor runs, a Llama-family model whose linear layers' input
    widths are not multiples of ``group_size`` (llm-compressor's group-wise W4A16 rejects
    them only after loading, with a long traceback)."""
    try:
        cfg = json.loads((model_dir / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return  # not ours to judge; llm-compressor reports what it cannot read
    hidden, mlp = cfg.get("hidden_size"), cfg.get("intermediate_size")
    heads = cfg.get("num_attention_heads")
    head_dim = cfg.get("head_dim") or (hidden // heads if hidden and heads else None)
    widths = {"hidden_size (q/k/v, gate/up inputs)": hidden, "intermediate_size (down_proj input)": mlp,
              "num_attention_heads x head_dim (o_proj input)": heads * head_dim if heads and head_dim else None}
    bad = {k: v for k, v in widths.items() if isinstance(v, int) and v % group_size}
    if bad:
        listed = ", ".join(f"{k} = {v}" for k, v in bad.items())
        raise ValueError(
            f"--scheme awq-w4a16 quantizes in groups of {group_size} input columns, but {model_dir} has "
            f"{listed}; allowed: multiples of {group_size}. Use --scheme int4-rtn --group-size N with N "
            f"dividing them (or -1, per row), or a model whose widths are multiples of {group_size}"
        )


def quantize_llmc(model: str, scheme: str, out: Path, *, calibration: str | None,
                  samples: int, dequantized: bool = False) -> dict[str, Any]:
    """awq-w4a16 / fp8-dynamic through llm-compressor (here or in ``$QUANTAGENT_LLMC_PYTHON``)."""
    from pytest_quantagent.backends.transformers import resolve_model_path

    src = resolve_model_path(model)
    if not isinstance(src, Path):
        raise ValueError(f"--model {model!r}: llm-compressor schemes need a local folder here")
    python = os.environ.get("QUANTAGENT_LLMC_PYTHON")
    if importlib.util.find_spec("llmcompressor") is not None:
        python = sys.executable
    if not python:
        raise MissingDependencyError(
            f"--scheme {scheme} (llm-compressor)", "quantize", ["llmcompressor"],
        )
    if scheme == "awq-w4a16":
        check_group_divisible(src)
    calib_file: str | None = None
    with tempfile.TemporaryDirectory() as tmp:
        if scheme == "awq-w4a16":
            if calibration is None:
                raise ValueError("--scheme awq-w4a16 needs --calibration DOMAIN (e.g. retail or telecom)")
            ids = calibration_ids(src, calibration, samples)
            calib_file = str(Path(tmp) / "calib.json")
            Path(calib_file).write_text(json.dumps(ids))
        script = Path(__file__).resolve().parent.parent / "quant" / "llmc.py"
        cmd = [python, str(script), "--model", str(src), "--scheme", scheme, "--out", str(out)]
        if calib_file:
            cmd += ["--calibration", calib_file]
        if dequantized:
            cmd.append("--dequantized")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"llm-compressor failed ({python}):\n{proc.stderr[-4000:]}")
    info: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    _copy_tokenizer(src, out)
    info.update(source=str(src), calibration=calibration)
    (out / "quantagent_quant.json").write_text(json.dumps(info, indent=1))
    return info


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    out = Path(args.out)
    t0 = time.monotonic()
    if args.scheme in ("int4-rtn", "fp8-cast"):
        info = quantize_fake(args.model, args.scheme, out, group_size=args.group_size,
                             fp8_scale=args.fp8_scale, include_lm_head=args.include_lm_head)
    else:
        info = quantize_llmc(args.model, args.scheme, out, calibration=args.calibration,
                             samples=args.calibration_samples, dequantized=args.dequantized)
    info["seconds"] = round(time.monotonic() - t0, 2)
    if args.json:
        print(json.dumps(info))
    else:
        print(f"wrote {args.scheme} checkpoint to {out} in {info['seconds']} s")
    return 0

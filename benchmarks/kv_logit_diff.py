"""How far a quantized KV cache moves the bundled model's logits (issue 38 item 3).

For each bundled model and each weight arm (``bf16``, ``int4``), the same prompts (telecom
conversations as the agent sends them: the system prompt, a user's first message, some with a
tool call and its result) are decoded greedily by the arm and by its KV variants
(``+kv-int8``, ``+kv-fp8``, ``+kv-fp8_e5m2``, ``+kv-int4``) through the transformers
backend's batched decoder. Printed per pair: the largest |logit difference| over the decode
steps where both fed the same tokens, the largest |logit| of the arm (for scale), how many of
the prompts decode to the same tokens, and, for comparison, the same for ``int4`` vs ``bf16``
(the weight quantization's own move). No timing: these are accuracy figures::

    OMP_NUM_THREADS=1 python3 benchmarks/kv_logit_diff.py [--prompts 7] [--tokens 16]
        [--models tiny-agent,tiny-agent-prone]

Measured 2026-12-03 (this tree, ``--prompts 7 --tokens 16``): see the output quoted in
``pytest_quantagent/bundled/models/README.md`` ("KV-cache arms").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KV = ("int8", "fp8", "fp8_e5m2", "int4")


def _prompts(n: int) -> list[Any]:
    from tests.backends.test_batched_decode import _requests

    return _requests(n)


def _decode(label: str, model: str, requests: list[Any], tokens: int) -> list[Any]:
    from pytest_quantagent.backends.base import BackendOptions
    from pytest_quantagent.backends.batched_decode import DecodeRow
    from pytest_quantagent.backends.transformers import create_backend
    from pytest_quantagent.quant.arms import resolve_arm
    from pytest_quantagent.quant.loading import backend_spec

    backend = create_backend(backend_spec(resolve_arm(label, model)), BackendOptions())
    decoder = backend.batched_decoder()
    if decoder is None:
        raise SystemExit(f"{label}@{model}: not batched ({backend.batching_reason})")
    rows = [DecodeRow(backend.prompt_ids(r), tokens, True) for r in requests]
    decoder.decode(rows, 64)
    return rows


def _compare(a: list[Any], b: list[Any]) -> tuple[float, float, int]:
    worst, scale, same = 0.0, 0.0, 0
    for ra, rb in zip(a, b, strict=True):
        same += ra.tokens == rb.tokens
        for la, lb, ta, tb in zip(ra.logits, rb.logits, ra.tokens, rb.tokens, strict=False):
            worst = max(worst, float((la - lb).abs().max()))
            scale = max(scale, float(la.abs().max()))
            if ta != tb:
                break
    return worst, scale, same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--models", default="tiny-agent,tiny-agent-prone")
    args = ap.parse_args()
    requests = _prompts(args.prompts)
    print(f"{'model':<18}{'arm':<18}{'vs':<6}{'max|dlogit|':>12}{'max|logit|':>12}{'same tokens':>13}")
    for model in args.models.split(","):
        base = {w: _decode(w, model, requests, args.tokens) for w in ("bf16", "int4")}
        d, s, same = _compare(base["bf16"], base["int4"])
        print(f"{model:<18}{'int4':<18}{'bf16':<6}{d:>12.4f}{s:>12.1f}{same:>8}/{len(requests)}")
        for w in ("bf16", "int4"):
            for kv in KV:
                rows = _decode(f"{w}+kv-{kv}", model, requests, args.tokens)
                d, s, same = _compare(base[w], rows)
                print(f"{model:<18}{w + '+kv-' + kv:<18}{w:<6}{d:>12.4f}{s:>12.1f}"
                      f"{same:>8}/{len(requests)}")


if __name__ == "__main__":
    main()

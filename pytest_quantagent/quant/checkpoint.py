"""``--quant-model`` / ``--model`` given an HF id or a local checkpoint folder.

A model that is not a registered model spec (the bundled ``tiny-agent``...) resolves every
arm label to the ``transformers`` backend on that checkpoint:

============  ===================================================================
arm           what it loads
============  ===================================================================
``bf16``      the checkpoint as stored (the reference)
``int4``      round-to-nearest W4A16 g128 on load (``w4a16-rtn-g128``; not AWQ:
              for AWQ give the AWQ checkpoint its own arm in ``--quant-config``)
``int4-rtn``  the same RTN W4 g128 (``int4-rtn-g128``)
``int3-rtn``  RTN at 3 bits, ``int2-rtn`` at 2 bits (positive controls)
``fp8``       e4m3 cast with per-channel scales on load (``fp8-cast-channel``)
============  ===================================================================

The quantized arms are fake-quantized in place once the transformers backend has loaded the
checkpoint (:func:`pytest_quantagent.quant.loading.apply_on_load_quantization`): fine for a
model that fits a CPU or one GPU, and comparable to what a served RTN checkpoint does. For
llm-compressor or served checkpoints, write an arms TOML (``--quant-config``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_quantagent.errors import UnknownNameError

if TYPE_CHECKING:
    from pytest_quantagent.quant.arms import ArmSpec

CHECKPOINT_ARMS: tuple[str, ...] = ("bf16", "fp8", "int4", "int4-rtn", "int3-rtn", "int2-rtn")
_ON_LOAD: dict[str, str | None] = {
    "bf16": None,
    "fp8": "fp8-cast-channel",
    "int4": "w4a16-rtn-g128",
    "int4-rtn": "int4-rtn-g128",
    "int3-rtn": "int3-rtn-g128",
    "int2-rtn": "int2-rtn-g128",
}
_HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*$")

MODEL_FORMS = ("a bundled model spec ({specs})", "an HF id ORG/NAME (e.g. Qwen/Qwen3-8B)",
               "a local checkpoint folder holding config.json")


def checkpoint_kind(value: str) -> str | None:
    """``"path"`` for an existing folder with ``config.json``, ``"hf"`` for an ``ORG/NAME``
    id that is not a local path, else None."""
    p = Path(value).expanduser()
    if p.is_dir():
        return "path" if (p / "config.json").is_file() else None
    if _HF_ID.match(value) and not value.startswith((".", "/", "~")):
        return "hf"
    return None


def describe_problem(value: str) -> str:
    """Why ``value`` is not a checkpoint (for the refusal message)."""
    p = Path(value).expanduser()
    if p.is_dir():
        return f"the folder {str(p)!r} holds no config.json (not a transformers checkpoint)"
    if any(c in value for c in "/\\") or value.startswith((".", "~")):
        return f"no folder {str(p)!r}, and it is not an HF id ORG/NAME"
    return "not a model spec, an HF id ORG/NAME, or a folder"


def resolve_checkpoint_arm(model: str, label: str) -> ArmSpec:
    """The :class:`~pytest_quantagent.quant.arms.ArmSpec` of arm ``label`` (without
    ``+repair``) on checkpoint ``model``."""
    from pytest_quantagent.quant.arms import ArmSpec

    if label not in _ON_LOAD:
        raise UnknownNameError("arm", label, CHECKPOINT_ARMS,
                               hint=f"a checkpoint given as --quant-model ({model}) provides these arms")
    path = str(Path(model).expanduser()) if checkpoint_kind(model) == "path" else None
    return ArmSpec(label=label, backend="transformers", model=model, path=path,
                   quantization=_ON_LOAD[label])

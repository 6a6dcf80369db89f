"""Model specs of the bundled CPU reference agents: ``tiny-agent`` and ``tiny-agent-prone``.

Each resolves the project's arm labels with no configuration:

===============  ==================================================================================
arm              what it loads
===============  ==================================================================================
``bf16``         the trained weights, saved in bfloat16 (``models/<name>/``; the reference arm;
                 computed in fp32, which is exact for bf16 values)
``fp8``          ``models/<name>/arms/fp8-dynamic`` (llm-compressor FP8-dynamic, compressed-tensors)
                 when present, else the weights cast to e4m3 with per-channel scales on load
``int4``         ``models/<name>/arms/awq-w4a16`` (llm-compressor AWQ W4A16 g128) when present,
                 else round-to-nearest W4A16 g128 on load (labelled so in ``quantization``)
``int4-rtn``     plain-torch round-to-nearest W4 g128 (asymmetric, zero point) on load
``int4-rtn-pc``  the same RTN W4, asymmetric, one scale and zero point per output row
                 (per-channel, ``int4-rtn-g-1``); differs from g128 only in the MLP down-projection
                 (384 inputs); chosen by the pair search (``bundled/models/README.md``)
``int3-rtn``     RTN at 3 bits g128, ``int2-rtn`` at 2 bits g128 (positive controls)
===============  ==================================================================================

The "on load" arms (``quantization`` of the :class:`ArmSpec`) are applied to the weights the
transformers backend loaded, by the quantizer ``quant/loading.py`` hands it; they are
deterministic, take milliseconds for this model, and need no files. Checkpoints written by ``quantagent quantize`` load the same way as any HF folder.
"""

from __future__ import annotations

from pathlib import Path

from pytest_quantagent.errors import UnknownNameError
from pytest_quantagent.quant.arms import ArmSpec, register_model_spec

MODELS_DIR = Path(__file__).resolve().parent.parent / "bundled" / "models"
BUNDLED_SPECS: tuple[str, ...] = ("tiny-agent", "tiny-agent-prone")
BUNDLED_ARMS: tuple[str, ...] = ("bf16", "fp8", "int4", "int4-rtn", "int4-rtn-pc", "int3-rtn", "int2-rtn")


def _resolver(name: str):  # type: ignore[no-untyped-def]
    folder = MODELS_DIR / name

    def resolve(label: str) -> ArmSpec:
        def arm(path: Path, quantization: str | None) -> ArmSpec:
            return ArmSpec(label=label, backend="transformers", model=name, path=str(path),
                           quantization=quantization)

        if label == "bf16":
            return arm(folder, None)
        if label == "int4-rtn":
            return arm(folder, "int4-rtn-g128")
        if label == "int4-rtn-pc":
            return arm(folder, "int4-rtn-g-1")
        if label in ("int3-rtn", "int2-rtn"):
            return arm(folder, f"{label}-g128")
        if label == "int4":
            awq = folder / "arms" / "awq-w4a16"
            if (awq / "config.json").is_file():
                return arm(awq, "awq-w4a16-g128")
            return arm(folder, "w4a16-rtn-g128")
        if label == "fp8":
            fp8 = folder / "arms" / "fp8-dynamic"
            if (fp8 / "config.json").is_file():
                return arm(fp8, "fp8-dynamic")
            return arm(folder, "fp8-cast-channel")
        raise UnknownNameError("arm", label, BUNDLED_ARMS, hint=f"model spec {name!r} provides these arms")

    return resolve


for _name in BUNDLED_SPECS:
    register_model_spec(_name, _resolver(_name), BUNDLED_ARMS)

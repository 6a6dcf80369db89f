"""The reference agent's network: a small ``LlamaForCausalLM`` in HF format.

The defaults follow the feasibility notes: hidden 128, 4 layers, 4 heads, MLP 384, *untied*
input/output embeddings (tying slowed the emergence of copying), RoPE so that the context
length costs no parameters. The bundled pair is tied, with 2 heads of width 64
(``models/README.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import LlamaConfig, LlamaForCausalLM

    from pytest_quantagent.bundled.tokenizer import DomainTokenizer


@dataclass(frozen=True)
class ModelSize:
    """Shape of the reference network."""

    hidden: int = 128
    layers: int = 4
    heads: int = 4
    mlp: int = 384
    max_positions: int = 2048
    tied: bool = False
    """Share the input embedding with the output layer (``tie_word_embeddings``)."""
    head_dim: int | None = None
    """Width of each attention head (default ``hidden // heads``). A head's value/output
    path has this rank, which bounds how faithfully it can copy one of thousands of
    single-token ids from the context."""


def make_config(tokenizer: DomainTokenizer, size: ModelSize = ModelSize()) -> LlamaConfig:
    """A ``LlamaConfig`` for ``tokenizer``'s vocabulary."""
    from transformers import LlamaConfig

    return LlamaConfig(  # type: ignore[call-arg]  # rope_theta is not in the typed signature
        vocab_size=tokenizer.vocab_size,
        hidden_size=size.hidden,
        intermediate_size=size.mlp,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.heads,
        head_dim=size.head_dim or size.hidden // size.heads,
        max_position_embeddings=size.max_positions,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=size.tied,
        bos_token_id=tokenizer.bos_id,
        eos_token_id=[tokenizer.end_id, tokenizer.eos_id],
        pad_token_id=tokenizer.pad_id,
        attention_bias=False,
        mlp_bias=False,
    )


def make_model(tokenizer: DomainTokenizer, size: ModelSize = ModelSize(), seed: int = 0) -> LlamaForCausalLM:
    """A freshly initialised reference network (deterministic for a seed)."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(make_config(tokenizer, size))


def count_parameters(model: LlamaForCausalLM) -> int:
    """Number of parameters."""
    return sum(p.numel() for p in model.parameters())


def folder_size_bytes(folder: str | Path) -> int:
    """Total size of the files in a model folder."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())

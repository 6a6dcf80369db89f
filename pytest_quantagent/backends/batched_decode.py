"""Batch-invariant batched greedy decoding for the transformers backend (Llama-family, CPU).

Concurrent episodes' requests are decoded together, one forward step for every sequence in
flight, and each sequence's tokens *and logits* are bit-for-bit what it gets decoded alone
(the store resumes episodes and pairs arms by task and seed, so a result must not depend on
which other episodes happened to be in flight). Batching a matmul in the obvious way breaks
that: on this CPU (MKL, AVX2) ``F.linear`` of a 1-row input takes a GEMV path and of a
2- or 3-row input a GEMM path whose rounding differs in the last bits (measured in
``tests/backends/test_batched_decode.py``), and padded attention over a longer key range
reduces in another order. So every operation here is shaped per row exactly as the
unbatched decode shapes it:

- **Prefill** runs alone per request: one forward pass of the prompt with the same call,
  shapes and kernels as the unbatched ``generate``'s first step; its KV cache is copied into
  a per-sequence buffer.
- **Linear layers** of a decode step are one ``torch.bmm`` of ``(B, 1, K) @ W.T`` broadcast
  to ``(B, K, N)``: B independent 1-row products, each the same kernel call as a 1-row
  ``F.linear`` (checked bitwise in the tests), in one call instead of B.
- **Attention** is one ``scaled_dot_product_attention`` call per sequence over exactly its
  own cache length (the unbatched call's shapes); the rest (RMSNorm, RoPE, SiLU, residuals,
  embedding, argmax) is row-wise.

Exactness was chosen over a logit-margin check with fallback: the episode records also store
the margins themselves (``Decision.margin``, and the report's margin quantiles), which a
tolerance scheme would let drift with the batch. The cost is the per-row attention loop and
1-row kernels instead of a GEMM; the forward step still costs far less per sequence than
one unbatched step (``benchmarks/bundled_throughput.py``).

Supported: ``model_type == "llama"`` with plain bias-free float32 ``nn.Linear`` projections
and no forward hooks (the bundled bf16, RTN and AWQ arms), as many key/value heads as query
heads, CPU, SDPA attention. Anything else (another
architecture, a compressed-tensors checkpoint, bf16 compute, a GPU) is decoded one request
at a time by the backend: still batch-independent, just not batched
(:func:`unsupported_reason` says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def unsupported_reason(model: Any, device: str) -> str | None:
    """Why ``model`` cannot take the batched path (None when it can)."""
    import torch

    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) != "llama":
        return "not a llama-family model"
    if device != "cpu":
        return f"device {device!r} (batch invariance is verified on CPU only)"
    if getattr(cfg, "_attn_implementation", "sdpa") != "sdpa":
        return f"attention implementation {cfg._attn_implementation!r}"
    if getattr(cfg, "pretraining_tp", 1) != 1:
        return "pretraining_tp != 1"
    if cfg.num_key_value_heads != cfg.num_attention_heads:
        return "grouped-query attention"
    try:
        layers = model.model.layers
        linears = [model.lm_head]
        for layer in layers:
            a, m = layer.self_attn, layer.mlp
            linears += [a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj]
    except AttributeError:
        return "unexpected module layout"
    for module in model.modules():
        # The batched step calls the projections' weights, not their forward: a hook or a
        # quantization wrapper (compressed-tensors, activation fake-quant) would be skipped.
        if module._forward_hooks or module._forward_pre_hooks or "forward" in vars(module):
            return f"{type(module).__name__} has forward hooks or a patched forward"
        if hasattr(module, "quantization_scheme") or hasattr(module, "weight_scale"):
            return f"{type(module).__name__} is a quantized module"
    for lin in linears:
        if type(lin) is not torch.nn.Linear or lin.bias is not None:
            return f"projection {type(lin).__name__} is not a bias-free nn.Linear"
        if lin.weight.dtype != torch.float32:
            return f"weights in {lin.weight.dtype} (float32 compute only)"
    return None


@dataclass
class DecodeRow:
    """One request being decoded: prompt, limits, output so far and its KV cache."""

    prompt: list[int]
    max_new: int
    want_logits: bool
    tokens: list[int] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)
    done: bool = False
    length: int = 0
    """Positions in the cache (prompt plus generated tokens fed back so far)."""
    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)

    def emitted(self, token: int, logits: torch.Tensor, stop_ids: set[int]) -> None:
        """Record the token chosen at this step (a stop token ends the row, unrecorded)."""
        if token in stop_ids:
            self.done = True
            return
        self.tokens.append(token)
        if self.want_logits:
            self.logits.append(logits)
        if len(self.tokens) >= self.max_new:
            self.done = True


class BatchedDecoder:
    """Prefill one row at a time, then decode steps over any set of rows at once."""

    def __init__(self, model: Any, stop_ids: list[int], pad_id: int) -> None:
        import torch

        self.model = model
        self.stop_ids = set(stop_ids)
        self._stop_list = list(stop_ids)
        self.pad_id = pad_id
        inner = model.model
        self.embed = inner.embed_tokens
        self.rotary = inner.rotary_emb
        self.norm = inner.norm
        self.layers = list(inner.layers)
        self.n_heads = model.config.num_attention_heads
        self.head_dim = self.layers[0].self_attn.head_dim
        self.scaling = self.layers[0].self_attn.scaling
        self.mlp_width = self.layers[0].mlp.gate_proj.out_features
        # W.T (K, N), broadcast per batch in bmm: B 1-row products (see module doc). q/k/v
        # and gate/up are fused column-wise (each output column is its own dot product; the
        # load-time self-check and the tests verify the bits).
        def wt(*lins: Any) -> torch.Tensor:
            return torch.cat([lin.weight.detach() for lin in lins], 0).t()

        self._qkv = [wt(a.q_proj, a.k_proj, a.v_proj) for a in (ly.self_attn for ly in self.layers)]
        self._o = [wt(ly.self_attn.o_proj) for ly in self.layers]
        self._gate_up = [wt(ly.mlp.gate_proj, ly.mlp.up_proj) for ly in self.layers]
        self._down = [wt(ly.mlp.down_proj) for ly in self.layers]
        self._lm = wt(model.lm_head)
        self._torch = torch

    def _linear(self, wt: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``x @ wt`` for x of shape (B, 1, K), as B independent 1-row products."""
        return self._torch.bmm(x, wt.expand(x.shape[0], *wt.shape))

    def prefill(self, row: DecodeRow) -> None:
        """The prompt alone, one forward pass (bitwise the unbatched ``generate``'s first
        step: same call shapes, last-position logits only)."""
        import torch

        ids = torch.tensor([row.prompt], dtype=torch.long)
        with torch.inference_mode():
            out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1)
        cache = out["cache"] if "cache" in out else out["past_key_values"]
        first = out.logits[0, -1].float()
        n = len(row.prompt)
        cap = n + row.max_new
        for li in range(len(self.layers)):
            k, v = _layer_kv(cache, li)
            kb = torch.empty((1, k.shape[1], cap, k.shape[3]), dtype=k.dtype)
            vb = torch.empty_like(kb)
            kb[:, :, :n] = k[:, :, :n]
            vb[:, :, :n] = v[:, :, :n]
            row.keys.append(kb)
            row.values.append(vb)
        row.length = n
        row.emitted(int(torch.argmax(first)), first, self.stop_ids)

    def step(self, rows: list[DecodeRow]) -> None:
        """Feed each row's last token and choose its next one (every row must be live)."""
        import torch
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        b = len(rows)
        with torch.inference_mode():
            ids = torch.tensor([[r.tokens[-1]] for r in rows], dtype=torch.long)
            pos = torch.tensor([[r.length] for r in rows], dtype=torch.long)
            h = self.embed(ids)
            cos, sin = self.rotary(h, pos)
            sdpa = torch.nn.functional.scaled_dot_product_attention
            for li, layer in enumerate(self.layers):
                residual = h
                x = layer.input_layernorm(h)
                shape = (b, 1, 3 * self.n_heads, self.head_dim)
                qkv = self._linear(self._qkv[li], x).view(shape).transpose(1, 2)
                q, k, v = torch.split(qkv, self.n_heads, 1)
                q, k = apply_rotary_pos_emb(q, k, cos, sin)
                outs = []
                for r, qi, ki, vi in zip(rows, torch.split(q, 1), torch.split(k, 1), torch.split(v, 1), strict=True):
                    n = r.length
                    kb, vb = r.keys[li], r.values[li]
                    kb.narrow(2, n, 1).copy_(ki)
                    vb.narrow(2, n, 1).copy_(vi)
                    outs.append(sdpa(qi, kb.narrow(2, 0, n + 1), vb.narrow(2, 0, n + 1),
                                     attn_mask=None, dropout_p=0.0, scale=self.scaling, is_causal=False))
                o = torch.cat(outs, 0).transpose(1, 2).reshape(b, 1, -1)
                h = residual + self._linear(self._o[li], o)
                residual = h
                x = layer.post_attention_layernorm(h)
                gate, up = torch.split(self._linear(self._gate_up[li], x), self.mlp_width, -1)
                h = residual + self._linear(self._down[li], layer.mlp.act_fn(gate) * up)
            h = self.norm(h)
            logits = self._linear(self._lm, h)[:, 0].float()
            nxt = torch.argmax(logits, dim=-1).tolist()
        for i, r in enumerate(rows):
            r.length += 1
            r.emitted(int(nxt[i]), logits[i].clone() if r.want_logits else logits[i], self.stop_ids)

    def decode(self, rows: list[DecodeRow], max_batch: int) -> None:
        """Decode ``rows`` to the end, at most ``max_batch`` in flight (synchronous use)."""
        waiting = list(rows)
        active: list[DecodeRow] = []
        while waiting or active:
            while waiting and len(active) < max_batch:
                row = waiting.pop(0)
                self.prefill(row)
                if not row.done:
                    active.append(row)
            if active:
                self.step(active)
                active = [r for r in active if not r.done]


def _layer_kv(cache: Any, li: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of layer ``li`` from a transformers cache (v5 layers or v4 tuples)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return layers[li].keys, layers[li].values
    k, v = cache[li]
    return k, v


def self_check(decoder: BatchedDecoder, max_batch: int, vocab_size: int) -> str | None:
    """Decode three synthetic prompts alone and in one batch of copies (up to ``max_batch``
    rows); None when tokens and logits agree bit for bit, else why not. Run once per loaded
    model, on the machine that decodes: kernels differ between CPUs, and a CPU whose batched
    kernels round differently falls back to decoding alone instead of changing results."""
    import torch

    prompts = [[(7 * i + 3 * j + 11) % vocab_size for j in range(n)] for i, n in enumerate((3, 6, 11))]

    def rows(copies: int) -> list[DecodeRow]:
        return [DecodeRow(list(p), 4, True) for _ in range(copies) for p in prompts]

    alone = rows(1)
    for r in alone:
        decoder.decode([r], 1)
    batched = rows(max(1, max_batch // len(prompts)))
    decoder.decode(batched, max_batch)
    for k, r in enumerate(batched):
        ref = alone[k % len(prompts)]
        same = r.tokens == ref.tokens and all(
            torch.equal(a, b) for a, b in zip(r.logits, ref.logits, strict=True))
        if not same:
            return "batched kernels are not bitwise batch-invariant on this machine (self-check)"
    return None

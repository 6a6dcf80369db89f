"""Batch-invariant batched greedy decoding with a prefix KV cache, for the transformers
backend (Llama-family, CPU).

Concurrent episodes' requests are decoded together, and each request's tokens *and logits*
are a function of its own token ids only: never of which other requests share its forward
passes, nor of what the prefix cache happens to hold (the store resumes episodes and pairs
arms by task and seed, so a result must not depend on which other episodes were in flight).
The computation is therefore fixed per request, and every batched operation is one whose
per-row result does not depend on the other rows:

- **Canonical chunks.** A prompt's positions are cut into chunks of ``chunk`` tokens at
  multiples of ``chunk`` from position 0 (the last one shorter); the keys and values of a
  chunk are a function of the tokens up to its end. Generated tokens are then fed one
  position at a time. So the KV cache of a conversation's next prompt, which starts with
  the previous prompt and answer, can be taken over chunk by chunk from the previous turn:
  the **prefix cache** keeps every full prompt chunk it has computed, in a tree keyed by the
  chunks' token ids (LRU-bounded in bytes, shared by all requests), and a request prefills
  only from its first chunk not in the tree. A hit and a miss give the same bits.
- **Linear layers** of all rows of a forward pass (every prefilled chunk's tokens and every
  decoded row's token, concatenated) are one ``F.linear`` of at least ``MIN_ROWS`` and at
  most ``MAX_ROWS`` rows (padded / split): on this CPU (MKL, AVX2) such a GEMM computes
  every row with the same kernel and summation order whatever the other rows are, while a
  1- to 3-row product takes a GEMV path that rounds differently (the load-time
  :func:`self_check` verifies the rows' independence on the machine that decodes).
- **Attention** is one ``scaled_dot_product_attention`` call per chunk (or per decoded
  token) over exactly its keys, with the causal mask of its position: the call's shapes
  depend on the request alone. RMSNorm, RoPE (one precomputed table), SiLU, residuals,
  embedding and argmax are row-wise.

- **KV-cache precision** (``kv_cache_dtype``, :mod:`pytest_quantagent.backends.kv_cache`):
  keys (after RoPE) and values are rounded to the dtype as they are written to the row's
  cache, per token and head, and every attention call reads them from there (a chunk's own
  positions included), so the prefix cache holds the stored values and a hit and a miss
  still give the same bits.

Exactness was chosen over a logit-margin check with fallback: the episode records also store
the margins themselves (``Decision.margin``, and the report's margin quantiles), which a
tolerance scheme would let drift with the batch. The chunked computation differs from one
full-prompt ``model.generate`` pass in the logits' last bits (the backend's version says
which path decoded), and agrees with it to float rounding (tested).

Supported: ``model_type == "llama"`` with plain bias-free float32 ``nn.Linear`` projections
and no forward hooks (the bundled bf16, RTN and AWQ arms), or compressed-tensors projections
with static weight quantization and no or per-token dynamic input quantization (the bundled
FP8-dynamic arms: the step applies the library's own ``forward_quantize`` to the weights once
and to each row's inputs, so a row still depends on nothing but itself), as many key/value
heads as query heads, CPU, SDPA attention. Anything else (another architecture, another
quantization scheme, bf16 compute, a GPU) is decoded one request at a time by
``model.generate``: still batch-independent, just not batched (:func:`unsupported_reason`
says why).
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

MIN_ROWS = 8
"""Fewest rows of a batched linear call (fewer are zero-padded: see the module doc)."""
MAX_ROWS = 512
"""Most rows of one linear call (more are split): the range the self-check covers."""
CHUNK = 32
"""Prompt positions per canonical chunk (the prefix cache's unit)."""
CACHE_BYTES = 128 << 20
"""Default bound of the prefix cache."""
PREFILL_TOKENS = 2048
"""Prompt tokens prefilled per forward pass at most (one prompt more when it alone is longer)."""


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
    if not getattr(cfg, "max_position_embeddings", None):
        return "no max_position_embeddings"
    try:
        groups = _fused_groups(model)
        linears = [model.lm_head, *(lin for group in groups for lin in group)]
    except AttributeError:
        return "unexpected module layout"
    for module in model.modules():
        # The batched step calls the projections' weights, not their forward: a hook or a
        # quantization wrapper would be skipped. A compressed-tensors projection whose
        # scheme the step reproduces (ct_scheme_reason) is the exception.
        if module._forward_hooks or module._forward_pre_hooks:
            return f"{type(module).__name__} has forward hooks"
        if _is_ct_quantized(module):
            why = ct_scheme_reason(module)
            if why is not None:
                return f"{type(module).__name__}: {why}"
            continue
        if "forward" in vars(module):
            return f"{type(module).__name__} has a patched forward"
        if hasattr(module, "quantization_scheme") or hasattr(module, "weight_scale"):
            return f"{type(module).__name__} is a quantized module"
    for group in groups:
        if len({repr(_input_args(lin)) for lin in group}) > 1:
            return "projections fused into one GEMM quantize their inputs differently"
    for lin in linears:
        if type(lin) is not torch.nn.Linear or lin.bias is not None:
            return f"projection {type(lin).__name__} is not a bias-free nn.Linear"
        if lin.weight.dtype != torch.float32:
            return f"weights in {lin.weight.dtype} (float32 compute only)"
    return None


def _is_ct_quantized(module: Any) -> bool:
    """A projection compressed-tensors quantizes in its forward (``set_forward_quantized``)."""
    forward = vars(module).get("forward")
    func = getattr(forward, "__func__", None)
    return (hasattr(module, "quantization_scheme") and func is not None
            and func.__code__.co_name == "quantized_forward"
            and "compressed_tensors" in func.__code__.co_filename)


def _active_scheme(module: Any) -> Any:
    """The quantization scheme a compressed-tensors projection applies in its forward (None:
    not such a projection, or its quantization is off, so it is the plain projection)."""
    if not _is_ct_quantized(module) or not getattr(module, "quantization_enabled", True):
        return None
    if getattr(module, "quantization_status", None) is None:
        return None
    return module.quantization_scheme


def ct_scheme_reason(module: Any) -> str | None:
    """Why the batched step cannot reproduce this compressed-tensors projection (None when
    it can): it must quantize its weights statically (the step uses the library's own
    fake-quantized weight) and its inputs not at all or per token, dynamically (the step
    applies the library's own ``forward_quantize`` to each row: one token's scale depends on
    that token only, so a row's values do not depend on the batch); no output quantization."""
    scheme = _active_scheme(module)
    if scheme is None:
        return None  # quantization off: the plain projection
    if scheme.output_activations is not None:
        return "output activations are quantized"
    if scheme.weights is not None and scheme.weights.dynamic not in (False, None):
        return "weights are quantized dynamically"
    act = scheme.input_activations
    if act is not None and not (act.dynamic is True and str(act.strategy) in ("token", "QuantizationStrategy.TOKEN")):
        return f"input activations quantized with strategy {act.strategy!s} (dynamic={act.dynamic})"
    return None


def _input_args(lin: Any) -> Any:
    """The input-activation quantization of a projection (None: none)."""
    scheme = _active_scheme(lin)
    return None if scheme is None else scheme.input_activations


def _fused_groups(model: Any) -> list[list[Any]]:
    """The projections the batched step fuses into one GEMM (they share an input)."""
    out: list[list[Any]] = []
    for layer in model.model.layers:
        a, m = layer.self_attn, layer.mlp
        out += [[a.q_proj, a.k_proj, a.v_proj], [a.o_proj], [m.gate_proj, m.up_proj], [m.down_proj]]
    return out


def _weight(lin: Any) -> torch.Tensor:
    """The weight a projection multiplies by: as stored, or, for a compressed-tensors
    projection that fake-quantizes its weight in each forward, that quantized weight
    (computed once here by the library's ``forward_quantize``: the same values every call)."""
    w = lin.weight.detach()
    scheme = _active_scheme(lin)
    if scheme is not None and scheme.weights is not None:
        from compressed_tensors.quantization import QuantizationStatus
        from compressed_tensors.quantization.lifecycle.forward import forward_quantize

        if lin.quantization_status < QuantizationStatus.COMPRESSED:
            w = forward_quantize(lin, w, "weight", scheme.weights)
    out: torch.Tensor = w
    return out


def _input_quantizer(lin: Any) -> Any:
    """``x -> x`` fake-quantized as ``lin``'s forward quantizes its input, row by row (the
    library's ``forward_quantize`` on ``(1, rows, features)``: per-token strategy keeps dims 0
    and 1, one scale per row), or None when the projection leaves its input alone."""
    args = _input_args(lin)
    if args is None:
        return None
    from compressed_tensors.quantization.lifecycle.forward import forward_quantize

    def quantize(x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = forward_quantize(lin, x.unsqueeze(0), "input", args)[0]
        return out

    return quantize


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
    kv: torch.Tensor | None = None
    """Keys and values, ``(layers, 2, heads, capacity, head_dim)``; allocated on first use."""
    reused: int = 0
    """Prompt positions taken from the prefix cache."""

    @property
    def prefilled(self) -> bool:
        return self.kv is not None and self.length >= len(self.prompt)

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


class _Node:
    __slots__ = ("children", "key", "kv", "parent")

    def __init__(self, key: tuple[int, ...], parent: _Node | None, kv: torch.Tensor | None) -> None:
        self.key = key
        self.parent = parent
        self.kv = kv
        self.children: dict[tuple[int, ...], _Node] = {}


class PrefixCache:
    """Full prompt chunks' keys and values, in a tree keyed by the chunks' token ids, the
    least recently used leaves evicted beyond ``max_bytes`` (0: nothing is kept)."""

    def __init__(self, chunk: int, max_bytes: int) -> None:
        self.chunk = chunk
        self.max_bytes = max_bytes
        self.root = _Node((), None, None)
        self._lru: collections.OrderedDict[int, _Node] = collections.OrderedDict()
        self.bytes = 0
        self.reused = 0
        """Prompt positions served from the cache so far."""
        self.computed = 0
        """Prompt positions prefilled so far."""

    def __len__(self) -> int:
        return len(self._lru)

    def clear(self) -> None:
        self.root = _Node((), None, None)
        self._lru.clear()
        self.bytes = 0

    def _key(self, prompt: list[int], i: int) -> tuple[int, ...]:
        return tuple(prompt[i * self.chunk:(i + 1) * self.chunk])

    def _touch(self, path: list[_Node]) -> None:
        # Deepest first: a parent is always more recent than its children, so the least
        # recently used node is a leaf.
        for node in reversed(path):
            self._lru.move_to_end(id(node))

    def lookup(self, prompt: list[int], most: int) -> list[_Node]:
        """The cached nodes of ``prompt``'s first chunks (``most`` at most)."""
        path: list[_Node] = []
        node = self.root
        for i in range(most):
            child = node.children.get(self._key(prompt, i))
            if child is None:
                break
            path.append(child)
            node = child
        self._touch(path)
        return path

    def insert(self, prompt: list[int], kv: torch.Tensor, chunks: int) -> None:
        """Keep ``prompt``'s first ``chunks`` chunks (keys and values read from ``kv``)."""
        if self.max_bytes <= 0:
            return
        path: list[_Node] = []
        node = self.root
        for i in range(chunks):
            key = self._key(prompt, i)
            child = node.children.get(key)
            if child is None:
                part = kv[:, :, :, i * self.chunk:(i + 1) * self.chunk].clone()
                child = _Node(key, node, part)
                node.children[key] = child
                self._lru[id(child)] = child
                self.bytes += part.numel() * part.element_size()
            path.append(child)
            node = child
        self._touch(path)
        while self.bytes > self.max_bytes and self._lru:
            _, old = self._lru.popitem(last=False)
            assert not old.children and old.parent is not None and old.kv is not None
            del old.parent.children[old.key]
            self.bytes -= old.kv.numel() * old.kv.element_size()


class BatchedDecoder:
    """Forward passes over any set of rows at once: rows still to prefill run their prompt
    (from the prefix cache's last hit on), decoding rows feed their last token."""

    def __init__(
        self, model: Any, stop_ids: list[int], pad_id: int, *, chunk: int = CHUNK,
        cache_bytes: int = CACHE_BYTES, prefill_tokens: int = PREFILL_TOKENS,
        kv_cache_dtype: str = "auto",
    ) -> None:
        import torch

        from pytest_quantagent.backends.kv_cache import check_kv_cache_dtype

        self.kv_cache_dtype = check_kv_cache_dtype(kv_cache_dtype)
        if chunk < 1:
            raise ValueError(f"chunk must be a positive number of tokens, got {chunk}")
        self.model = model
        self.stop_ids = set(stop_ids)
        self.pad_id = pad_id
        self.chunk = chunk
        self.prefill_tokens = prefill_tokens
        self.cache = PrefixCache(chunk, cache_bytes)
        self._lock = threading.RLock()
        """Held by ``prepare`` and ``step``: the prefix cache is shared by the decode thread
        and synchronous ``generate_batch`` calls."""
        inner = model.model
        cfg = model.config
        self.embed = inner.embed_tokens
        self.norm = inner.norm
        self.layers = list(inner.layers)
        self.n_heads = cfg.num_attention_heads
        self.head_dim = self.layers[0].self_attn.head_dim
        self.scaling = self.layers[0].self_attn.scaling
        self.mlp_width = self.layers[0].mlp.gate_proj.out_features
        self.positions = int(cfg.max_position_embeddings)
        # q/k/v and gate/up fused row-wise (one GEMM each; the self-check verifies the bits).
        def w(*lins: Any) -> torch.Tensor:
            return torch.cat([_weight(lin) for lin in lins], 0).contiguous()

        self._qkv = [w(a.q_proj, a.k_proj, a.v_proj) for a in (ly.self_attn for ly in self.layers)]
        self._o = [w(ly.self_attn.o_proj) for ly in self.layers]
        self._gate_up = [w(ly.mlp.gate_proj, ly.mlp.up_proj) for ly in self.layers]
        self._down = [w(ly.mlp.down_proj) for ly in self.layers]
        self._lm = w(model.lm_head)
        # A compressed-tensors scheme's per-token input quantization, per fused projection
        # (None: none); the fused projections quantize alike (unsupported_reason checks).
        self._in_qkv = [_input_quantizer(ly.self_attn.q_proj) for ly in self.layers]
        self._in_o = [_input_quantizer(ly.self_attn.o_proj) for ly in self.layers]
        self._in_gate_up = [_input_quantizer(ly.mlp.gate_proj) for ly in self.layers]
        self._in_down = [_input_quantizer(ly.mlp.down_proj) for ly in self.layers]
        self._in_lm = _input_quantizer(model.lm_head)
        dtype = self._lm.dtype
        with torch.inference_mode():
            probe = torch.zeros((1, 1, cfg.hidden_size), dtype=dtype)
            cos, sin = inner.rotary_emb(probe, torch.arange(self.positions)[None])
        self._cos = cos[0].unsqueeze(1).contiguous()  # (positions, 1, head_dim)
        self._sin = sin[0].unsqueeze(1).contiguous()
        self._dtype = dtype

    # -- pieces ------------------------------------------------------------------------
    def _linear(self, weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``x @ weight.T`` in GEMMs of MIN_ROWS..MAX_ROWS rows (each row independent)."""
        import torch

        m = x.shape[0]
        if MIN_ROWS <= m <= MAX_ROWS:
            return torch.nn.functional.linear(x, weight)
        if m < MIN_ROWS:
            pad = x.new_zeros((MIN_ROWS - m, x.shape[1]))
            return torch.nn.functional.linear(torch.cat([x, pad]), weight)[:m]
        return torch.cat([self._linear(weight, x[a:a + MAX_ROWS]) for a in range(0, m, MAX_ROWS)])

    def _chunks(self, a: int, b: int) -> list[tuple[int, int]]:
        """Positions ``a..b`` cut at multiples of the chunk size."""
        out = []
        while a < b:
            e = min(b, (a // self.chunk + 1) * self.chunk)
            out.append((a, e))
            a = e
        return out

    def prepare(self, row: DecodeRow) -> None:
        """Allocate ``row``'s KV cache and copy in the prefix cache's chunks of its prompt
        (every one but the chunk holding the last prompt position, whose logits are needed)."""
        with self._lock:
            self._prepare(row)

    def _prepare(self, row: DecodeRow) -> None:
        import torch

        n = len(row.prompt)
        if n < 1 or n + row.max_new > self.positions + 1:
            raise ValueError(f"prompt of {n} tokens plus {row.max_new} new ones exceeds "
                             f"the model's {self.positions} positions")
        cap = n + row.max_new
        row.kv = torch.empty((len(self.layers), 2, self.n_heads, cap, self.head_dim), dtype=self._dtype)
        path = self.cache.lookup(row.prompt, (n - 1) // self.chunk)
        for i, node in enumerate(path):
            assert node.kv is not None
            row.kv[:, :, :, i * self.chunk:(i + 1) * self.chunk].copy_(node.kv)
        row.length = row.reused = len(path) * self.chunk
        self.cache.reused += row.reused
        self.cache.computed += n - row.reused

    # -- forward -----------------------------------------------------------------------
    def step(self, rows: list[DecodeRow]) -> list[DecodeRow]:
        """One forward pass: every decoding row (one token each) and the rows still to
        prefill, in order, while their prompt tokens fit ``prefill_tokens`` (the first
        always). Each row run chooses its next token. Returns the rows run."""
        with self._lock:
            return self._step(rows)

    def _step(self, rows: list[DecodeRow]) -> list[DecodeRow]:
        import torch

        from pytest_quantagent.backends.kv_cache import fake_quantize_kv

        spans: list[tuple[DecodeRow, int, int, int]] = []  # row, offset in the pass, from, to
        ids: list[int] = []
        budget = self.prefill_tokens
        first_prefill = True
        for r in rows:
            if r.done:
                raise ValueError("step: a finished row")
            if r.prefilled:
                toks = [r.tokens[-1]]
            else:
                if r.kv is None:
                    self._prepare(r)
                need = len(r.prompt) - r.length
                if need > budget and not first_prefill:
                    continue
                first_prefill = False
                budget -= need
                toks = r.prompt[r.length:]
            spans.append((r, len(ids), r.length, r.length + len(toks)))
            ids += toks
        if not spans:
            return []
        m = len(ids)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        h_, d = self.n_heads, self.head_dim
        with torch.inference_mode():
            pos = torch.cat([torch.arange(a, b) for _, _, a, b in spans])
            cos, sin = self._cos[pos], self._sin[pos]
            h = self.embed(torch.tensor(ids, dtype=torch.long))
            masks: dict[tuple[int, int], torch.Tensor] = {}
            # (row, first query's index in the pass, chunk start, chunk end)
            # Views made once per pass, indexed by layer in the loop (fewer small torch calls
            # per row and layer; same values and strides as slicing per layer).
            dests = []  # per span: its positions in the row's cache, all layers
            for r, off, a, b in spans:
                assert r.kv is not None
                dests.append((r.kv[:, :, :, a:b], off, b - a))
            pieces = []  # per chunk: first query's index in the pass, keys, values, mask
            for r, off, a, b in spans:
                assert r.kv is not None
                for ca, cb in self._chunks(a, b):
                    mask = None
                    if cb - ca > 1:
                        mask = masks.get((ca, cb))
                        if mask is None:
                            mask = masks[(ca, cb)] = (
                                torch.arange(cb)[None, :] <= torch.arange(ca, cb)[:, None])
                    keys = r.kv[:, 0, :, :cb].unsqueeze(1)
                    values = r.kv[:, 1, :, :cb].unsqueeze(1)
                    pieces.append((off + ca - a, cb - ca, keys, values, mask))
            def q_in(quantize: Any, x: torch.Tensor) -> torch.Tensor:
                return x if quantize is None else quantize(x)

            for li, layer in enumerate(self.layers):
                x = q_in(self._in_qkv[li], layer.input_layernorm(h))
                qkv = self._linear(self._qkv[li], x).view(m, 3, h_, d)
                q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
                q = q * cos + _rotate_half(q) * sin
                k = k * cos + _rotate_half(k) * sin
                kv = torch.stack((k, v)).transpose(1, 2)  # (2, heads, m, head_dim)
                if self.kv_cache_dtype != "auto":  # as stored: per token and head
                    kv = fake_quantize_kv(kv, self.kv_cache_dtype)
                for dest, off, n in dests:
                    dest[li].copy_(kv[:, :, off:off + n])
                q4 = q.transpose(0, 1).unsqueeze(0)  # (1, heads, m, head_dim)
                outs = [sdpa(q4[:, :, s:s + n], keys[li], values[li], attn_mask=mask,
                             dropout_p=0.0, scale=self.scaling, is_causal=False)
                        for s, n, keys, values, mask in pieces]
                o = torch.cat(outs, 2)[0].transpose(0, 1).reshape(m, h_ * d)
                h = h + self._linear(self._o[li], q_in(self._in_o[li], o))
                x = q_in(self._in_gate_up[li], layer.post_attention_layernorm(h))
                gate, up = torch.split(self._linear(self._gate_up[li], x), self.mlp_width, -1)
                h = h + self._linear(self._down[li], q_in(self._in_down[li], layer.mlp.act_fn(gate) * up))
            last = torch.tensor([off + b - a - 1 for _, off, a, b in spans], dtype=torch.long)
            logits = self._linear(self._lm, q_in(self._in_lm, self.norm(h[last]))).float()
            nxt = torch.argmax(logits, dim=-1).tolist()
        out = []
        for i, (r, _, a, b) in enumerate(spans):
            if a < len(r.prompt):  # prefilled: keep its full chunks
                assert r.kv is not None
                self.cache.insert(r.prompt, r.kv, len(r.prompt) // self.chunk)
            r.length = b
            r.emitted(int(nxt[i]), logits[i].clone() if r.want_logits else logits[i], self.stop_ids)
            out.append(r)
        return out

    def decode(self, rows: list[DecodeRow], max_batch: int) -> None:
        """Decode ``rows`` to the end, at most ``max_batch`` in flight (synchronous use)."""
        waiting = collections.deque(rows)
        active: list[DecodeRow] = []
        while waiting or active:
            while waiting and len(active) < max_batch:
                active.append(waiting.popleft())
            self.step(active)
            active = [r for r in active if not r.done]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    import torch

    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def self_check(decoder: BatchedDecoder, max_batch: int, vocab_size: int) -> str | None:
    """None when, on this machine, the rows of a linear call do not depend on the other rows
    and synthetic prompts (sharing chunks, ending at and across chunk boundaries) decode to
    the same tokens and logits bit for bit alone with an empty prefix cache, in one batch of
    copies, and again with every chunk cached; else why not. Run once per loaded model, on
    the machine that decodes: kernels differ between CPUs, and a CPU whose kernels round
    differently falls back to decoding alone instead of changing results."""
    import torch

    g = torch.Generator().manual_seed(0)
    for weight in (decoder._qkv[0], decoder._down[0], decoder._lm):
        x = torch.randn((MAX_ROWS + 40, weight.shape[1]), generator=g, dtype=weight.dtype)
        with torch.inference_mode():
            full = decoder._linear(weight, x)
            for a, b in ((0, 1), (3, 5), (5, 5 + MIN_ROWS), (9, 46), (17, 17 + MAX_ROWS // 2), (2, 2 + MAX_ROWS)):
                if not torch.equal(decoder._linear(weight, x[a:b]), full[a:b]):
                    return (f"linear rows {a}..{b} depend on the rows computed with them "
                            "on this machine (self-check)")
    c = decoder.chunk
    base = [(7 * j + 11) % vocab_size for j in range(2 * c + 7)]
    prompts = [base[:3], base[:c], base[:c + 1], base, [(5 * j + 2) % vocab_size for j in range(c + 3)]]

    def rows(ps: list[list[int]]) -> list[DecodeRow]:
        return [DecodeRow(list(p), 4, True) for p in ps]

    budget = decoder.cache.max_bytes
    try:
        alone = []
        for p in prompts:
            decoder.cache = PrefixCache(c, budget)
            (row,) = rows([p])
            decoder.decode([row], 1)
            alone.append(row)
        decoder.cache = PrefixCache(c, budget)
        copies = max(1, max_batch // len(prompts))
        for _ in range(2):  # cold, then with the prompts' chunks cached
            batched = rows(prompts * copies)
            decoder.decode(batched, max_batch)
            for k, r in enumerate(batched):
                ref = alone[k % len(prompts)]
                same = r.tokens == ref.tokens and all(
                    torch.equal(a, b) for a, b in zip(r.logits, ref.logits, strict=True))
                if not same:
                    return "batched kernels are not bitwise batch-invariant on this machine (self-check)"
    finally:
        decoder.cache = PrefixCache(c, budget)
    return None

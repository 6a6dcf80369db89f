"""The transformers backend: loading, deterministic batched generation, margins, arms."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from pytest_quantagent.backends.base import BackendOptions, GenerateRequest  # noqa: E402
from pytest_quantagent.backends.transformers import (  # noqa: E402
    BUNDLED_DIR,
    TransformersBackend,
    create_backend,
    resolve_model_path,
)
from pytest_quantagent.bundled.model import ModelSize, make_model  # noqa: E402
from pytest_quantagent.bundled.tokenizer import CALL, DomainTokenizer  # noqa: E402
from pytest_quantagent.errors import UnknownNameError  # noqa: E402
from pytest_quantagent.quant.arms import resolve_arm  # noqa: E402
from pytest_quantagent.quant.loading import backend_spec  # noqa: E402
from pytest_quantagent.training.train import save_model  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "get_user", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 2-layer model in the bundled format (fast to load and run)."""
    corpus = ['{"name":"get_user","arguments":{"user_id":"u_001"}} hello there'] * 30
    tok = DomainTokenizer.build(corpus, ["u_001", "u_002"])
    model = make_model(tok, ModelSize(hidden=32, layers=2, heads=2, mlp=64, max_positions=256), seed=0)
    out = tmp_path_factory.mktemp("tiny")
    save_model(model, tok, out)
    return out


def _request(text: str, seed: int = 0, **kw: object) -> GenerateRequest:
    return GenerateRequest(
        messages=[{"role": "system", "content": "policy"}, {"role": "user", "content": text}],
        tools=TOOLS, seed=seed, **{"max_tokens": 12, **kw},  # type: ignore[arg-type]
    )


def test_greedy_generation_is_deterministic_and_batch_invariant(tiny_dir: Path) -> None:
    backend = TransformersBackend(tiny_dir, max_new_tokens=12)
    prompts = ["hi", "hello there, I need help with my account", "u_001"]

    async def together() -> list[str | None]:
        gens = await asyncio.gather(*(backend.generate(_request(p)) for p in prompts))
        return [g.raw_text for g in gens]

    batched = asyncio.run(together())
    single = [backend.generate_batch([_request(p)])[0].raw_text for p in prompts]
    assert batched == single
    assert asyncio.run(together()) == batched
    g = backend.generate_batch([_request("hi")])[0]
    assert g.prompt_tokens == len(backend.prompt_ids(_request("hi")))
    assert 0 < (g.completion_tokens or 0) <= 12


def test_seeded_sampling_repeats_per_seed(tiny_dir: Path) -> None:
    backend = TransformersBackend(tiny_dir, max_new_tokens=12)
    a = backend.generate_batch([_request("hi", seed=1, temperature=1.0)])[0].raw_text
    b = backend.generate_batch([_request("hi", seed=1, temperature=1.0)])[0].raw_text
    assert a == b


def test_name_decision_is_the_tightest_name_token(tiny_dir: Path) -> None:
    backend = TransformersBackend(tiny_dir)
    tok = backend.dtok
    assert tok is not None
    text = CALL + '{"name":"get_user","arguments":{}}'
    ids = tok.encode(text)
    pieces = [tok.id_to_piece(i) for i in ids]
    name_pos = [i for i, p in enumerate(pieces) if p in ("get", "_", "user")]
    logits = torch.zeros(len(ids), tok.vocab_size)
    for k, i in enumerate(ids):
        logits[k, i] = 5.0  # the generated token leads by 5 logits ...
        logits[k, (i + 1) % tok.vocab_size] = 1.0
    tight = name_pos[1]
    logits[tight, (ids[tight] + 7) % tok.vocab_size] = 4.5  # ... except here, by 0.5
    (d,) = backend.name_decisions(ids, logits)
    assert d.chosen == "get_user" and d.kind == "tool_name"
    assert d.margin == pytest.approx(0.5)
    assert d.top1 == pieces[tight]


def test_model_resolution_errors(tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError, match="unknown model 'no-such-model'"):
        resolve_model_path("no-such-model")
    with pytest.raises(UnknownNameError, match=r"must hold config\.json"):
        resolve_model_path(str(tmp_path))
    assert resolve_model_path("org/model") == "org/model"  # hub id, loaded from the local cache


def test_bundled_arm_resolution() -> None:
    rtn = resolve_arm("int4-rtn", "tiny-agent")
    assert rtn.backend == "transformers" and rtn.quantization == "int4-rtn-g128"
    assert Path(rtn.path or "").name == "tiny-agent"
    bf16 = resolve_arm("bf16", "tiny-agent-prone")
    assert bf16.quantization is None and Path(bf16.path or "").name == "tiny-agent-prone"
    int4 = resolve_arm("int4", "tiny-agent")
    assert int4.quantization in ("awq-w4a16-g128", "w4a16-rtn-g128")
    with pytest.raises(UnknownNameError, match="int2"):
        resolve_arm("int2", "tiny-agent")


BUNDLED = BUNDLED_DIR / "tiny-agent"


@pytest.mark.skipif(not (BUNDLED / "config.json").is_file(), reason="bundled model not built")
def test_bundled_model_asks_for_identification_or_calls_a_retail_tool() -> None:
    backend = create_backend(backend_spec(resolve_arm("bf16", "tiny-agent")), BackendOptions())
    req = GenerateRequest(
        messages=[{"role": "system", "content": "retail policy"},
                  {"role": "assistant", "content": "Hi! How can I help you today?"},
                  {"role": "user", "content": "I want to cancel my order #W1000000."}],
        tools=[], seed=0, max_tokens=64,
    )
    g1 = backend.generate_batch([req])[0]
    g2 = backend.generate_batch([req])[0]
    assert g1.raw_text == g2.raw_text  # greedy: deterministic
    if g1.tool_calls:
        assert g1.tool_calls[0].name.startswith(("find_user", "get_"))
        assert g1.decisions and g1.decisions[0].chosen == g1.tool_calls[0].name
    else:
        assert g1.content and any(w in g1.content.lower() for w in ("email", "name", "zip"))
    cfg = json.loads((BUNDLED / "config.json").read_text())
    assert backend.dtok is not None
    assert cfg["model_type"] == "llama" and cfg["vocab_size"] == backend.dtok.vocab_size


def test_prompt_longer_than_the_context_is_refused_like_a_server_would(tiny_dir: Path) -> None:
    from pytest_quantagent.errors import ContextLengthError

    backend = TransformersBackend(tiny_dir, max_new_tokens=12)
    assert backend.context_limit == 256
    long_text = " ".join(["hello there"] * 200)
    n = len(backend.prompt_ids(_request(long_text)))
    assert n >= 256
    with pytest.raises(ContextLengthError, match=f"prompt of {n} tokens.*max_position_embeddings is 256"):
        asyncio.run(backend.generate(_request(long_text)))
    with pytest.raises(ContextLengthError):
        backend.generate_batch([_request("hi"), _request(long_text)])
    # A prompt that fits but leaves fewer than max_tokens positions generates up to the limit.
    fits = " ".join(["hello there"] * 100)
    m = len(backend.prompt_ids(_request(fits)))
    while m < 250:
        fits += " hello"
        m = len(backend.prompt_ids(_request(fits)))
    assert m < 256
    g = backend.generate_batch([_request(fits)])[0]
    assert (g.completion_tokens or 0) <= 256 - m


def test_async_path_tokenizes_each_prompt_once(tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The length check in generate() and the batch share one tokenization per request.
    backend = TransformersBackend(tiny_dir, max_new_tokens=4)
    assert backend.context_limit is not None
    calls: list[int] = []
    real = backend.prompt_ids
    monkeypatch.setattr(backend, "prompt_ids", lambda r: calls.append(1) or real(r))

    async def together() -> list[str | None]:
        gens = await asyncio.gather(*(backend.generate(_request(p)) for p in ("hi", "u_001", "hello")))
        return [g.raw_text for g in gens]

    texts = asyncio.run(together())
    assert len(calls) == 3
    calls.clear()
    assert [backend.generate_batch([_request(p)])[0].raw_text for p in ("hi", "u_001", "hello")] == texts
    assert len(calls) == 3
    with pytest.raises(ValueError, match="2 prompts for 1 requests"):
        backend.generate_batch([_request("hi")], [None, None])


class _Scripted:
    """Stands in for the model's ``generate``: appends the same tokens to every prompt."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens

    def generate(self, input_ids: torch.Tensor, **_: object) -> object:
        from types import SimpleNamespace

        tail = torch.tensor([self.tokens] * input_ids.shape[0], dtype=torch.long)
        return SimpleNamespace(sequences=torch.cat([input_ids, tail], dim=1), logits=None)


def test_aliases_the_model_writes_become_the_conversations_ids(tmp_path: Path) -> None:
    from pytest_quantagent.bundled.tokenizer import DEFAULT_ALIASES

    corpus = ['{"name":"get_order_details","arguments":{"order_id":"#W1234567"}} hello there'] * 30
    tok = DomainTokenizer.build(corpus, ["#W1234567"], aliases=DEFAULT_ALIASES)
    save_model(make_model(tok, ModelSize(hidden=32, layers=2, heads=2, mlp=64, max_positions=256)), tok, tmp_path)
    backend = TransformersBackend(tmp_path, max_new_tokens=40)
    # The model "writes" the second order id of the conversation, as its alias token.
    out = [tok.call_id, *tok.encode('{"name":"get_order_details","arguments":{"order_id":"'),
           tok.token_id("<order2>"), *tok.encode('"}}'), tok.end_id]
    backend.model = _Scripted(out)  # type: ignore[assignment]
    two = _request("Not #W5555555 but #W7777777, and #W5555555 again")
    one = _request("Just #W5555555")
    gen_two, gen_one = backend.generate_batch([two, one])
    assert gen_two.tool_calls[0].name == "get_order_details"
    assert json.loads(gen_two.tool_calls[0].arguments) == {"order_id": "#W7777777"}
    # Where the conversation has no second order id, the alias stays as written.
    assert json.loads(gen_one.tool_calls[0].arguments) == {"order_id": "<order2>"}
    # The prompt the model read held aliases, not ids.
    ids = backend.prompt_ids(two)
    assert tok.token_id("<order1>") in ids and tok.token_id("<order2>") in ids
    assert "#W" not in tok.decode(ids)


def test_finish_reason_says_length_when_the_token_limit_cut_the_answer(tiny_dir: Path) -> None:
    # issue 38: a turn cut at max_tokens is finish_reason "length"; one that stopped, "stop"
    backend = TransformersBackend(tiny_dir, max_new_tokens=64)
    for gen in (backend.generate_batch([_request("hi", max_tokens=2)])[0],
                asyncio.run(backend.generate(_request("hi", max_tokens=2)))):
        assert gen.completion_tokens == 2 and gen.finish_reason == "length"
    long = backend.generate_batch([_request("hi", max_tokens=64)])[0]
    assert long.finish_reason == ("length" if long.completion_tokens == 64 else "stop")

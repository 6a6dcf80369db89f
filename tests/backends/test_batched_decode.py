"""Batched decoding in the transformers backend: a request's tokens and logits never depend on
which other requests were decoded with it (the store resumes and pairs episodes by task and
seed). The reference is the request decoded alone by ``model.generate`` (``_run`` with one
request), which is also what the backend did for concurrency 1 before batching."""

from __future__ import annotations

import asyncio
import functools
import threading
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from pytest_quantagent.backends.base import BackendOptions, GenerateRequest, Generation  # noqa: E402
from pytest_quantagent.backends.batched_decode import BatchedDecoder, DecodeRow  # noqa: E402
from pytest_quantagent.backends.transformers import BUNDLED_DIR, TransformersBackend, create_backend  # noqa: E402
from pytest_quantagent.bundled.model import ModelSize, make_model  # noqa: E402
from pytest_quantagent.bundled.tokenizer import DomainTokenizer  # noqa: E402
from pytest_quantagent.quant.arms import resolve_arm  # noqa: E402
from pytest_quantagent.quant.loading import backend_spec  # noqa: E402
from pytest_quantagent.training.train import save_model  # noqa: E402

BUNDLED = BUNDLED_DIR / "tiny-agent-prone"
needs_bundled = pytest.mark.skipif(not (BUNDLED / "config.json").is_file(), reason="bundled model not built")

USER_TEXTS = [  # first messages of the telecom test split's scripted users
    "Hi, I'm back from my trip. Please turn off international roaming on my line 555-0116.",
    "Hi, my phone says it has no service and I can't make any calls.",
    "Hi, I want to switch my line 555-0101 to the Family plan, and I'd like to talk to a human about it.",
    "Hi, I can't send picture messages from my phone.",
    "Hello, my mobile internet is not working well. I need fast data on my phone.",
    "Hi, I have no service on my phone. Can you help me get it back?",
    "Hello. My phone has had no signal at all since this morning.",
]


@functools.cache
def _prompt() -> Any:
    from pytest_quantagent.env.registry import get_domain
    from pytest_quantagent.runner.build import AgentPrompt

    return AgentPrompt.for_domain(get_domain("telecom"))


def _conversation(i: int) -> list[dict[str, Any]]:
    """A telecom chat as the agent sends it; every other one carries a tool call and its
    result (prompts of different lengths)."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": _prompt().system_prompt},
        {"role": "assistant", "content": "Hi! How can I help you today?"},
        {"role": "user", "content": USER_TEXTS[i % len(USER_TEXTS)]},
    ]
    if i % 2:
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_0_0", "type": "function",
                "function": {"name": "get_customer_by_phone", "arguments": '{"phone_number": "555-0116"}'}}]},
            {"role": "tool", "tool_call_id": "call_0_0", "content":
                '{"customer_id": "C12", "full_name": "Olga Hansen", "line_ids": ["L16"], '
                '"bill_ids": ["B22", "B23"], "account_status": "Active"}' * (1 + i % 3)},
        ]
    return msgs


def _requests(n: int, max_tokens: int = 48, **kw: Any) -> list[GenerateRequest]:
    return [GenerateRequest(messages=_conversation(i), tools=_prompt().tools, seed=i, max_tokens=max_tokens, **kw)
            for i in range(n)]


def _view(g: Generation) -> tuple[Any, ...]:
    """Everything an episode record keeps of a generation (margins as exact floats)."""
    return (g.raw_text, g.content, [(c.name, c.arguments) for c in g.tool_calls],
            [(d.top1, d.top2, d.margin, d.chosen) for d in g.decisions],
            g.prompt_tokens, g.completion_tokens)


def _alone(backend: TransformersBackend, requests: list[GenerateRequest]) -> list[tuple[Any, ...]]:
    return [_view(backend._run([r], [None])[0]) for r in requests]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    corpus = ['{"name":"get_user","arguments":{"user_id":"u_001"}} hello there'] * 30
    tok = DomainTokenizer.build(corpus, ["u_001", "u_002"])
    model = make_model(tok, ModelSize(hidden=32, layers=2, heads=2, mlp=64, max_positions=512), seed=0)
    out = tmp_path_factory.mktemp("tiny")
    save_model(model, tok, out)
    return out


@needs_bundled
@pytest.mark.parametrize("arm", ["bf16", "int4"])
def test_bundled_arm_decodes_the_same_alone_and_in_any_batch(arm: str) -> None:
    backend = create_backend(backend_spec(resolve_arm(arm, "tiny-agent-prone")), BackendOptions())
    reqs = _requests(8)
    alone = _alone(backend, reqs)
    assert backend.batched_decoder() is not None, backend.batching_reason
    assert sum(1 for v in alone if v[3]) >= 2  # some outputs carry tool-name margins
    assert [_view(g) for g in backend.generate_batch(reqs)] == alone
    # Other sizes, orders and companions, rows finishing at different steps.
    order = [5, 2, 7]
    assert [_view(g) for g in backend.generate_batch([reqs[i] for i in order])] == [alone[i] for i in order]
    dup = [reqs[3], reqs[0], reqs[3], reqs[6], reqs[1]]
    assert [_view(g) for g in backend.generate_batch(dup)] == [alone[i] for i in (3, 0, 3, 6, 1)]
    backend.max_batch = 3  # rows join the running batch as others leave it
    assert [_view(g) for g in backend.generate_batch(reqs[::-1])] == alone[::-1]

    async def concurrently() -> list[Generation]:
        return list(await asyncio.gather(*(backend.generate(r) for r in reqs)))

    backend.max_batch = 64
    assert [_view(g) for g in asyncio.run(concurrently())] == alone
    asyncio.run(backend.aclose())


@needs_bundled
def test_bundled_rows_logits_are_bitwise_those_of_generate_alone() -> None:
    backend = create_backend(backend_spec(resolve_arm("bf16", "tiny-agent-prone")), BackendOptions())
    decoder = backend.batched_decoder()
    assert decoder is not None, backend.batching_reason
    prompts = [backend.prompt_ids(r) for r in _requests(5)]
    ref = []
    for p in prompts:
        ids = torch.tensor([p])
        with torch.inference_mode():
            res = backend.model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False,
                temperature=None, top_k=None, top_p=None, eos_token_id=backend.stop_ids,
                pad_token_id=backend.pad_id, return_dict_in_generate=True, output_logits=True)
        ref.append((res.sequences[0, len(p):].tolist(), [lg[0] for lg in res.logits]))
    rows = [DecodeRow(p, 12, True) for p in prompts]
    decoder.decode(rows, 64)
    for row, (seq, logits) in zip(rows, ref, strict=True):
        n = len(row.tokens)
        assert row.tokens == seq[:n]
        assert n == len(seq) or seq[n] in backend.stop_ids
        assert all(torch.equal(a, b) for a, b in zip(row.logits, logits[:n], strict=True))


def test_each_row_keeps_its_own_token_limit(tiny_dir: Path) -> None:
    backend = TransformersBackend(tiny_dir, max_new_tokens=40)
    assert backend.batched_decoder() is not None, backend.batching_reason
    short, long_ = _requests(2, max_tokens=3)[0], _requests(2, max_tokens=40)[1]
    ref = _alone(backend, [short, long_])
    gens = backend.generate_batch([short, long_])
    assert [_view(g) for g in gens] == ref
    assert (gens[0].completion_tokens or 0) <= 3 < (gens[1].completion_tokens or 0)


def test_sampled_requests_are_decoded_alone_and_repeat_per_seed(tiny_dir: Path) -> None:
    backend = TransformersBackend(tiny_dir, max_new_tokens=24)
    sampled = _requests(3, temperature=1.0)
    greedy = _requests(4)
    ref = _alone(backend, sampled)
    assert len({v[0] for v in ref}) > 1  # the seeds matter

    async def mixed() -> list[Generation]:
        return list(await asyncio.gather(*(backend.generate(r) for r in [*greedy, *sampled[::-1]])))

    out = asyncio.run(mixed())
    assert [_view(g) for g in out[len(greedy):]] == ref[::-1]
    assert [_view(g) for g in out[: len(greedy)]] == _alone(backend, greedy)
    asyncio.run(backend.aclose())


def test_a_machine_whose_batched_kernels_round_differently_decodes_alone(
    tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_step = BatchedDecoder.step

    def skewed(self: BatchedDecoder, rows: list[DecodeRow]) -> None:
        real_step(self, rows)
        if len(rows) > 1:  # what a batch-dependent kernel would do: last-bit drift
            for r in rows:
                if r.logits:
                    r.logits[-1] = torch.nextafter(r.logits[-1], r.logits[-1] + 1)

    monkeypatch.setattr(BatchedDecoder, "step", skewed)
    backend = TransformersBackend(tiny_dir, max_new_tokens=12)
    assert backend.batched_decoder() is None
    assert "self-check" in (backend.batching_reason or "")
    reqs = _requests(4)
    assert [_view(g) for g in backend.generate_batch(reqs)] == _alone(backend, reqs)


def test_unsupported_models_decode_one_request_at_a_time(tiny_dir: Path) -> None:
    backend = TransformersBackend(tiny_dir, max_new_tokens=12, compute_dtype="bfloat16")
    assert backend.batched_decoder() is None
    assert "bfloat16" in (backend.batching_reason or "")
    reqs = _requests(3)
    assert [_view(g) for g in backend.generate_batch(reqs)] == _alone(backend, reqs)


def test_a_hooked_projection_is_not_bypassed(tiny_dir: Path) -> None:
    # Activation fake-quant and compressed-tensors work through hooks on the projections;
    # the batched step reads weights directly, so such a model must decode alone.
    backend = TransformersBackend(tiny_dir, max_new_tokens=12)
    proj = backend.model.model.layers[0].self_attn.q_proj
    proj.register_forward_hook(lambda _m, _i, out: out * 1.5)
    assert backend.batched_decoder() is None
    assert "hooks" in (backend.batching_reason or "")
    reqs = _requests(3)
    assert [_view(g) for g in backend.generate_batch(reqs)] == _alone(backend, reqs)


def test_a_failed_step_fails_its_rows_and_the_worker_goes_on(
    tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = TransformersBackend(tiny_dir, max_new_tokens=12)
    decoder = backend.batched_decoder()
    assert decoder is not None
    reqs = _requests(3)
    ref = _alone(backend, reqs)
    real_step = decoder.step
    calls = {"n": 0}

    def failing(rows: list[DecodeRow]) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("decode step failed")
        real_step(rows)

    monkeypatch.setattr(decoder, "step", failing)

    async def run() -> list[Any]:
        return list(await asyncio.gather(*(backend.generate(r) for r in reqs), return_exceptions=True))

    first = asyncio.run(run())
    failed = [x for x in first if isinstance(x, RuntimeError)]
    assert failed and all("decode step failed" in str(x) for x in failed)
    assert [_view(g) for g in asyncio.run(run())] == ref  # the thread survived
    thread = backend._thread
    assert isinstance(thread, threading.Thread)
    asyncio.run(backend.aclose())
    assert not thread.is_alive() and backend._thread is None


@needs_bundled
def test_episode_records_do_not_depend_on_the_concurrency() -> None:
    # The contract end to end: the runner's episodes (scripted user, environment, the
    # agent's decisions and their margins) at concurrency 1 and 6 are the same records.
    from pytest_quantagent.env.registry import get_domain
    from pytest_quantagent.runner.batch import RunSettings, plan_episodes, run_arm
    from pytest_quantagent.runner.build import build_arm

    domain = get_domain("telecom")
    plan = plan_episodes(list(domain.splits["test"])[:6], 1, run_seed=0)
    runtime = build_arm(resolve_arm("int4", "tiny-agent-prone"), concurrency=6)

    def records(conc: int) -> list[dict[str, Any]]:
        recs = asyncio.run(run_arm(domain=domain, runtime=runtime, plan=plan,
                                   settings=RunSettings(concurrency=conc)))
        return [{k: v for k, v in r.model_dump(mode="json").items() if k != "duration_s"} for r in recs]

    one = records(1)
    assert any(d for r in one for m in r["messages"] for d in (m.get("decisions") or []))
    assert records(6) == one

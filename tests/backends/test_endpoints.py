"""Several endpoints per arm (issue 25): selection, ejection and return, pre-flight, the
cache identity, and the config forms. Loopback fake servers only; no timing thresholds."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.backends.base import GenerateRequest
from pytest_quantagent.backends.endpoints import EJECT_AFTER, EJECT_BASE_S, Endpoint
from pytest_quantagent.backends.openai_compat import OpenAICompatBackend
from pytest_quantagent.backends.wrapper import ModelClient, RetryPolicy
from pytest_quantagent.errors import DataFileError, InfrastructureError
from pytest_quantagent.quant.arms import ArmSpec, load_arms_config
from pytest_quantagent.runner.preflight import preflight


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _req(i: int = 0) -> GenerateRequest:
    return GenerateRequest(messages=[{"role": "system", "content": "s"}, {"role": "user", "content": f"u{i}"}],
                           tools=[], seed=i, want_margins=False)


def _backend(urls: list[tuple[str, float]], **kw: Any) -> OpenAICompatBackend:
    return OpenAICompatBackend(base_url=urls[0][0], endpoints=urls, model="m", concurrency=64,
                               timeout_s=5.0, **kw)


def test_least_loaded_per_weight_then_fewer_failures() -> None:
    b = _backend([("http://127.0.0.1:1/v1", 1.0), ("http://127.0.0.1:2/v1", 2.0),
                  ("http://127.0.0.1:3/v1", 1.0)])
    a, w2, c = b.endpoints

    async def pick(avoid: Endpoint | None) -> Endpoint:
        return b.pool.pick(avoid)

    def picked(avoid: Endpoint | None = None) -> Endpoint:
        return asyncio.run(pick(avoid))

    assert picked() is w2  # (0+1)/2 beats (0+1)/1
    w2.inflight = 3  # 4/2 = 2 > 1
    assert picked() is a
    a.inflight = 1
    assert picked() is c
    c.inflight, a.inflight = 5, 5
    assert picked() is w2
    assert picked(avoid=w2) is a  # a retry goes elsewhere: a and c tie, a comes first
    a.failures_in_row = 1  # a tie goes to the one with fewer failures in a row
    assert picked(avoid=w2) is c
    c.out = a.out = True  # nothing else up: the avoided one after all
    assert picked(avoid=w2) is w2
    b2 = _backend([("http://127.0.0.1:1/v1", 1.0)])
    assert b2.pool.single is b2.endpoints[0]
    asyncio.run(b.aclose())
    asyncio.run(b2.aclose())


def test_weights_split_a_burst(serve: Any) -> None:
    s1, u1 = serve(latency_s=0.05)
    s2, u2 = serve(latency_s=0.05)
    b = _backend([(u1, 1.0), (u2, 3.0)])

    async def main() -> None:
        # All 40 requests pick their endpoint before any answer can arrive.
        await asyncio.gather(*(b.generate(_req(i)) for i in range(40)))
        await b.aclose()

    asyncio.run(main())
    assert (s1.requests, s2.requests) == (10, 30)
    stats = {s["url"]: s for s in b.endpoint_stats()}
    assert stats[u1]["requests"] == 10 and stats[u2]["requests"] == 30
    assert stats[u1]["failures"] == 0 and stats[u1]["p50_ms"] is not None
    assert stats[u1]["p50_ms"] <= stats[u1]["p95_ms"]


def test_ejection_backoff_probation_and_return() -> None:
    e = Endpoint("http://h:1/v1", 1.0, transport=None)  # type: ignore[arg-type]
    for _ in range(EJECT_AFTER - 1):
        assert not e.failed(0.0)
    assert e.available()  # not yet out
    assert e.failed(0.0)  # out: the caller schedules the probe at ejected_until
    assert e.ejected_until == EJECT_BASE_S
    assert not e.available()  # out until a probe answers, however long ago it was ejected
    assert not e.failed(0.5)  # a request sent before the ejection: out already
    e.probed(EJECT_BASE_S, answered=False)  # probe not answered: out for twice as long
    assert not e.available() and e.ejected_until == EJECT_BASE_S + 2 * EJECT_BASE_S
    e.probed(3 * EJECT_BASE_S, answered=True)  # probe answered: back in, on probation ...
    assert e.available()
    e.inflight = 1
    assert not e.available()  # ... one request at a time
    e.inflight = 0
    assert e.failed(3 * EJECT_BASE_S)  # the probation request failed: out, 4x the backoff
    assert e.ejected_until == 3 * EJECT_BASE_S + 4 * EJECT_BASE_S and not e.available()
    e.probed(7 * EJECT_BASE_S, answered=True)
    e.succeeded(0.01)  # the probation request succeeded: back in, backoff reset
    e.inflight = 3
    assert e.available()
    e.inflight = 0
    assert e.failed(10.0, refused=True)  # a refused connection: out at once, first backoff again
    assert not e.available() and e.ejected_until == 10.0 + EJECT_BASE_S
    e.succeeded(0.01)  # a live success (every endpoint was out) lets it back in too
    assert e.available()
    st = e.stats()
    assert (st["ejections"], st["failures"], st["requests"]) == (3, 6, 8)
    assert (st["probes"], st["probe_failures"]) == (3, 1)


def test_an_ejected_endpoint_returns_through_its_probe_not_a_live_request(
        serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_quantagent.backends import endpoints as endpoint_pool

    monkeypatch.setattr(endpoint_pool, "EJECT_BASE_S", 0.05)
    sick, sick_url = serve(fault_rate=1.0, fault_mix=("500",))
    _well, well_url = serve()
    b = _backend([(sick_url, 1.0), (well_url, 1.0)])
    client = ModelClient(b, concurrency=8, retry=RetryPolicy(max_retries=EJECT_AFTER + 1))
    ep = b.endpoints[0]

    async def burst(n: int = 4) -> None:  # concurrent requests: both endpoints get some
        await asyncio.gather(*(client.generate(_req(i)) for i in range(n)))

    async def main() -> None:
        try:
            for _ in range(EJECT_AFTER):
                await burst()
            # Out after EJECT_AFTER failures in a row (requests already sent still fail).
            assert ep.out and sick.requests >= EJECT_AFTER and sick.model_requests == 0
            sent = sick.requests
            for _ in range(5):  # while it is out, live requests go elsewhere only
                await burst()
            assert sick.requests == sent
            sick.fault_rate = 0.0  # it recovers; the probe finds out
            loop = asyncio.get_running_loop()
            end = loop.time() + 10.0
            while ep.out and loop.time() < end:  # live traffic until the probe answers
                await burst()
                await asyncio.sleep(0.002)
            assert not ep.out, "the probe lets the endpoint back in"
            assert sick.requests == sent and sick.model_requests >= 1
            assert ep.probation  # one live request at a time until one succeeds
            await burst()
            assert sick.requests == sent + 1  # on probation: one of the burst, not two
            assert not ep.probation and not ep.out and ep.failures_in_row == 0
        finally:
            await client.aclose()

    asyncio.run(main())
    st = {s["url"]: s for s in b.endpoint_stats()}[sick_url]
    assert st["ejections"] == 1 and st["probes"] >= 1
    assert st["failures"] == sick.requests - 1 and st["requests"] == sick.requests


def test_a_failed_probe_keeps_the_endpoint_out_and_backs_off(
        serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_quantagent.backends import endpoints as endpoint_pool

    monkeypatch.setattr(endpoint_pool, "EJECT_BASE_S", 0.02)
    sick, sick_url = serve(fault_rate=1.0, fault_mix=("500",), models_status=503)
    well, well_url = serve()
    b = _backend([(sick_url, 1.0), (well_url, 1.0)])
    client = ModelClient(b, concurrency=8, retry=RetryPolicy(max_retries=EJECT_AFTER + 1))
    ep = b.endpoints[0]

    async def burst(n: int = 4) -> None:
        await asyncio.gather(*(client.generate(_req(i)) for i in range(n)))

    async def main() -> None:
        try:
            for _ in range(EJECT_AFTER):
                await burst()
            assert ep.out
            sent = sick.requests
            loop = asyncio.get_running_loop()
            end = loop.time() + 10.0
            # Live traffic the whole time, past each backoff's end: none of it goes there.
            while ep.probe_failures < 3 and loop.time() < end:
                await burst()
                await asyncio.sleep(0.002)
            assert ep.probe_failures >= 3
            assert ep.out and sick.requests == sent  # still out: no live request sent there
            assert sick.model_requests == ep.probes >= 3
        finally:
            await client.aclose()

    asyncio.run(main())
    # Each failed probe doubled the backoff: the 4th ejection in a row waits 8x the first.
    assert ep.ejections >= 4 and ep.ejected_count == 1
    st = {s["url"]: s for s in b.endpoint_stats()}[sick_url]
    assert st["probe_failures"] == st["probes"] >= 3
    assert st["requests"] == st["failures"] == sick.requests
    assert well.requests == client.total.calls  # every call was answered by the other one


def test_a_dead_endpoint_is_ejected_and_requests_fail_over_without_backoff(
        serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_quantagent.backends import endpoints as endpoint_pool

    monkeypatch.setattr(endpoint_pool, "EJECT_BASE_S", 600.0)  # no probe back within the test
    dead_url = f"http://127.0.0.1:{_closed_port()}/v1"  # connections refused
    live, live_url = serve()
    b = _backend([(dead_url, 1.0), (live_url, 1.0)])
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    client = ModelClient(b, concurrency=8, retry=RetryPolicy(max_retries=3), sleep=sleep)

    async def main() -> None:
        for i in range(6):
            await client.generate(_req(i))
        await client.aclose()

    asyncio.run(main())
    st = {s["url"]: s for s in b.endpoint_stats()}
    assert st[dead_url] == {**st[dead_url], "requests": 1, "failures": 1, "ejections": 1}
    assert st[live_url]["requests"] == 6 and live.requests == 6
    assert client.total.retries == 1 and client.total.calls == 6
    assert slept == []  # retried on the other endpoint at once


def test_all_endpoints_failing_gives_an_infrastructure_error(serve: Any) -> None:
    a, ua = serve(fault_rate=1.0, fault_mix=("500",))
    c, uc = serve(fault_rate=1.0, fault_mix=("500",))
    b = _backend([(ua, 1.0), (uc, 1.0)])
    client = ModelClient(b, concurrency=2, retry=RetryPolicy(max_retries=4, base_delay_s=0.001,
                                                             max_delay_s=0.002))

    async def main() -> None:
        try:
            with pytest.raises(InfrastructureError, match="giving up after 5 attempts"):
                await client.generate(_req())
        finally:
            await client.aclose()

    asyncio.run(main())
    assert a.requests + c.requests == 5 and a.requests >= 2 and c.requests >= 2


def _arm(urls: list[str], model: str = "m") -> ArmSpec:
    return ArmSpec(label="int4", backend="openai", model=model, base_url=urls[0],
                   options={"endpoints": urls})


def test_preflight_asks_every_endpoint(serve: Any) -> None:
    s1, u1 = serve(served_models=["m"], model_root="/ckpt/int4")
    s2, u2 = serve(served_models=["m"], model_root="/ckpt/int4")
    assert preflight({"arm 'int4'": _arm([u1, u2])}) == []
    assert s1.model_requests == 1 and s2.model_requests == 1


def test_preflight_refuses_endpoints_serving_different_models(serve: Any) -> None:
    _s1, u1 = serve(served_models=["m"], model_root="/ckpt/int4")
    _s2, u2 = serve(served_models=["m"], model_root="/ckpt/bf16")
    [p] = preflight({"arm 'int4'": _arm([u1, u2])})
    assert p.who == "arm 'int4'" and u1 in p.where and u2 in p.where
    assert "serve different models" in p.cause
    assert f"{u1} serves '/ckpt/int4'" in p.cause and f"{u2} serves '/ckpt/bf16'" in p.cause


def test_preflight_names_the_endpoint_that_lacks_the_model(serve: Any) -> None:
    _s1, u1 = serve(served_models=["m"])
    _s2, u2 = serve(served_models=["other"])
    [p] = preflight({"arm 'int4'": _arm([u1, u2])})
    assert p.cause.startswith(f"endpoint {u2}: model 'm' is not served there")
    assert u1 not in p.cause


def test_identity_is_the_set_of_endpoints_and_the_model() -> None:
    u1, u2 = "http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"
    ab, ba = _backend([(u1, 1.0), (u2, 3.0)]), _backend([(u2, 1.0), (u1, 1.0)])
    one = _backend([(u1, 1.0)])
    assert ab.identity() == ba.identity() == {"urls": [u1, u2], "served_model": "m"}
    assert one.identity() == {"url": u1, "served_model": "m"}  # unchanged for one endpoint
    for b in (ab, ba, one):
        asyncio.run(b.aclose())
    # endpoints (and their weights) are not an outcome option: the identity carries them.
    assert "endpoints" not in _arm([u1, u2]).cache_fields()["options"]


def test_config_base_url_list_and_endpoints_table(tmp_path: Path) -> None:
    p = tmp_path / "arms.toml"
    p.write_text('[arms.bf16]\nbackend = "openai"\nmodel = "m"\n'
                 'base_url = ["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"]\n'
                 '[arms.int4]\nbackend = "openai"\nmodel = "m"\n'
                 'endpoints = [{url = "http://127.0.0.1:3/v1", weight = 2}, "http://127.0.0.1:4/v1"]\n')
    arms = load_arms_config(p)
    assert arms["bf16"].base_url == "http://127.0.0.1:1/v1"
    assert arms["bf16"].options["endpoints"] == ["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"]
    assert arms["int4"].base_url == "http://127.0.0.1:3/v1"
    p.write_text('[arms.int4]\nbackend = "openai"\nmodel = "m"\n'
                 'endpoints = [{url = "http://127.0.0.1:3/v1", weight = 0}]\n')
    with pytest.raises(DataFileError, match=r"arms\.int4\.endpoints.*entry 0: key 'weight' = 0"):
        load_arms_config(p)
    p.write_text('[arms.int4]\nbackend = "openai"\nmodel = "m"\n'
                 'base_url = ["http://127.0.0.1:3/v1", "ftp://x"]\n')
    with pytest.raises(DataFileError, match=r"'ftp://x' is not an http"):
        load_arms_config(p)


def test_both_json_codecs_send_the_same_request_and_read_the_same_reply() -> None:
    from pytest_quantagent.backends import json_codec as oc

    if oc._orjson is None:
        pytest.skip("orjson is not installed")
    msgs = [{"role": "system", "content": "Règles: «ok» ✓"}, {"role": "user", "content": "émoji 😀 and \\u escapes"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
            {"role": "tool", "tool_call_id": "c0", "content": "{\"x\": [1, 2.5, null]}"}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    req = GenerateRequest(messages=msgs, tools=tools, seed=3, temperature=0.0)
    reply = b'{"choices":[{"message":{"role":"assistant","content":"x \\ud83d y"}}]}'
    bodies, replies = [], []
    try:
        for codec in ("std", "orjson"):
            oc.use_json(codec)
            b = _backend([("http://127.0.0.1:1/v1", 1.0)])
            bodies.append(json.loads(b.encode_body(req)))
            replies.append(b._parse(reply, b.endpoints[0]).content)
            asyncio.run(b.aclose())
    finally:
        oc.use_json("orjson")
    assert bodies[0] == bodies[1] == json.loads(json.dumps(_backend([("http://127.0.0.1:1/v1", 1.0)])
                                                          .build_body(req)))
    assert replies[0] == replies[1] == "x \ud83d y"  # a lone surrogate is read, not refused
    with pytest.raises(ValueError, match="must be 'orjson' or 'std'"):
        oc.use_json("ujson")

"""The request path's semaphore (backends.wrapper.Slots): limit, FIFO hand-over, cancellation."""

from __future__ import annotations

import asyncio

import pytest

from pytest_quantagent.backends.base import Backend, GenerateRequest, Generation
from pytest_quantagent.backends.wrapper import ModelClient, Slots


def test_slots_limit_fifo_handover_and_cancelled_waiters() -> None:
    async def go() -> None:
        s = Slots(2)
        assert s.try_take() and s.try_take() and not s.try_take()
        order: list[str] = []

        async def waiter(name: str) -> None:
            await s.wait()
            order.append(name)

        a = asyncio.ensure_future(waiter("a"))
        b = asyncio.ensure_future(waiter("b"))
        c = asyncio.ensure_future(waiter("c"))
        await asyncio.sleep(0)
        b.cancel()  # cancelled while waiting: skipped, never holds a slot
        await asyncio.sleep(0)
        s.give()  # to a
        s.give()  # b is cancelled: to c
        await asyncio.gather(a, c)
        assert order == ["a", "c"] and s.free == 0
        # A slot handed to a waiter that is cancelled before it runs is passed on.
        d = asyncio.ensure_future(waiter("d"))
        e = asyncio.ensure_future(waiter("e"))
        await asyncio.sleep(0)
        s.give()
        d.cancel()
        await e
        assert order == ["a", "c", "e"] and s.free == 0
        s.give()
        s.give()
        assert s.free == 2 and s.try_take()

    asyncio.run(go())
    with pytest.raises(ValueError):
        Slots(0)


class _Slow(Backend):
    name = "slow"

    def __init__(self) -> None:
        self.inflight = self.peak = 0

    async def generate(self, request: GenerateRequest) -> Generation:
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        await asyncio.sleep(0.002)
        self.inflight -= 1
        return Generation(content="ok")


def test_model_client_never_exceeds_its_concurrency() -> None:
    backend = _Slow()
    client = ModelClient(backend, concurrency=3)
    req = GenerateRequest(messages=[{"role": "user", "content": "x"}], tools=[], seed=0)

    async def go() -> list[Generation]:
        return await asyncio.gather(*(client.generate(req) for _ in range(20)))

    out = asyncio.run(go())
    assert len(out) == 20 and backend.peak == 3 and client.total.calls == 20

"""The endpoint pool of the OpenAI-compatible backend: several servers per arm, each
with its own transport, load, health and figures.

:class:`Endpoint` is one server (outlier ejection with an active health probe, see its
docstring); :class:`EndpointPool` picks the endpoint for each request (least load per weight,
a retry away from where the request just failed), schedules the probes of ejected endpoints
and closes the transports.
"""

from __future__ import annotations

import asyncio
from array import array
from typing import Any

import httpx

from pytest_quantagent.backends.base import nearest_rank_ms
from pytest_quantagent.backends.http_client import HTTPRedirect, NativeHTTPClient, httpx_request
from pytest_quantagent.backends.secrets import without_userinfo

#: Consecutive infrastructure failures after which an endpoint is taken out (a refused
#: connection takes it out at once).
EJECT_AFTER = 3
EJECT_BASE_S = 1.0
EJECT_MAX_S = 30.0
#: The health probe's own deadline (``GET /models`` of an ejected endpoint).
PROBE_TIMEOUT_S = 5.0


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a refused or failed connection attempt."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, (ConnectionRefusedError, httpx.ConnectError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class Endpoint:
    """One server of an arm: its transport, load, health and figures.

    Health is outlier ejection with an active probe: :data:`EJECT_AFTER` infrastructure
    failures in a row, or one refused connection, take the endpoint out; ``EJECT_BASE_S *
    2**(n-1)`` seconds later (n-th ejection in a row, at most :data:`EJECT_MAX_S`) the backend
    probes it with ``GET {base}/models`` (:meth:`probe`). No live request goes to an endpoint
    that is out while another is up. A probe answered (any HTTP status below 500) lets it back
    in on probation: one live request at a time until one succeeds (back in, backoff reset)
    or fails (out again, for twice as long). A probe not answered keeps it out for twice as
    long, until the next probe.
    """

    __slots__ = (
        "ejected_count",
        "ejected_until",
        "ejections",
        "failures",
        "failures_in_row",
        "inflight",
        "latencies",
        "out",
        "probation",
        "probe_failures",
        "probes",
        "requests",
        "shown",
        "transport",
        "url",
        "weight",
    )

    def __init__(self, url: str, weight: float, transport: NativeHTTPClient | httpx.AsyncClient) -> None:
        self.url = url
        self.shown = without_userinfo(url)
        self.weight = weight
        self.transport = transport
        self.inflight = 0
        self.failures_in_row = 0
        self.ejections = 0
        """Ejections since the last success (the backoff exponent)."""
        self.ejected_until = 0.0
        """When the current ejection's backoff ends (the next probe is due)."""
        self.out = False
        """Ejected and not yet let back in by a probe (or a live success)."""
        self.probation = False
        self.probes = 0
        self.probe_failures = 0
        self.requests = 0
        self.failures = 0
        self.ejected_count = 0
        self.latencies = array("d")
        """Seconds of each successful request (8 bytes each)."""

    def reset_figures(self) -> None:
        """Zero the figures (requests, failures, ejections, latencies); health is kept."""
        self.requests = self.failures = self.ejected_count = 0
        self.probes = self.probe_failures = 0
        self.latencies = array("d")

    def available(self) -> bool:
        """Whether a live request may go here now: not ejected (an ejected endpoint comes back
        only through its health probe), and not on probation with a request in flight."""
        return not self.out and not (self.probation and self.inflight > 0)

    def succeeded(self, seconds: float) -> None:
        self.requests += 1
        self.latencies.append(seconds)
        if self.failures_in_row or self.probation or self.out:
            self.failures_in_row = 0
            self.ejections = 0
            self.probation = False
            self.out = False

    def _eject(self, now: float) -> None:
        self.ejections += 1
        self.ejected_until = now + min(EJECT_MAX_S, EJECT_BASE_S * 2 ** (self.ejections - 1))
        self.out = True
        self.probation = False

    def failed(self, now: float, *, refused: bool = False) -> bool:
        """Count an infrastructure failure; True when it took the endpoint out (the caller
        schedules the probe at ``ejected_until``)."""
        self.requests += 1
        self.failures += 1
        self.failures_in_row += 1
        if self.out:
            return False  # a request sent before the ejection (or with all out): out already
        if refused or self.probation or self.failures_in_row >= EJECT_AFTER:
            self.ejected_count += 1
            self._eject(now)
            return True
        return False

    def probed(self, now: float, answered: bool) -> None:
        """The probe's outcome: answered → back in on probation; not → out for twice as
        long (the next probe at ``ejected_until``)."""
        self.probes += 1
        if not self.out:
            return  # a live request succeeded meanwhile
        if answered:
            self.out = False
            self.probation = True
        else:
            self.probe_failures += 1
            self._eject(now)

    async def probe(self, timeout_s: float) -> bool:
        """``GET {base}/models``: whether the server answers HTTP (any status below 500; a
        server without the route is up all the same)."""
        transport = self.transport
        try:
            if isinstance(transport, NativeHTTPClient):
                status, _, _ = await transport.post("/models", b"", method="GET", timeout_s=timeout_s)
            else:
                status = (await httpx_request(transport, "GET", "/models", timeout_s=timeout_s))[0]
        except HTTPRedirect:
            return True  # the server answers (the next request stops the run with the cause)
        except Exception:
            return False
        return status < 500

    def stats(self) -> dict[str, Any]:
        """Requests (attempts), failures, ejections and latency p50/p95 (ms, successful
        requests; nearest-rank percentiles)."""
        lat = sorted(self.latencies)
        return {"url": self.shown, "weight": self.weight, "requests": self.requests,
                "failures": self.failures, "ejections": self.ejected_count,
                "probes": self.probes, "probe_failures": self.probe_failures,
                "p50_ms": nearest_rank_ms(lat, 0.5), "p95_ms": nearest_rank_ms(lat, 0.95)}


class EndpointPool:
    """The endpoints of one arm: which one takes each request, failover, the health probes.

    A request goes to the healthy endpoint with the least load per weight (:meth:`pick`). A
    retryable failure counts against its endpoint (which may eject it and schedule its probe,
    see :class:`Endpoint`); with another endpoint up, the exception is marked ``failover`` (the
    retry wrapper retries it at once, no backoff) and the retry of the same request object
    goes elsewhere (:meth:`for_request`). With one endpoint there is no choice and no probe.
    """

    def __init__(self, endpoints: list[Endpoint], *, timeout_s: float) -> None:
        self.endpoints = endpoints
        self.single = endpoints[0] if len(endpoints) == 1 else None
        """The only endpoint, when there is one."""
        self.timeout_s = timeout_s
        """The arm's request deadline (a probe's is the smaller of it and
        :data:`PROBE_TIMEOUT_S`)."""
        self._failed_on: dict[int, Endpoint] = {}
        """Request (by id) → the endpoint it last failed on, for its retry to go elsewhere."""
        self._probe_timers: dict[int, asyncio.TimerHandle] = {}
        """Ejected endpoint (by id) → the timer of its next health probe."""
        self._probe_tasks: set[asyncio.Task[None]] = set()

    def for_request(self, request: object) -> Endpoint:
        """The endpoint for ``request``: :meth:`pick`, away from the endpoint this same
        request object last failed on."""
        return self.single or self.pick(self._failed_on.pop(id(request), None))

    def pick(self, avoid: Endpoint | None = None) -> Endpoint:
        """The healthy endpoint with the least load per weight (ties: fewer failures in a
        row, then the order given), other than ``avoid`` (where this request just failed)
        when another is up; with all of them ejected, the one whose ejection ends first."""
        best: Endpoint | None = None
        best_key: tuple[float, int] | None = None
        for e in self.endpoints:
            if e is avoid or not e.available():
                continue
            key = ((e.inflight + 1) / e.weight, e.failures_in_row)
            if best_key is None or key < best_key:
                best, best_key = e, key
        if best is None:
            if avoid is not None and avoid.available():
                return avoid
            best = min(self.endpoints, key=lambda e: e.ejected_until)
        return best

    def failed(self, ep: Endpoint, exc: BaseException, request: object,
               loop: asyncio.AbstractEventLoop) -> None:
        """A retryable failure of ``request`` on ``ep``: counted (an ejection schedules the
        probe); with another endpoint up, ``exc`` is marked for failover and the retry of
        ``request`` goes elsewhere."""
        if ep.failed(loop.time(), refused=refused(exc)) and self.single is None:
            self._schedule_probe(ep, loop)
        if self.single is None and any(e is not ep and e.available() for e in self.endpoints):
            # The wrapper retries this at once (no backoff) and the retry goes to
            # another endpoint (the wrapper retries the same request object).
            exc.failover = True  # type: ignore[attr-defined]
            if len(self._failed_on) >= 4096:
                self._failed_on.clear()
            self._failed_on[id(request)] = ep

    def stats(self) -> list[dict[str, Any]]:
        return [e.stats() for e in self.endpoints]

    def _schedule_probe(self, ep: Endpoint, loop: asyncio.AbstractEventLoop) -> None:
        """Probe ``ep`` when its backoff ends (see :class:`Endpoint`)."""
        old = self._probe_timers.pop(id(ep), None)
        if old is not None:
            old.cancel()
        self._probe_timers[id(ep)] = loop.call_at(ep.ejected_until, self._start_probe, ep)

    def _start_probe(self, ep: Endpoint) -> None:
        self._probe_timers.pop(id(ep), None)
        task = asyncio.ensure_future(self._probe(ep))
        self._probe_tasks.add(task)
        task.add_done_callback(self._probe_tasks.discard)

    async def _probe(self, ep: Endpoint) -> None:
        if not ep.out:
            return  # back in already (a live request succeeded with every endpoint out)
        answered = await ep.probe(min(PROBE_TIMEOUT_S, self.timeout_s))
        loop = asyncio.get_running_loop()
        ep.probed(loop.time(), answered)
        if ep.out:
            self._schedule_probe(ep, loop)

    async def aclose(self) -> None:
        """Cancel the probes and close every endpoint's transport."""
        for timer in self._probe_timers.values():
            timer.cancel()
        self._probe_timers.clear()
        for task in list(self._probe_tasks):
            task.cancel()
        if self._probe_tasks:
            await asyncio.gather(*self._probe_tasks, return_exceptions=True)
        for e in self.endpoints:
            await e.transport.aclose()

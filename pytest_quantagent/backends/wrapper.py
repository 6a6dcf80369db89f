"""The one place that owns retries, the concurrency limit and token accounting.

Every backend is used through a :class:`ModelClient`. Infrastructure failures (whatever
``backend.is_retryable`` accepts: HTTP 5xx/429, timeouts, dropped connections) are retried
with exponential backoff, or after the server's ``Retry-After`` when it is longer (at once
when the backend marks the failure ``failover``: it failed on one of the arm's endpoints and
another is up); when retries are exhausted the client raises
:class:`~pytest_quantagent.errors.InfrastructureError`, which the batch layer counts apart and
never scores. Non-retryable exceptions propagate unchanged.

Per-episode counters (retries, tokens) are kept in a :class:`UsageCounter` bound through a
context variable: the batch layer binds a fresh one in each episode's task, so concurrent
episodes sharing one client never mix their counts.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from pytest_quantagent.backends.base import Backend, GenerateRequest, Generation
from pytest_quantagent.errors import InfrastructureError, ServerDownError


@dataclass
class UsageCounter:
    """Counts of model calls, infrastructure retries and tokens."""

    calls: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


T = TypeVar("T")

if sys.version_info >= (3, 11):

    async def with_timeout(aw: Awaitable[T], seconds: float) -> T:
        """``await aw`` with a deadline; raises the builtin ``TimeoutError``."""
        async with asyncio.timeout(seconds):
            return await aw

else:  # pragma: no cover - Python 3.10

    async def with_timeout(aw: Awaitable[T], seconds: float) -> T:
        """``await aw`` with a deadline; raises the builtin ``TimeoutError``."""
        try:
            return await asyncio.wait_for(aw, seconds)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no result within {seconds} s") from None


class Slots:
    """A counting semaphore for the per-request path: ``try_take()`` is a plain call (no
    coroutine) when a slot is free, ``wait()`` queues FIFO otherwise, and ``give()`` hands the
    slot straight to the oldest waiter. :class:`asyncio.Semaphore` does the same work through
    two coroutine calls and a scan of its waiters on every acquire; this runs twice per model
    call. A waiter cancelled after being handed a slot passes it on."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"slots ({n}) must be >= 1")
        self._free = n
        self._waiters: deque[asyncio.Future[None]] = deque()

    def try_take(self) -> bool:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def wait(self) -> None:
        """Take a slot, waiting for one (call when :meth:`try_take` said no)."""
        if self.try_take():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled():
                self.give()  # handed a slot, then cancelled: pass it on
            else:
                fut.cancel()  # give() skips it
            raise

    def give(self) -> None:
        waiters = self._waiters
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1

    @property
    def free(self) -> int:
        return self._free


_EPISODE_USAGE: ContextVar[UsageCounter | None] = ContextVar("quantagent_episode_usage", default=None)


def bind_episode_usage() -> UsageCounter:
    """Bind a fresh counter to the current context (call at the start of an episode task)."""
    counter = UsageCounter()
    _EPISODE_USAGE.set(counter)
    return counter


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff: ``min(max_delay_s, base_delay_s * 2**attempt)`` with ±50% jitter."""

    max_retries: int = 6
    base_delay_s: float = 0.25
    max_delay_s: float = 8.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries ({self.max_retries}) must be >= 0")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError(
                f"base_delay_s ({self.base_delay_s}) and max_delay_s ({self.max_delay_s}) must be >= 0"
            )

    def delay(self, attempt: int, rng: random.Random) -> float:
        d = min(self.max_delay_s, self.base_delay_s * (2**attempt))
        return float(d * (0.5 + rng.random()))


@dataclass
class Breaker:
    """A circuit breaker over one client's requests: it opens when ``failures`` requests in a
    row have failed (infrastructure failures, each attempt counted) **and** ``seconds`` have
    passed since the last success (or since the client was made). Either alone is not
    enough: a burst of quick refusals from a server that then recovers, or one slow request,
    must not stop a run. Open, every request raises :class:`ServerDownError` naming the
    model, the time of the last success and the last error, and the run stops (its stored
    episodes are kept; re-running resumes)."""

    failures: int = 20
    seconds: float = 60.0
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    _row: int = 0
    _since: float | None = None
    _since_wall: float | None = None
    _succeeded: bool = False
    _last: str = ""

    def __post_init__(self) -> None:
        if self.failures < 1 or not self.seconds > 0:
            raise ValueError(f"breaker failures ({self.failures}) must be >= 1 and seconds "
                             f"({self.seconds}) > 0")

    def success(self) -> None:
        self._row, self._since, self._since_wall, self._succeeded = 0, self.clock(), self.wall(), True

    def failure(self, exc: BaseException) -> None:
        if self._since is None:
            self._since, self._since_wall = self.clock(), self.wall()
        self._row += 1
        self._last = f"{type(exc).__name__}: {exc}"

    def check(self, who: Callable[[], str], role: str | None) -> None:
        """Raise :class:`ServerDownError` when the breaker is open (``who()`` names the
        model; called only then, so a closed breaker costs two comparisons)."""
        if self._since is None or self._row < self.failures:
            return
        idle = self.clock() - self._since
        if idle < self.seconds:
            return
        when = datetime.fromtimestamp(self._since_wall or self.wall()).strftime("%H:%M:%S")
        since = (f"has not answered since {when}" if self._succeeded
                 else f"has not answered once since the run started at {when}")
        raise ServerDownError(
            f"{who()} {since} ({self._row} failed requests in a row over {idle:.0f} s; last "
            f"error: {self._last}); the run stops here, the episodes stored so far are kept: "
            "fix the server and run the same command again to resume", role=role)


class ModelClient:
    """A backend plus retries, a concurrency semaphore, a circuit breaker and usage
    accounting. ``role`` names the model in messages ("user model", "judge"; None: the arm,
    which the batch layer names)."""

    def __init__(
        self,
        backend: Backend,
        *,
        concurrency: int = 8,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        breaker: Breaker | None = None,
        role: str | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency ({concurrency}) must be >= 1")
        self.breaker = breaker or Breaker()
        self.role = role
        self.backend = backend
        self.concurrency = min(concurrency, max(1, backend.max_concurrency()))
        self.retry = retry or RetryPolicy()
        self.total = UsageCounter()
        self._slots = Slots(self.concurrency)
        self._sleep = sleep
        # Jitter only spreads retries in time; it never touches an outcome, so a private
        # unseeded generator is fine (and the global `random` stays untouched).
        self._rng = random.Random()

    async def generate(self, request: GenerateRequest) -> Generation:
        """Generate with retries; raises :class:`InfrastructureError` when they run out."""
        episode = _EPISODE_USAGE.get()
        attempt = 0
        slots = self._slots
        breaker = self.breaker
        while True:
            breaker.check(self._who, self.role)
            if not slots.try_take():
                await slots.wait()
            try:
                gen = await self.backend.generate(request)
            except Exception as exc:
                if not self.backend.is_retryable(exc):
                    raise
                breaker.failure(exc)
                breaker.check(self._who, self.role)
                if attempt >= self.retry.max_retries:
                    raise InfrastructureError(
                        f"{self.backend.name}: giving up after {attempt + 1} attempts: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                failure: Exception | None = exc
            else:
                failure = None
            finally:
                slots.give()
            if failure is None:
                breaker.success()
                break
            attempt += 1
            self.total.retries += 1
            if episode is not None:
                episode.retries += 1
            if getattr(failure, "failover", False):
                # It failed on one endpoint of several and another is up: retry there now
                # (still counted as a retry, apart from the agent's failures).
                continue
            delay = self.retry.delay(attempt - 1, self._rng)
            retry_after = getattr(failure, "retry_after", None)
            if isinstance(retry_after, (int, float)) and retry_after > delay:
                # The server said when to come back (HTTP 429/503 ``Retry-After``).
                delay = float(retry_after)
            await self._sleep(delay)
        for counter in (self.total, episode):
            if counter is None:
                continue
            counter.calls += 1
            counter.prompt_tokens += gen.prompt_tokens or 0
            counter.completion_tokens += gen.completion_tokens or 0
        return gen

    def _who(self) -> str:
        """The model's name in a breaker message: its role or backend, and its server."""
        ident = self.backend.identity() or {}
        url = ident.get("url") or ", ".join(str(u) for u in ident.get("urls") or ())
        name = self.role or f"{self.backend.name}"
        return f"{name} ({url})" if url else name

    async def aclose(self) -> None:
        await self.backend.aclose()

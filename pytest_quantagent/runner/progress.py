"""Progress of episode runs: :class:`RunProgress` (``quantagent run``: rich bars per arm,
silent when stderr is not a TTY or with ``quiet``) and :class:`CellProgress` (the pytest
plugin: one cell's arms, a rich live display on a terminal or a plain line every N seconds).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from pytest_quantagent.store.records import EpisodeRecord


class ArmProgress:
    """Counts of one arm; drives a bar when one is shown."""

    def __init__(self, label: str, total: int, progress: Progress | None) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.failed = 0
        """Episodes that did not succeed (any scored termination other than success)."""
        self.infra = 0
        """Episodes lost to infrastructure failures after retries."""
        self._progress = progress
        self._task: TaskID | None = None
        if progress is not None:
            self._task = progress.add_task(label, total=total, failed=0, infra=0)

    def preload(self, n: int, failed: int = 0, infra: int = 0) -> None:
        self.done += n
        self.failed += failed
        self.infra += infra
        if self._progress is not None and self._task is not None and n:
            self._progress.update(self._task, completed=self.done, failed=self.failed, infra=self.infra)

    def advance(self, record: EpisodeRecord) -> None:
        self.done += 1
        if not record.scored:
            self.infra += 1
        elif not record.success:
            self.failed += 1
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self.done, failed=self.failed, infra=self.infra)


class RunProgress:
    """Context manager owning the live display; ``arm(label, total)`` adds one bar."""

    def __init__(self, *, quiet: bool = False, stream: TextIO | None = None) -> None:
        stream = stream if stream is not None else sys.stderr
        self.enabled = not quiet and stream.isatty()
        self.arms: dict[str, ArmProgress] = {}
        self._progress: Progress | None = None
        if self.enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("fail {task.fields[failed]}  infra {task.fields[infra]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(file=stream),
                transient=False,
            )

    def arm(self, label: str, total: int) -> ArmProgress:
        bar = ArmProgress(label, total, self._progress)
        self.arms[label] = bar
        return bar

    def __enter__(self) -> RunProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()


def _clock_text(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class _CellArm:
    """The sink of one arm of a :class:`CellProgress` (preload/advance, as ``ProgressSink``)."""

    def __init__(self, owner: CellProgress, label: str, total: int) -> None:
        self.owner, self.label, self.total = owner, label, total
        self.done = self.preloaded = self.failed = self.infra = 0
        self.task: TaskID | None = None

    def preload(self, n: int, failed: int = 0, infra: int = 0) -> None:
        self.done += n
        self.preloaded += n
        self.failed += failed
        self.infra += infra
        self.owner.update()

    def advance(self, record: EpisodeRecord) -> None:
        self.done += 1
        if not record.scored:
            self.infra += 1
        elif not record.success:
            self.failed += 1
        self.owner.update()


class CellProgress:
    """Progress of one cell's episodes (every arm of it) for the pytest plugin.

    Per cell: episodes done/total, failures so far (unsuccessful episodes; infrastructure
    failures apart), episodes per second over this run's own episodes (stored ones loaded
    on resume do not count) and the ETA. Two renderings:

    - ``live=True`` (a terminal): a rich live display, one bar per arm, redrawn at most
      every ``refresh_s`` and left on screen when the cell is done;
    - ``live=False`` (CI logs, xdist workers): one plain line when the cell starts, one
      every ``interval_s`` seconds, and one when it is done.

    ``guard()`` wraps every write: the plugin passes pytest's "capture disabled" context,
    since episodes run inside a test, where pytest captures the output. ``clock`` is
    injectable for tests.
    """

    def __init__(
        self,
        name: str,
        stream: TextIO,
        *,
        live: bool,
        interval_s: float = 30.0,
        refresh_s: float = 0.25,
        prefix: str = "quantagent ",
        guard: Callable[[], AbstractContextManager[object]] = nullcontext,
        clock: Callable[[], float] = time.monotonic,
        width: int | None = None,
    ) -> None:
        self.name, self.stream, self.live = name, stream, live
        self.interval_s, self.refresh_s, self.prefix = interval_s, refresh_s, prefix
        self.guard, self.clock = guard, clock
        self.arms: dict[str, _CellArm] = {}
        self._start = clock()
        self._last_write = -math.inf
        self._started = self._closed = self._final = False
        self._progress: Progress | None = None
        if live:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(bar_width=24),
                MofNCompleteColumn(),
                TextColumn("failed {task.fields[failed]}"),
                TextColumn("{task.fields[rate]}"),
                TextColumn("ETA {task.fields[eta]}"),
                console=Console(file=stream, force_terminal=True, width=width),
                auto_refresh=False, transient=False,
                redirect_stdout=False, redirect_stderr=False,
            )

    # -- the sinks ------------------------------------------------------------------

    def arm(self, label: str, total: int) -> _CellArm:
        """The sink of one arm (``run_cell(progress=cell_progress.arm)``)."""
        a = _CellArm(self, label, total)
        self.arms[label] = a
        if self._progress is not None:
            a.task = self._progress.add_task(f"{self.name} {label}", total=total, failed=0,
                                             rate="", eta="–")
        return a

    # -- figures ----------------------------------------------------------------------

    @property
    def done(self) -> int:
        return sum(a.done for a in self.arms.values())

    @property
    def total(self) -> int:
        return sum(a.total for a in self.arms.values())

    @property
    def failed(self) -> int:
        return sum(a.failed for a in self.arms.values())

    @property
    def infra(self) -> int:
        return sum(a.infra for a in self.arms.values())

    def rate(self) -> float | None:
        """Episodes per second run by this process (stored episodes excluded)."""
        ran = self.done - sum(a.preloaded for a in self.arms.values())
        elapsed = self.clock() - self._start
        return ran / elapsed if ran > 0 and elapsed > 0 else None

    def eta_s(self) -> float | None:
        r = self.rate()
        return None if r is None else (self.total - self.done) / r

    def line(self) -> str:
        """The plain-text status: ``telecom-int4: 57/80 episodes, 9 failed, ...``."""
        r, eta = self.rate(), self.eta_s()
        infra = f" ({self.infra} infrastructure)" if self.infra else ""
        elapsed = _clock_text(self.clock() - self._start)
        if self.done >= self.total:
            speed = "" if r is None else f" ({r:.2f} episodes/s)"
            return (f"{self.prefix}{self.name}: {self.done}/{self.total} episodes done in "
                    f"{elapsed}{speed}, {self.failed} failed{infra}")
        speed = "" if r is None else f", {r:.2f} episodes/s, ETA {_clock_text(eta or 0)}"
        return (f"{self.prefix}{self.name}: {self.done}/{self.total} episodes, {self.failed} "
                f"failed{infra}{speed} (elapsed {elapsed})")

    # -- output -----------------------------------------------------------------------

    def update(self, *, force: bool = False) -> None:
        if self._closed:
            return
        now = self.clock()
        finished = self.done >= self.total > 0
        if self._progress is not None:
            if not (force or finished or now - self._last_write >= self.refresh_s):
                return
            self._last_write = now
            r, eta = self.rate(), self.eta_s()
            for a in self.arms.values():
                if a.task is not None:
                    self._progress.update(
                        a.task, completed=a.done, failed=a.failed + a.infra,
                        rate="" if r is None else f"{r:.2f} ep/s",
                        eta="–" if eta is None else _clock_text(eta))
            with self.guard():
                if not self._started:
                    self._started = True
                    self._progress.start()
                self._progress.refresh()
            return
        if not self._started or finished or force or now - self._last_write >= self.interval_s:
            self._started = True
            self._last_write = now
            self._final = finished
            text = self.line()
            with self.guard():
                self.stream.write(text + "\n")
                self.stream.flush()

    def close(self) -> None:
        """Final render (the done line), once."""
        if self._closed:
            return
        if self._progress is not None:
            self.update(force=True)
            with self.guard():
                self._progress.stop()
        elif not self._final:
            self.update(force=True)
        self._closed = True

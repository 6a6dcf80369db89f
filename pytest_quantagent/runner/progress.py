"""Progress bars per arm (rich): done/total, failures so far, ETA.

Silent (no output at all) when stderr is not a TTY or when ``quiet`` is set, so CI logs and
``-q`` runs stay clean. The counts are kept either way.
"""

from __future__ import annotations

import sys
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

    def preload(self, n: int) -> None:
        self.done += n
        if self._progress is not None and self._task is not None and n:
            self._progress.update(self._task, completed=self.done)

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

"""An arm's episodes as the analysis reads them, and their pairing with the reference's."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_quantagent.metrics.episode import ArmData, summarize_arm
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.vocab.channels import ALL_CHANNELS

Records = Iterable[EpisodeRecord] | ArmData


@dataclass
class CellInput:
    """One cell to analyse: the candidate arm against its reference on one domain.

    ``records``/``reference_records`` are episode records (consumed once, streaming) or
    :class:`ArmData` already summarised (share one reference ArmData between cells).
    ``reference=None`` (and ``reference_records=None``) gives arm-only figures.
    """

    domain: str
    arm: str
    records: Records | None = None
    reference: str | None = None
    reference_records: Records | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Extra fields copied into the cell (e.g. τ²-bench reader flags)."""
    arm_records: Records | None = None
    """Synonym of ``records`` (give one of them)."""
    pool_tasks: int | None = None
    """How many tasks the run's pool holds (the design advice never asks for more)."""
    alpha: float | None = None
    """The level this cell is judged at, when it is not the config's: the α a sequential
    run spent at the cell's last look (:mod:`pytest_quantagent.analysis.sequential`)."""
    sequential: dict[str, Any] | None = None
    """The cell's run-until-decided block (plan, looks, α spent, why it stopped)."""
    comparability: dict[str, Any] | None = None
    """How the two arms are served, compared before any episode (see
    :func:`pytest_quantagent.runner.preflight.compare_serving`): a setting whose status is
    ``differs`` makes the cell INCONCLUSIVE "not comparable"; None: not compared."""

    def __post_init__(self) -> None:
        if (self.records is None) == (self.arm_records is None):
            raise ValueError(
                f"cell {self.domain}/{self.arm}: give exactly one of records= or arm_records="
            )
        if self.records is None:
            self.records = self.arm_records
            self.arm_records = None


def fnum(x: float | np.floating[Any] | None) -> float | None:
    """A finite float, or None (the report JSON has no NaN/inf)."""
    if x is None:
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def mean_or_none(x: np.ndarray) -> float | None:
    v = x[~np.isnan(x)] if x.dtype.kind == "f" else x
    return fnum(v.mean()) if v.size else None


def as_arm(data: Records, domain: str, arm: str) -> ArmData:
    if isinstance(data, ArmData):
        return data
    return summarize_arm(data, domain, arm)


_PER_EPISODE = ("task_ids", "trials", "success", "n_errors", "steps", "tool_calls",
                "channel_counts", "failures", "recovered", "tokens", "duration_s",
                "agent_calls", "user_calls", "user_failed", "termination_of", "answers")


def subset_arm(a: ArmData, rows: np.ndarray) -> ArmData:
    """The episodes ``rows`` of ``a`` (indices, in order): every per-episode array, the
    terminations and the decisions recounted. The failing names are the arm's whole
    counts (they are not kept per episode)."""
    from dataclasses import fields, replace

    kw: dict[str, Any] = {f.name: getattr(a, f.name)[rows] for f in fields(a)
                          if f.name in _PER_EPISODE and getattr(a, f.name) is not None}
    keys = set(zip(kw["task_ids"].tolist(), kw["trials"].tolist(), strict=True))
    decisions = {k: v for k, v in a.decisions.items() if k in keys}
    margins = np.asarray([m for v in decisions.values() for m in v[1]], dtype=float)
    terms: dict[str, int] = {}
    if a.termination_of is not None:
        for t in kw["termination_of"]:
            terms[str(t)] = terms.get(str(t), 0) + 1
    return replace(a, **kw, decisions=decisions, margins=margins,
                   terminations=terms if a.termination_of is not None else a.terminations,
                   user_event_counts={k: v[rows] for k, v in a.user_event_counts.items()})


def pair_index(a: ArmData, r: ArmData) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (arm, reference) of the episodes paired by (task, trial)."""
    ref_index = {k: i for i, k in enumerate(r.keys())}
    ia, ir = [], []
    for i, k in enumerate(a.keys()):
        j = ref_index.get(k)
        if j is not None:
            ia.append(i)
            ir.append(j)
    return np.asarray(ia, dtype=np.int64), np.asarray(ir, dtype=np.int64)


def task_sums(a: ArmData, r: ArmData | None, rows_a: np.ndarray | None = None,
              rows_r: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Per-task sums of agent calls, channel counts and episodes for the arm (and the
    reference), aligned over the union of tasks (of the rows given; default all), and the
    task labels last."""
    ra = np.arange(a.n) if rows_a is None else rows_a
    rr = None if r is None else (np.arange(r.n) if rows_r is None else rows_r)
    ids = [a.task_ids[ra]] if r is None or rr is None else [a.task_ids[ra], r.task_ids[rr]]
    labels, inv = np.unique(np.concatenate(ids).astype(str), return_inverse=True)
    g = labels.size
    ia = inv[: ra.size]

    def sums(idx: np.ndarray, x: np.ndarray) -> np.ndarray:
        return np.bincount(idx, weights=x.astype(float), minlength=g)

    def side(d: ArmData, rows: np.ndarray, idx: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        assert d.agent_calls is not None
        n = sums(idx, d.agent_calls[rows])
        y = np.stack([sums(idx, d.channel_counts[rows, j]) for j in range(len(ALL_CHANNELS))],
                     axis=1) if g else np.zeros((0, len(ALL_CHANNELS)))
        return n, y, sums(idx, np.ones(rows.size))

    na, ya, ea = side(a, ra, ia)
    if r is None or rr is None:
        return na, ya, ea, labels
    nr, yr, er = side(r, rr, inv[ra.size:])
    return na, ya, nr, yr, ea, er, labels


def fewest_trials(*arms: ArmData) -> int:
    counts = [np.unique(x.task_ids.astype(str), return_counts=True)[1] for x in arms if x.n]
    return int(min(int(c.min()) for c in counts)) if counts else 0


@dataclass
class Pairing:
    """How the cell's episodes pair (by task and trial, hence seed)."""

    ia: np.ndarray
    ir: np.ndarray
    notes: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.ia.size)

    @property
    def paired(self) -> bool:
        return self.n >= 2


def pairing(a: ArmData, r: ArmData) -> Pairing:
    """The pairing evidence: which episodes pair, what is said about the rest, and whether
    the unpaired share blocks a LOSSLESS claim (more than 10% of an arm)."""
    ia, ir = pair_index(a, r)
    p = Pairing(ia, ir)
    n_pairs = p.n
    un_a, un_r = a.n - n_pairs, r.n - n_pairs
    p.summary = {"paired": n_pairs, "unpaired_arm": un_a, "unpaired_reference": un_r}
    if p.paired and (un_a or un_r):
        p.summary["use"] = ("score, gap, widening and channel tests on the paired episodes "
                            "(channels: the unpaired ones in per-task strata); rates and budget "
                            "curves on every episode")
        p.notes.append(f"{n_pairs} paired episodes; {un_a} of the arm's and {un_r} of the "
                       "reference's have no partner and are left out of the paired tests")
        if max(un_a, un_r) > 0.1 * max(a.n, r.n):
            p.blockers.append(f"only {n_pairs} of {max(a.n, r.n)} episodes are paired: the "
                              "paired tests may not speak for the whole run")
    elif p.paired:
        p.summary["use"] = "every test on the paired episodes"
    return p

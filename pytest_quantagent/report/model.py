"""Analysis of cells into the versioned report (DESIGN.md "Report JSON", schema_version 1).

``analyze(inputs, config, rng)`` takes, per cell, the candidate's and the reference's
episodes (records or pre-summarised :class:`~pytest_quantagent.metrics.episode.ArmData`),
computes every figure of the report, applies Holm within each cell's family of damage tests
(or across the report, ``holm_scope="report"``) and asks :func:`pytest_quantagent.verdict.decide`
for each cell's verdict: the thresholds, the ``Verdict`` enum and the rule live in
:mod:`pytest_quantagent.verdict`. ``Report.model_dump(mode="json")`` is the report JSON;
renderers (terminal, HTML) consume :class:`Report` only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from pytest_quantagent.metrics.budget import success_at_budgets
from pytest_quantagent.metrics.episode import ArmData, summarize_arm
from pytest_quantagent.metrics.failure_sets import failure_set_change_pvalue, judge_failure_set
from pytest_quantagent.metrics.margins import flip_rates, margin_histogram
from pytest_quantagent.metrics.passk import pass_k_curve
from pytest_quantagent.stats.clustered import channel_ratio, paired_score
from pytest_quantagent.stats.intervals import wilson_interval
from pytest_quantagent.stats.multiplicity import weighted_holm
from pytest_quantagent.stats.paired import mcnemar_exact, unpaired_difference, unpaired_tost
from pytest_quantagent.stats.power import plan_design
from pytest_quantagent.stats.rank import failure_set_agreement
from pytest_quantagent.stats.ratio import per_unit_ci, rate_ci
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.verdict import (
    VERDICTS,
    AnalysisConfig,
    ChannelEvidence,
    Evidence,
    GapEvidence,
    Verdict,
    decide,
    family_weights,
    holm_groups,
)
from pytest_quantagent.vocab.channels import ALL_CHANNELS, NAMED_CHANNELS

__all__ = ["SCHEMA_VERSION", "VERDICTS", "AnalysisConfig", "CellInput", "CellReport", "Report",
           "Verdict", "analyze"]

SCHEMA_VERSION: Literal[1] = 1
VerdictName = Literal["LOSSLESS", "MASKED_DAMAGE", "DEGRADED", "INCONCLUSIVE"]


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

    def __post_init__(self) -> None:
        if (self.records is None) == (self.arm_records is None):
            raise ValueError(
                f"cell {self.domain}/{self.arm}: give exactly one of records= or arm_records="
            )
        if self.records is None:
            self.records = self.arm_records
            self.arm_records = None


# --------------------------------------------------------------------------- report schema


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ArmValue(_Model):
    arm: float | None
    reference: float | None = None


class CountPair(_Model):
    arm: int
    reference: int | None = None


class SuccessStats(_Model):
    arm: float | None
    reference: float | None = None
    diff: float | None = None
    """Candidate − reference over paired episodes (all episodes when unpaired)."""
    ci: list[float] | None = None
    tost_p: float | None = None
    mcnemar_p: float | None = None
    """Exact two-sided McNemar (paired); the unpaired test's p-value when episodes cannot be
    paired. Descriptive: the verdict's DEGRADED test is ``harm_p`` (one-sided, cluster-aware)."""
    mcnemar_p_holm: float | None = None
    """Holm-adjusted ``harm_p`` (kept under this name for schema_version 1 readers)."""
    margin: float
    arm_ci: list[float] | None = None
    reference_ci: list[float] | None = None
    method: str | None = None
    ci_level: float | None = None
    """Level of ``ci``: 1 − 2α, the interval the TOST decides on (inside ±margin ⇔ TOST
    p < α)."""
    ci95: list[float] | None = None
    harm_p: float | None = None
    """One-sided p of H0 "candidate not worse" (DEGRADED's test; exact McNemar with one trial
    per task, the task-cluster test otherwise)."""
    harm_p_holm: float | None = None
    paired_arm: float | None = None
    paired_reference: float | None = None
    """Success rates over the paired episodes only (what the paired tests compare)."""
    run_budget: int | None = None
    """The budget the score is compared at (the smaller of the arms' budgets)."""


class BudgetStats(_Model):
    K: list[int]
    arm: list[float | None]
    reference: list[float | None] | None = None
    gap: list[float | None] | None = None
    gap_ci: list[list[float] | None] | None = None
    gap_p: list[float | None] | None = None
    gap_p_holm: dict[str, float | None] = Field(default_factory=dict)
    """Holm-adjusted p of the gap widening at each tight budget (keys are K as strings)."""
    tight: list[int] = Field(default_factory=list)
    """Tight budgets whose widening is tested."""
    widening: dict[str, float | None] = Field(default_factory=dict)
    """Per tight K: (candidate's − reference's) share of pairs that succeed at the run's
    budget but not at K; > 0 means the gap widens."""
    widening_upper: dict[str, float | None] = Field(default_factory=dict)
    widening_p: dict[str, float | None] = Field(default_factory=dict)
    """One-sided p of H0 "the gap does not widen"."""


class ChannelStats(_Model):
    arm_count: int
    reference_count: int | None = None
    arm_rate: float | None
    reference_rate: float | None = None
    ratio: float | None = None
    ratio_ci: list[float | None] | None = None
    p: float | None = None
    p_holm: float | None = None
    arm_rate_ci: list[float] | None = None
    reference_rate_ci: list[float] | None = None
    arm_per_episode: float | None = None
    reference_per_episode: float | None = None
    arm_per_episode_ci: list[float | None] | None = None
    reference_per_episode_ci: list[float | None] | None = None
    method: str | None = None
    ratio_upper: float | None = None
    """One-sided 1 − α upper bound of the ratio (LOSSLESS needs it below max_ratio)."""
    rate_increase: float | None = None
    rate_increase_upper: float | None = None
    """One-sided 1 − α upper bound of the per-call rate increase (rare-channel route)."""
    tested: bool | None = None
    """Whether the channel's amplification test is in the Holm family (it has failures)."""


class FailureSetStats(_Model):
    spearman: float | None
    kendall: float | None
    novel_share: float | None
    n_names: int
    arm_total: int
    reference_total: int
    top_arm: list[tuple[str, int]] = Field(default_factory=list)
    top_reference: list[tuple[str, int]] = Field(default_factory=list)
    p_changed: float | None = None
    """Permutation p-value that the candidate fails with other names (low = evidence)."""
    judgement: Literal["same", "changed", "cannot judge"] | None = None
    """The failure-set gate at its defaults (``assert_failure_set_invariant``)."""
    judgement_reason: str | None = None


class CellReport(_Model):
    domain: str
    arm: str
    reference: str | None
    episodes: int
    reference_episodes: int | None
    paired: int
    tool_calls: CountPair
    success: SuccessStats
    budget: BudgetStats
    channels: dict[str, ChannelStats]
    failure_set: dict[str, FailureSetStats]
    recovery: ArmValue
    steps: ArmValue
    terminations: dict[str, dict[str, int] | None]
    pass_k: dict[str, dict[str, float] | None]
    margins: dict[str, Any] | None = None
    verdict: Verdict | None
    """None only for arm-only cells (no reference)."""
    reasons: list[str]
    infrastructure_errors: CountPair
    tokens: ArmValue | None = None
    duration_s: ArmValue | None = None
    n_needed: int | None = None
    """Paired episodes the advised design has (tasks × trials; see ``plan``)."""
    trials_needed: int | None = None
    """Trials per task of the advised design (see ``plan``)."""
    user_sim: str | None = None
    """Which user simulator produced the cell's episodes (``scripted`` or an LLM user's
    identity; several, comma-separated, when arm and reference differ)."""
    user_failures: dict[str, dict[str, int] | None] | None = None
    """Failed calls of the user simulator by channel (``arm``/``reference``), kept out of
    ``channels``; None when there are none."""
    user_side: dict[str, dict[str, Any] | None] | None = None
    """The user simulator's own tool calls per side (``arm``/``reference``): ``calls``,
    ``failures``, ``failures_per_episode``, ``by_channel``. They count toward the error
    budget (τ²-bench) but not in ``channels``."""
    pairing: dict[str, Any] | None = None
    """``paired``, ``unpaired_arm``, ``unpaired_reference`` and how each is used."""
    holm: dict[str, Any] | None = None
    """Holm's family of this cell's verdict: ``scope``, ``size``, ``tests``."""
    plan: dict[str, Any] | None = None
    """The design advice (``tasks``, ``trials``, ``reachable``, ``message``)."""
    extra: dict[str, Any] = Field(default_factory=dict)


class Report(_Model):
    """The report. ``model_dump(mode="json")`` is DESIGN.md's report JSON."""

    schema_version: Literal[1] = SCHEMA_VERSION
    run: dict[str, Any] = Field(default_factory=dict)
    cells: list[CellReport] = Field(default_factory=list)

    def cell(self, domain: str, arm: str) -> CellReport:
        """The cell of (domain, arm); ValueError listing the cells when absent."""
        for c in self.cells:
            if c.domain == domain and c.arm == arm:
                return c
        known = ", ".join(f"{c.domain}/{c.arm}" for c in self.cells) or "(none)"
        raise ValueError(f"no cell domain={domain!r} arm={arm!r}; cells: {known}")


# --------------------------------------------------------------------------- helpers


def _f(x: float | np.floating[Any] | None) -> float | None:
    if x is None:
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def _ci(lo: float, hi: float) -> list[float]:
    return [float(lo), float(hi)]


def _mean(x: np.ndarray) -> float | None:
    v = x[~np.isnan(x)] if x.dtype.kind == "f" else x
    return _f(v.mean()) if v.size else None


def _as_arm(data: Records, domain: str, arm: str) -> ArmData:
    if isinstance(data, ArmData):
        return data
    return summarize_arm(data, domain, arm)


def _pair_index(a: ArmData, r: ArmData) -> tuple[np.ndarray, np.ndarray]:
    ref_index = {k: i for i, k in enumerate(r.keys())}
    ia, ir = [], []
    for i, k in enumerate(a.keys()):
        j = ref_index.get(k)
        if j is not None:
            ia.append(i)
            ir.append(j)
    return np.asarray(ia, dtype=np.int64), np.asarray(ir, dtype=np.int64)


def _task_sums(a: ArmData, r: ArmData | None) -> tuple[np.ndarray, ...]:
    """Per-task sums of agent calls, channel counts and episodes for the arm (and the
    reference), aligned over the union of tasks."""
    ids = [a.task_ids] if r is None else [a.task_ids, r.task_ids]
    labels, inv = np.unique(np.concatenate(ids).astype(str), return_inverse=True)
    g = labels.size
    ia = inv[: a.n]

    def sums(idx: np.ndarray, x: np.ndarray) -> np.ndarray:
        return np.bincount(idx, weights=x.astype(float), minlength=g)

    def side(d: ArmData, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        assert d.agent_calls is not None
        n = sums(idx, d.agent_calls)
        y = np.stack([sums(idx, d.channel_counts[:, j]) for j in range(len(ALL_CHANNELS))],
                     axis=1) if g else np.zeros((0, len(ALL_CHANNELS)))
        return n, y, sums(idx, np.ones(d.n))

    na, ya, ea = side(a, ia)
    if r is None:
        return na, ya, ea
    nr, yr, er = side(r, inv[a.n:])
    return na, ya, nr, yr, ea, er


def _pass_k(a: ArmData, kmax: int) -> dict[str, float]:
    curve = pass_k_curve(a.task_ids.tolist(), a.success.tolist())
    return {str(k): v for k, v in curve.items() if k <= kmax}


def _fewest_trials(*arms: ArmData) -> int:
    counts = [np.unique(x.task_ids.astype(str), return_counts=True)[1] for x in arms if x.n]
    return int(min(int(c.min()) for c in counts)) if counts else 0


def _user_side(d: ArmData) -> dict[str, Any]:
    assert d.user_calls is not None and d.user_failed is not None
    k = int(d.user_failed.sum())
    return {"calls": int(d.user_calls.sum()), "failures": k,
            "failures_per_episode": _f(k / d.n) if d.n else None,
            "by_channel": dict(sorted(d.user_failures.items()))}


def _user_fields(a: ArmData, r: ArmData | None) -> dict[str, Any]:
    sims = sorted(a.user_sims | (r.user_sims if r is not None else set()))
    failures = None
    if a.user_failures or (r is not None and r.user_failures):
        failures = {"arm": dict(sorted(a.user_failures.items())),
                    "reference": dict(sorted(r.user_failures.items())) if r is not None else None}
    side = {"arm": _user_side(a), "reference": _user_side(r) if r is not None else None}
    return {"user_sim": ", ".join(sims) if sims else None, "user_failures": failures,
            "user_side": side}


def _user_reason(side: dict[str, dict[str, Any] | None]) -> str | None:
    ua, ur = side["arm"], side["reference"]
    if ua is None or ur is None or ua["failures"] == ur["failures"]:
        return None
    return (f"user-side failed calls differ: arm {ua['failures']} "
            f"({ua['failures_per_episode']:.2f}/episode) vs reference {ur['failures']} "
            f"({ur['failures_per_episode']:.2f}/episode); they are the simulator's, counted in "
            "the error budget but in no agent channel")


@dataclass
class _Pending:
    """A cell under construction plus the raw p-values waiting for Holm."""

    cell: CellReport
    tests: list[tuple[str, float]] = field(default_factory=list)
    """(test id, raw one-sided p): "success", "channel:<name>", "gap:<K>"."""
    evidence: Evidence | None = None


def _arm_only(inp: CellInput, a: ArmData, cfg: AnalysisConfig) -> _Pending:
    max_k = a.max_errors
    curve = success_at_budgets(a.success, a.n_errors, max_k).mean(axis=0) if a.n else None
    n_calls, y, _ = _task_sums(a, None)
    total_calls = int(n_calls.sum())
    channels: dict[str, ChannelStats] = {}
    for j, ch in enumerate(ALL_CHANNELS):
        count = int(a.channel_counts[:, j].sum()) if a.n else 0
        channels[ch.value] = ChannelStats(
            arm_count=count,
            arm_rate=_f(count / total_calls) if total_calls else None,
            arm_rate_ci=rate_ci(y[:, j], n_calls, confidence=cfg.confidence).as_list()
            if total_calls else None,
            arm_per_episode=_f(count / a.n) if a.n else None,
        )
    sr = wilson_interval(int(a.success.sum()), a.n, cfg.confidence)
    cell = CellReport(
        domain=inp.domain, arm=inp.arm, reference=None, episodes=a.n, reference_episodes=None,
        paired=0, tool_calls=CountPair(arm=total_calls),
        success=SuccessStats(arm=_f(sr.estimate), margin=cfg.margin, arm_ci=sr.ci.as_list()),
        budget=BudgetStats(K=list(range(max_k + 1)),
                           arm=[_f(v) for v in curve] if curve is not None else [None] * (max_k + 1)),
        channels=channels,
        failure_set={},
        recovery=ArmValue(arm=_f(a.recovered.sum() / a.failures.sum()) if a.failures.sum() else None),
        steps=ArmValue(arm=_mean(a.steps.astype(float))),
        terminations={"arm": a.terminations, "reference": None},
        pass_k={"arm": _pass_k(a, _fewest_trials(a)), "reference": None},
        margins={"bins": list(cfg.margin_bins), "arm": margin_histogram(a.margins, cfg.margin_bins)}
        if a.margins.size else None,
        verdict=None,
        reasons=["no reference arm: arm-only figures, no verdict"],
        infrastructure_errors=CountPair(arm=a.infrastructure_errors),
        tokens=ArmValue(arm=_mean(a.tokens)),
        duration_s=ArmValue(arm=_mean(a.duration_s)),
        **_user_fields(a, None),
        extra=dict(inp.extra),
    )
    return _Pending(cell)


def _analyze_cell(inp: CellInput, a: ArmData, r: ArmData, cfg: AnalysisConfig) -> _Pending:
    tests: list[tuple[str, float]] = []
    notes: list[str] = []
    blockers: list[str] = []
    ia, ir = _pair_index(a, r)
    n_pairs = int(ia.size)
    paired = n_pairs >= 2
    max_k = min(a.max_errors, r.max_errors)
    if a.max_errors != r.max_errors:
        notes.append(f"arms ran at different error budgets (arm {a.max_errors}, reference "
                     f"{r.max_errors}): both compared at the common budget K={max_k}")
    tight, budget_notes = cfg.budgets_for(max_k)
    notes.extend(budget_notes)
    un_a, un_r = a.n - n_pairs, r.n - n_pairs
    pairing: dict[str, Any] = {"paired": n_pairs, "unpaired_arm": un_a, "unpaired_reference": un_r}
    if paired and (un_a or un_r):
        pairing["use"] = ("score, gap and widening tests on the paired episodes; rates, channels "
                          "and budget curves on every episode")
        notes.append(f"{n_pairs} paired episodes; {un_a} of the arm's and {un_r} of the "
                     "reference's have no partner and are left out of the paired tests")
        if max(un_a, un_r) > 0.1 * max(a.n, r.n):
            blockers.append(f"only {n_pairs} of {max(a.n, r.n)} episodes are paired: the paired "
                            "tests may not speak for the whole run")
    elif paired:
        pairing["use"] = "every test on the paired episodes"

    ks = list(range(max_k + 1))
    ma = success_at_budgets(a.success, a.n_errors, max_k)
    mr = success_at_budgets(r.success, r.n_errors, max_k)
    run_a, run_r = ma[:, max_k], mr[:, max_k]
    sa = wilson_interval(int(run_a.sum()), a.n, cfg.confidence)
    sr = wilson_interval(int(run_r.sum()), r.n, cfg.confidence)
    clusters = a.task_ids[ia].astype(str) if paired else None
    score = None
    diff = tost_p = harm_p = mcnemar_p = None
    ci = ci95 = None
    method = None
    if paired:
        score = paired_score(run_a[ia], run_r[ir], clusters=clusters, margin=cfg.margin,
                             alpha=cfg.alpha)
        diff, tost_p, harm_p = score.diff, score.tost_p, score.harm_p
        mcnemar_p = mcnemar_exact(run_a[ia], run_r[ir]).pvalue
        ci, ci95 = score.ci.as_list(), score.ci95.as_list()
        method = (f"paired ({score.method}): TOST on the {100 * (1 - 2 * cfg.alpha):g}% "
                  "Tango score interval; harm: " +
                  ("exact one-sided McNemar" if score.method == "tango"
                   else "one-sided task-cluster test"))
        pairing["method"] = score.method
    elif a.n and r.n:
        ka, kr = int(run_a.sum()), int(run_r.sum())
        tost_u = unpaired_tost(ka, a.n, kr, r.n, margin=cfg.margin, alpha=cfg.alpha)
        du = unpaired_difference(ka, a.n, kr, r.n, confidence=cfg.confidence)
        diff, tost_p, ci, ci95 = du.diff, tost_u.pvalue, tost_u.ci.as_list(), du.ci.as_list()
        harm_p = du.pvalue / 2 if du.diff < 0 else 1 - du.pvalue / 2
        mcnemar_p = du.pvalue
        method = "unpaired: Agresti-Caffo TOST, Newcombe CI"
        blockers.append(f"episodes could not be paired by (task, trial) ({n_pairs} common): "
                        "unpaired statistics, no LOSSLESS claim")
    if harm_p is not None:
        tests.append(("success", float(harm_p)))

    # budget curve, gaps (descriptive) and the widening tests
    none_curve: list[float | None] = [None] * len(ks)
    curve_a = [_f(v) for v in ma.mean(axis=0)] if a.n else none_curve
    curve_r = [_f(v) for v in mr.mean(axis=0)] if r.n else list(none_curve)
    gap: list[float | None] = []
    gap_ci: list[list[float] | None] = []
    gap_p: list[float | None] = []
    for k in ks:
        if paired:
            g = paired_score(ma[ia, k], mr[ir, k], clusters=clusters, margin=cfg.margin,
                             alpha=cfg.alpha)
            gap.append(_f(g.diff))
            gap_ci.append(g.ci95.as_list())
            gap_p.append(_f(min(1.0, 2 * min(g.harm_p, 1 - g.harm_p + 1e-300))))
        elif a.n and r.n:
            res = unpaired_difference(int(ma[:, k].sum()), a.n, int(mr[:, k].sum()), r.n,
                                      confidence=cfg.confidence)
            gap.append(_f(res.diff))
            gap_ci.append(res.ci.as_list())
            gap_p.append(_f(res.pvalue))
        else:
            gap.append(None)
            gap_ci.append(None)
            gap_p.append(None)
    budget = BudgetStats(K=ks, arm=curve_a, reference=curve_r, gap=gap, gap_ci=gap_ci,
                         gap_p=gap_p, tight=tight)
    gaps: list[GapEvidence] = []
    if paired:
        for k in tight:
            kept_a = 1.0 - (ma[ia, max_k] & ~ma[ia, k]).astype(float)
            kept_r = 1.0 - (mr[ir, max_k] & ~mr[ir, k]).astype(float)
            w = paired_score(kept_a, kept_r, clusters=clusters, margin=cfg.margin, alpha=cfg.alpha)
            key = str(k)
            budget.widening[key] = _f(-w.diff)
            budget.widening_upper[key] = _f(-w.ci.low)
            budget.widening_p[key] = _f(w.harm_p)
            tests.append((f"gap:{k}", w.harm_p))
            gaps.append(GapEvidence(k, -w.diff, None, -w.ci.low, w.harm_p))

    # channels, per agent tool call
    na, ya, nr, yr, ea, er = _task_sums(a, r)
    calls_a, calls_r = int(na.sum()), int(nr.sum())
    channels: dict[str, ChannelStats] = {}
    ch_ev: list[ChannelEvidence] = []
    for j, ch in enumerate(ALL_CHANNELS):
        ca, cr = int(ya[:, j].sum()), int(yr[:, j].sum())
        stats = ChannelStats(
            arm_count=ca, reference_count=cr,
            arm_rate=_f(ca / calls_a) if calls_a else None,
            reference_rate=_f(cr / calls_r) if calls_r else None,
            arm_per_episode=_f(ca / a.n) if a.n else None,
            reference_per_episode=_f(cr / r.n) if r.n else None,
        )
        ev = ChannelEvidence(ch.value, ca, cr, None, None, None, None, testable=False)
        if calls_a and calls_r:
            rr = channel_ratio(ya[:, j], na, yr[:, j], nr, max_ratio=cfg.max_ratio,
                               alpha=cfg.alpha, confidence=cfg.confidence)
            stats.ratio = _f(rr.ratio)
            stats.ratio_ci = [_f(rr.ci.low), _f(rr.ci.high)]
            stats.ratio_upper = _f(rr.upper)
            stats.p = _f(rr.amplified_p)
            stats.rate_increase = _f(rr.increase)
            stats.rate_increase_upper = _f(rr.increase_upper)
            stats.method = rr.method
            stats.arm_rate_ci = rate_ci(ya[:, j], na, confidence=cfg.confidence).as_list()
            stats.reference_rate_ci = rate_ci(yr[:, j], nr, confidence=cfg.confidence).as_list()
            stats.tested = ca > 0
            if ca > 0:
                tests.append((f"channel:{ch.value}", rr.amplified_p))
            ev = ChannelEvidence(ch.value, ca, cr, _f(rr.ratio), rr.upper, None,
                                 rr.increase_upper, testable=True,
                                 p=rr.amplified_p if ca > 0 else None)
        if a.n:
            pe = per_unit_ci(ya[:, j], ea, confidence=cfg.confidence)
            stats.arm_per_episode_ci = [_f(pe.low), _f(pe.high)]
        if r.n:
            pe = per_unit_ci(yr[:, j], er, confidence=cfg.confidence)
            stats.reference_per_episode_ci = [_f(pe.low), _f(pe.high)]
        channels[ch.value] = stats
        ch_ev.append(ev)
    if not (calls_a and calls_r):
        blockers.append(f"agent tool calls: arm {calls_a}, reference {calls_r}; channels cannot "
                        "be compared without calls on both sides")

    # failure sets
    failure_set: dict[str, FailureSetStats] = {}
    for ch in NAMED_CHANNELS:
        pa: dict[str, int] = dict(a.names.get(ch, {}))
        pr: dict[str, int] = dict(r.names.get(ch, {}))
        if not pa and not pr:
            continue
        fs = failure_set_agreement(pa, pr)
        p_changed = failure_set_change_pvalue(pa, pr)
        judgement, why = judge_failure_set(_f(fs.spearman), p_changed, fs.arm_total,
                                           fs.reference_total, alpha=cfg.alpha)
        failure_set[ch.value] = FailureSetStats(
            spearman=_f(fs.spearman), kendall=_f(fs.kendall), novel_share=_f(fs.novel_share),
            n_names=fs.n_names, arm_total=fs.arm_total, reference_total=fs.reference_total,
            top_arm=sorted(pa.items(), key=lambda kv: (-kv[1], kv[0]))[:5],
            top_reference=sorted(pr.items(), key=lambda kv: (-kv[1], kv[0]))[:5],
            p_changed=p_changed, judgement=judgement, judgement_reason=why,
        )

    # margins
    margins: dict[str, Any] | None = None
    if a.margins.size or r.margins.size:
        pairs = [
            (r.decisions[k][0], r.decisions[k][1], a.decisions[k][0])
            for k in (a.keys()[i] for i in ia.tolist())
            if k in a.decisions and k in r.decisions
        ]
        fr = flip_rates(pairs, cfg.margin_bins)
        margins = {
            "bins": list(cfg.margin_bins),
            "arm": margin_histogram(a.margins, cfg.margin_bins),
            "reference": margin_histogram(r.margins, cfg.margin_bins),
            "flip_n": list(fr.n), "flip_rate": fr.rates, "paired_episodes": len(pairs),
        }

    # design advice (cluster-aware; planning assumption: the arms are truly equal)
    plan: dict[str, Any] | None = None
    pl = None
    if paired and clusters is not None:
        pl = plan_design(run_a[ia].astype(float) - run_r[ir].astype(float), clusters,
                         margin=cfg.margin, alpha=cfg.alpha, power=cfg.power,
                         max_tasks=cfg.max_tasks, trials_flag=cfg.trials_flag,
                         tasks_flag=cfg.tasks_flag)
        plan = {"tasks": pl.tasks, "trials": pl.trials, "reachable": pl.reachable,
                "between_task_var": pl.between_var, "within_task_var": pl.within_var,
                "message": pl.message}

    kmax = _fewest_trials(a, r)
    user = _user_fields(a, r)
    ur = _user_reason(user["user_side"])
    if ur:
        notes.append(ur)
    cell = CellReport(
        domain=inp.domain, arm=inp.arm, reference=inp.reference, episodes=a.n,
        reference_episodes=r.n, paired=n_pairs,
        tool_calls=CountPair(arm=calls_a, reference=calls_r),
        success=SuccessStats(
            arm=_f(sa.estimate), reference=_f(sr.estimate), diff=_f(diff), ci=ci,
            tost_p=_f(tost_p), mcnemar_p=_f(mcnemar_p), margin=cfg.margin,
            arm_ci=sa.ci.as_list(), reference_ci=sr.ci.as_list(), method=method,
            ci_level=1 - 2 * cfg.alpha, ci95=ci95, harm_p=_f(harm_p),
            paired_arm=_f(run_a[ia].mean()) if paired else None,
            paired_reference=_f(run_r[ir].mean()) if paired else None, run_budget=max_k,
        ),
        budget=budget,
        channels=channels,
        failure_set=failure_set,
        recovery=ArmValue(
            arm=_f(a.recovered.sum() / a.failures.sum()) if a.failures.sum() else None,
            reference=_f(r.recovered.sum() / r.failures.sum()) if r.failures.sum() else None,
        ),
        steps=ArmValue(arm=_mean(a.steps.astype(float)), reference=_mean(r.steps.astype(float))),
        terminations={"arm": a.terminations, "reference": r.terminations},
        pass_k={"arm": _pass_k(a, kmax), "reference": _pass_k(r, kmax)},
        margins=margins,
        verdict=Verdict.INCONCLUSIVE,
        reasons=[],
        infrastructure_errors=CountPair(arm=a.infrastructure_errors,
                                        reference=r.infrastructure_errors),
        tokens=ArmValue(arm=_mean(a.tokens), reference=_mean(r.tokens)),
        duration_s=ArmValue(arm=_mean(a.duration_s), reference=_mean(r.duration_s)),
        n_needed=pl.n_pairs if pl is not None else None,
        trials_needed=pl.trials if pl is not None else None,
        pairing=pairing,
        plan=plan,
        **user,
        extra=dict(inp.extra),
    )
    evidence = Evidence(episodes=a.n, reference_episodes=r.n, diff=_f(diff), tost_p=_f(tost_p),
                  ci=(ci[0], ci[1]) if ci else None, harm_p_holm=None,
                  harm_method=("exact McNemar" if score is not None and score.method == "tango"
                               else "task-cluster test" if score is not None else "unpaired test"),
                  channels=ch_ev, gaps=gaps, notes=notes, blockers=blockers,
                  plan=pl.message if pl is not None else None)
    return _Pending(cell, tests, evidence)


def _decide(p: _Pending, adjusted: dict[str, float], family: list[str], cfg: AnalysisConfig
            ) -> None:
    cell, ev = p.cell, p.evidence
    assert ev is not None
    ev.harm_p_holm = adjusted.get("success")
    cell.success.harm_p_holm = _f(ev.harm_p_holm)
    cell.success.mcnemar_p_holm = _f(ev.harm_p_holm)
    for c in ev.channels:
        c.p_holm = adjusted.get(f"channel:{c.name}")
        cell.channels[c.name].p_holm = _f(c.p_holm)
    for g in ev.gaps:
        g.p_holm = adjusted.get(f"gap:{g.k}")
        cell.budget.gap_p_holm[str(g.k)] = _f(g.p_holm)
    cell.holm = {"scope": cfg.holm_scope, "size": len(family), "tests": family}
    verdict, reasons = decide(ev, cfg)
    cell.verdict = verdict
    cell.reasons = reasons


# --------------------------------------------------------------------------- entry point


def analyze(
    inputs: Sequence[CellInput],
    config: AnalysisConfig | None = None,
    rng: np.random.Generator | None = None,
    run: dict[str, Any] | None = None,
) -> Report:
    """Analyse every cell and return the report.

    Holm's family is each cell's one-sided damage tests (success harm, each channel with
    failures, the widening at each tight budget) by default, every such test of the report
    with ``config.holm_scope="report"``; ``run.analysis`` and each cell's ``holm`` name the
    family. ``rng`` is accepted for compatibility (the tests are deterministic).
    """
    del rng
    cfg = config or AnalysisConfig()
    pending: list[_Pending] = []
    for inp in inputs:
        arm_input = inp.records if inp.records is not None else inp.arm_records
        if arm_input is None:  # unreachable: __post_init__ guarantees one
            raise ValueError(f"cell {inp.domain}/{inp.arm} has no records")
        a = _as_arm(arm_input, inp.domain, inp.arm)
        if inp.reference_records is None:
            pending.append(_arm_only(inp, a, cfg))
            continue
        if inp.reference is None:
            raise ValueError(
                f"cell {inp.domain}/{inp.arm} has reference_records but reference=None; "
                "name the reference arm"
            )
        r = _as_arm(inp.reference_records, inp.domain, inp.reference)
        pending.append(_analyze_cell(inp, a, r, cfg))
    flat = [(i, tid, pv) for i, p in enumerate(pending) for tid, pv in p.tests]
    per_cell: list[dict[str, float]] = [{} for _ in pending]
    families: list[list[str]] = [[] for _ in pending]
    for group in holm_groups(flat, cfg.holm_scope):
        adj = weighted_holm([flat[j][2] for j in group],
                            family_weights([(flat[j][0], flat[j][1]) for j in group]),
                            alpha=cfg.alpha).pvalues_adjusted
        names = [f"{pending[flat[j][0]].cell.domain}/{pending[flat[j][0]].cell.arm}:{flat[j][1]}"
                 if cfg.holm_scope == "report" else flat[j][1] for j in group]
        for j, a_p in zip(group, adj, strict=True):
            per_cell[flat[j][0]][flat[j][1]] = a_p
            families[flat[j][0]] = names
    for i, p in enumerate(pending):
        if p.cell.reference is not None:
            _decide(p, per_cell[i], families[i], cfg)
    meta = dict(run or {})
    meta.setdefault("analysis", {
        "margin": cfg.margin, "max_ratio": cfg.max_ratio, "alpha": cfg.alpha,
        "tight_budgets": list(cfg.tight_budgets) if cfg.tight_budgets is not None else None,
        "rare_tolerance": cfg.rare_tolerance, "power": cfg.power,
        "confidence": cfg.confidence, "holm_scope": cfg.holm_scope,
        "holm_family_size": len(flat) if cfg.holm_scope == "report"
        else max((len(f) for f in families), default=0),
        "holm_family": "every one-sided damage test of the report" if cfg.holm_scope == "report"
        else "each cell's one-sided damage tests (success harm, channels with failures, gap "
             "widening at each tight budget)",
        "score_method": "Tango score interval for paired proportions (variance max(model, "
                        "task-cluster robust) with several trials); TOST on the 1-2α interval",
        "channel_method": "stratified (per-task) robust score test of H0 ratio <= max_ratio, "
                          "per agent tool call",
        "channel_unit": "task",
    })
    return Report(run=meta, cells=[p.cell for p in pending])

"""Analysis of cells into the versioned report (DESIGN.md "Report JSON", schema_version 1).

``analyze(inputs, config, rng)`` takes, per cell, the candidate's and the reference's
episodes (records or pre-summarised :class:`~pytest_quantagent.metrics.episode.ArmData`),
computes every figure of the report, applies Holm across every cell × channel × test of the
report, and decides each cell's verdict. ``Report.model_dump(mode="json")`` is the report
JSON; renderers (terminal, HTML) consume :class:`Report` only.
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
from pytest_quantagent.metrics.margins import DEFAULT_MARGIN_BINS, flip_rates, margin_histogram
from pytest_quantagent.metrics.passk import pass_k_curve
from pytest_quantagent.stats.intervals import wilson_interval
from pytest_quantagent.stats.multiplicity import holm
from pytest_quantagent.stats.paired import (
    mcnemar_exact,
    paired_difference,
    paired_tost,
    unpaired_difference,
    unpaired_tost,
)
from pytest_quantagent.stats.power import trials_for_equivalence
from pytest_quantagent.stats.rank import failure_set_agreement
from pytest_quantagent.stats.ratio import per_unit_ci, rate_ci, rate_ratio_from_clusters
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.vocab.channels import ALL_CHANNELS, NAMED_CHANNELS

SCHEMA_VERSION: Literal[1] = 1
Verdict = Literal["LOSSLESS", "MASKED_DAMAGE", "DEGRADED", "INCONCLUSIVE"]
VERDICTS: tuple[str, ...] = ("LOSSLESS", "MASKED_DAMAGE", "DEGRADED", "INCONCLUSIVE")


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class AnalysisConfig:
    """Thresholds and options of the analysis (all verdict thresholds live here)."""

    margin: float = 0.075
    """Equivalence margin on the success rate (absolute, 0.075 = 7.5 points)."""
    max_ratio: float = 1.2
    """A channel is amplified when its rate ratio exceeds this and is significant (Holm)."""
    alpha: float = 0.05
    """Family-wise level (Holm) and TOST level."""
    budgets: tuple[int, ...] = (2, 5, 10)
    """Budgets K whose success gap is tested (those below the run's budget)."""
    power: float = 0.8
    """Power for the number of paired episodes an INCONCLUSIVE verdict asks for."""
    confidence: float = 0.95
    ratio_method: Literal["sandwich", "bootstrap"] = "sandwich"
    n_boot: int = 2000
    margin_bins: tuple[float, ...] = DEFAULT_MARGIN_BINS
    trials_flag: str = "--quant-trials"
    """The option an INCONCLUSIVE reason names (``--trials`` for ``quantagent run``)."""

    def __post_init__(self) -> None:
        if not (0 < self.margin < 1):
            raise ValueError(f"margin={self.margin!r} is not allowed; margin must be in (0, 1)")
        if not (self.max_ratio >= 1):
            raise ValueError(f"max_ratio={self.max_ratio!r} is not allowed; max_ratio must be >= 1")
        for name in ("alpha", "power", "confidence"):
            v = getattr(self, name)
            if not (0 < v < 1):
                raise ValueError(f"{name}={v!r} is not allowed; {name} must be in (0, 1)")
        if any((not isinstance(k, int)) or k < 0 for k in self.budgets):
            raise ValueError(
                f"budgets={self.budgets!r} is not allowed; budgets must be integers >= 0"
            )
        if self.ratio_method not in ("sandwich", "bootstrap"):
            raise ValueError(
                f"ratio_method={self.ratio_method!r} is not allowed; allowed: bootstrap, sandwich"
            )


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
    """Exact McNemar (paired); the unpaired test's p-value when episodes cannot be paired."""
    mcnemar_p_holm: float | None = None
    margin: float
    arm_ci: list[float] | None = None
    reference_ci: list[float] | None = None
    method: str | None = None


class BudgetStats(_Model):
    K: list[int]
    arm: list[float | None]
    reference: list[float | None] | None = None
    gap: list[float | None] | None = None
    gap_ci: list[list[float] | None] | None = None
    gap_p: list[float | None] | None = None
    gap_p_holm: dict[str, float | None] = Field(default_factory=dict)
    """Holm-adjusted p of the gap at each tested budget (keys are K as strings)."""


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
    """Paired episodes needed for the TOST at the configured power (INCONCLUSIVE)."""
    trials_needed: int | None = None
    """``--quant-trials`` that gives ``n_needed`` over this cell's tasks."""
    user_sim: str | None = None
    """Which user simulator produced the cell's episodes (``scripted`` or an LLM user's
    identity; several, comma-separated, when arm and reference differ)."""
    user_failures: dict[str, dict[str, int] | None] | None = None
    """Failed calls of the user simulator by channel (``arm``/``reference``), kept out of
    ``channels`` except ``user_tool_error`` (device side); None when there are none."""
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


def _cluster_sums(a: ArmData, r: ArmData) -> tuple[np.ndarray, ...]:
    """Per-task sums of calls, channel counts and episodes for both arms, aligned over the
    union of tasks."""
    labels, inv = np.unique(np.concatenate([a.task_ids, r.task_ids]).astype(str),
                            return_inverse=True)
    g = labels.size
    ia, ir = inv[: a.n], inv[a.n :]

    def sums(idx: np.ndarray, x: np.ndarray) -> np.ndarray:
        return np.bincount(idx, weights=x, minlength=g)

    na = sums(ia, a.tool_calls.astype(float))
    nr = sums(ir, r.tool_calls.astype(float))
    ya = np.stack([sums(ia, a.channel_counts[:, j].astype(float))
                   for j in range(len(ALL_CHANNELS))], axis=1)
    yr = np.stack([sums(ir, r.channel_counts[:, j].astype(float))
                   for j in range(len(ALL_CHANNELS))], axis=1)
    ea = sums(ia, np.ones(a.n))
    er = sums(ir, np.ones(r.n))
    return na, ya, nr, yr, ea, er


def _arm_cluster_sums(a: ArmData) -> tuple[np.ndarray, np.ndarray]:
    _, inv = np.unique(a.task_ids.astype(str), return_inverse=True)
    g = int(inv.max()) + 1 if inv.size else 0
    n = np.bincount(inv, weights=a.tool_calls.astype(float), minlength=g)
    y = np.stack([np.bincount(inv, weights=a.channel_counts[:, j].astype(float), minlength=g)
                  for j in range(len(ALL_CHANNELS))], axis=1) if g else np.zeros((0, len(ALL_CHANNELS)))
    return n, y


def _pass_k(a: ArmData) -> dict[str, float]:
    return {str(k): v for k, v in pass_k_curve(a.task_ids.tolist(), a.success.tolist()).items()}


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "n/a"
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.0e}"


# --------------------------------------------------------------------------- one cell


@dataclass
class _Pending:
    """A cell under construction plus the raw p-values waiting for Holm."""

    cell: CellReport
    tests: list[tuple[str, float]] = field(default_factory=list)
    """(test id, raw p): "channel:<name>", "success", "gap:<K>"."""
    tost_p: float | None = None
    diff: float | None = None
    n_tasks: int = 0


def _user_fields(a: ArmData, r: ArmData | None) -> dict[str, Any]:
    sims = sorted(a.user_sims | (r.user_sims if r is not None else set()))
    failures = None
    if a.user_failures or (r is not None and r.user_failures):
        failures = {"arm": dict(sorted(a.user_failures.items())),
                    "reference": dict(sorted(r.user_failures.items())) if r is not None else None}
    return {"user_sim": ", ".join(sims) if sims else None, "user_failures": failures}


def _arm_only(inp: CellInput, a: ArmData, cfg: AnalysisConfig) -> _Pending:
    max_k = a.max_errors
    curve = success_at_budgets(a.success, a.n_errors, max_k).mean(axis=0) if a.n else None
    n_calls, y = _arm_cluster_sums(a)
    total_calls = int(a.tool_calls.sum())
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
        pass_k={"arm": _pass_k(a), "reference": None},
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


def _analyze_cell(inp: CellInput, a: ArmData, r: ArmData, cfg: AnalysisConfig,
                  rng: np.random.Generator | None) -> _Pending:
    tests: list[tuple[str, float]] = []
    ia, ir = _pair_index(a, r)
    n_pairs = int(ia.size)
    paired = n_pairs >= 2
    max_k = min(a.max_errors, r.max_errors)
    reasons: list[str] = []

    # success at the run budget
    sa = wilson_interval(int(a.success.sum()), a.n, cfg.confidence)
    sr = wilson_interval(int(r.success.sum()), r.n, cfg.confidence)
    diff = tost_p = test_p = None
    ci = None
    method = None
    sd_pairs: float | None = None
    if paired:
        xa = a.success[ia].astype(float)
        xr = r.success[ir].astype(float)
        clusters = a.task_ids[ia].astype(str)
        tost = paired_tost(xa, xr, margin=cfg.margin, alpha=cfg.alpha, clusters=clusters)
        d95 = paired_difference(xa, xr, clusters=clusters, confidence=cfg.confidence)
        mc = mcnemar_exact(xa, xr)
        diff, tost_p, test_p, ci = tost.diff, tost.pvalue, mc.pvalue, d95.ci.as_list()
        method = "paired: cluster-robust t TOST, exact McNemar"
        sd_pairs = float(np.std(xa - xr, ddof=1)) if n_pairs > 1 else None
    elif a.n and r.n:
        ka, kr = int(a.success.sum()), int(r.success.sum())
        tost_u = unpaired_tost(ka, a.n, kr, r.n, margin=cfg.margin, alpha=cfg.alpha)
        du = unpaired_difference(ka, a.n, kr, r.n, confidence=cfg.confidence)
        diff, tost_p, test_p, ci = du.diff, tost_u.pvalue, du.pvalue, du.ci.as_list()
        method = "unpaired: Agresti-Caffo TOST, Newcombe CI"
        if n_pairs < 2 and min(a.n, r.n) >= 2:
            reasons.append(f"episodes could not be paired by (task, trial) ({n_pairs} common)")
        else:
            reasons.append(
                f"too few episodes for a paired test ({n_pairs} pair(s)); unpaired statistics used"
            )
    if test_p is not None:
        tests.append(("success", test_p))

    # budget curve and paired gaps
    ks = list(range(max_k + 1))
    ma = success_at_budgets(a.success, a.n_errors, max_k)
    mr = success_at_budgets(r.success, r.n_errors, max_k)
    none_curve: list[float | None] = [None] * len(ks)
    curve_a = [_f(v) for v in ma.mean(axis=0)] if a.n else none_curve
    curve_r = [_f(v) for v in mr.mean(axis=0)] if r.n else list(none_curve)
    gap: list[float | None] = []
    gap_ci: list[list[float] | None] = []
    gap_p: list[float | None] = []
    for k in ks:
        if paired:
            res = paired_difference(ma[ia, k], mr[ir, k], clusters=a.task_ids[ia].astype(str),
                                    confidence=cfg.confidence)
        elif a.n and r.n:
            res = unpaired_difference(int(ma[:, k].sum()), a.n, int(mr[:, k].sum()), r.n,
                                      confidence=cfg.confidence)
        else:
            gap.append(None)
            gap_ci.append(None)
            gap_p.append(None)
            continue
        gap.append(_f(res.diff))
        gap_ci.append(res.ci.as_list())
        gap_p.append(_f(res.pvalue))
    for k in cfg.budgets:
        if k < max_k and gap_p[k] is not None:
            tests.append((f"gap:{k}", float(gap_p[k])))  # type: ignore[arg-type]

    # channels
    na, ya, nr, yr, ea, er = _cluster_sums(a, r)
    calls_a, calls_r = int(na.sum()), int(nr.sum())
    channels: dict[str, ChannelStats] = {}
    for j, ch in enumerate(ALL_CHANNELS):
        ca, cr = int(ya[:, j].sum()), int(yr[:, j].sum())
        stats = ChannelStats(
            arm_count=ca, reference_count=cr,
            arm_rate=_f(ca / calls_a) if calls_a else None,
            reference_rate=_f(cr / calls_r) if calls_r else None,
            arm_per_episode=_f(ca / a.n) if a.n else None,
            reference_per_episode=_f(cr / r.n) if r.n else None,
        )
        if calls_a and calls_r:
            rr = rate_ratio_from_clusters(ya[:, j], na, yr[:, j], nr, confidence=cfg.confidence,
                                          method=cfg.ratio_method, rng=rng, n_boot=cfg.n_boot)
            stats.ratio = _f(rr.ratio)
            stats.ratio_ci = [_f(rr.ci.low), _f(rr.ci.high)]
            stats.p = _f(rr.pvalue)
            stats.method = rr.method
            stats.arm_rate_ci = rate_ci(ya[:, j], na, confidence=cfg.confidence).as_list()
            stats.reference_rate_ci = rate_ci(yr[:, j], nr, confidence=cfg.confidence).as_list()
        if a.n:
            pe = per_unit_ci(ya[:, j], ea, confidence=cfg.confidence)
            stats.arm_per_episode_ci = [_f(pe.low), _f(pe.high)]
        if r.n:
            pe = per_unit_ci(yr[:, j], er, confidence=cfg.confidence)
            stats.reference_per_episode_ci = [_f(pe.low), _f(pe.high)]
            if stats.p is not None and (ca or cr):
                tests.append((f"channel:{ch.value}", stats.p))
        channels[ch.value] = stats

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

    # sample size for the TOST (planning assumption: the arms are truly equal)
    n_tasks = int(np.unique(a.task_ids.astype(str)).size) if a.n else 0
    ss, trials_needed = trials_for_equivalence(
        sd_pairs, n_tasks, margin=cfg.margin, alpha=cfg.alpha, power=cfg.power)
    n_needed = ss.n_pairs

    cell = CellReport(
        domain=inp.domain, arm=inp.arm, reference=inp.reference, episodes=a.n,
        reference_episodes=r.n, paired=n_pairs,
        tool_calls=CountPair(arm=calls_a, reference=calls_r),
        success=SuccessStats(
            arm=_f(sa.estimate), reference=_f(sr.estimate), diff=_f(diff), ci=ci,
            tost_p=_f(tost_p), mcnemar_p=_f(test_p), margin=cfg.margin,
            arm_ci=sa.ci.as_list(), reference_ci=sr.ci.as_list(), method=method,
        ),
        budget=BudgetStats(K=ks, arm=curve_a, reference=curve_r, gap=gap, gap_ci=gap_ci,
                           gap_p=gap_p),
        channels=channels,
        failure_set=failure_set,
        recovery=ArmValue(
            arm=_f(a.recovered.sum() / a.failures.sum()) if a.failures.sum() else None,
            reference=_f(r.recovered.sum() / r.failures.sum()) if r.failures.sum() else None,
        ),
        steps=ArmValue(arm=_mean(a.steps.astype(float)), reference=_mean(r.steps.astype(float))),
        terminations={"arm": a.terminations, "reference": r.terminations},
        pass_k={"arm": _pass_k(a), "reference": _pass_k(r)},
        margins=margins,
        verdict="INCONCLUSIVE",
        reasons=reasons,
        infrastructure_errors=CountPair(arm=a.infrastructure_errors,
                                        reference=r.infrastructure_errors),
        tokens=ArmValue(arm=_mean(a.tokens), reference=_mean(r.tokens)),
        duration_s=ArmValue(arm=_mean(a.duration_s), reference=_mean(r.duration_s)),
        n_needed=n_needed,
        trials_needed=trials_needed,
        **_user_fields(a, r),
        extra=dict(inp.extra),
    )
    return _Pending(cell, tests, _f(tost_p), _f(diff), n_tasks)


# --------------------------------------------------------------------------- verdict


def _decide(p: _Pending, adjusted: dict[str, float], cfg: AnalysisConfig) -> None:
    cell = p.cell
    reasons = list(cell.reasons)
    if cell.episodes == 0 or (cell.reference_episodes or 0) == 0:
        cell.verdict = "INCONCLUSIVE"
        cell.reasons = [*reasons, "no scored episodes in one arm"]
        return
    success_holm = adjusted.get("success")
    cell.success.mcnemar_p_holm = _f(success_holm)
    amplified: list[str] = []
    nominal: list[str] = []  # significant alone, not after Holm: said, but not a verdict
    for name, ch in cell.channels.items():
        ch.p_holm = _f(adjusted.get(f"channel:{name}"))
        ratio_hi = ch.ratio is not None or (ch.arm_count > 0 and ch.reference_count == 0)
        ratio_val = ch.ratio if ch.ratio is not None else math.inf
        over = ratio_hi and ratio_val > cfg.max_ratio
        shown = f"×{ratio_val:.2g}" if math.isfinite(ratio_val) else f"{ch.arm_count} vs 0"
        if over and ch.p_holm is not None and ch.p_holm < cfg.alpha:
            amplified.append(f"{name} {shown} (Holm p={_fmt_p(ch.p_holm)})")
        elif over and ch.p is not None and ch.p < cfg.alpha and ch.p_holm is not None:
            nominal.append(f"{name} {shown} (p={_fmt_p(ch.p)}) is not significant after Holm "
                           f"(p={_fmt_p(ch.p_holm)})")
    gaps: list[str] = []
    for k in cfg.budgets:
        key = f"gap:{k}"
        if key not in adjusted:
            continue
        cell.budget.gap_p_holm[str(k)] = _f(adjusted[key])
        g = cell.budget.gap[k] if cell.budget.gap else None
        if g is not None and g < -cfg.margin and adjusted[key] < cfg.alpha:
            gaps.append(f"gap at K={k}: {abs(g) * 100:.0f} pts (Holm p={_fmt_p(adjusted[key])})")
        else:
            raw = cell.budget.gap_p[k] if cell.budget.gap_p else None
            if g is not None and g < -cfg.margin and raw is not None and raw < cfg.alpha:
                nominal.append(f"gap at K={k}: {abs(g) * 100:.0f} pts (p={_fmt_p(raw)}) is not "
                               f"significant after Holm (p={_fmt_p(adjusted[key])})")
    diff = p.diff
    degraded = (diff is not None and diff < 0 and success_holm is not None
                and success_holm < cfg.alpha)
    equivalent = p.tost_p is not None and p.tost_p < cfg.alpha
    score = (
        f"success {diff * 100:+.1f} pts" if diff is not None else "success difference n/a"
    )
    if degraded:
        cell.verdict = "DEGRADED"
        reasons.append(f"{score} (McNemar Holm p={_fmt_p(success_holm)})")
        reasons.extend(amplified + gaps)
    elif amplified or gaps:
        cell.verdict = "MASKED_DAMAGE"
        reasons.extend(amplified + gaps + nominal)
        if equivalent:
            reasons.append(f"{score}: equivalent within ±{cfg.margin * 100:g} pts "
                           f"(TOST p={_fmt_p(p.tost_p)})")
        else:
            reasons.append(f"{score}: not significantly lower")
    elif equivalent:
        cell.verdict = "LOSSLESS"
        reasons.append(f"{score}: equivalent within ±{cfg.margin * 100:g} pts "
                       f"(TOST p={_fmt_p(p.tost_p)})")
        reasons.append(f"no channel amplified above ×{cfg.max_ratio:g}")
        reasons.extend(nominal)
    else:
        cell.verdict = "INCONCLUSIVE"
        need = cell.n_needed
        msg = (f"{score}: neither equivalent within ±{cfg.margin * 100:g} pts "
               f"(TOST p={_fmt_p(p.tost_p)}) nor significantly lower")
        if need is not None:
            msg += f"; about {need} paired episodes needed"
            if cell.trials_needed is not None:
                msg += f": run with {cfg.trials_flag} {cell.trials_needed}"
        reasons.extend(nominal)
        reasons.append(msg)
    cell.reasons = reasons


# --------------------------------------------------------------------------- entry point


def analyze(
    inputs: Sequence[CellInput],
    config: AnalysisConfig | None = None,
    rng: np.random.Generator | None = None,
    run: dict[str, Any] | None = None,
) -> Report:
    """Analyse every cell and return the report.

    Holm is applied once across every cell × channel × test of the report (channel rate
    ratios, the paired success test, the success gaps at the tested budgets below the run's
    budget). ``rng`` is used only by ``config.ratio_method="bootstrap"``.
    """
    cfg = config or AnalysisConfig()
    if cfg.ratio_method == "bootstrap" and rng is None:
        raise ValueError("ratio_method='bootstrap' needs rng (a numpy.random.Generator)")
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
        pending.append(_analyze_cell(inp, a, r, cfg, rng))
    flat = [(i, tid, pv) for i, p in enumerate(pending) for tid, pv in p.tests]
    adj = holm([pv for _, _, pv in flat], alpha=cfg.alpha).pvalues_adjusted if flat else ()
    per_cell: list[dict[str, float]] = [{} for _ in pending]
    for (i, tid, _), a_p in zip(flat, adj, strict=False):
        per_cell[i][tid] = a_p
    for p, adjusted in zip(pending, per_cell, strict=False):
        if p.cell.reference is not None:
            _decide(p, adjusted, cfg)
    meta = dict(run or {})
    meta.setdefault("analysis", {
        "margin": cfg.margin, "max_ratio": cfg.max_ratio, "alpha": cfg.alpha,
        "budgets": list(cfg.budgets), "power": cfg.power, "confidence": cfg.confidence,
        "ratio_method": cfg.ratio_method, "holm_family_size": len(flat),
    })
    return Report(run=meta, cells=[p.cell for p in pending])

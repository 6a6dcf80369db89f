"""One function per claim of a cell, each returning its figures (the report's fields, by
the report model's names) and the evidence :func:`pytest_quantagent.verdict.decide` judges.

- :func:`score_claim`: success at the run's budget, TOST within ±margin and DEGRADED's
  test (drop beyond the margin), paired (Tango, task-clustered) or unpaired.
- :func:`budget_claim`: the success-at-K curves, the gaps, and each tight budget's widening
  tested against the margin in both directions.
- :func:`channel_claims`: every channel's rate ratio and per-call increase, stratified by
  paired episode (task strata for the unpaired), tested against its damage region.
- :func:`failure_set_claims`, :func:`margins_claim`: the failure-set and decision-margin
  figures (descriptive; the failure-set gate is the assertion's).
- :func:`user_claim`: the simulated user's own calls, failures and events per side, and
  whether the arms differ through it beyond chance.
- :func:`termination_claims`: each termination reason's rate per episode (evidence of damage).
- :func:`answer_claims`: the answers themselves, per agent model turn: empty answers and
  turns cut at the length limit (rates, the channels' rule; LOSSLESS needs them outside their
  region when recorded), output and reasoning length (a ratio of means, evidence of damage
  only); :func:`without_empty_turns` keeps an empty answer out of ``malformed_call``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats as _st

from pytest_quantagent.analysis.arms import Pairing, fnum, task_sums
from pytest_quantagent.metrics.episode import ANSWER_INDEX, CHANNEL_INDEX, ArmData
from pytest_quantagent.metrics.failure_sets import failure_set_change_pvalue, judge_failure_set
from pytest_quantagent.metrics.margins import flip_rates, margin_histogram
from pytest_quantagent.stats.clustered import PairedScore, channel_ratio, paired_score
from pytest_quantagent.stats.intervals import wilson_interval
from pytest_quantagent.stats.paired import mcnemar_exact, unpaired_difference, unpaired_tost
from pytest_quantagent.stats.rank import failure_set_agreement
from pytest_quantagent.stats.ratio import per_unit_ci, rate_ci
from pytest_quantagent.verdict import AnalysisConfig, ChannelEvidence, GapEvidence
from pytest_quantagent.vocab.channels import ALL_CHANNELS, NAMED_CHANNELS, Channel

Test = tuple[str, float]
"""(test id, raw one-sided p) of a damage test in Holm's family: "success",
"channel:<name>", "gap:<K>"."""


# --------------------------------------------------------------------------- score


@dataclass
class SuccessFigures:
    """The report's ``success`` section (see :class:`~pytest_quantagent.report.model.SuccessStats`)."""

    arm: float | None
    margin: float
    reference: float | None = None
    diff: float | None = None
    ci: list[float] | None = None
    tost_p: float | None = None
    mcnemar_p: float | None = None
    mcnemar_p_holm: float | None = None
    arm_ci: list[float] | None = None
    reference_ci: list[float] | None = None
    method: str | None = None
    ci_level: float | None = None
    ci95: list[float] | None = None
    harm_p: float | None = None
    harm_p_holm: float | None = None
    paired_arm: float | None = None
    paired_reference: float | None = None
    run_budget: int | None = None
    damage_p: float | None = None
    damage_p_holm: float | None = None


@dataclass
class ScoreClaim:
    figures: SuccessFigures
    tests: list[Test] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    score: PairedScore | None = None
    harm_method: str = "unpaired test"


def score_claim(a: ArmData, r: ArmData, p: Pairing, run_a: np.ndarray, run_r: np.ndarray,
                max_k: int, cfg: AnalysisConfig) -> ScoreClaim:
    """The score at the run's budget: the TOST within ±margin (LOSSLESS's side) and the
    one-sided test of H0 "drop ≤ margin" (DEGRADED's side, in Holm's family); the test of
    "not worse at all" is kept as ``harm_p`` (descriptive)."""
    sa = wilson_interval(int(run_a.sum()), a.n, cfg.confidence)
    sr = wilson_interval(int(run_r.sum()), r.n, cfg.confidence)
    fig = SuccessFigures(arm=fnum(sa.estimate), reference=fnum(sr.estimate), margin=cfg.margin,
                         arm_ci=sa.ci.as_list(), reference_ci=sr.ci.as_list(),
                         ci_level=1 - 2 * cfg.alpha, run_budget=max_k)
    out = ScoreClaim(fig)
    ia, ir = p.ia, p.ir
    if p.paired:
        clusters = a.task_ids[ia].astype(str)
        sc = paired_score(run_a[ia], run_r[ir], clusters=clusters, margin=cfg.margin,
                          alpha=cfg.alpha)
        out.score = sc
        fig.diff, fig.tost_p, fig.harm_p = fnum(sc.diff), fnum(sc.tost_p), fnum(sc.harm_p)
        fig.damage_p = fnum(sc.inferiority_p)
        fig.mcnemar_p = fnum(mcnemar_exact(run_a[ia], run_r[ir]).pvalue)
        fig.ci, fig.ci95 = sc.ci.as_list(), sc.ci95.as_list()
        fig.method = (f"paired ({sc.method}): TOST on the {100 * (1 - 2 * cfg.alpha):g}% "
                      "Tango score interval; damage: one-sided score test of a drop beyond the "
                      "margin" + (" (task-clustered)" if sc.method != "tango" else ""))
        fig.paired_arm, fig.paired_reference = fnum(run_a[ia].mean()), fnum(run_r[ir].mean())
        out.harm_method = "Tango score test" if sc.method == "tango" else "task-cluster test"
    elif a.n and r.n:
        ka, kr = int(run_a.sum()), int(run_r.sum())
        tost_u = unpaired_tost(ka, a.n, kr, r.n, margin=cfg.margin, alpha=cfg.alpha)
        du = unpaired_difference(ka, a.n, kr, r.n, confidence=cfg.confidence)
        fig.diff, fig.tost_p = fnum(du.diff), fnum(tost_u.pvalue)
        fig.ci, fig.ci95 = tost_u.ci.as_list(), du.ci.as_list()
        fig.harm_p = fnum(du.pvalue / 2 if du.diff < 0 else 1 - du.pvalue / 2)
        fig.damage_p = fnum(1.0 - tost_u.pvalue_low)
        fig.mcnemar_p = fnum(du.pvalue)
        fig.method = "unpaired: Agresti-Caffo TOST, Newcombe CI"
        out.blockers.append(f"episodes could not be paired by (task, trial) ({p.n} common): "
                            "unpaired statistics, no LOSSLESS claim")
    if fig.damage_p is not None:
        out.tests.append(("success", fig.damage_p))
    return out


# --------------------------------------------------------------------------- budget gaps


@dataclass
class BudgetFigures:
    """The report's ``budget`` section (see :class:`~pytest_quantagent.report.model.BudgetStats`)."""

    K: list[int]
    arm: list[float | None]
    reference: list[float | None] | None = None
    gap: list[float | None] | None = None
    gap_ci: list[list[float] | None] | None = None
    gap_p: list[float | None] | None = None
    gap_p_holm: dict[str, float | None] = field(default_factory=dict)
    tight: list[int] = field(default_factory=list)
    widening: dict[str, float | None] = field(default_factory=dict)
    widening_upper: dict[str, float | None] = field(default_factory=dict)
    widening_p: dict[str, float | None] = field(default_factory=dict)


@dataclass
class BudgetClaim:
    figures: BudgetFigures
    gaps: list[GapEvidence] = field(default_factory=list)
    tests: list[Test] = field(default_factory=list)


def budget_claim(a: ArmData, r: ArmData, p: Pairing, ma: np.ndarray, mr: np.ndarray,
                 max_k: int, tight: list[int], cfg: AnalysisConfig) -> BudgetClaim:
    """Success at every K ≤ the run's budget, the gaps (descriptive, two-sided), and per
    tight K the widening w (candidate's lost successes − reference's between the run's
    budget and K, per pair) tested against the margin: damage H0 w ≤ margin (Holm), LOSSLESS
    needs the one-sided upper bound below the margin."""
    ks = list(range(max_k + 1))
    none_curve: list[float | None] = [None] * len(ks)
    curve_a = [fnum(v) for v in ma.mean(axis=0)] if a.n else none_curve
    curve_r = [fnum(v) for v in mr.mean(axis=0)] if r.n else list(none_curve)
    ia, ir = p.ia, p.ir
    clusters = a.task_ids[ia].astype(str) if p.paired else None
    gap: list[float | None] = []
    gap_ci: list[list[float] | None] = []
    gap_p: list[float | None] = []
    for k in ks:
        if p.paired:
            g = paired_score(ma[ia, k], mr[ir, k], clusters=clusters, margin=cfg.margin,
                             alpha=cfg.alpha)
            gap.append(fnum(g.diff))
            gap_ci.append(g.ci95.as_list())
            gap_p.append(fnum(min(1.0, 2 * min(g.harm_p, 1 - g.harm_p + 1e-300))))
        elif a.n and r.n:
            res = unpaired_difference(int(ma[:, k].sum()), a.n, int(mr[:, k].sum()), r.n,
                                      confidence=cfg.confidence)
            gap.append(fnum(res.diff))
            gap_ci.append(res.ci.as_list())
            gap_p.append(fnum(res.pvalue))
        else:
            gap.append(None)
            gap_ci.append(None)
            gap_p.append(None)
    fig = BudgetFigures(K=ks, arm=curve_a, reference=curve_r, gap=gap, gap_ci=gap_ci,
                        gap_p=gap_p, tight=tight)
    out = BudgetClaim(fig)
    if p.paired:
        for k in tight:
            kept_a = 1.0 - (ma[ia, max_k] & ~ma[ia, k]).astype(float)
            kept_r = 1.0 - (mr[ir, max_k] & ~mr[ir, k]).astype(float)
            w = paired_score(kept_a, kept_r, clusters=clusters, margin=cfg.margin,
                             alpha=cfg.alpha)
            key = str(k)
            fig.widening[key] = fnum(-w.diff)
            fig.widening_upper[key] = fnum(-w.ci.low)
            fig.widening_p[key] = fnum(w.inferiority_p)
            out.tests.append((f"gap:{k}", w.inferiority_p))
            out.gaps.append(GapEvidence(k, -w.diff, None, -w.ci.low, w.inferiority_p))
    return out


# --------------------------------------------------------------------------- channels


@dataclass
class ChannelFigures:
    """One entry of the report's ``channels`` (see
    :class:`~pytest_quantagent.report.model.ChannelStats`)."""

    arm_count: int
    arm_rate: float | None
    reference_count: int | None = None
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
    ratio_estimate: float | None = None
    rate_increase: float | None = None
    rate_increase_upper: float | None = None
    tested: bool | None = None
    ratio_p: float | None = None
    increase_p: float | None = None
    strata: str | None = None
    shown_not_amplified: bool | None = None


@dataclass
class ChannelsClaim:
    figures: dict[str, ChannelFigures]
    evidence: list[ChannelEvidence] = field(default_factory=list)
    tests: list[Test] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    calls_arm: int = 0
    calls_reference: int = 0


def channel_strata(a: ArmData, r: ArmData, p: Pairing, pair_strata: bool
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """Per stratum (a paired episode; the unpaired episodes of a task pooled into one
    stratum): agent calls and channel counts of each arm, the stratum's task label and
    whether strata are pairs."""
    assert a.agent_calls is not None and r.agent_calls is not None
    if not (p.paired and pair_strata):
        na, ya, nr, yr, _, _, labels = task_sums(a, r)
        return na, ya, nr, yr, labels, False
    na = a.agent_calls[p.ia].astype(float)
    nr = r.agent_calls[p.ir].astype(float)
    ya = a.channel_counts[p.ia].astype(float)
    yr = r.channel_counts[p.ir].astype(float)
    labels = a.task_ids[p.ia].astype(str)
    rest_a = np.setdiff1d(np.arange(a.n), p.ia)
    rest_r = np.setdiff1d(np.arange(r.n), p.ir)
    if rest_a.size and rest_r.size:
        na2, ya2, nr2, yr2, _, _, lab2 = task_sums(a, r, rest_a, rest_r)
        na, nr = np.concatenate([na, na2]), np.concatenate([nr, nr2])
        ya, yr = np.concatenate([ya, ya2]), np.concatenate([yr, yr2])
        labels = np.concatenate([labels, lab2.astype(str)])
    return na, ya, nr, yr, labels, True


def channel_claims(a: ArmData, r: ArmData, p: Pairing, cfg: AnalysisConfig) -> ChannelsClaim:
    """Every channel, per agent tool call: its ratio and increase (stratified by paired
    episode, tasks as clusters) and the damage test of its region (ratio above
    ``max_ratio`` and increase above ``rare_tolerance``: intersection-union, in Holm's family
    when the candidate has a failure of it)."""
    na, ya, nr, yr, labels, paired = channel_strata(a, r, p, cfg.channel_pairing)
    tna, tya, tnr, tyr, tea, ter, _ = task_sums(a, r)
    calls_a, calls_r = int(tna.sum()), int(tnr.sum())
    out = ChannelsClaim({}, calls_arm=calls_a, calls_reference=calls_r)
    for j, ch in enumerate(ALL_CHANNELS):
        ca, cr = int(tya[:, j].sum()), int(tyr[:, j].sum())
        fig = ChannelFigures(
            arm_count=ca, reference_count=cr,
            arm_rate=fnum(ca / calls_a) if calls_a else None,
            reference_rate=fnum(cr / calls_r) if calls_r else None,
            arm_per_episode=fnum(ca / a.n) if a.n else None,
            reference_per_episode=fnum(cr / r.n) if r.n else None,
        )
        ev = ChannelEvidence(ch.value, ca, cr, None, None, None, None, testable=False)
        if calls_a and calls_r:
            rr = channel_ratio(ya[:, j], na, yr[:, j], nr, clusters=labels, paired=paired,
                               max_ratio=cfg.max_ratio, tolerance=cfg.rare_tolerance,
                               alpha=cfg.alpha, confidence=cfg.confidence)
            fig.ratio = fnum(rr.ratio)
            fig.ratio_ci = [fnum(rr.ci.low), fnum(rr.ci.high)]
            fig.ratio_upper = fnum(rr.upper)
            fig.ratio_estimate = fnum(rr.estimate)
            fig.ratio_p, fig.increase_p = fnum(rr.amplified_p), fnum(rr.increase_p)
            fig.p = fnum(rr.damage_p)
            fig.rate_increase = fnum(rr.increase)
            fig.rate_increase_upper = fnum(rr.increase_upper)
            fig.method = rr.method
            fig.strata = rr.strata
            fig.arm_rate_ci = rate_ci(tya[:, j], tna, confidence=cfg.confidence).as_list()
            fig.reference_rate_ci = rate_ci(tyr[:, j], tnr, confidence=cfg.confidence).as_list()
            fig.tested = ca > 0
            if ca > 0:
                out.tests.append((f"channel:{ch.value}", rr.damage_p))
            ev = ChannelEvidence(ch.value, ca, cr, fnum(rr.ratio), rr.upper, None,
                                 rr.increase_upper, testable=True,
                                 p=rr.damage_p if ca > 0 else None, ratio_p=rr.amplified_p,
                                 increase_p=rr.increase_p, increase=rr.increase)
            fig.shown_not_amplified = (
                (rr.upper < cfg.max_ratio) or (rr.increase_upper < cfg.rare_tolerance))
        if a.n:
            pe = per_unit_ci(tya[:, j], tea, confidence=cfg.confidence)
            fig.arm_per_episode_ci = [fnum(pe.low), fnum(pe.high)]
        if r.n:
            pe = per_unit_ci(tyr[:, j], ter, confidence=cfg.confidence)
            fig.reference_per_episode_ci = [fnum(pe.low), fnum(pe.high)]
        out.figures[ch.value] = fig
        out.evidence.append(ev)
    if not (calls_a and calls_r):
        out.blockers.append(f"agent tool calls: arm {calls_a}, reference {calls_r}; channels "
                            "cannot be compared without calls on both sides")
    return out


# --------------------------------------------------------------------------- terminations

#: Terminations an episode may end with that are not a failure of its own (the conversation
#: ended as it should); every other scored reason is tested as evidence of damage.
NORMAL_ENDINGS = ("user_stop", "agent_stop")


@dataclass
class TerminationFigures:
    """One termination reason of the report's ``termination_tests``: episodes per side, the
    ratio of its rate per episode and its increase, and the damage test."""

    arm_count: int
    reference_count: int
    ratio: float | None = None
    ratio_ci: list[float | None] | None = None
    increase: float | None = None
    increase_upper: float | None = None
    p: float | None = None
    p_holm: float | None = None


@dataclass
class TerminationsClaim:
    figures: dict[str, TerminationFigures] = field(default_factory=dict)
    evidence: list[ChannelEvidence] = field(default_factory=list)
    tests: list[tuple[str, float]] = field(default_factory=list)


def termination_claims(a: ArmData, r: ArmData, p: Pairing, cfg: AnalysisConfig
                       ) -> TerminationsClaim:
    """Each termination reason other than a normal ending, as a rate per episode (strata:
    the paired episodes, tasks as clusters): in Holm's family when the candidate has one,
    damage when its ratio is above ``max_ratio`` and its increase above
    ``termination_tolerance`` (the channels' rule, per episode). A spike of ``agent_error``
    or ``max_steps`` at a flat score is MASKED_DAMAGE; terminations never hold LOSSLESS back
    (the score and the channels decide it)."""
    out = TerminationsClaim()
    if a.termination_of is None or r.termination_of is None or not p.paired:
        return out
    ta, tr = a.termination_of[p.ia], r.termination_of[p.ir]
    labels = a.task_ids[p.ia].astype(str)
    ones = np.ones(p.n)
    for reason in sorted((set(ta) | set(tr)) - set(NORMAL_ENDINGS)):
        ya, yr = (ta == reason).astype(float), (tr == reason).astype(float)
        fig = TerminationFigures(int(ya.sum()), int(yr.sum()))
        rr = channel_ratio(ya, ones, yr, ones, clusters=labels, paired=True,
                           max_ratio=cfg.max_ratio, tolerance=cfg.termination_tolerance,
                           alpha=cfg.alpha, confidence=cfg.confidence)
        fig.ratio, fig.ratio_ci = fnum(rr.ratio), [fnum(rr.ci.low), fnum(rr.ci.high)]
        fig.increase, fig.increase_upper = fnum(rr.increase), fnum(rr.increase_upper)
        if fig.arm_count > 0:
            fig.p = fnum(rr.damage_p)
            out.tests.append((f"termination:{reason}", rr.damage_p))
            out.evidence.append(ChannelEvidence(
                f"termination:{reason}", fig.arm_count, fig.reference_count, fnum(rr.ratio),
                rr.upper, None, rr.increase_upper, testable=True, p=rr.damage_p,
                ratio_p=rr.amplified_p, increase_p=rr.increase_p, increase=rr.increase))
        out.figures[reason] = fig
    return out


# --------------------------------------------------------------------------- answers

#: The answer-level rates per agent turn (the channels' rule, part of LOSSLESS when recorded).
ANSWER_RATES: dict[str, str] = {"empty_answer": "empty", "length_cut": "length_cut"}
#: The answer lengths (a ratio of means per agent turn, damage only).
ANSWER_LENGTHS: tuple[str, ...] = ("output_tokens", "reasoning")
@dataclass
class AnswerFigures:
    """One entry of the report's ``answer_tests``: both sides' totals over the paired
    episodes that recorded it, per agent turn, the ratio and (rates) the increase per turn,
    the damage test and (rates) whether it is shown outside its damage region."""

    kind: str
    """``rate`` (per agent turn, the channels' rule) or ``length`` (ratio of means)."""
    unit: str
    """What is counted: ``turns``, ``tokens`` or ``characters``."""
    episodes: int
    """Paired episodes in the comparison (those that recorded it on both sides)."""
    arm_total: float
    reference_total: float
    arm_turns: int
    reference_turns: int
    arm_per_turn: float | None = None
    reference_per_turn: float | None = None
    ratio: float | None = None
    ratio_ci: list[float | None] | None = None
    ratio_upper: float | None = None
    threshold: float | None = None
    """The ratio above which it is damage (``max_ratio``, or ``length_ratio`` for lengths)."""
    increase: float | None = None
    increase_upper: float | None = None
    p: float | None = None
    p_holm: float | None = None
    shown_outside: bool | None = None


@dataclass
class AnswersClaim:
    figures: dict[str, AnswerFigures] = field(default_factory=dict)
    rates: list[ChannelEvidence] = field(default_factory=list)
    lengths: list[ChannelEvidence] = field(default_factory=list)
    tests: list[Test] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _answer_pairs(a: ArmData, r: ArmData, p: Pairing, column: str
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Over the paired episodes that recorded ``column`` on both sides and had a model turn:
    (arm values, arm turns, reference values, reference turns, task labels)."""
    assert a.answers is not None and r.answers is not None
    c, t = ANSWER_INDEX[column], ANSWER_INDEX["turns"]
    xa, xr = a.answers[p.ia], r.answers[p.ir]
    keep = (np.isfinite(xa[:, c]) & np.isfinite(xr[:, c]) & np.isfinite(xa[:, t])
            & np.isfinite(xr[:, t]) & (xa[:, t] > 0) & (xr[:, t] > 0))
    return (xa[keep, c], xa[keep, t], xr[keep, c], xr[keep, t],
            a.task_ids[p.ia][keep].astype(str))


def _answer_test(name: str, kind: str, unit: str, ya: np.ndarray, na: np.ndarray,
                 yr: np.ndarray, nr: np.ndarray, labels: np.ndarray, threshold: float,
                 tolerance: float, cfg: AnalysisConfig, out: AnswersClaim) -> None:
    fig = AnswerFigures(kind, unit, int(ya.size), float(ya.sum()), float(yr.sum()),
                        int(na.sum()), int(nr.sum()), threshold=threshold)
    fig.arm_per_turn = fnum(ya.sum() / na.sum())
    fig.reference_per_turn = fnum(yr.sum() / nr.sum())
    out.figures[name] = fig
    if ya.size < 2:
        return
    rr = channel_ratio(ya, na, yr, nr, clusters=labels, paired=True, max_ratio=threshold,
                       tolerance=tolerance, alpha=cfg.alpha, confidence=cfg.confidence)
    fig.ratio, fig.ratio_ci = fnum(rr.ratio), [fnum(rr.ci.low), fnum(rr.ci.high)]
    fig.ratio_upper = fnum(rr.upper)
    # a length's damage region is its ratio alone; a rate's, ratio and increase per turn
    damage_p = rr.amplified_p if kind == "length" else rr.damage_p
    ev = ChannelEvidence(f"answer:{name}", int(ya.sum().round()), int(yr.sum().round()),
                         fnum(rr.ratio), rr.upper, None,
                         rr.increase_upper if kind == "rate" else None, testable=True,
                         ratio_p=rr.amplified_p, arm_mean=fig.arm_per_turn,
                         reference_mean=fig.reference_per_turn)
    if kind == "rate":
        fig.increase, fig.increase_upper = fnum(rr.increase), fnum(rr.increase_upper)
        ev.increase, ev.increase_p = rr.increase, rr.increase_p
        fig.shown_outside = bool(rr.upper < threshold or rr.increase_upper < tolerance)
    if ya.sum() > 0:
        fig.p = ev.p = fnum(damage_p)
        out.tests.append((ev.name, damage_p))
    (out.rates if kind == "rate" else out.lengths).append(ev)


def answer_claims(a: ArmData, r: ArmData, p: Pairing, cfg: AnalysisConfig) -> AnswersClaim:
    """The answers per agent model turn over the paired episodes that recorded them:

    - ``empty_answer``, ``length_cut``: rates per turn with the channels' rule (damage: ratio
      above ``max_ratio`` **and** increase above ``answer_tolerance`` per turn; LOSSLESS needs
      them shown outside it), in Holm's family when the candidate has one;
    - ``output_tokens``, ``reasoning`` (tokens where the server reports them on both sides,
      else characters of reasoning text): the ratio of mean length per turn, damage when
      shown above ``length_ratio`` (in Holm's family; never needed for LOSSLESS).

    Strata: the paired episodes, tasks as clusters (as the channels). Episodes whose
    records do not say (schema-1 records, a backend without usage) are left out and counted
    in a note; a cell where no pair says has no answer tests (and no note: the report's
    ``answer_tests`` is null)."""
    out = AnswersClaim()
    if a.answers is None or r.answers is None or not p.paired:
        return out
    known = int((np.isfinite(a.answers[p.ia, 0]) & np.isfinite(r.answers[p.ir, 0])).sum())
    if known == 0:  # records before schema 2: nothing to compare (answer_tests is null)
        return out
    if known < p.n:
        out.notes.append(f"answer-level figures recorded for {known} of {p.n} paired episodes "
                         "(the others' records predate them): compared on those")
    for name, column in ANSWER_RATES.items():
        ya, na, yr, nr, lab = _answer_pairs(a, r, p, column)
        if ya.size:
            _answer_test(name, "rate", "turns", ya, na, yr, nr, lab, cfg.max_ratio,
                         cfg.answer_tolerance, cfg, out)
    ya, na, yr, nr, lab = _answer_pairs(a, r, p, "output_tokens")
    if ya.size:
        _answer_test("output_tokens", "length", "tokens", ya, na, yr, nr, lab,
                     cfg.length_ratio, 0.0, cfg, out)
    ya, na, yr, nr, lab = _answer_pairs(a, r, p, "reasoning_tokens")
    unit = "tokens"
    if not (ya.sum() > 0 and yr.sum() > 0):
        ya, na, yr, nr, lab = _answer_pairs(a, r, p, "reasoning_chars")
        unit = "characters"
    if ya.size and ya.sum() > 0 and yr.sum() > 0:
        _answer_test("reasoning", "length", unit, ya, na, yr, nr, lab, cfg.length_ratio, 0.0,
                     cfg, out)
    return out


_MALFORMED = CHANNEL_INDEX[Channel.MALFORMED_CALL]


def without_empty_turns(a: ArmData, r: ArmData) -> tuple[ArmData, ArmData, list[str]]:
    """The arms with each empty answer taken out of ``malformed_call`` and of the agent's
    tool calls: the engine answers an empty turn with a ``malformed_call`` error (it counts
    in the error budget), but it is not a call, and :func:`answer_claims` judges it as an
    empty answer, so it is counted in one test only. Done only when every episode of both
    arms recorded its turns (otherwise the arms would count it differently); a note says
    so when empty answers stay in ``malformed_call``."""
    from dataclasses import replace

    def known(d: ArmData) -> bool:
        return d.answers is not None and bool(np.isfinite(d.answers[:, 0]).all())

    def empties(d: ArmData) -> int:
        if d.answers is None:
            return 0
        col = d.answers[:, ANSWER_INDEX["empty"]]
        return int(np.nansum(col))

    if not (empties(a) or empties(r)):
        return a, r, []
    if not (known(a) and known(r)):
        return a, r, ["empty answers are counted in malformed_call too: some episodes did "
                      "not record their turns, so the arms cannot be counted alike"]

    def take_out(d: ArmData) -> ArmData:
        assert d.answers is not None and d.agent_calls is not None
        e = d.answers[:, ANSWER_INDEX["empty"]].astype(np.int64)
        counts = d.channel_counts.copy()
        counts[:, _MALFORMED] = np.maximum(counts[:, _MALFORMED] - e, 0)
        return replace(d, channel_counts=counts,
                       agent_calls=np.maximum(d.agent_calls - e, 0))

    return take_out(a), take_out(r), []


# --------------------------------------------------------------------------- failure sets, margins


@dataclass
class FailureSetFigures:
    """One entry of the report's ``failure_set``."""

    spearman: float | None
    kendall: float | None
    novel_share: float | None
    n_names: int
    arm_total: int
    reference_total: int
    top_arm: list[tuple[str, int]] = field(default_factory=list)
    top_reference: list[tuple[str, int]] = field(default_factory=list)
    p_changed: float | None = None
    judgement: str | None = None
    judgement_reason: str | None = None


def failure_set_claims(a: ArmData, r: ArmData, cfg: AnalysisConfig
                       ) -> dict[str, FailureSetFigures]:
    """Per named channel with failures: whether the candidate fails with other names."""
    out: dict[str, FailureSetFigures] = {}
    for ch in NAMED_CHANNELS:
        pa: dict[str, int] = dict(a.names.get(ch, {}))
        pr: dict[str, int] = dict(r.names.get(ch, {}))
        if not pa and not pr:
            continue
        fs = failure_set_agreement(pa, pr)
        p_changed = failure_set_change_pvalue(pa, pr)
        judgement, why = judge_failure_set(fnum(fs.spearman), p_changed, fs.arm_total,
                                           fs.reference_total, alpha=cfg.alpha)
        out[ch.value] = FailureSetFigures(
            spearman=fnum(fs.spearman), kendall=fnum(fs.kendall),
            novel_share=fnum(fs.novel_share), n_names=fs.n_names, arm_total=fs.arm_total,
            reference_total=fs.reference_total,
            top_arm=sorted(pa.items(), key=lambda kv: (-kv[1], kv[0]))[:5],
            top_reference=sorted(pr.items(), key=lambda kv: (-kv[1], kv[0]))[:5],
            p_changed=p_changed, judgement=judgement, judgement_reason=why,
        )
    return out


def margins_claim(a: ArmData, r: ArmData, p: Pairing, cfg: AnalysisConfig
                  ) -> dict[str, Any] | None:
    """Decision-margin histograms per arm and flip rates by margin over paired episodes."""
    if not (a.margins.size or r.margins.size):
        return None
    keys = a.keys()
    pairs = [
        (r.decisions[k][0], r.decisions[k][1], a.decisions[k][0])
        for k in (keys[i] for i in p.ia.tolist())
        if k in a.decisions and k in r.decisions
    ]
    fr = flip_rates(pairs, cfg.margin_bins)
    return {
        "bins": list(cfg.margin_bins),
        "arm": margin_histogram(a.margins, cfg.margin_bins),
        "reference": margin_histogram(r.margins, cfg.margin_bins),
        "flip_n": list(fr.n), "flip_rate": fr.rates, "paired_episodes": len(pairs),
    }


# --------------------------------------------------------------------------- the user side


def _user_side(d: ArmData) -> dict[str, Any]:
    assert d.user_calls is not None and d.user_failed is not None
    k = int(d.user_failed.sum())
    out: dict[str, Any] = {
        "calls": int(d.user_calls.sum()), "failures": k,
        "failures_per_episode": fnum(k / d.n) if d.n else None,
        "by_channel": dict(sorted(d.user_failures.items())),
    }
    if d.user_event_counts:
        out["events"] = d.user_events
    return out


@dataclass
class UserClaim:
    fields: dict[str, Any]
    """``user_sim``, ``user_failures``, ``user_side`` of the report's cell."""
    notes: list[str] = field(default_factory=list)
    differs: list[str] = field(default_factory=list)
    """Differences through the simulated user shown beyond chance (the verdict claims no
    damage from them)."""


USER_EVENT_TEXT = {
    "not_understood": "not-understood turns",
    "unrequested_change": "unrequested state changes by the user",
    "premature_transfer": "premature transfers by the user",
}


def user_event_difference(arm: np.ndarray, reference: np.ndarray, labels: np.ndarray
                          ) -> float:
    """Two-sided p that paired episodes differ in one kind of user event: the task-clustered
    paired t on per-task sums of (arm − reference) counts, the exact sign test on the
    discordant tasks when fewer than 10 tasks differ."""
    d = arm.astype(float) - reference.astype(float)
    _, inv = np.unique(labels, return_inverse=True)
    per_task = np.bincount(inv, weights=d)
    nz = per_task[per_task != 0]
    if nz.size == 0:
        return 1.0
    if nz.size < 10:
        return float(_st.binomtest(int((nz > 0).sum()), int(nz.size), 0.5).pvalue)
    g = per_task.size
    se = float(per_task.std(ddof=1)) / np.sqrt(g)
    if se == 0:
        return 0.0
    return float(2 * _st.t.sf(abs(float(per_task.mean()) / se), g - 1))


def user_claim(a: ArmData, r: ArmData | None, p: Pairing | None,
               cfg: AnalysisConfig) -> UserClaim:
    """The user simulator's side per arm, and the user-event differences beyond chance."""
    sims = sorted(a.user_sims | (r.user_sims if r is not None else set()))
    failures = None
    if a.user_failures or (r is not None and r.user_failures):
        failures = {"arm": dict(sorted(a.user_failures.items())),
                    "reference": dict(sorted(r.user_failures.items())) if r is not None else None}
    ua = _user_side(a)
    ur = _user_side(r) if r is not None else None
    side = {"arm": ua, "reference": ur}
    out = UserClaim({"user_sim": ", ".join(sims) if sims else None, "user_failures": failures,
                     "user_side": side})
    if ur is not None and ua["failures"] != ur["failures"]:
        out.notes.append(
            f"user-side failed calls differ: arm {ua['failures']} "
            f"({ua['failures_per_episode']:.2f}/episode) vs reference {ur['failures']} "
            f"({ur['failures_per_episode']:.2f}/episode); they are the simulator's, counted in "
            "the error budget but in no agent channel")
    if r is None or p is None or not p.paired or a.user_sims != r.user_sims:
        return out
    ea, er = a.user_event_counts, r.user_event_counts
    zero_a, zero_r = np.zeros(a.n, dtype=np.int64), np.zeros(r.n, dtype=np.int64)
    labels = a.task_ids[p.ia].astype(str)
    for kind, text in USER_EVENT_TEXT.items():
        if kind not in ea and kind not in er:
            continue
        pa, pr = ea.get(kind, zero_a)[p.ia], er.get(kind, zero_r)[p.ir]
        if int(pa.sum()) == int(pr.sum()) == 0:
            continue
        pv = user_event_difference(pa, pr, labels)
        if pv < cfg.alpha:
            out.differs.append(f"{int(pa.sum())} vs {int(pr.sum())} {text} (p={pv:.2g})")
    return out

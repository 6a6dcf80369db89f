"""Assertions over a quant cell, for use in tests.

Each assertion returns a small result object when it passes and raises ``AssertionError``
when it fails, with the figures, their confidence intervals, the verdict and the next step
in the message. Score assertions compute paired statistics directly from the cell's episode
records (same task, trial and seed in both arms; clusters = tasks); channel and failure-set
assertions read the cell's analysis (the report JSON entry of the cell, analyzed on its own,
so Holm's correction runs over that cell's tests only — the run's report applies it across
every cell).

Example::

    from pytest_quantagent.assertions import assert_score_equivalent

    @pytest.mark.error_budget(2)
    def test_tight_budget(quant_cell):
        assert_score_equivalent(quant_cell, margin=0.075)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_quantagent.errors import UnknownNameError
from pytest_quantagent.metrics.failure_sets import (
    DEFAULT_MIN_FAILURES,
    DEFAULT_MIN_RANK_CORR,
    judge_failure_set,
)
from pytest_quantagent.vocab.channels import ALL_CHANNELS, NAMED_CHANNELS

if TYPE_CHECKING:
    from pytest_quantagent.session import QuantCell
    from pytest_quantagent.stats.results import DiffResult, TostResult
    from pytest_quantagent.store.records import EpisodeRecord

__all__ = [
    "BudgetRobustness",
    "ScoreEquivalence",
    "assert_budget_robust",
    "assert_failure_set_invariant",
    "assert_no_channel_amplification",
    "assert_score_equivalent",
    "paired_successes",
]

_CHANNEL_NAMES: tuple[str, ...] = tuple(c.value for c in ALL_CHANNELS)


@dataclass(frozen=True)
class PairedSuccess:
    """Success at one budget of each paired episode (only pairs scored in both arms)."""

    arm: list[float]
    reference: list[float]
    clusters: list[str]
    """Task id of each pair: trials of one task are not independent."""
    unpaired: int
    """Episodes left out: no partner in the other arm, or an infrastructure failure."""

    @property
    def n(self) -> int:
        return len(self.arm)


def paired_successes(
    arm: Sequence[EpisodeRecord], reference: Sequence[EpisodeRecord], budget: int
) -> PairedSuccess:
    """Pair episodes on (task, trial) and read success at ``budget`` in each arm."""
    ref_by_key = {(r.task_id, r.trial): r for r in reference if r.scored}
    a_vals: list[float] = []
    r_vals: list[float] = []
    clusters: list[str] = []
    for rec in sorted(arm, key=lambda r: (r.task_id, r.trial)):
        ref = ref_by_key.get((rec.task_id, rec.trial))
        if ref is None or not rec.scored:
            continue
        a_vals.append(float(rec.success_at_budget(budget)))
        r_vals.append(float(ref.success_at_budget(budget)))
        clusters.append(rec.task_id)
    unpaired = len(arm) + len(reference) - 2 * len(a_vals)
    return PairedSuccess(a_vals, r_vals, clusters, unpaired)


def _check_fraction(name: str, value: object, low: float = 0.0, high: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
        math.isfinite(value) and low < value < high
    ):
        raise ValueError(f"{name}={value!r} is not allowed; {name} must be a number in ({low}, {high})")
    return float(value)


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def _ci(lo: float, hi: float) -> str:
    return f"[{100 * lo:+.1f}, {100 * hi:+.1f}] pts"


@dataclass(frozen=True)
class ScoreEquivalence:
    """Outcome of :func:`assert_score_equivalent`."""

    cell: str
    budget: int
    n_pairs: int
    arm_success: float
    reference_success: float
    tost: TostResult
    diff: DiffResult
    """Paired difference with its ``1 - 2 alpha`` CI (the interval TOST compares to ±margin)."""
    verdict: str
    """``EQUIVALENT``, ``DEGRADED``, ``NOT_EQUIVALENT`` or ``INCONCLUSIVE``."""
    message: str


def _need_pairs(cell: QuantCell, paired: PairedSuccess) -> None:
    if paired.n < 2:
        raise AssertionError(
            f"{cell.id}: INCONCLUSIVE: only {paired.n} paired episode(s) of {cell.arm} vs "
            f"{cell.reference} (both arms scored on the same task and trial); run more tasks "
            "(--quant-tasks) or trials (--quant-trials)"
        )


def score_equivalence(
    cell: QuantCell, margin: float = 0.075, alpha: float = 0.05, power: float = 0.8
) -> ScoreEquivalence:
    """Paired TOST of the cell's success at ``cell.budget`` within ``±margin`` (no raise).

    An INCONCLUSIVE message names the ``--quant-trials`` that reach ``power`` if the arms
    are truly equal: the same plan as the report's verdict
    (:func:`~pytest_quantagent.stats.power.trials_for_equivalence`)."""
    import statistics

    from pytest_quantagent.stats import paired_difference, paired_tost, trials_for_equivalence

    margin = _check_fraction("margin", margin)
    alpha = _check_fraction("alpha", alpha, 0.0, 0.5)
    power = _check_fraction("power", power)
    paired = paired_successes(cell.episodes, cell.reference_episodes, cell.budget)
    _need_pairs(cell, paired)
    tost = paired_tost(paired.arm, paired.reference, margin=margin, alpha=alpha,
                       clusters=paired.clusters)
    # TOST at level alpha rejects exactly when the 1 - 2*alpha CI lies inside ±margin.
    diff = paired_difference(paired.arm, paired.reference, clusters=paired.clusters,
                             confidence=1 - 2 * alpha)
    a = sum(paired.arm) / paired.n
    r = sum(paired.reference) / paired.n
    conf = f"{100 * (1 - 2 * alpha):.0f}% CI"
    head = (
        f"{cell.id} at error budget K={cell.budget}: success {a:.1%} ({cell.arm}) vs {r:.1%} "
        f"({cell.reference}) over {paired.n} paired episodes; diff {_pts(diff.diff)} pts, "
        f"{conf} {_ci(diff.ci.low, diff.ci.high)}, margin ±{100 * margin:.1f} pts, "
        f"TOST p={tost.pvalue:.3g}"
    )
    half = (diff.ci.high - diff.ci.low) / 2
    if tost.pvalue < alpha:
        verdict, step = "EQUIVALENT", ""
    elif diff.ci.high < 0:
        verdict = "DEGRADED"
        step = (f"DEGRADED: {cell.arm} scores significantly lower than {cell.reference}; "
                "look at the channel rates (assert_no_channel_amplification) and the report")
    elif diff.ci.low > 0 and diff.diff > margin:
        verdict = "NOT_EQUIVALENT"
        step = (f"NOT_EQUIVALENT: {cell.arm} scores higher than {cell.reference} beyond the "
                "margin; check that both arms ran the same tasks and prompts")
    else:
        verdict = "INCONCLUSIVE"
        sd = statistics.stdev(x - y for x, y in zip(paired.arm, paired.reference, strict=True))
        plan, t = trials_for_equivalence(sd, len(set(paired.clusters)), margin=margin,
                                         alpha=alpha, power=power)
        step = (f"INCONCLUSIVE: {paired.n} paired episodes give ±{100 * half:.1f} points; "
                f"about {plan.n_pairs} are needed for {power:.0%} power if the arms are equal: "
                f"run with --quant-trials {t}")
        if abs(diff.diff) >= margin:
            step += (f" (the estimate {_pts(diff.diff)} is itself outside ±{100 * margin:.1f}, "
                     "so more episodes may instead show a difference)")
    message = head if not step else f"{step}\n{head}"
    return ScoreEquivalence(cell.id, cell.budget, paired.n, a, r, tost, diff, verdict, message)


def assert_score_equivalent(
    cell: QuantCell, margin: float = 0.075, alpha: float = 0.05, power: float = 0.8
) -> ScoreEquivalence:
    """Assert that the candidate's success equals the reference's within ``±margin``.

    Paired TOST (H0: ``diff <= -margin`` or ``diff >= margin``) on success at the cell's
    budget (``@pytest.mark.error_budget(K)``, else the run's), clustered by task. Passes when
    equivalence is shown at level ``alpha``; the failure message gives the verdict
    (DEGRADED, NOT_EQUIVALENT, INCONCLUSIVE with the trials needed for ``power``, planned as
    the report plans them).
    """
    __tracebackhide__ = True
    result = score_equivalence(cell, margin, alpha, power)
    if result.verdict != "EQUIVALENT":
        raise AssertionError(result.message)
    return result


def _channel_list(channel: str | Iterable[str] | None) -> list[str]:
    if channel is None:
        return list(_CHANNEL_NAMES)
    names = [channel] if isinstance(channel, str) else list(channel)
    for n in names:
        if n not in _CHANNEL_NAMES:
            raise UnknownNameError("channel", n, _CHANNEL_NAMES)
    return names


def _fmt_p(p: Any) -> str:
    return "n/a" if p is None else f"{p:.2g}"


def _fmt_ratio(x: Any) -> str:
    return "∞" if x is None else f"{x:.2f}"


def assert_no_channel_amplification(
    cell: QuantCell,
    channel: str | Iterable[str] | None = "unknown_tool",
    max_ratio: float = 1.2,
    alpha: float = 0.05,
) -> dict[str, dict[str, Any]]:
    """Assert that no failure channel is amplified in the candidate arm.

    A channel is amplified when its rate per tool call in the candidate is above
    ``max_ratio`` times the reference's and the rate ratio differs from 1 significantly after
    Holm's correction (``p_holm < alpha``). ``channel`` is one channel name, several, or None
    for every channel. Fails naming every amplified channel with both rates, the ratio and
    its CI; returns the checked channels' report entries when it passes.
    """
    __tracebackhide__ = True
    names = _channel_list(channel)
    if isinstance(max_ratio, bool) or not isinstance(max_ratio, (int, float)) or not (
        math.isfinite(max_ratio) and max_ratio > 0
    ):
        raise ValueError(f"max_ratio={max_ratio!r} is not allowed; max_ratio must be a number > 0")
    alpha = _check_fraction("alpha", alpha, 0.0, 0.5)
    analysis = cell.analysis()
    channels: dict[str, dict[str, Any]] = analysis["channels"]
    amplified: list[str] = []
    for name in names:
        ch = channels[name]
        ratio = ch.get("ratio")
        p = ch.get("p_holm")
        # None ratio with candidate failures means the reference had none (ratio ∞).
        above = (ratio is None and ch["arm_count"] > 0) or (ratio is not None and ratio > max_ratio)
        if above and p is not None and p < alpha:
            ci = ch.get("ratio_ci") or [None, None]
            amplified.append(
                f"  {name}: {ch['arm_rate']:.1%} of {cell.arm} tool calls vs "
                f"{ch['reference_rate']:.1%} of {cell.reference} ({ch['arm_count']} vs "
                f"{ch['reference_count']}), ratio ×{_fmt_ratio(ratio)} (95% CI "
                f"{_fmt_ratio(ci[0])}–{_fmt_ratio(ci[1])}), Holm p={_fmt_p(p)}"
            )
    if amplified:
        success = analysis.get("success", {})
        flat = ""
        if success.get("tost_p") is not None and success["tost_p"] < alpha:
            flat = " while the final score is equivalent (MASKED_DAMAGE)"
        raise AssertionError(
            f"{cell.id}: {len(amplified)} channel(s) amplified above ×{max_ratio:g}{flat}:\n"
            + "\n".join(amplified)
            + f"\ncell verdict: {analysis.get('verdict', 'n/a')} (Holm over this cell's tests; the "
            "run's report corrects across every cell). Next: inspect these calls in the "
            "HTML report (--quant-html), try --quant-repair=reflexive, or a less lossy "
            "quantization recipe"
        )
    return {n: channels[n] for n in names}


@dataclass(frozen=True)
class BudgetRobustness:
    """Outcome of :func:`assert_budget_robust`: per budget K, the paired difference."""

    cell: str
    budgets: tuple[int, ...]
    diffs: tuple[DiffResult, ...]
    pvalues_holm: tuple[float, ...]
    arm_success: tuple[float, ...]
    reference_success: tuple[float, ...]


def assert_budget_robust(
    cell: QuantCell, budgets: Sequence[int] = (2, 5, 10), alpha: float = 0.05
) -> BudgetRobustness:
    """Assert that the candidate is not significantly worse at any of the error ``budgets``.

    For each K, success at K is recomputed from the stored trajectories (success and fewer
    than K failed tool calls) in both arms and compared with a paired, task-clustered t-test;
    p-values are Holm-adjusted across the budgets. Fails listing every K where the candidate
    is significantly worse, with the gap and its CI (the "gap widens under tight budgets"
    sign of masked damage). Budgets above the run's ``--error-budget`` are an error.
    """
    __tracebackhide__ = True
    from pytest_quantagent.stats import holm, paired_difference

    ks = list(budgets)
    if not ks:
        raise ValueError("budgets is empty; give budgets such as (2, 5, 10)")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= cell.run_budget:
            raise ValueError(
                f"budget {k!r} in budgets={tuple(budgets)!r} is not allowed; budgets must be "
                f"integers from 0 to the run's error budget {cell.run_budget} "
                "(raise --error-budget to judge larger ones)"
            )
    alpha = _check_fraction("alpha", alpha, 0.0, 0.5)
    diffs: list[DiffResult] = []
    a_s: list[float] = []
    r_s: list[float] = []
    for k in ks:
        paired = paired_successes(cell.episodes, cell.reference_episodes, k)
        _need_pairs(cell, paired)
        diffs.append(paired_difference(paired.arm, paired.reference, clusters=paired.clusters))
        a_s.append(sum(paired.arm) / paired.n)
        r_s.append(sum(paired.reference) / paired.n)
    adj = holm([d.pvalue for d in diffs], alpha=alpha)
    worse = [
        f"  K={k}: {a:.1%} vs {r:.1%}, diff {_pts(d.diff)} pts, 95% CI "
        f"{_ci(d.ci.low, d.ci.high)}, Holm p={p:.2g}"
        for k, d, p, a, r in zip(ks, diffs, adj.pvalues_adjusted, a_s, r_s, strict=True)
        if d.diff < 0 and p < alpha
    ]
    result = BudgetRobustness(cell.id, tuple(ks), tuple(diffs), tuple(adj.pvalues_adjusted),
                              tuple(a_s), tuple(r_s))
    if worse:
        raise AssertionError(
            f"{cell.id}: {cell.arm} is significantly worse than {cell.reference} at "
            f"{len(worse)} of {len(ks)} error budgets:\n" + "\n".join(worse)
            + "\nA gap that widens as K shrinks means extra failed tool calls are being absorbed "
            "by the error budget (MASKED_DAMAGE). Next: assert_no_channel_amplification(cell, "
            "channel=None) names the channel"
        )
    return result


def assert_failure_set_invariant(
    cell: QuantCell,
    min_rank_corr: float = DEFAULT_MIN_RANK_CORR,
    channel: str | Iterable[str] | None = None,
    min_failures: int = DEFAULT_MIN_FAILURES,
    alpha: float = 0.05,
) -> dict[str, dict[str, Any]]:
    """Assert that the candidate fails in the same ways as the reference, on evidence.

    For each named channel (``unknown_tool``, ``cross_role_tool``, ``wrong_entity``, or the
    ones given) with at least ``min_failures`` failures in each arm, the channel fails the
    assertion when the Spearman rank correlation of the two arms' per-name failure counts is
    below ``min_rank_corr`` **and** a one-sided permutation test says it is lower than the
    same failures dealt to the arms at random would give (``p_changed < alpha``; see
    :func:`pytest_quantagent.metrics.failure_sets.failure_set_change_pvalue`). A low rank
    correlation over a few dozen failures is common by chance alone, so it is not evidence.

    The report's cell carries the same judgement at the defaults (``failure_set.<channel>.
    judgement``: ``same``, ``changed`` or ``cannot judge``). When no channel can be judged,
    the test is *skipped* with "cannot judge: ..." and the failure counts. Returns the
    channels it judged (their report entries).
    """
    __tracebackhide__ = True
    import pytest

    if isinstance(min_rank_corr, bool) or not isinstance(min_rank_corr, (int, float)) or not (
        -1.0 <= min_rank_corr <= 1.0
    ):
        raise ValueError(
            f"min_rank_corr={min_rank_corr!r} is not allowed; it must be a number from -1 to 1"
        )
    if isinstance(min_failures, bool) or not isinstance(min_failures, int) or min_failures < 1:
        raise ValueError(
            f"min_failures={min_failures!r} is not allowed; it must be an integer >= 1"
        )
    alpha = _check_fraction("alpha", alpha, 0.0, 0.5)
    names = [c.value for c in NAMED_CHANNELS] if channel is None else _channel_list(channel)
    fs: dict[str, dict[str, Any]] = cell.analysis().get("failure_set", {})
    changed: list[str] = []
    unjudged: list[str] = []
    checked: dict[str, dict[str, Any]] = {}
    for name in names:
        entry = fs.get(name) or {}
        a_n, r_n = entry.get("arm_total") or 0, entry.get("reference_total") or 0
        verdict, why = judge_failure_set(
            entry.get("spearman"), entry.get("p_changed"), a_n, r_n,
            min_rank_corr=float(min_rank_corr), min_failures=min_failures, alpha=alpha)
        if verdict == "cannot judge":
            unjudged.append(f"{name} {why}")
            continue
        checked[name] = entry
        if verdict == "changed":
            novel = entry.get("novel_share")
            changed.append(
                f"  {name}: Spearman {entry['spearman']:.2f} (Kendall "
                f"{_fmt_ratio(entry.get('kendall'))}) over {a_n} vs {r_n} failures, permutation "
                f"p={entry['p_changed']:.2g}, novel names "
                f"{'n/a' if novel is None else f'{novel:.1%}'} of {cell.arm}'s failures"
            )
    if changed:
        raise AssertionError(
            f"{cell.id}: the failure set changed (rank correlation below {min_rank_corr:g}, "
            f"significant at {alpha:g}):\n" + "\n".join(changed)
            + f"\n{cell.arm} fails in new ways, not just more often: compare the failing names "
            "in the HTML report (--quant-html)"
        )
    if not checked:
        pytest.skip(f"{cell.id}: cannot judge the failure set: " + "; ".join(unjudged)
                    + " (run more tasks or trials: --quant-tasks, --quant-trials)")
    return checked

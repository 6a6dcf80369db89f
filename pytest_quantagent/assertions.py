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
from typing import TYPE_CHECKING, Any, NoReturn

from pytest_quantagent.errors import UnknownNameError
from pytest_quantagent.metrics.failure_sets import (
    DEFAULT_MIN_FAILURES,
    DEFAULT_MIN_RANK_CORR,
    judge_failure_set,
)
from pytest_quantagent.verdict import shown_not_amplified
from pytest_quantagent.vocab.channels import ALL_CHANNELS, NAMED_CHANNELS

if TYPE_CHECKING:
    from pytest_quantagent.quant_cell import QuantCell
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


class AssertionArgumentError(ValueError):
    """A bad argument to an assertion: reported as one line (at collection when the call's
    value is written in the test, else by the failing test), never a traceback."""


def _check_fraction(name: str, value: object, low: float = 0.0, high: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
        math.isfinite(value) and low < value < high
    ):
        hint = ""
        if name == "margin" and isinstance(value, (int, float)) and not isinstance(value, bool) \
                and math.isfinite(value) and 1 <= value < 100:
            hint = (f"; did you mean margin={value / 100:g}? ({value:g} points: margins are "
                    "fractions of 1)")
        raise AssertionArgumentError(
            f"{name}={value!r} is not allowed; {name} must be a number in ({low}, {high}){hint}")
    return float(value)


def _check_max_ratio(max_ratio: object) -> float:
    if isinstance(max_ratio, bool) or not isinstance(max_ratio, (int, float)) or not (
        math.isfinite(max_ratio) and max_ratio >= 1
    ):
        raise AssertionArgumentError(
            f"max_ratio={max_ratio!r} is not allowed; max_ratio must be a number >= 1")
    return float(max_ratio)


def _check_budgets(budgets: Iterable[object], run_budget: int) -> list[int]:
    ks = list(budgets)
    if not ks:
        raise AssertionArgumentError("budgets is empty; give budgets such as (2, 5)")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= run_budget:
            raise AssertionArgumentError(
                f"budget {k!r} in budgets={tuple(ks)!r} is not allowed; budgets must be "
                f"integers from 1 to the run's error budget {run_budget} "
                "(raise --error-budget to judge larger ones)"
            )
    return [int(k) for k in ks]  # type: ignore[call-overload]


def _check_min_rank_corr(min_rank_corr: object) -> float:
    if isinstance(min_rank_corr, bool) or not isinstance(min_rank_corr, (int, float)) or not (
        -1.0 <= min_rank_corr <= 1.0
    ):
        raise AssertionArgumentError(
            f"min_rank_corr={min_rank_corr!r} is not allowed; it must be a number from -1 to 1"
        )
    return float(min_rank_corr)


def _check_min_failures(min_failures: object) -> int:
    if isinstance(min_failures, bool) or not isinstance(min_failures, int) or min_failures < 1:
        raise AssertionArgumentError(
            f"min_failures={min_failures!r} is not allowed; it must be an integer >= 1"
        )
    return min_failures


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


def _config(cell: QuantCell) -> Any:
    """The verdict's thresholds of the run (``--quant-margin`` etc.), or the defaults."""
    from pytest_quantagent.verdict import AnalysisConfig

    session = getattr(cell, "_session", None)
    per_cell = getattr(session, "cell_config", None)
    make = getattr(session, "analysis_config", None)
    key = getattr(cell, "key", None)
    if callable(per_cell) and key is not None:  # a run-until-decided cell: its look's alpha
        cfg = per_cell(key)
    else:
        cfg = make() if callable(make) else None
    return cfg if isinstance(cfg, AnalysisConfig) else AnalysisConfig()


def _cannot_judge(cell: QuantCell, message: str) -> NoReturn:
    """A test that cannot judge: a skip, or a failure under ``--quant-require=decision`` or
    ``lossless`` (a release gate that is green by skipping is no gate)."""
    import pytest

    session = getattr(cell, "_session", None)
    require = getattr(getattr(session, "qc", None), "require", "none")
    if require in ("decision", "lossless"):
        pytest.fail(f"{message} [--quant-require={require}: a test that cannot judge fails]",
                    pytrace=False)
    pytest.skip(message)


def _analysis(cell: QuantCell, cfg: Any) -> dict[str, Any]:
    """The cell's report entry under ``cfg`` (the session's cached one when ``cfg`` is the
    run's)."""
    if cfg == _config(cell):
        return cell.analysis()
    from pytest_quantagent.report.model import CellInput, analyze

    rep = analyze([CellInput(cell.domain, cell.arm, cell.episodes, cell.reference,
                             cell.reference_episodes)], cfg)
    out: dict[str, Any] = rep.model_dump(mode="json")["cells"][0]
    return out


def score_equivalence(
    cell: QuantCell, margin: float | None = None, alpha: float | None = None,
    power: float | None = None,
) -> ScoreEquivalence:
    """Paired TOST of the cell's success at ``cell.budget`` within ``±margin`` (no raise).

    The same statistics as the report's verdict: Tango's score interval for paired
    proportions (task-cluster robust with several trials), the one-sided harm test, and the
    design advice of :func:`~pytest_quantagent.analysis.plan.plan_score` (the score's
    claim, with the run's pool and trial rules).
    ``None`` thresholds come from the run (``--quant-margin``) or the defaults."""
    from pytest_quantagent.stats.clustered import paired_score
    from pytest_quantagent.stats.results import DiffResult, TostResult

    cfg = _config(cell)
    margin = _check_fraction("margin", cfg.margin if margin is None else margin)
    alpha = _check_fraction("alpha", cfg.alpha if alpha is None else alpha, 0.0, 0.5)
    power = _check_fraction("power", cfg.power if power is None else power)
    paired = paired_successes(cell.episodes, cell.reference_episodes, cell.budget)
    _need_pairs(cell, paired)
    sc = paired_score(paired.arm, paired.reference, clusters=paired.clusters, margin=margin,
                      alpha=alpha)
    tost = TostResult(sc.diff, -margin, margin, sc.tost_p, sc.noninferiority_p, sc.upper_p,
                      math.nan, sc.ci, sc.n_clusters, sc.method)
    diff = DiffResult(sc.diff, sc.ci, sc.harm_p, sc.n_pairs, sc.method)
    a = sum(paired.arm) / paired.n
    r = sum(paired.reference) / paired.n
    conf = f"{100 * (1 - 2 * alpha):.0f}% CI"
    head = (
        f"{cell.id} at error budget K={cell.budget}: success {a:.1%} ({cell.arm}) vs {r:.1%} "
        f"({cell.reference}) over {paired.n} paired episodes; diff {_pts(sc.diff)} pts, "
        f"{conf} {_ci(sc.ci.low, sc.ci.high)} ({sc.method}), margin ±{100 * margin:.1f} pts, "
        f"TOST p={sc.tost_p:.3g}"
    )
    if sc.tost_p < alpha:
        verdict, step = "EQUIVALENT", ""
    elif sc.inferiority_p < alpha:
        # the verdict's DEGRADED: a drop shown beyond the margin (issue 33), not below 0
        verdict = "DEGRADED"
        step = (f"DEGRADED: {cell.arm} scores significantly lower than {cell.reference} "
                f"(one-sided p={sc.inferiority_p:.2g} against a drop of at most "
                f"{100 * margin:.1f} pts); look at the channel rates "
                "(assert_no_channel_amplification) and the report")
    elif sc.ci.low > 0 and sc.diff > margin:
        verdict = "NOT_EQUIVALENT"
        step = (f"NOT_EQUIVALENT: {cell.arm} scores higher than {cell.reference} beyond the "
                "margin; check that both arms ran the same tasks and prompts")
    else:
        verdict = "INCONCLUSIVE"
        from dataclasses import replace

        from pytest_quantagent.analysis.arms import as_arm
        from pytest_quantagent.analysis.plan import plan_score, trials_useful

        pool_of = getattr(getattr(cell, "_session", None), "pool_tasks", None)
        useful = trials_useful(as_arm(cell.episodes, cell.domain, cell.arm),
                               as_arm(cell.reference_episodes, cell.domain, cell.reference))
        plan = plan_score([x - y for x, y in zip(paired.arm, paired.reference, strict=True)],
                          paired.clusters, pool_of(cell.domain) if callable(pool_of) else None,
                          replace(cfg, margin=margin, alpha=alpha, power=power,
                                  trials_flag="--quant-trials", tasks_flag="--quant-tasks"),
                          useful)
        half = (sc.ci.high - sc.ci.low) / 2
        step = (f"INCONCLUSIVE: {paired.n} paired episodes give ±{100 * half:.1f} points; for "
                f"{power:.0%} power if the arms are equal (the score alone; the report's "
                f"verdict sizes every claim): {plan.message}")
        if abs(sc.diff) >= margin:
            step += (f" (the estimate {_pts(sc.diff)} is itself outside ±{100 * margin:.1f}, "
                     "so more episodes may instead show a difference)")
    message = head if not step else f"{step}\n{head}"
    return ScoreEquivalence(cell.id, cell.budget, paired.n, a, r, tost, diff, verdict, message)


def assert_score_equivalent(
    cell: QuantCell, margin: float | None = None, alpha: float | None = None,
    power: float | None = None,
) -> ScoreEquivalence:
    """Assert that the candidate's success equals the reference's within ``±margin``.

    Paired TOST (H0: ``diff <= -margin`` or ``diff >= margin``) on success at the cell's
    budget (``@pytest.mark.error_budget(K)``, else the run's), clustered by task, with the
    report's method (Tango's score interval). Passes when equivalence is shown at level
    ``alpha``; the failure message gives the verdict (DEGRADED, NOT_EQUIVALENT,
    INCONCLUSIVE with the design that would decide, planned as the report plans it).
    ``None`` thresholds come from the run's options (``--quant-margin``) or the defaults.
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
            raise AssertionArgumentError(str(UnknownNameError("channel", n, _CHANNEL_NAMES)))
    return names


def _fmt_p(p: Any) -> str:
    return "n/a" if p is None else f"{p:.2g}"


def _fmt_ratio(x: Any) -> str:
    return "∞" if x is None else f"{x:.2f}"


def assert_no_channel_amplification(
    cell: QuantCell,
    channel: str | Iterable[str] | None = "unknown_tool",
    max_ratio: float | None = None,
    alpha: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Assert that no failure channel is amplified in the candidate arm.

    The report's test: per agent tool call, tasks as clusters, one-sided H0 "ratio ≤
    ``max_ratio``", Holm within the cell; a channel is amplified when that is rejected
    (``p_holm < alpha``). ``channel`` is one channel name, several, or None for every
    channel; ``None`` thresholds come from the run (``--quant-max-ratio``) or the defaults.
    Fails naming every amplified channel with both rates, the ratio and its CI; skips
    ("cannot judge") when a checked channel is neither amplified nor shown not amplified (its
    ratio's upper bound below ``max_ratio``, or its per-call rate increase's below the rare-
    channel tolerance: the verdict's LOSSLESS rule); returns the checked channels' report
    entries when every one is shown not amplified.
    """
    __tracebackhide__ = True
    from dataclasses import replace

    names = _channel_list(channel)
    cfg = _config(cell)
    if max_ratio is not None:
        cfg = replace(cfg, max_ratio=_check_max_ratio(max_ratio))
    if alpha is not None:
        cfg = replace(cfg, alpha=_check_fraction("alpha", alpha, 0.0, 0.5))
    analysis = _analysis(cell, cfg)
    channels: dict[str, dict[str, Any]] = analysis["channels"]
    amplified: list[str] = []
    for name in names:
        ch = channels[name]
        p = ch.get("p_holm")
        if p is not None and p < cfg.alpha:
            ci = ch.get("ratio_ci") or [None, None]
            amplified.append(
                f"  {name}: {ch['arm_rate']:.1%} of {cell.arm} agent tool calls vs "
                f"{ch['reference_rate']:.1%} of {cell.reference} ({ch['arm_count']} vs "
                f"{ch['reference_count']}), ratio ×{_fmt_ratio(ch.get('ratio'))} (95% CI "
                f"{_fmt_ratio(ci[0])}–{_fmt_ratio(ci[1])}), one-sided Holm p={_fmt_p(p)} "
                f"against ratio ≤ {cfg.max_ratio:g}"
            )
    if amplified:
        success = analysis.get("success", {})
        flat = ""
        if success.get("tost_p") is not None and success["tost_p"] < cfg.alpha:
            flat = " while the final score is equivalent (MASKED_DAMAGE)"
        raise AssertionError(
            f"{cell.id}: {len(amplified)} channel(s) amplified above ×{cfg.max_ratio:g}{flat}:\n"
            + "\n".join(amplified)
            + f"\ncell verdict: {analysis.get('verdict', 'n/a')} (Holm over this cell's tests). "
            "Next: inspect these calls in the HTML report (--quant-html), try "
            "--quant-repair=reflexive, or a less lossy quantization recipe"
        )
    # Not amplified is not the same as shown not amplified (the verdict's LOSSLESS rule): a
    # channel whose ratio bound and rate-increase bound both stay open cannot be judged, and
    # the test says so as a skip instead of passing on absence of evidence.
    open_: list[str] = []
    for name in names:
        ch = channels[name]
        up, inc = ch.get("ratio_upper"), ch.get("rate_increase_upper")
        if shown_not_amplified(up, inc, cfg):
            continue
        up_s = "inf" if up is None or not math.isfinite(up) else f"{up:.2g}"
        inc_s = "n/a" if inc is None else f"{inc * 100:.2g}"
        open_.append(f"{name} {ch['arm_count']} vs {ch['reference_count']} (ratio upper bound "
                     f"×{up_s}, rate increase up to {inc_s} per 100 agent calls)")
    if open_:
        _cannot_judge(
            cell,
            f"{cell.id}: cannot judge amplification: " + "; ".join(open_)
            + f" — neither above nor shown below ×{cfg.max_ratio:g} or within "
            f"+{cfg.rare_tolerance * 100:g} per 100 calls (run more tasks: --quant-tasks)")
    return {n: channels[n] for n in names}


@dataclass(frozen=True)
class BudgetRobustness:
    """Outcome of :func:`assert_budget_robust`: per tight budget K, the widening of the gap
    (candidate's lost successes − reference's, between the run's budget and K)."""

    cell: str
    budgets: tuple[int, ...]
    widening: tuple[float, ...]
    pvalues: tuple[float, ...]
    """One-sided p of H0 "the gap does not widen" per K."""
    pvalues_holm: tuple[float, ...]
    arm_success: tuple[float, ...]
    reference_success: tuple[float, ...]


def assert_budget_robust(
    cell: QuantCell, budgets: Sequence[int] | None = None, alpha: float | None = None
) -> BudgetRobustness:
    """Assert that the gap between the arms does not widen at the tight error ``budgets``.

    For each K below the run's budget, success at K is recomputed from the stored
    trajectories; the test is the report's: a paired one-sided test of gap(K) − gap(K_run)
    < 0 (the candidate loses more successes than the reference when the budget tightens),
    task-clustered, Holm across the budgets. A plain score drop (the same at every K) does
    not fail it; :func:`assert_score_equivalent` judges that. Budgets above the run's
    ``--error-budget`` are an error; ``None`` budgets are the run's ``--quant-tight-budgets``.
    """
    __tracebackhide__ = True
    from dataclasses import replace

    from pytest_quantagent.stats import holm

    cfg = _config(cell)
    if budgets is None:
        ks = list(cfg.tight_budgets) if cfg.tight_budgets is not None else \
            [k for k in (2, 5) if k < cell.run_budget]
    else:
        ks = _check_budgets(budgets, cell.run_budget)
    for k in ks:  # the run's own --quant-tight-budgets were checked against it already
        _check_budgets([k], cell.run_budget)
    if alpha is not None:
        cfg = replace(cfg, alpha=_check_fraction("alpha", alpha, 0.0, 0.5))
    ks = [k for k in ks if k < cell.run_budget]
    cfg = replace(cfg, tight_budgets=tuple(ks) or None)
    analysis = _analysis(cell, cfg) if ks else cell.analysis()
    b = analysis["budget"]
    wid = [float(b["widening"][str(k)]) for k in ks]
    raw = [float(b["widening_p"][str(k)]) for k in ks]
    adj = holm(raw, alpha=cfg.alpha).pvalues_adjusted if ks else ()
    a_s = [float(b["arm"][k]) for k in ks]
    r_s = [float(b["reference"][k]) for k in ks]
    worse = [
        f"  K={k}: {a:.1%} vs {r:.1%}; the gap widens by {100 * w:.1f} pts from K="
        f"{cell.run_budget} (one-sided Holm p={p:.2g})"
        for k, w, p, a, r in zip(ks, wid, adj, a_s, r_s, strict=True) if p < cfg.alpha
    ]
    result = BudgetRobustness(cell.id, tuple(ks), tuple(wid), tuple(raw), tuple(adj),
                              tuple(a_s), tuple(r_s))
    if worse:
        raise AssertionError(
            f"{cell.id}: the gap between {cell.arm} and {cell.reference} widens at "
            f"{len(worse)} of {len(ks)} tight error budgets:\n" + "\n".join(worse)
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

    _check_min_rank_corr(min_rank_corr)
    _check_min_failures(min_failures)
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
        _cannot_judge(cell, f"{cell.id}: cannot judge the failure set: " + "; ".join(unjudged)
                      + " (run more tasks or trials: --quant-tasks, --quant-trials)")
    return checked


# --------------------------------------------------------------------------- static check

#: Each checked parameter → its check (value, the run's error budget); the same checks the
#: assertions make when they run.
_PARAM_CHECKS: dict[str, Any] = {
    "margin": lambda v, _k: None if v is None else _check_fraction("margin", v),
    "alpha": lambda v, _k: None if v is None else _check_fraction("alpha", v, 0.0, 0.5),
    "power": lambda v, _k: None if v is None else _check_fraction("power", v),
    "max_ratio": lambda v, _k: None if v is None else _check_max_ratio(v),
    "channel": lambda v, _k: _channel_list(v),
    "budgets": lambda v, k: None if v is None else _check_budgets(v, k),
    "min_rank_corr": lambda v, _k: _check_min_rank_corr(v),
    "min_failures": lambda v, _k: _check_min_failures(v),
}

_CHECKED_FUNCTIONS = ("assert_score_equivalent", "score_equivalence",
                      "assert_no_channel_amplification", "assert_budget_robust",
                      "assert_failure_set_invariant")


class _Unknown:
    """An argument whose value is not written in the call (a name, an expression)."""


def static_argument_problems(fn: Any, run_budget: int) -> list[tuple[int, str]]:
    """(line, problem) for each call of an assertion in ``fn``'s source whose arguments are
    written as literals and are not allowed (``channel="unknown_tools"``, ``margin=7.5``,
    an unknown keyword), found before any episode runs. Arguments that are not literals
    are left to the assertion itself; a source that cannot be read gives no problems."""
    import ast
    import inspect
    import textwrap

    try:
        src = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(src)
        first = fn.__code__.co_firstlineno
    except (OSError, TypeError, SyntaxError, AttributeError):
        return []
    funcs = {name: globals()[name] for name in _CHECKED_FUNCTIONS}

    def value(node: ast.expr) -> Any:
        try:
            return ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return _Unknown()

    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name not in funcs:
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            continue  # *args / **kwargs: not statically known
        line = first + node.lineno - 1
        args = [value(a) for a in node.args]
        kwargs = {str(k.arg): value(k.value) for k in node.keywords}
        try:
            bound = inspect.signature(funcs[name]).bind(*args, **kwargs) if args else \
                inspect.signature(funcs[name]).bind(None, **kwargs)
        except TypeError as e:
            out.append((line, f"{name}(): {e}"))
            continue
        for param, v in list(bound.arguments.items())[1:]:
            check = _PARAM_CHECKS.get(param)
            if check is None or isinstance(v, _Unknown) or (
                    isinstance(v, (list, tuple)) and any(isinstance(x, _Unknown) for x in v)):
                continue
            try:
                check(v, run_budget)
            except ValueError as e:
                out.append((line, f"{name}(): {e}"))
    return sorted(out)

"""verdict.decide: each claim's damage region and its complement, with the same thresholds
(issue 33), on hand-made evidence whose truth is known by construction."""

from __future__ import annotations

import math

import pytest

from pytest_quantagent.verdict import (
    AnalysisConfig,
    ChannelEvidence,
    Evidence,
    GapEvidence,
    Verdict,
    decide,
    shown_not_amplified,
)

CFG = AnalysisConfig()


def _ev(channels: list[ChannelEvidence] | None = None, gaps: list[GapEvidence] | None = None,
        **kw: object) -> Evidence:
    base: dict[str, object] = dict(episodes=342, reference_episodes=342, diff=0.0, tost_p=0.001,
                                   ci=(-0.03, 0.03), harm_p_holm=0.9, harm_method="Tango score test",
                                   damage_p=0.9, lower_p=0.5)
    base.update(kw)
    return Evidence(channels=channels or [], gaps=gaps or [], **base)  # type: ignore[arg-type]


def _ch(upper: float, inc_upper: float, p: float | None = None, p_holm: float | None = None,
        name: str = "unknown_tool") -> ChannelEvidence:
    return ChannelEvidence(name, 26, 10, 2.6, upper, p_holm, inc_upper, testable=True, p=p,
                           increase=0.0047)


def test_channel_regions_both_directions() -> None:
    # ratio bound open (×5.5) and increase bound over the tolerance: neither shown outside
    # the region (the reproduction) nor inside it (IUT not rejected): INCONCLUSIVE
    v, reasons = decide(_ev([_ch(5.5, 0.007, p=0.3, p_holm=0.6)]), CFG)
    assert v is Verdict.INCONCLUSIVE
    assert any(r.startswith("unknown_tool ×2.6 (26 vs 10) not shown below ×1.2 (upper bound "
                            "×5.5) nor within +0.2 per 100 calls") for r in reasons)
    # inside the region after Holm: MASKED_DAMAGE, naming both thresholds
    v, reasons = decide(_ev([_ch(5.5, 0.007, p=0.001, p_holm=0.003)]), CFG)
    assert v is Verdict.MASKED_DAMAGE
    assert reasons[0].startswith("unknown_tool ×2.6 (26 vs 10), +0.47 per 100 calls: above ×1.2 "
                                 "and more than +0.2 per 100 calls (Holm p=0.003)")
    # outside by either route: the increase bound below the tolerance with the ratio open,
    # or the ratio bound below max_ratio
    assert decide(_ev([_ch(5.5, 0.0015)]), CFG)[0] is Verdict.LOSSLESS
    assert decide(_ev([_ch(1.15, 0.05)]), CFG)[0] is Verdict.LOSSLESS
    assert shown_not_amplified(1.15, None, CFG) and shown_not_amplified(math.inf, 0.0015, CFG)
    assert not shown_not_amplified(1.25, 0.0025, CFG)
    # the threshold is the configured one
    assert decide(_ev([_ch(5.5, 0.007)]), AnalysisConfig(rare_tolerance=0.01))[0] is \
        Verdict.LOSSLESS


def test_gap_regions_are_at_the_margin_not_at_zero() -> None:
    # a widening shown above 0 but not above the margin (its damage p is that of H0 w ≤ m)
    # is no damage; shown below the margin it allows LOSSLESS
    below = GapEvidence(2, 0.03, 0.7, 0.06, 0.35)
    assert decide(_ev(gaps=[below]), CFG)[0] is Verdict.LOSSLESS
    open_ = GapEvidence(2, 0.06, 0.4, 0.11, 0.2)
    v, reasons = decide(_ev(gaps=[open_]), CFG)
    assert v is Verdict.INCONCLUSIVE
    assert "gap at K=2 not shown to widen by less than 7.5 pts (upper bound 11.0)" in reasons
    above = GapEvidence(2, 0.2, 0.004, 0.3, 0.001)
    v, reasons = decide(_ev(gaps=[above]), CFG)
    assert v is Verdict.MASKED_DAMAGE
    assert reasons[0] == ("gap widens by 20.0 pts from the run's budget to K=2, more than 7.5 "
                          "(Holm p=0.004)")


def test_score_damage_is_a_drop_beyond_the_margin() -> None:
    # significantly lower than the reference (p=0.01) but not beyond the margin: named, not
    # DEGRADED; equivalent within ±7.5 it is still LOSSLESS
    v, reasons = decide(_ev(diff=-0.03, ci=(-0.06, -0.005), tost_p=0.01, lower_p=0.01,
                            damage_p=0.9, harm_p_holm=0.9), CFG)
    assert v is Verdict.LOSSLESS
    assert "lower than the reference (p=0.01) but not shown lower by more than 7.5 pts" in \
        reasons[0]
    v, reasons = decide(_ev(diff=-0.2, ci=(-0.3, -0.1), tost_p=0.9, lower_p=1e-6,
                            damage_p=1e-4, harm_p_holm=2e-4), CFG)
    assert v is Verdict.DEGRADED
    assert "significantly lower by more than 7.5 pts (Tango score test Holm p=2e-04)" in \
        reasons[0]


@pytest.mark.parametrize("verdict", ["LOSSLESS", "INCONCLUSIVE", "MASKED_DAMAGE", "DEGRADED"])
def test_every_verdict_names_tests_significant_before_holm_only(verdict: str) -> None:
    # issue 33 item 6: the README promises it for every verdict, LOSSLESS included
    nominal = ChannelEvidence("wrong_entity", 9, 2, 4.4, 1.1, 0.08, 0.03, testable=True, p=0.03,
                              increase=0.002)
    extra: dict[str, object] = {}
    chans = [nominal]
    if verdict == "INCONCLUSIVE":
        extra = dict(tost_p=0.2)
    elif verdict == "MASKED_DAMAGE":
        chans.append(_ch(5.5, 0.007, p=0.001, p_holm=0.003))
    elif verdict == "DEGRADED":
        extra = dict(diff=-0.2, ci=(-0.3, -0.1), tost_p=0.9, damage_p=1e-4, harm_p_holm=2e-4)
    v, reasons = decide(_ev(chans, **extra), CFG)
    assert v.value == verdict
    assert any(r.startswith("wrong_entity ×4.4 (9 vs 2)") and "(p=0.03) is not significant "
               "after Holm (p=0.08)" in r for r in reasons), reasons


def test_a_difference_through_the_simulated_user_claims_no_damage() -> None:
    # issue 35 item 4: the arms differ in not-understood turns; the channel and the score
    # say damage, but the verdict names the user's difference and claims none
    ev = _ev([_ch(5.5, 0.007, p=0.001, p_holm=0.003)],
             user_differs=["9 vs 2 not-understood turns (p=0.02)"])
    v, reasons = decide(ev, CFG)
    assert v is Verdict.INCONCLUSIVE
    assert reasons[0] == ("the arms differ through the simulated user: 9 vs 2 not-understood "
                          "turns (p=0.02); no damage is claimed from the episodes it may decide")


def test_user_event_difference_is_a_task_clustered_paired_test() -> None:
    # Reference: scipy's one-sample t test of the per-task sums of (arm − reference) counts
    # (1e-12), and the exact two-sided sign test (binomtest) when fewer than 10 tasks differ.
    import numpy as np
    from scipy import stats as sps

    from pytest_quantagent.analysis.claims import user_event_difference

    rng = np.random.default_rng(8)
    labels = np.repeat(np.arange(40), 3).astype(str)
    arm = rng.poisson(0.4, 120)
    ref = rng.poisson(0.2, 120)
    per_task = np.bincount(np.repeat(np.arange(40), 3), weights=arm - ref)
    p = user_event_difference(arm, ref, labels)
    assert p == pytest.approx(sps.ttest_1samp(per_task, 0.0).pvalue, rel=1e-12)
    few_a = np.zeros(120, dtype=int)
    few_a[[0, 3, 6, 9, 12, 15, 18]] = 1
    few_r = np.zeros(120, dtype=int)
    few_r[30] = 1
    p = user_event_difference(few_a, few_r, labels)
    assert p == pytest.approx(sps.binomtest(7, 8, 0.5).pvalue, rel=1e-12)
    assert user_event_difference(ref, ref, labels) == 1.0

"""The judgment: the verdict of a cell, its thresholds and its decision rule, in one place.

The report (:mod:`pytest_quantagent.report.model`, computed by
:mod:`pytest_quantagent.analysis`), the assertions and the CLI all take their thresholds from
:class:`AnalysisConfig` and their verdict from :func:`decide`; DESIGN.md "Verdict per cell" is
what this module implements.

Every claim has **one damage region**, and the same thresholds decide both directions:
damage is claimed when the data show the truth inside the region (a one-sided test of "not
in the region" rejected, Holm within the family), LOSSLESS needs the data to show it outside
(a one-sided test of "in the region" rejected at α; every claim must hold, so by the
intersection-union argument no multiplicity correction is needed). ``m`` = ``margin``,
``R`` = ``max_ratio``, ``τ`` = ``rare_tolerance``:

================  ====================================  =============================
claim             damage region                         LOSSLESS shows
================  ====================================  =============================
score             drop: Δ < −m (candidate − reference)  −m < Δ < m (TOST)
channel           ratio ρ > R **and** increase δ > τ    ρ < R **or** δ < τ
tight-budget gap  widening w > m                        w < m
termination       ratio ρ > R **and** increase > τ_t    (not needed: evidence only)
empty / cut turn  ratio ρ > R **and** increase > τ_a    ρ < R **or** δ < τ_a
answer length     ratio λ > L (``length_ratio``)        (not needed: evidence only)
================  ====================================  =============================

Answers: empty answers and turns cut at the length limit are failures of the answer, per
agent turn, with a channel's rule (``answer_tolerance`` = τ_a): LOSSLESS needs them shown
outside their region when both arms recorded their turns (a store written before the record
schema 2 has nothing to bound, and the reasons say so). Output (and reasoning) length is a
cost, not a failure: a length shown above ``length_ratio`` is damage (the same score bought
with ×1.5 the tokens), but an arm not shown below it has shown no failure, so LOSSLESS does
not need it, as it does not need the termination reasons.

Comparability: a serving setting in which the arms differ and that the user did not accept
(:attr:`Evidence.not_comparable`) makes the cell INCONCLUSIVE "not comparable: …" before
any other claim: no claim either way is the quantization's.

- ``DEGRADED``: the score's drop is shown beyond the margin (H0 Δ ≥ −m rejected after
  Holm). A drop shown below 0 but not beyond the margin is named in the reasons only.
- ``MASKED_DAMAGE``: not DEGRADED, and a channel is shown inside its damage region (the
  intersection-union test ``max(p(ρ ≤ R), p(δ ≤ τ))`` rejected after Holm) or a gap is shown
  to widen by more than the margin (H0 w ≤ m rejected after Holm), or a termination reason,
  the empty or cut answers, or the answers' length is shown inside its region.
- ``LOSSLESS``: the score equivalent within ±m, **and** every channel shown outside its
  damage region (its ratio's one-sided upper bound below R, or its increase's below τ),
  **and** every tight-budget gap's widening bound below m, **and** the empty and cut
  answers (when recorded) shown outside their region, **and** the comparison is on paired
  episodes. Absence of evidence is not LOSSLESS.
- ``INCONCLUSIVE``: otherwise, with the reasons and the design that would decide it; also
  when the arms differ through the simulated user (its not-understood turns, its own
  anomalies) beyond chance: that difference is named and no damage is claimed from it.

Why a channel's region needs both conditions: a ratio alone puts every channel whose
failures are too few to bound (a channel that never fails in 3 000 calls per arm) out of
LOSSLESS's reach for ever; an increase alone misses the channels quantization amplifies
(×2.5 on a 0.3%-per-call channel is +0.45 failed calls per 100 calls, +4.5 per 100 episodes
of 10 calls). With τ = 0.2 per 100 calls the increase decides only below a base rate of
τ / (R − 1) = 1% per call, where the ratio cannot be bounded in a run of ordinary size
(bounding it below ×1.2 takes ~160 failures per arm): ×1.2 at 2% per call and ×2.5 at 0.3%
are damage.

A test significant before Holm but not after is named in the reasons of every verdict and
never decides one. Only this module and metrics/stats are needed to judge: it never imports
pytest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Literal

from pytest_quantagent.metrics.margins import DEFAULT_MARGIN_BINS


class Verdict(str, Enum):
    """The verdict of one cell (its value is the report JSON's string)."""

    LOSSLESS = "LOSSLESS"
    MASKED_DAMAGE = "MASKED_DAMAGE"
    DEGRADED = "DEGRADED"
    INCONCLUSIVE = "INCONCLUSIVE"

    def __str__(self) -> str:
        return self.value


VERDICTS: tuple[str, ...] = tuple(v.value for v in Verdict)

DEFAULT_MARGIN = 0.075
"""Equivalence margin on the success rate (absolute; 0.075 = 7.5 points)."""
DEFAULT_MAX_RATIO = 1.2
"""A channel's rate ratio above this is amplification."""
DEFAULT_ALPHA = 0.05
DEFAULT_TIGHT_BUDGETS: tuple[int, ...] = (2, 5)
"""Tight error budgets whose gap widening is tested (those below the run's budget)."""
DEFAULT_RARE_TOLERANCE = 0.002
"""The channel damage region's increase threshold: an amplification counts as damage only
when the per-call rate increase exceeds this too (0.2 failed calls more per 100 agent calls,
2 per 100 episodes of 10 calls). It decides only for channels below a base rate of
``rare_tolerance / (max_ratio − 1)`` (1% per call at the defaults), where the ratio cannot
be bounded."""
DEFAULT_TERMINATION_TOLERANCE = 0.02
"""A termination reason (``agent_error``, ``max_steps``, ...) counts as damage only when its
per-episode rate rises by more than this too (2 more episodes per 100 ending that way)."""
DEFAULT_LENGTH_RATIO = 1.5
"""Answers longer than the reference's by more than this ratio (mean output tokens per agent
turn, and reasoning length) are damage: the same score bought with ×1.5 the tokens."""
DEFAULT_ANSWER_TOLERANCE = 0.005
"""Empty answers and turns cut at the length limit count as damage only when their rate per
agent turn rises by more than this too (0.5 more per 100 agent turns)."""
HolmScope = Literal["cell", "report"]


def _pct(level: float) -> str:
    """A confidence level as a percentage, as precise as its complement needs (90%, 92.8%,
    99.967%)."""
    c = 100 * (1 - level)
    if c <= 0 or abs(c - round(c)) < 1e-9:
        return f"{100 * level:.0f}%"
    d = min(6, max(1, 1 - math.floor(math.log10(c))))
    return f"{100 * level:.{d}f}%"


def _fraction(name: str, v: float, lo_open: float = 0.0, hi_open: float = 1.0) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
        math.isfinite(v) and lo_open < v < hi_open
    ):
        raise ValueError(f"{name}={v!r} is not allowed; {name} must be in ({lo_open:g}, {hi_open:g})")


@dataclass(frozen=True)
class AnalysisConfig:
    """Thresholds and options of the analysis (every verdict threshold lives here)."""

    margin: float = DEFAULT_MARGIN
    """Equivalence margin on the success rate."""
    max_ratio: float = DEFAULT_MAX_RATIO
    """Amplification threshold of a channel's per-agent-call rate ratio (in the hypothesis:
    H0 ratio ≤ max_ratio)."""
    alpha: float = DEFAULT_ALPHA
    """Family-wise level (Holm) of the damage tests, and the TOST / bound level."""
    tight_budgets: tuple[int, ...] | None = None
    """Tight budgets K whose gap widening is tested; None = :data:`DEFAULT_TIGHT_BUDGETS`
    below the run's budget. Given explicitly, a budget above the run's is refused."""
    rare_tolerance: float = DEFAULT_RARE_TOLERANCE
    """Per-call rate increase a channel's damage must exceed too (see the module docstring);
    LOSSLESS's route for a channel whose ratio cannot be bounded."""
    termination_tolerance: float = DEFAULT_TERMINATION_TOLERANCE
    """Per-episode rate increase a termination reason's spike must exceed (beside its ratio
    above ``max_ratio``) to count as damage."""
    length_ratio: float = DEFAULT_LENGTH_RATIO
    """Ratio of mean output (and reasoning) length per agent turn above which longer answers
    are damage (H0 ratio ≤ length_ratio); evidence of damage only, never needed for
    LOSSLESS."""
    answer_tolerance: float = DEFAULT_ANSWER_TOLERANCE
    """Per-turn rate increase an empty-answer or length-cut rise must exceed (beside its ratio
    above ``max_ratio``) to count as damage; LOSSLESS's route for such a rate whose ratio
    cannot be bounded."""
    holm_scope: HolmScope = "cell"
    """Holm's family: each cell's own tests (default) or every test of the report."""
    power: float = 0.8
    """Power the INCONCLUSIVE advice plans for."""
    confidence: float = 0.95
    """Level of the reported two-sided intervals (ratio CIs, gap CIs, per-arm rates)."""
    margin_bins: tuple[float, ...] = DEFAULT_MARGIN_BINS
    max_tasks: int | None = None
    """Tasks available to the planner (None: unknown)."""
    trials_flag: str = "--quant-trials"
    tasks_flag: str = "--quant-tasks"
    """The caller's flag names, used in the INCONCLUSIVE advice."""
    budgets: tuple[int, ...] | None = None
    """Synonym of ``tight_budgets`` (the first release's name)."""
    channel_pairing: bool = True
    """Stratify the channel tests by paired episode (same task, trial and seed); False: by
    task only (the first release's method, kept to measure what pairing gains)."""

    def within_pool(self, pool: int | None) -> AnalysisConfig:
        """This config with :attr:`max_tasks` at most ``pool`` (the run's pool size; None or
        0: unknown, unchanged): the design advice never asks for more tasks than it holds."""
        if not pool or (self.max_tasks is not None and self.max_tasks <= pool):
            return self
        return replace(self, max_tasks=pool)

    def __post_init__(self) -> None:
        _fraction("margin", self.margin)
        if isinstance(self.max_ratio, bool) or not isinstance(self.max_ratio, (int, float)) \
                or not (math.isfinite(self.max_ratio) and self.max_ratio >= 1):
            raise ValueError(f"max_ratio={self.max_ratio!r} is not allowed; max_ratio must be >= 1")
        for name in ("alpha", "power", "confidence"):
            _fraction(name, getattr(self, name))
        _fraction("rare_tolerance", self.rare_tolerance)
        _fraction("termination_tolerance", self.termination_tolerance)
        _fraction("answer_tolerance", self.answer_tolerance)
        if isinstance(self.length_ratio, bool) or not isinstance(self.length_ratio, (int, float)) \
                or not (math.isfinite(self.length_ratio) and self.length_ratio > 1):
            raise ValueError(f"length_ratio={self.length_ratio!r} is not allowed; length_ratio "
                             "must be a finite number > 1 (e.g. 1.5)")
        if self.holm_scope not in ("cell", "report"):
            raise ValueError(f"holm_scope={self.holm_scope!r} is not allowed; allowed: cell, report")
        tb = self.tight_budgets if self.tight_budgets is not None else self.budgets
        if tb is not None:
            if any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in tb):
                raise ValueError(f"tight_budgets={tb!r} is not allowed; budgets must be integers >= 1")
            object.__setattr__(self, "tight_budgets", tuple(sorted(set(tb))))

    def budgets_for(self, run_budget: int) -> tuple[list[int], list[str]]:
        """The tight budgets tested for a run at ``run_budget`` and notes about them.

        Explicit budgets above the run's are refused (ValueError naming them); a budget equal
        to the run's is the run itself and is skipped."""
        notes: list[str] = []
        if self.tight_budgets is None:
            ks = [k for k in DEFAULT_TIGHT_BUDGETS if k < run_budget]
            return ks, notes
        above = [k for k in self.tight_budgets if k > run_budget]
        if above:
            raise ValueError(
                f"tight budget(s) {above} are above the run's error budget {run_budget}; success "
                f"at K can only be recomputed for K <= {run_budget} (allowed: 1..{run_budget})")
        ks = [k for k in self.tight_budgets if k < run_budget]
        if run_budget in self.tight_budgets:
            notes.append(f"tight budget {run_budget} is the run's budget: nothing to compare")
        return ks, notes


# --------------------------------------------------------------------------- the rule


@dataclass
class ChannelEvidence:
    """One channel's evidence (per agent tool call)."""

    name: str
    arm_count: int
    reference_count: int
    ratio: float | None
    upper: float | None
    """One-sided 1 − α upper bound of the ratio."""
    p_holm: float | None
    increase_upper: float | None
    testable: bool
    """False when a side has no agent tool call: the channel cannot be judged."""
    p: float | None = None
    """Raw one-sided p of H0 "not in the damage region" (intersection-union:
    ``max(ratio_p, increase_p)``); None when the channel is not in the Holm family."""
    ratio_p: float | None = None
    """Raw one-sided p of H0 ratio ≤ max_ratio."""
    increase_p: float | None = None
    """Raw one-sided p of H0 increase ≤ rare_tolerance."""
    increase: float | None = None
    arm_mean: float | None = None
    """Answer lengths and rates: the candidate's value per agent turn."""
    reference_mean: float | None = None


@dataclass
class GapEvidence:
    k: int
    widening: float
    """(candidate's lost successes − reference's) between the run's budget and K, per pair."""
    p_holm: float | None
    upper: float
    """One-sided 1 − α upper bound of the widening."""
    p: float | None = None
    """Raw one-sided p of H0 "the gap widens by at most the margin"."""


@dataclass
class Evidence:
    """What :func:`decide` needs about one cell."""

    episodes: int
    reference_episodes: int
    diff: float | None
    tost_p: float | None
    ci: tuple[float, float] | None
    harm_p_holm: float | None
    """Holm-adjusted p of DEGRADED's test (H0: the drop is at most the margin)."""
    harm_method: str
    channels: list[ChannelEvidence] = field(default_factory=list)
    gaps: list[GapEvidence] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Said in the reasons, whatever the verdict."""
    blockers: list[str] = field(default_factory=list)
    """What keeps the cell from LOSSLESS besides the tests (e.g. unpaired episodes)."""
    plan: str | None = None
    damage_p: float | None = None
    """Raw one-sided p of H0 "the drop is at most the margin" (DEGRADED's test)."""
    lower_p: float | None = None
    """Raw one-sided p of H0 "the candidate is not worse" (descriptive: a drop within the
    margin is no damage)."""
    terminations: list[ChannelEvidence] = field(default_factory=list)
    """Each termination reason the candidate ended an episode with (other than a normal
    ending), per episode: evidence of damage only (MASKED_DAMAGE when its spike is shown
    after Holm); never needed for LOSSLESS."""
    user_differs: list[str] = field(default_factory=list)
    """Differences between the arms that run through the simulated user (not-understood
    turns, user-made anomalies) shown beyond chance: no damage is claimed from the episodes
    they may decide."""
    answers: list[ChannelEvidence] = field(default_factory=list)
    """Empty answers and turns cut at the length limit, per agent turn (names
    ``answer:empty_answer``, ``answer:length_cut``): the channels' rule with
    ``answer_tolerance``; LOSSLESS needs each shown outside its damage region."""
    lengths: list[ChannelEvidence] = field(default_factory=list)
    """Output and reasoning length per agent turn (``answer:output_tokens``,
    ``answer:reasoning``): damage when shown above ``length_ratio``; never needed for
    LOSSLESS."""
    not_comparable: list[str] = field(default_factory=list)
    """Serving settings in which the arms differ and that the user did not accept
    (``"<setting>: <reference value> vs <candidate value>"``): the cell is INCONCLUSIVE."""


def fmt_p(p: float | None) -> str:
    if p is None:
        return "n/a"
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.0e}"


def _ratio_text(c: ChannelEvidence) -> str:
    if c.ratio is None or not math.isfinite(c.ratio):
        return f"{c.arm_count} vs {c.reference_count}"
    return f"×{c.ratio:.2g} ({c.arm_count} vs {c.reference_count})"


def shown_not_amplified(upper: float | None, increase_upper: float | None,
                        cfg: AnalysisConfig) -> bool:
    """LOSSLESS's rule for one channel: the data show it outside its damage region ("ratio
    above ``max_ratio`` and increase above ``rare_tolerance``"): its ratio's upper bound below
    ``max_ratio``, or its per-call increase's upper bound below ``rare_tolerance``."""
    return ((upper is not None and upper < cfg.max_ratio)
            or (increase_upper is not None and increase_upper < cfg.rare_tolerance))


def channel_damage_text(c: ChannelEvidence, cfg: AnalysisConfig) -> str:
    inc = "" if c.increase is None else f", +{c.increase * 100:.2g} per 100 calls"
    return (f"{c.name} {_ratio_text(c)}{inc}: above ×{cfg.max_ratio:g} and more than "
            f"+{cfg.rare_tolerance * 100:g} per 100 calls")


def termination_damage_text(c: ChannelEvidence, cfg: AnalysisConfig) -> str:
    reason = c.name.removeprefix("termination:")
    inc = "" if c.increase is None else f", +{c.increase * 100:.2g} per 100 episodes"
    return (f"episodes ending as {reason} {_ratio_text(c)}{inc}: above ×{cfg.max_ratio:g} and "
            f"more than +{cfg.termination_tolerance * 100:g} per 100 episodes")


ANSWER_TEXT: dict[str, str] = {
    "empty_answer": "empty answers (no text, no tool call)",
    "length_cut": "turns cut at the length limit",
    "output_tokens": "output tokens per agent turn",
    "reasoning": "reasoning per agent turn",
}
"""The answer-level claims in words (their report names without ``answer:``)."""


def _answer_name(c: ChannelEvidence) -> str:
    return ANSWER_TEXT.get(c.name.removeprefix("answer:"), c.name)


def answer_damage_text(c: ChannelEvidence, cfg: AnalysisConfig) -> str:
    """An empty-answer or length-cut rate inside its damage region, in words."""
    inc = "" if c.increase is None else f", +{c.increase * 100:.2g} per 100 agent turns"
    return (f"{_answer_name(c)} {_ratio_text(c)}{inc}: above ×{cfg.max_ratio:g} and more than "
            f"+{cfg.answer_tolerance * 100:g} per 100 agent turns")


def length_damage_text(c: ChannelEvidence, cfg: AnalysisConfig) -> str:
    """An output (or reasoning) length above ``length_ratio``, in words."""
    means = ("" if c.arm_mean is None or c.reference_mean is None
             else f" ({c.arm_mean:.3g} vs {c.reference_mean:.3g})")
    ratio = "n/a" if c.ratio is None or not math.isfinite(c.ratio) else f"{c.ratio:.2g}"
    return f"{_answer_name(c)} ×{ratio}{means}: above ×{cfg.length_ratio:g}"


def _nominal(e: Evidence, cfg: AnalysisConfig) -> list[str]:
    """Tests significant before Holm and not after (named in every verdict's reasons)."""
    a = cfg.alpha

    def nominal(p: float | None, p_holm: float | None) -> bool:
        return p is not None and p < a and p_holm is not None and p_holm >= a

    out = []
    if nominal(e.damage_p, e.harm_p_holm):
        out.append(f"success drop beyond {cfg.margin * 100:g} pts (p={fmt_p(e.damage_p)}) is not "
                   f"significant after Holm (p={fmt_p(e.harm_p_holm)})")
    out += [f"{channel_damage_text(c, cfg)} (p={fmt_p(c.p)}) is not significant after Holm "
            f"(p={fmt_p(c.p_holm)})" for c in e.channels if nominal(c.p, c.p_holm)]
    out += [f"{termination_damage_text(c, cfg)} (p={fmt_p(c.p)}) is not significant after "
            f"Holm (p={fmt_p(c.p_holm)})" for c in e.terminations if nominal(c.p, c.p_holm)]
    out += [f"{answer_damage_text(c, cfg)} (p={fmt_p(c.p)}) is not significant after Holm "
            f"(p={fmt_p(c.p_holm)})" for c in e.answers if nominal(c.p, c.p_holm)]
    out += [f"{length_damage_text(c, cfg)} (p={fmt_p(c.p)}) is not significant after Holm "
            f"(p={fmt_p(c.p_holm)})" for c in e.lengths if nominal(c.p, c.p_holm)]
    out += [f"gap at K={g.k} widens by {g.widening * 100:.1f} pts, more than "
            f"{cfg.margin * 100:g} (p={fmt_p(g.p)}), is not significant after Holm "
            f"(p={fmt_p(g.p_holm)})" for g in e.gaps if nominal(g.p, g.p_holm)]
    return out


def decide(e: Evidence, cfg: AnalysisConfig) -> tuple[Verdict, list[str]]:
    """The verdict and its reasons (see the module docstring for the rule)."""
    reasons = list(e.notes)
    if e.not_comparable:
        # the arms were not served alike: no claim either way is the quantization's
        return Verdict.INCONCLUSIVE, [
            *(f"not comparable: {d}" for d in e.not_comparable),
            "the arms differ in how they are served, not only in their weights: no verdict "
            "is claimed; serve them alike, or accept the difference by name "
            "(--quant-accept-difference)", *reasons]
    if e.episodes == 0 or e.reference_episodes == 0:
        return Verdict.INCONCLUSIVE, [*reasons, "no scored episodes in one arm"]
    a = cfg.alpha
    user = [f"the arms differ through the simulated user: {u}; no damage is claimed from "
            "the episodes it may decide" for u in e.user_differs]
    amplified = [f"{channel_damage_text(c, cfg)} (Holm p={fmt_p(c.p_holm)})"
                 for c in e.channels if c.p_holm is not None and c.p_holm < a]
    amplified += [f"{termination_damage_text(c, cfg)} (Holm p={fmt_p(c.p_holm)})"
                  for c in e.terminations if c.p_holm is not None and c.p_holm < a]
    amplified += [f"{answer_damage_text(c, cfg)} (Holm p={fmt_p(c.p_holm)})"
                  for c in e.answers if c.p_holm is not None and c.p_holm < a]
    amplified += [f"{length_damage_text(c, cfg)} (Holm p={fmt_p(c.p_holm)})"
                  for c in e.lengths if c.p_holm is not None and c.p_holm < a]
    widened = [f"gap widens by {g.widening * 100:.1f} pts from the run's budget to K={g.k}, "
               f"more than {cfg.margin * 100:g} (Holm p={fmt_p(g.p_holm)})" for g in e.gaps
               if g.p_holm is not None and g.p_holm < a]
    nominal = _nominal(e, cfg)
    score = f"success {e.diff * 100:+.1f} pts" if e.diff is not None else "success n/a"
    ci = (f", {_pct(1 - 2 * a)} CI [{e.ci[0] * 100:+.1f}, {e.ci[1] * 100:+.1f}]"
          if e.ci is not None else "")
    if e.harm_p_holm is not None and e.harm_p_holm < a and not user:
        return Verdict.DEGRADED, [
            *reasons, f"{score}{ci}: significantly lower by more than {cfg.margin * 100:g} pts "
            f"({e.harm_method} Holm p={fmt_p(e.harm_p_holm)})", *amplified, *widened, *nominal]
    equivalent = e.tost_p is not None and e.tost_p < a
    lower = ""
    if e.lower_p is not None and e.lower_p < a and not (e.harm_p_holm is not None
                                                        and e.harm_p_holm < a):
        lower = (f"; lower than the reference (p={fmt_p(e.lower_p)}) but not shown lower by "
                 f"more than {cfg.margin * 100:g} pts")
    eq_text = (f"{score}{ci}: equivalent within ±{cfg.margin * 100:g} pts (TOST p={fmt_p(e.tost_p)})"
               if equivalent else
               f"{score}{ci}: not shown equivalent within ±{cfg.margin * 100:g} pts "
               f"(TOST p={fmt_p(e.tost_p)}), nor lower by more than {cfg.margin * 100:g}")
    eq_text += lower
    if user:
        # a difference the simulated user makes is not the model's: name it, claim nothing
        return Verdict.INCONCLUSIVE, [*reasons, *user, eq_text, *amplified, *widened, *nominal]
    if amplified or widened:
        return Verdict.MASKED_DAMAGE, [*reasons, *amplified, *widened, *nominal, eq_text]
    open_channels: list[str] = []
    silent: list[ChannelEvidence] = []
    for c in e.channels:
        if not c.testable:
            open_channels.append(f"{c.name}: {c.arm_count} vs {c.reference_count} failures "
                                 "but a side has no agent tool call, so it cannot be judged")
            continue
        shown = shown_not_amplified(c.upper, c.increase_upper, cfg)
        if not shown and c.arm_count == 0 and c.reference_count == 0:
            silent.append(c)
        elif not shown:
            up = "inf" if c.upper is None or not math.isfinite(c.upper) else f"{c.upper:.2g}"
            inc = "n/a" if c.increase_upper is None else f"{c.increase_upper * 100:.2g}"
            open_channels.append(
                f"{c.name} {_ratio_text(c)} not shown below ×{cfg.max_ratio:g} (upper bound "
                f"×{up}) nor within +{cfg.rare_tolerance * 100:g} per 100 calls (rate increase "
                f"up to {inc}): not shown outside its damage region")
    for c in e.answers:
        if not shown_not_amplified(c.upper, c.increase_upper, replace(
                cfg, rare_tolerance=cfg.answer_tolerance)):
            up = "inf" if c.upper is None or not math.isfinite(c.upper) else f"{c.upper:.2g}"
            inc = "n/a" if c.increase_upper is None else f"{c.increase_upper * 100:.2g}"
            open_channels.append(
                f"{_answer_name(c)} {_ratio_text(c)} not shown below ×{cfg.max_ratio:g} "
                f"(upper bound ×{up}) nor within +{cfg.answer_tolerance * 100:g} per 100 agent "
                f"turns (rate increase up to {inc}): not shown outside its damage region")
    if silent:
        worst = max(c.increase_upper or 0.0 for c in silent)
        open_channels.append(
            f"{', '.join(c.name for c in silent)}: no failure on either side, but too few agent "
            f"calls to bound the rate increase below {cfg.rare_tolerance * 100:g} per 100 calls "
            f"(upper bound {worst * 100:.2g})")
    open_gaps = [f"gap at K={g.k} not shown to widen by less than {cfg.margin * 100:g} pts "
                 f"(upper bound {g.upper * 100:.1f})" for g in e.gaps if not g.upper < cfg.margin]
    if equivalent and not open_channels and not open_gaps and not e.blockers:
        return Verdict.LOSSLESS, [
            *reasons, eq_text,
            f"every channel shown below ×{cfg.max_ratio:g} or within "
            f"+{cfg.rare_tolerance * 100:g} per 100 calls",
            *([f"empty and cut answers shown below ×{cfg.max_ratio:g} or within "
               f"+{cfg.answer_tolerance * 100:g} per 100 agent turns"] if e.answers else []),
            *([f"gap shown to widen by less than {cfg.margin * 100:g} pts at K=" +
               ",".join(str(g.k) for g in e.gaps)] if e.gaps else []),
            *nominal]
    out = [*reasons, eq_text, *nominal, *open_channels, *open_gaps, *e.blockers]
    if not equivalent and e.plan:
        out.append(f"to decide the score: {e.plan}")
    return Verdict.INCONCLUSIVE, out


def holm_groups(tests: Sequence[tuple[int, str, float]], scope: HolmScope
                ) -> list[list[int]]:
    """Indices of ``tests`` (cell index, id, p) grouped into Holm families."""
    if scope == "report":
        return [list(range(len(tests)))]
    groups: dict[int, list[int]] = {}
    for i, (cell, _, _) in enumerate(tests):
        groups.setdefault(cell, []).append(i)
    return list(groups.values())


SUCCESS_WEIGHT = 0.5
"""Share of a cell's α that the score's harm test gets in the weighted Holm family; the
channel and gap-widening tests share the rest equally. DEGRADED keeps most of its power
however many channels a cell tests, and the family-wise error stays at α."""


def family_weights(tests: Sequence[tuple[int, str]]) -> list[float]:
    """Weighted-Holm weights of (cell index, test id) pairs: per cell, the ``success`` test
    :data:`SUCCESS_WEIGHT` and the others ``(1 − SUCCESS_WEIGHT)`` shared equally (all of it
    when a test kind is absent); each cell's weights sum to 1."""
    by_cell: dict[int, list[str]] = {}
    for cell, tid in tests:
        by_cell.setdefault(cell, []).append(tid)
    out: list[float] = []
    for cell, tid in tests:
        ids = by_cell[cell]
        others = sum(1 for t in ids if t != "success")
        has_success = "success" in ids
        if tid == "success":
            out.append(SUCCESS_WEIGHT if others else 1.0)
        else:
            out.append((1.0 - SUCCESS_WEIGHT if has_success else 1.0) / others)
    return out

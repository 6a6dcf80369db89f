"""The versioned report model (DESIGN.md "Report JSON", schema_version 1) and
:func:`analyze`, which turns the cell analysis of :mod:`pytest_quantagent.analysis` into it.

The figures, tests and verdicts are computed in :mod:`pytest_quantagent.analysis` (one
function per claim) and judged by :func:`pytest_quantagent.verdict.decide` (thresholds, the
``Verdict`` enum and the rule); this module only holds the pydantic model.
``Report.model_dump(mode="json")`` is the report JSON; renderers (terminal, HTML) consume
:class:`Report` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from pytest_quantagent.analysis.arms import CellInput, Records
from pytest_quantagent.analysis.cell import CellAnalysis, analyze_cells
from pytest_quantagent.verdict import VERDICTS, AnalysisConfig, Verdict

__all__ = ["SCHEMA_VERSION", "VERDICTS", "AnalysisConfig", "CellInput", "CellReport", "Records",
           "Report", "Verdict", "analyze"]

SCHEMA_VERSION: Literal[1] = 1
VerdictName = Literal["LOSSLESS", "MASKED_DAMAGE", "DEGRADED", "INCONCLUSIVE"]


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
    """Holm-adjusted p of DEGRADED's test, ``damage_p`` (kept under this name for
    schema_version 1 readers)."""
    margin: float
    arm_ci: list[float] | None = None
    reference_ci: list[float] | None = None
    method: str | None = None
    ci_level: float | None = None
    """Level of ``ci``: 1 − 2α, the interval the TOST decides on (inside ±margin ⇔ TOST
    p < α)."""
    ci95: list[float] | None = None
    harm_p: float | None = None
    """One-sided p of H0 "candidate not worse" (exact McNemar with one trial per task, the
    task-cluster test otherwise). Descriptive: a drop within the margin is no damage; the
    verdict's DEGRADED test is ``damage_p``."""
    harm_p_holm: float | None = None
    """Holm-adjusted p of DEGRADED's test (``damage_p_holm``; the first release's name)."""
    paired_arm: float | None = None
    paired_reference: float | None = None
    """Success rates over the paired episodes only (what the paired tests compare)."""
    run_budget: int | None = None
    """The budget the score is compared at (the smaller of the arms' budgets)."""
    damage_p: float | None = None
    """One-sided p of H0 "the drop is at most the margin" (DEGRADED's test, in Holm's
    family: the damage side of the threshold the TOST uses)."""
    damage_p_holm: float | None = None


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
    """One-sided p of H0 "the gap widens by at most the margin" (the widening's damage
    test; LOSSLESS needs ``widening_upper`` below the margin)."""


class ChannelStats(_Model):
    arm_count: int
    reference_count: int | None = None
    arm_rate: float | None
    reference_rate: float | None = None
    ratio: float | None = None
    ratio_ci: list[float | None] | None = None
    p: float | None = None
    """One-sided p of H0 "not in the damage region" (ratio ≤ max_ratio or increase ≤
    rare_tolerance): the intersection-union test ``max(ratio_p, increase_p)``."""
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
    ratio_estimate: float | None = None
    """The stratified (within pair or task) point estimate of the ratio, inside ``ratio_ci``;
    ``ratio`` is the crude ratio of the per-call rates."""
    rate_increase: float | None = None
    rate_increase_upper: float | None = None
    """One-sided 1 − α upper bound of the per-call rate increase (rare-channel route)."""
    tested: bool | None = None
    """Whether the channel's amplification test is in the Holm family (it has failures)."""
    ratio_p: float | None = None
    """One-sided p of H0 ratio ≤ max_ratio."""
    increase_p: float | None = None
    """One-sided p of H0 per-call increase ≤ rare_tolerance."""
    strata: str | None = None
    """``pair`` (stratified by paired episode) or ``task``."""
    shown_not_amplified: bool | None = None
    """LOSSLESS's side: the ratio's upper bound below max_ratio or the increase's below
    rare_tolerance."""


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
    ``failures``, ``failures_per_episode``, ``by_channel``, and ``events`` (what it did of
    its own accord per kind, e.g. ``not_understood``, when the user reports them). The calls
    count toward the error budget (τ²-bench) but not in ``channels``; events that differ
    between the arms beyond chance keep the verdict from claiming damage."""
    pairing: dict[str, Any] | None = None
    """``paired``, ``unpaired_arm``, ``unpaired_reference`` and how each is used."""
    holm: dict[str, Any] | None = None
    """Holm's family of this cell's verdict: ``scope``, ``size``, ``tests``."""
    plan: dict[str, Any] | None = None
    """The design advice (``tasks``, ``trials``, ``reachable``, ``message``)."""
    termination_tests: dict[str, dict[str, Any]] | None = None
    """Per termination reason other than a normal ending: ``arm_count``, ``reference_count``
    (episodes), ``ratio``, ``ratio_ci``, ``increase`` per episode, the damage test's ``p`` and
    ``p_holm`` (see ``verdict.termination_damage_text``); None when no episode ended so."""
    answer_tests: dict[str, dict[str, Any]] | None = None
    """The answers per agent model turn (``empty_answer``, ``length_cut``, ``output_tokens``,
    ``reasoning``), over the paired episodes that recorded them: ``kind`` (``rate`` or
    ``length``), ``unit``, ``episodes``, both sides' totals, turns and values per turn,
    ``ratio``, ``ratio_ci``, ``ratio_upper``, ``threshold``, ``increase``/``increase_upper``
    per turn (rates), the damage test's ``p`` and ``p_holm``, ``shown_outside`` (rates);
    None when no paired episode recorded them (records of schema 1)."""
    comparability: dict[str, Any] | None = None
    """How the arms are served, compared before any episode: ``settings`` (each with
    ``reference``, ``arm``, ``status``: ``same``, ``differs``, ``accepted``, ``unknown`` or
    ``informational``, and ``source``) and ``accepted`` (the names the user accepted); None
    when not compared (e.g. ``quantagent analyze`` of a store)."""
    sequential: dict[str, Any] | None = None
    """Run-until-decided: ``planned_looks``, ``alphas``, ``looks`` (each look's design,
    episodes, α and verdict), ``episodes_used``, ``alpha_spent``, ``stopped`` and ``why``;
    None for a fixed design."""
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


# --------------------------------------------------------------------------- entry point


def _cell_report(c: CellAnalysis) -> CellReport:
    return CellReport(
        **c.fields,
        success=SuccessStats(**asdict(c.success)),
        budget=BudgetStats(**asdict(c.budget)),
        channels={k: ChannelStats(**asdict(v)) for k, v in c.channels.items()},
        failure_set={k: FailureSetStats(**asdict(v)) for k, v in c.failure_set.items()},
        verdict=c.verdict, reasons=c.reasons, holm=c.holm,
    )


def analyze(
    inputs: Sequence[CellInput],
    config: AnalysisConfig | None = None,
    rng: np.random.Generator | None = None,
    run: dict[str, Any] | None = None,
) -> Report:
    """Analyse every cell (:func:`pytest_quantagent.analysis.cell.analyze_cells`) and return
    the report.

    Holm's family is each cell's one-sided damage tests (score drop beyond the margin, each
    channel with failures, the widening at each tight budget) by default, every such test of
    the report with ``config.holm_scope="report"``; ``run.analysis`` and each cell's ``holm``
    name the family. ``rng`` is accepted for compatibility (the tests are deterministic).
    """
    del rng
    cfg = config or AnalysisConfig()
    cells, meta = analyze_cells(inputs, cfg)
    run_meta = dict(run or {})
    run_meta.setdefault("analysis", meta)
    return Report(run=run_meta, cells=[_cell_report(c) for c in cells])

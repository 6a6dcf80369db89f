"""A cell's analysis assembled from its claims, and the cells of a report judged together
(Holm's families, then :func:`pytest_quantagent.verdict.decide`).

:func:`analyze_cells` is what :func:`pytest_quantagent.report.model.analyze` turns into the
report model; a sequential loop can call :func:`analyze_cell` on the episodes so far after
each wave and judge with :func:`judge`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from pytest_quantagent.analysis.arms import (
    CellInput,
    as_arm,
    fewest_trials,
    fnum,
    mean_or_none,
    pairing,
    subset_arm,
    task_sums,
)
from pytest_quantagent.analysis.claims import (
    BudgetFigures,
    ChannelFigures,
    FailureSetFigures,
    SuccessFigures,
    Test,
    answer_claims,
    budget_claim,
    channel_claims,
    failure_set_claims,
    margins_claim,
    score_claim,
    termination_claims,
    user_claim,
    without_empty_turns,
)
from pytest_quantagent.analysis.plan import CellPlan, plan_for_cell
from pytest_quantagent.metrics.budget import success_at_budgets
from pytest_quantagent.metrics.episode import ArmData
from pytest_quantagent.metrics.margins import margin_histogram
from pytest_quantagent.metrics.passk import pass_k_curve
from pytest_quantagent.stats.intervals import wilson_interval
from pytest_quantagent.stats.multiplicity import weighted_holm
from pytest_quantagent.stats.ratio import rate_ci
from pytest_quantagent.verdict import (
    AnalysisConfig,
    Evidence,
    Verdict,
    decide,
    family_weights,
    holm_groups,
)
from pytest_quantagent.vocab.channels import ALL_CHANNELS


@dataclass
class CellAnalysis:
    """Everything the report says about one cell, by the report model's field names
    (``fields``: the scalar and dict fields; the sections as figures), with the raw damage
    tests waiting for Holm and the evidence :func:`decide` judges."""

    fields: dict[str, Any]
    success: SuccessFigures
    budget: BudgetFigures
    channels: dict[str, ChannelFigures]
    failure_set: dict[str, FailureSetFigures] = field(default_factory=dict)
    tests: list[Test] = field(default_factory=list)
    evidence: Evidence | None = None
    verdict: Verdict | None = None
    reasons: list[str] = field(default_factory=list)
    holm: dict[str, Any] | None = None
    design: CellPlan | None = None
    """The design that decides every claim (:mod:`pytest_quantagent.analysis.plan`); named
    in an INCONCLUSIVE verdict's last reason."""


def _pass_k(a: ArmData, kmax: int) -> dict[str, float]:
    curve = pass_k_curve(a.task_ids.tolist(), a.success.tolist())
    return {str(k): v for k, v in curve.items() if k <= kmax}


def _common(a: ArmData) -> dict[str, Any]:
    return {"tokens": mean_or_none(a.tokens), "duration_s": mean_or_none(a.duration_s),
            "steps": mean_or_none(a.steps.astype(float)),
            "recovery": fnum(a.recovered.sum() / a.failures.sum()) if a.failures.sum() else None}


def arm_only(inp: CellInput, a: ArmData, cfg: AnalysisConfig) -> CellAnalysis:
    """Arm-only figures (no reference, no verdict)."""
    max_k = a.max_errors
    curve = success_at_budgets(a.success, a.n_errors, max_k).mean(axis=0) if a.n else None
    n_calls, y, _, _ = task_sums(a, None)
    total_calls = int(n_calls.sum())
    channels: dict[str, ChannelFigures] = {}
    for j, ch in enumerate(ALL_CHANNELS):
        count = int(a.channel_counts[:, j].sum()) if a.n else 0
        channels[ch.value] = ChannelFigures(
            arm_count=count,
            arm_rate=fnum(count / total_calls) if total_calls else None,
            arm_rate_ci=rate_ci(y[:, j], n_calls, confidence=cfg.confidence).as_list()
            if total_calls else None,
            arm_per_episode=fnum(count / a.n) if a.n else None,
        )
    sr = wilson_interval(int(a.success.sum()), a.n, cfg.confidence)
    c = _common(a)
    fields: dict[str, Any] = {
        "domain": inp.domain, "arm": inp.arm, "reference": None, "episodes": a.n,
        "reference_episodes": None, "paired": 0, "tool_calls": {"arm": total_calls},
        "recovery": {"arm": c["recovery"]}, "steps": {"arm": c["steps"]},
        "terminations": {"arm": a.terminations, "reference": None},
        "pass_k": {"arm": _pass_k(a, fewest_trials(a)), "reference": None},
        "margins": {"bins": list(cfg.margin_bins),
                    "arm": margin_histogram(a.margins, cfg.margin_bins)}
        if a.margins.size else None,
        "infrastructure_errors": {"arm": a.infrastructure_errors},
        "tokens": {"arm": c["tokens"]}, "duration_s": {"arm": c["duration_s"]},
        **user_claim(a, None, None, cfg).fields,
        "extra": dict(inp.extra),
    }
    return CellAnalysis(
        fields, SuccessFigures(arm=fnum(sr.estimate), margin=cfg.margin, arm_ci=sr.ci.as_list()),
        BudgetFigures(K=list(range(max_k + 1)),
                      arm=[fnum(v) for v in curve] if curve is not None else [None] * (max_k + 1)),
        channels, reasons=["no reference arm: arm-only figures, no verdict"])


def analyze_cell(inp: CellInput, a: ArmData, r: ArmData, cfg: AnalysisConfig) -> CellAnalysis:
    """Every claim of one cell, its figures and raw damage tests (before Holm)."""
    notes: list[str] = []
    a, r, empty_notes = without_empty_turns(a, r)
    notes.extend(empty_notes)
    p = pairing(a, r)
    max_k = min(a.max_errors, r.max_errors)
    if a.max_errors != r.max_errors:
        notes.append(f"arms ran at different error budgets (arm {a.max_errors}, reference "
                     f"{r.max_errors}): both compared at the common budget K={max_k}")
    tight, budget_notes = cfg.budgets_for(max_k)
    notes.extend(budget_notes)
    notes.extend(p.notes)
    ma = success_at_budgets(a.success, a.n_errors, max_k)
    mr = success_at_budgets(r.success, r.n_errors, max_k)
    run_a, run_r = ma[:, max_k], mr[:, max_k]

    score = score_claim(a, r, p, run_a, run_r, max_k, cfg)
    budget = budget_claim(a, r, p, ma, mr, max_k, tight, cfg)
    chans = channel_claims(a, r, p, cfg)
    terms = termination_claims(a, r, p, cfg)
    answers = answer_claims(a, r, p, cfg)
    notes.extend(answers.notes)
    user = user_claim(a, r, p, cfg)
    notes.extend(user.notes)
    pl = plan_for_cell(a, r, p, run_a, run_r, ma, mr, max_k, budget.gaps, chans.evidence,
                       (chans.calls_arm, chans.calls_reference), inp.pool_tasks, cfg,
                       score_damage_p=score.figures.damage_p)
    ca, cr = _common(a), _common(r)
    kmax = fewest_trials(a, r)
    fields: dict[str, Any] = {
        "domain": inp.domain, "arm": inp.arm, "reference": inp.reference, "episodes": a.n,
        "reference_episodes": r.n, "paired": p.n,
        "tool_calls": {"arm": chans.calls_arm, "reference": chans.calls_reference},
        "recovery": {"arm": ca["recovery"], "reference": cr["recovery"]},
        "steps": {"arm": ca["steps"], "reference": cr["steps"]},
        "terminations": {"arm": a.terminations, "reference": r.terminations},
        "pass_k": {"arm": _pass_k(a, kmax), "reference": _pass_k(r, kmax)},
        "margins": margins_claim(a, r, p, cfg),
        "infrastructure_errors": {"arm": a.infrastructure_errors,
                                  "reference": r.infrastructure_errors},
        "tokens": {"arm": ca["tokens"], "reference": cr["tokens"]},
        "duration_s": {"arm": ca["duration_s"], "reference": cr["duration_s"]},
        "n_needed": pl.n_pairs if pl is not None else None,
        "trials_needed": pl.trials if pl is not None else None,
        "pairing": p.summary, "plan": pl.as_dict() if pl is not None else None,
        "termination_tests": {k: asdict(v) for k, v in terms.figures.items()} or None,
        "answer_tests": {k: asdict(v) for k, v in answers.figures.items()} or None,
        "comparability": inp.comparability,
        **user.fields,
        "extra": dict(inp.extra),
    }
    s = score.figures
    evidence = Evidence(
        episodes=a.n, reference_episodes=r.n, diff=s.diff, tost_p=s.tost_p,
        ci=(s.ci[0], s.ci[1]) if s.ci else None, harm_p_holm=None,
        harm_method=score.harm_method, channels=chans.evidence, gaps=budget.gaps, notes=notes,
        terminations=terms.evidence, answers=answers.rates, lengths=answers.lengths,
        not_comparable=not_comparable(inp.comparability),
        blockers=[*p.blockers, *score.blockers, *chans.blockers],
        plan=None, damage_p=s.damage_p, lower_p=s.harm_p, user_differs=user.differs)
    return CellAnalysis(fields, s, budget.figures, chans.figures,
                        failure_set_claims(a, r, cfg),
                        tests=[*score.tests, *budget.tests, *chans.tests, *terms.tests,
                               *answers.tests],
                        evidence=evidence, design=pl)


def not_comparable(block: dict[str, Any] | None) -> list[str]:
    """The serving settings of a comparability block (see
    :func:`pytest_quantagent.runner.preflight.compare_serving`) in which the arms differ and
    that the user did not accept, as ``"<setting>: <reference> vs <candidate>"``."""
    if not block:
        return []
    return [f"{name}: {s.get('reference')} vs {s.get('arm')}"
            for name, s in (block.get("settings") or {}).items()
            if s.get("status") == "differs"]


def judge(c: CellAnalysis, adjusted: dict[str, float], family: list[str],
          cfg: AnalysisConfig) -> None:
    """Fill in the Holm-adjusted p-values of ``c``'s tests and its verdict and reasons."""
    ev = c.evidence
    assert ev is not None
    ev.harm_p_holm = adjusted.get("success")
    c.success.damage_p_holm = fnum(ev.harm_p_holm)
    c.success.harm_p_holm = fnum(ev.harm_p_holm)
    c.success.mcnemar_p_holm = fnum(ev.harm_p_holm)
    for ch in ev.channels:
        ch.p_holm = adjusted.get(f"channel:{ch.name}")
        c.channels[ch.name].p_holm = fnum(ch.p_holm)
    tt = c.fields.get("termination_tests") or {}
    for t in ev.terminations:
        t.p_holm = adjusted.get(t.name)
        reason = t.name.removeprefix("termination:")
        if reason in tt:
            tt[reason]["p_holm"] = fnum(t.p_holm)
    at = c.fields.get("answer_tests") or {}
    for t in (*ev.answers, *ev.lengths):
        t.p_holm = adjusted.get(t.name)
        name = t.name.removeprefix("answer:")
        if name in at:
            at[name]["p_holm"] = fnum(t.p_holm)
    for g in ev.gaps:
        g.p_holm = adjusted.get(f"gap:{g.k}")
        c.budget.gap_p_holm[str(g.k)] = fnum(g.p_holm)
    c.holm = {"scope": cfg.holm_scope, "size": len(family), "tests": family}
    c.verdict, c.reasons = decide(ev, cfg)
    if c.verdict is Verdict.INCONCLUSIVE and c.design is not None:
        c.reasons.append(f"to decide every claim: {c.design.message}")


def _judge_without_user_events(c: CellAnalysis, inp: CellInput, a: ArmData, r: ArmData,
                               cfg: AnalysisConfig) -> None:
    """A cell whose arms differ through the simulated user claims no damage from the
    episodes the user may decide; it may from the others. Re-judge the claims on the pairs
    in which the user reported nothing in either arm (under the null the events fall on
    both arms alike, so the selection is symmetric and the tests keep their level; the
    full-cell analysis claimed nothing, so this is the cell's one claim). A damage verdict
    there is the cell's, with the user's difference still named."""
    p = pairing(a, r)
    if not p.paired:
        return
    quiet = np.ones(p.n, dtype=bool)
    for counts, rows in ((a.user_event_counts, p.ia), (r.user_event_counts, p.ir)):
        for v in counts.values():
            quiet &= v[rows] == 0
    n = int(quiet.sum())
    if n < 2 or n == p.n:
        return
    sub_in = CellInput(domain=inp.domain, arm=inp.arm, records=subset_arm(a, p.ia[quiet]),
                       reference=inp.reference, reference_records=subset_arm(r, p.ir[quiet]),
                       pool_tasks=inp.pool_tasks, alpha=cfg.alpha)
    (sub,), _ = analyze_cells([sub_in], replace(cfg, holm_scope="cell"))
    if sub.verdict not in (Verdict.MASKED_DAMAGE, Verdict.DEGRADED):
        c.reasons.append(f"on the {n} of {p.n} paired episodes in which the simulated user "
                         f"reported nothing in either arm: {sub.verdict}, no damage shown")
        return
    user_lines = [x for x in c.reasons if x.startswith("the arms differ through the simulated user")]
    c.verdict = sub.verdict
    c.reasons = [*user_lines,
                 f"on the {n} of {p.n} paired episodes in which the simulated user reported "
                 f"nothing in either arm, damage is shown ({sub.verdict}):",
                 *[x for x in sub.reasons if not x.startswith("to decide")]]
    c.fields.setdefault("extra", {})["without_user_events"] = {
        "paired": n, "verdict": str(sub.verdict), "holm": sub.holm}


def sequential_reason(seq: dict[str, Any]) -> str:
    """The reason line of a run-until-decided cell: where it stopped, at what level."""
    looks = seq.get("looks") or []
    last = looks[-1] if looks else {}
    trials = last.get("trials")
    return (f"run until decided: {seq.get('why', '')}; {seq.get('episodes_used', 0)} episodes "
            f"per arm ({last.get('tasks')} tasks x {trials} trial{'' if trials == 1 else 's'}), "
            f"tested at alpha {last.get('alpha', 0.0):.3g} at this look, "
            f"{seq.get('alpha_spent', 0.0):.3g} of {seq.get('alpha', 0.0):g} spent")


def analyze_cells(inputs: Sequence[CellInput], cfg: AnalysisConfig
                  ) -> tuple[list[CellAnalysis], dict[str, Any]]:
    """Every cell analysed and judged, and the report's ``run.analysis`` section.

    Holm's family is each cell's one-sided damage tests (score drop beyond the margin, each
    channel with failures, the widening at each tight budget) by default, every such test of
    the report with ``cfg.holm_scope="report"``."""
    cells: list[CellAnalysis] = []
    cfgs: list[AnalysisConfig] = []
    for inp in inputs:
        if inp.alpha is not None and cfg.holm_scope == "report" and inp.alpha != cfg.alpha:
            raise ValueError(f"cell {inp.domain}/{inp.arm} is judged at alpha {inp.alpha:g} "
                             "(a sequential look) but Holm's family is the report's; use "
                             "holm_scope='cell' with run-until-decided")
        cfgs.append(cfg if inp.alpha is None else replace(cfg, alpha=inp.alpha))
    sides: list[tuple[ArmData, ArmData] | None] = []
    for inp, ccfg in zip(inputs, cfgs, strict=True):
        arm_input = inp.records if inp.records is not None else inp.arm_records
        if arm_input is None:  # unreachable: __post_init__ guarantees one
            raise ValueError(f"cell {inp.domain}/{inp.arm} has no records")
        a = as_arm(arm_input, inp.domain, inp.arm)
        if inp.reference_records is None:
            cells.append(arm_only(inp, a, ccfg))
            sides.append(None)
            continue
        if inp.reference is None:
            raise ValueError(
                f"cell {inp.domain}/{inp.arm} has reference_records but reference=None; "
                "name the reference arm"
            )
        r = as_arm(inp.reference_records, inp.domain, inp.reference)
        cells.append(analyze_cell(inp, a, r, ccfg))
        sides.append((a, r))
        if inp.sequential is not None:
            cells[-1].fields["sequential"] = inp.sequential
    flat = [(i, tid, pv) for i, c in enumerate(cells) for tid, pv in c.tests]
    per_cell: list[dict[str, float]] = [{} for _ in cells]
    families: list[list[str]] = [[] for _ in cells]
    for group in holm_groups(flat, cfg.holm_scope):
        adj = weighted_holm([flat[j][2] for j in group],
                            family_weights([(flat[j][0], flat[j][1]) for j in group]),
                            alpha=cfgs[flat[group[0]][0]].alpha).pvalues_adjusted
        names = [f"{cells[flat[j][0]].fields['domain']}/{cells[flat[j][0]].fields['arm']}:"
                 f"{flat[j][1]}" if cfg.holm_scope == "report" else flat[j][1] for j in group]
        for j, a_p in zip(group, adj, strict=True):
            per_cell[flat[j][0]][flat[j][1]] = a_p
            families[flat[j][0]] = names
    for i, c in enumerate(cells):
        if c.evidence is not None:
            judge(c, per_cell[i], families[i], cfgs[i])
            ar = sides[i]
            if c.evidence.user_differs and c.verdict is Verdict.INCONCLUSIVE and ar is not None:
                _judge_without_user_events(c, inputs[i], ar[0], ar[1], cfgs[i])
            seq = inputs[i].sequential
            if seq is not None:
                c.reasons.append(sequential_reason(seq))
    meta = {
        "margin": cfg.margin, "max_ratio": cfg.max_ratio, "alpha": cfg.alpha,
        "tight_budgets": list(cfg.tight_budgets) if cfg.tight_budgets is not None else None,
        "rare_tolerance": cfg.rare_tolerance, "power": cfg.power,
        "termination_tolerance": cfg.termination_tolerance,
        "length_ratio": cfg.length_ratio, "answer_tolerance": cfg.answer_tolerance,
        "confidence": cfg.confidence, "holm_scope": cfg.holm_scope,
        "holm_family_size": len(flat) if cfg.holm_scope == "report"
        else max((len(f) for f in families), default=0),
        "holm_family": "every one-sided damage test of the report" if cfg.holm_scope == "report"
        else "each cell's one-sided damage tests (score drop beyond the margin, channels with "
             "failures, gap widening beyond the margin at each tight budget, termination "
             "reasons, empty and cut answers, answer length)",
        "score_method": "Tango score interval for paired proportions (variance max(model, "
                        "task-cluster robust) with several trials); TOST on the 1-2α interval; "
                        "DEGRADED: one-sided score test of a drop beyond the margin",
        "channel_method": "robust score test stratified by paired episode (tasks as clusters), "
                          "per agent tool call; damage: ratio > max_ratio and increase > "
                          "rare_tolerance (intersection-union test)",
        "channel_unit": "task",
        "damage_regions": {
            "score": "drop beyond the margin", "channel": "ratio above max_ratio and per-call "
            "increase above rare_tolerance", "gap": "widening beyond the margin",
            "termination": "ratio above max_ratio and per-episode increase above "
            "termination_tolerance",
            "answer_rate": "empty answers, turns cut at the length limit: ratio above "
            "max_ratio and per-turn increase above answer_tolerance",
            "answer_length": "mean output (reasoning) length per agent turn: ratio above "
            "length_ratio"},
    }
    return cells, meta

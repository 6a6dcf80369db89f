"""report.model: schema of the report JSON, verdicts, Holm family, arm-only cells."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pytest_quantagent.metrics import summarize_arm
from pytest_quantagent.metrics.synthetic import make_tasks, synthetic_episodes
from pytest_quantagent.report.model import AnalysisConfig, CellInput, Report, analyze
from pytest_quantagent.stats import holm
from pytest_quantagent.vocab.channels import ALL_CHANNELS, Channel

DESIGN_CELL_KEYS = {
    "domain", "arm", "reference", "episodes", "reference_episodes", "paired", "tool_calls",
    "success", "budget", "channels", "failure_set", "recovery", "steps", "terminations",
    "pass_k", "margins", "verdict", "reasons",
}


def _cell(seed: int, *, n_tasks: int = 60, trials: int = 3, ratio: dict[Channel, float] | None = None,
          shift: float = 0.0, noise: float = 0.3, decisions: bool = False) -> CellInput:
    rng = np.random.default_rng(seed)
    tasks = make_tasks(rng, n_tasks)
    ref = summarize_arm(synthetic_episodes(rng, tasks, arm="bf16", trials=trials,
                                           success_noise=noise, decisions=decisions), "retail", "bf16")
    arm = synthetic_episodes(rng, tasks, arm="int4", trials=trials, ratio=ratio,
                             success_shift=shift, success_noise=noise, decisions=decisions)
    return CellInput("retail", "int4", arm, "bf16", ref)


def test_report_json_has_design_schema() -> None:
    rep = analyze([_cell(1, decisions=True)], run={"model": "synthetic", "seed": 1})
    d = rep.model_dump(mode="json")
    assert d["schema_version"] == 1 and d["run"]["model"] == "synthetic"
    cell = d["cells"][0]
    assert DESIGN_CELL_KEYS <= set(cell)
    assert set(cell["channels"]) == {c.value for c in ALL_CHANNELS}
    assert cell["channels"]["cross_role_tool"]["arm_count"] == 0
    for key in ("arm_count", "reference_count", "arm_rate", "reference_rate", "ratio",
                "ratio_ci", "p", "p_holm"):
        assert key in cell["channels"]["unknown_tool"]
    for key in ("arm", "reference", "diff", "ci", "tost_p", "mcnemar_p", "margin"):
        assert key in cell["success"]
    assert cell["budget"]["K"] == list(range(11))
    assert len(cell["budget"]["gap_ci"]) == 11 and cell["budget"]["gap"][0] == 0.0
    assert set(cell["tool_calls"]) == {"arm", "reference"}
    assert cell["pass_k"]["arm"]["1"] == pytest.approx(cell["success"]["arm"])
    assert cell["margins"]["arm"]["count"] > 0 and len(cell["margins"]["flip_rate"]) == 6
    # strict JSON (no NaN/Infinity) and the model round-trips
    text = json.dumps(d, allow_nan=False)
    assert Report.model_validate_json(text).cells[0].verdict == rep.cells[0].verdict


def test_verdicts_on_known_scenarios() -> None:
    lossless = _cell(2, n_tasks=150, trials=4, noise=0.05)
    degraded = _cell(3, shift=-0.35)
    masked = _cell(4, ratio={Channel.UNKNOWN_TOOL: 3.0})
    rep = analyze([lossless, degraded, masked])
    v = [c.verdict for c in rep.cells]
    assert v == ["LOSSLESS", "DEGRADED", "MASKED_DAMAGE"], [c.reasons for c in rep.cells]
    assert any(r.startswith("unknown_tool ×") and "Holm p=" in r for r in rep.cells[2].reasons)
    assert any("McNemar Holm p=" in r for r in rep.cells[1].reasons)
    assert any("equivalent within ±7.5 pts" in r for r in rep.cells[0].reasons)


def test_inconclusive_says_how_many_trials() -> None:
    rep = analyze([_cell(5, n_tasks=6, trials=1)])
    cell = rep.cells[0]
    assert cell.verdict == "INCONCLUSIVE"
    assert cell.n_needed is not None and cell.n_needed > 6
    assert cell.trials_needed == -(-cell.n_needed // 6)
    assert f"--quant-trials {cell.trials_needed}" in cell.reasons[-1]


def test_holm_is_across_the_whole_report() -> None:
    one = analyze([_cell(6, ratio={Channel.UNKNOWN_TOOL: 2.0})])
    two = analyze([_cell(6, ratio={Channel.UNKNOWN_TOOL: 2.0}), _cell(7)])
    c1, c2 = one.cells[0].channels["unknown_tool"], two.cells[0].channels["unknown_tool"]
    assert c1.p == pytest.approx(c2.p)
    assert c2.p_holm is not None and c1.p_holm is not None and c2.p_holm >= c1.p_holm
    # the family is exactly the raw p-values the report lists
    raws: list[float] = []
    for cell in two.cells:
        raws.append(cell.success.mcnemar_p)  # type: ignore[arg-type]
        raws += [ch.p for ch in cell.channels.values() if ch.p is not None and (ch.arm_count or ch.reference_count)]
        raws += [cell.budget.gap_p[int(k)] for k in cell.budget.gap_p_holm]  # type: ignore[misc]
    assert two.run["analysis"]["holm_family_size"] == len(raws)
    adj = holm(raws).pvalues_adjusted
    assert c2.p_holm == pytest.approx(adj[raws.index(c2.p)])


def test_findings_significant_only_before_holm_are_reported_but_do_not_decide() -> None:
    # A gap or channel ratio with raw p < alpha whose Holm-adjusted p is not is named in the
    # reasons ("... is not significant after Holm"), and never decides a verdict.
    cfg = AnalysisConfig()
    notes_seen = 0
    for seed in (23, 36):
        rep = analyze([_cell(seed, ratio={Channel.UNKNOWN_TOOL: 1.8}), _cell(seed + 100), _cell(seed + 200)])
        for cell in rep.cells:
            notes = [r for r in cell.reasons if "is not significant after Holm" in r]
            expected = [f"{name} ×" for name, ch in cell.channels.items()
                        if ch.ratio is not None and ch.ratio > cfg.max_ratio and ch.p is not None
                        and ch.p < cfg.alpha and ch.p_holm is not None and ch.p_holm >= cfg.alpha]
            for k, holm_p in cell.budget.gap_p_holm.items():
                raw = cell.budget.gap_p[int(k)]  # type: ignore[index]
                if (cell.budget.gap[int(k)] < -cfg.margin and raw is not None and raw < cfg.alpha
                        and holm_p is not None and holm_p >= cfg.alpha):
                    expected.append(f"gap at K={k}:")
            assert len(notes) == len(expected) and all(n.startswith(e) for n, e in zip(notes, expected, strict=True))
            notes_seen += len(notes)
            if cell.verdict == "MASKED_DAMAGE":  # decided by a finding that passes Holm
                assert any("Holm p=" in r and "not significant" not in r for r in cell.reasons), cell.reasons
    assert notes_seen >= 2  # seed 23: a K=2 gap (raw p 0.012); seed 36: wrong_entity ×1.8 (raw p 0.047)


def test_arm_only_cell() -> None:
    rng = np.random.default_rng(8)
    tasks = make_tasks(rng, 10)
    rep = analyze([CellInput("telecom", "bf16", synthetic_episodes(rng, tasks, arm="bf16", domain="telecom"))])
    cell = rep.model_dump(mode="json")["cells"][0]
    assert cell["reference"] is None and cell["verdict"] is None
    assert cell["success"]["arm"] is not None and cell["success"]["reference"] is None
    assert cell["channels"]["unknown_tool"]["arm_rate"] > 0
    assert set(cell["channels"]) == {c.value for c in ALL_CHANNELS}


def test_unpaired_fallback() -> None:
    rng = np.random.default_rng(9)
    ta, tb = make_tasks(rng, 30), make_tasks(rng, 30)
    ref = list(synthetic_episodes(rng, ta, arm="bf16"))
    arm = [r.model_copy(update={"task_id": "other_" + r.task_id})
           for r in synthetic_episodes(rng, tb, arm="int4")]
    cell = analyze([CellInput("retail", "int4", arm, "bf16", ref)]).cells[0]
    assert cell.paired == 0 and cell.success.method is not None
    assert cell.success.method.startswith("unpaired")
    assert any("could not be paired" in r for r in cell.reasons)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match=r"margin=2 is not allowed"):
        AnalysisConfig(margin=2)
    with pytest.raises(ValueError, match=r"max_ratio=0.5"):
        AnalysisConfig(max_ratio=0.5)
    with pytest.raises(ValueError, match="ratio_method='poisson'"):
        AnalysisConfig(ratio_method="poisson")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs rng"):
        analyze([_cell(10, n_tasks=5)], AnalysisConfig(ratio_method="bootstrap"))


def test_bootstrap_method_is_reproducible() -> None:
    cfg = AnalysisConfig(ratio_method="bootstrap", n_boot=500)
    cell_a = analyze([_cell(11)], cfg, rng=np.random.default_rng(0)).cells[0]
    cell_b = analyze([_cell(11)], cfg, rng=np.random.default_rng(0)).cells[0]
    ch_a, ch_b = cell_a.channels["unknown_tool"], cell_b.channels["unknown_tool"]
    assert ch_a.method == "cluster-bootstrap" and ch_a.ratio_ci == ch_b.ratio_ci


def test_terminal_table_one_row_per_cell() -> None:
    from rich.console import Console

    from pytest_quantagent.report.terminal import render_terminal

    rep = analyze([_cell(12, ratio={Channel.UNKNOWN_TOOL: 3.0}), _cell(13, n_tasks=5, trials=1)])
    console = Console(record=True, width=200)
    render_terminal(rep, console)
    text = console.export_text()
    assert "MASKED_DAMAGE" in text and "INCONCLUSIVE" in text
    assert "unknown_tool ×" in text and "--quant-trials" in text
    render_terminal(rep.model_dump(mode="json"), console)  # a saved report re-renders


def test_all_infrastructure_errors_arm_is_inconclusive() -> None:
    from pytest_quantagent.vocab.channels import TerminationReason

    rng = np.random.default_rng(14)
    tasks = make_tasks(rng, 5)
    ref = list(synthetic_episodes(rng, tasks, arm="bf16"))
    arm = [r.model_copy(update={"arm": "int4", "termination": TerminationReason.INFRASTRUCTURE_ERROR,
                                "success": False}) for r in ref]
    cell = analyze([CellInput("retail", "int4", arm, "bf16", ref)]).cells[0]
    assert cell.verdict == "INCONCLUSIVE" and cell.episodes == 0
    assert cell.infrastructure_errors.arm == 15
    assert "no scored episodes in one arm" in cell.reasons
    json.dumps(cell.model_dump(mode="json"), allow_nan=False)

"""report.model: schema of the report JSON, verdicts, Holm family, arm-only cells."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pytest_quantagent.metrics import summarize_arm
from pytest_quantagent.metrics.synthetic import make_tasks, synthetic_episodes
from pytest_quantagent.report.model import AnalysisConfig, CellInput, Report, analyze
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


def _identical_cell(seed: int, n_tasks: int = 120, trials: int = 2) -> CellInput:
    # deterministic decoding with shared seeds: the candidate's episodes are the reference's
    rng = np.random.default_rng(seed)
    tasks = make_tasks(rng, n_tasks)
    ref = list(synthetic_episodes(rng, tasks, arm="bf16", trials=trials))
    arm = [r.model_copy(update={"arm": "int4", "key": r.key.replace(":bf16:", ":int4:")})
           for r in ref]
    return CellInput("retail", "int4", arm, "bf16", ref)


def test_verdicts_on_known_scenarios() -> None:
    # LOSSLESS needs every channel shown outside its damage region: with independent failure
    # draws that takes ~300 failures per arm in each channel; arms identical on every paired
    # episode (issue 33) are decided by the paired channel evidence at 240 episodes
    lossless = _identical_cell(2)
    degraded = _cell(3, shift=-0.35)
    masked = _cell(4, ratio={Channel.UNKNOWN_TOOL: 3.0})
    rep = analyze([lossless, degraded, masked])
    v = [c.verdict for c in rep.cells]
    assert v == ["LOSSLESS", "DEGRADED", "MASKED_DAMAGE"], [c.reasons for c in rep.cells]
    assert any(r.startswith("unknown_tool ×") and "above ×1.2 and more than +0.2 per 100 "
               "calls (Holm p=" in r for r in rep.cells[2].reasons)
    assert any("significantly lower by more than 7.5 pts (task-cluster test Holm p=" in r
               for r in rep.cells[1].reasons)
    assert any("equivalent within ±7.5 pts" in r for r in rep.cells[0].reasons)
    # the interval shown is the one the TOST decides on
    s = rep.cells[0].success
    assert s.ci_level == pytest.approx(0.9) and s.ci is not None and -0.075 < s.ci[0] < s.ci[1] < 0.075


def test_inconclusive_gives_cluster_aware_advice() -> None:
    # 6 tasks × 1 trial: task-level and trial-level variation cannot be told apart, so the
    # advice is more tasks (named with the caller's flag), not 153 trials of 6 tasks
    rep = analyze([_cell(5, n_tasks=6, trials=1)])
    cell = rep.cells[0]
    assert cell.verdict == "INCONCLUSIVE" and cell.plan is not None
    assert cell.plan["trials"] == 1 and cell.plan["tasks"] > 6
    assert cell.n_needed == cell.plan["tasks"]
    assert f"--quant-tasks {cell.plan['tasks']}" in cell.reasons[-1]
    cli = analyze([_cell(5, n_tasks=6, trials=1)],
                  AnalysisConfig(trials_flag="--trials", tasks_flag="--num-tasks")).cells[0]
    assert f"--num-tasks {cell.plan['tasks']}" in cli.reasons[-1]


def test_holm_is_within_each_cell_by_default_and_report_wide_as_an_option() -> None:
    one = analyze([_cell(6, ratio={Channel.UNKNOWN_TOOL: 2.0})])
    two = analyze([_cell(6, ratio={Channel.UNKNOWN_TOOL: 2.0}), _cell(7)])
    c1, c2 = one.cells[0], two.cells[0]
    # a cell's verdict does not change when unrelated cells are added
    assert c1.channels["unknown_tool"].p_holm == pytest.approx(c2.channels["unknown_tool"].p_holm)
    assert c1.verdict == c2.verdict and c1.holm == c2.holm
    assert c2.holm is not None and c2.holm["scope"] == "cell"
    assert c2.holm["size"] == len(c2.holm["tests"]) >= 3 and "success" in c2.holm["tests"]
    wide = analyze([_cell(6, ratio={Channel.UNKNOWN_TOOL: 2.0}), _cell(7)],
                   AnalysisConfig(holm_scope="report"))
    w = wide.cells[0]
    assert w.holm is not None and w.holm["scope"] == "report"
    assert w.holm["size"] == c2.holm["size"] + (two.cells[1].holm or {})["size"]
    assert wide.run["analysis"]["holm_family_size"] == w.holm["size"]
    p_w, p_c = w.channels["unknown_tool"].p_holm, c2.channels["unknown_tool"].p_holm
    assert p_w is not None and p_c is not None and p_w >= p_c


def test_findings_significant_only_before_holm_are_reported_but_do_not_decide() -> None:
    # a channel or gap with raw one-sided p < alpha whose Holm p is not is named in the
    # reasons ("... is not significant after Holm") and never decides a verdict
    cfg = AnalysisConfig()
    seen = 0
    for seed in range(20, 40):
        cell = analyze([_cell(seed, ratio={Channel.UNKNOWN_TOOL: 1.6})]).cells[0]
        notes = [r for r in cell.reasons if "is not significant after Holm" in r]
        expected = [name for name, ch in cell.channels.items()
                    if ch.p is not None and ch.p < cfg.alpha and ch.p_holm is not None
                    and ch.p_holm >= cfg.alpha]
        expected += [f"gap at K={k}" for k, p in cell.budget.widening_p.items()
                     if p is not None and p < cfg.alpha and (cell.budget.gap_p_holm[k] or 1) >= cfg.alpha]
        assert len(notes) == len(expected), (notes, expected)
        assert all(n.startswith(e) for n, e in zip(notes, expected, strict=True))
        seen += len(notes)
        if cell.verdict == "MASKED_DAMAGE":
            assert any("Holm p=" in r and "not significant" not in r for r in cell.reasons)
    assert seen >= 1


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
    with pytest.raises(ValueError, match="holm_scope='run' is not allowed; allowed: cell, report"):
        AnalysisConfig(holm_scope="run")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"tight_budgets=\(0, 2\) is not allowed"):
        AnalysisConfig(tight_budgets=(0, 2))
    # budgets above the run's are refused by name, before any work
    with pytest.raises(ValueError, match=r"tight budget\(s\) \[12\] are above the run's error "
                                         r"budget 10"):
        analyze([_cell(10, n_tasks=5)], AnalysisConfig(tight_budgets=(2, 12)))


def test_terminal_table_one_row_per_cell() -> None:
    from rich.console import Console

    from pytest_quantagent.report.terminal import render_terminal

    rep = analyze([_cell(12, ratio={Channel.UNKNOWN_TOOL: 3.0}), _cell(13, n_tasks=5, trials=1)])
    console = Console(record=True, width=200)
    render_terminal(rep, console)
    text = console.export_text()
    assert "MASKED_DAMAGE" in text and "INCONCLUSIVE" in text
    assert "unknown_tool ×" in text and "--quant-tasks" in text
    render_terminal(rep.model_dump(mode="json"), console)  # a saved report re-renders


def test_terminal_table_fits_120_columns_and_every_reason_is_one_line_below_it() -> None:
    from rich.console import Console

    from pytest_quantagent.report.terminal import render_terminal

    rep = analyze([_cell(12, ratio={Channel.UNKNOWN_TOOL: 3.0}), _cell(13, n_tasks=5, trials=1)])
    console = Console(record=True, width=120, soft_wrap=False)
    render_terminal(rep, console)
    lines = console.export_text().splitlines()
    table = [ln for ln in lines if ln[:1] in "┏┃┡│├└"]
    assert table and max(len(ln) for ln in table) <= 120
    # the verdict column holds the verdict only; each reason is one whole line below the table
    for cell in rep.model_dump(mode="json")["cells"]:
        assert f"{cell['domain']} / {cell['arm']}: {cell['verdict']}" in lines
        for reason in cell["reasons"]:
            assert "  - " + " ".join(reason.split()) in lines


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


def _user_cell() -> CellInput:
    """A telecom-like cell: the arm's simulated user fails 6 device calls, the reference's 1;
    the agents are identical."""
    from pytest_quantagent.store.records import CallRecord, EpisodeRecord

    def rec(arm: str, i: int, user_fail: bool) -> EpisodeRecord:
        calls = [CallRecord(step=1, requestor="assistant", name="get_customer", error=False),
                 CallRecord(step=2, requestor="user", name="toggle_airplane_mode",
                            error=user_fail, channel=Channel.USER_TOOL_ERROR if user_fail else None),
                 CallRecord(step=3, requestor="assistant", name="nope", error=i % 4 == 0,
                            channel=Channel.UNKNOWN_TOOL if i % 4 == 0 else None)]
        return EpisodeRecord(key=f"telecom:{arm}:t{i}:0", model="m", arm=arm, backend="mock",
                             domain="telecom", task_id=f"t{i}", trial=0, seed=i, max_errors=10,
                             max_steps=200, termination=TerminationReason.USER_STOP, reward=1.0,
                             success=True, n_errors=sum(c.error for c in calls), steps=6,
                             calls=calls)

    from pytest_quantagent.vocab.channels import TerminationReason

    arm = [rec("int4", i, i < 6) for i in range(20)]
    ref = [rec("bf16", i, i < 1) for i in range(20)]
    return CellInput("telecom", "int4", arm, "bf16", ref)


def test_user_side_failures_are_reported_apart_in_json_with_a_reason() -> None:
    # issue 22.6: count and per-episode rate per side, kept out of the agent's channels
    # (rates per agent call), and a reason when the arms differ
    rep = analyze([_user_cell()])
    cell = rep.model_dump(mode="json")["cells"][0]
    assert cell["user_side"]["arm"] == {"calls": 20, "failures": 6, "failures_per_episode": 0.3,
                                        "by_channel": {"user_tool_error": 6}}
    assert cell["user_side"]["reference"]["failures"] == 1
    assert cell["user_side"]["reference"]["failures_per_episode"] == pytest.approx(0.05)
    assert cell["channels"]["user_tool_error"]["arm_count"] == 0
    assert cell["tool_calls"] == {"arm": 40, "reference": 40}  # agent calls only
    assert cell["channels"]["unknown_tool"]["arm_rate"] == pytest.approx(5 / 40)
    assert any(r.startswith("user-side failed calls differ: arm 6 (0.30/episode) vs reference 1 "
                            "(0.05/episode)") for r in cell["reasons"])
    from pytest_quantagent.report.json_io import validate_report

    validate_report(rep.model_dump(mode="json"))


def test_user_side_failures_in_terminal_and_html() -> None:
    from rich.console import Console

    from pytest_quantagent.report.html import render_html
    from pytest_quantagent.report.terminal import render_terminal

    rep = analyze([_user_cell()])
    console = Console(record=True, width=220)
    render_terminal(rep, console)
    text = console.export_text()
    assert "user-side failures" in text and "1 (0.05/ep) → 6 (0.30/ep)" in text
    page = render_html(rep.model_dump(mode="json"))
    assert '<table class="user-side">' in page
    assert "<td>20</td><td>6</td><td>0.30</td><td class=l>user_tool_error 6</td>" in page


def test_partial_pairing_budgets_pass_k_and_silent_reference_are_said() -> None:
    rng = np.random.default_rng(30)
    tasks = make_tasks(rng, 20)
    ref = list(synthetic_episodes(rng, tasks, arm="bf16", trials=2))
    arm = list(synthetic_episodes(rng, tasks, arm="int4", trials=3))
    cell = analyze([CellInput("retail", "int4", arm, "bf16", ref)]).cells[0]
    # partial pairing: 40 pairs, 20 of the arm's episodes unpaired, said and blocking LOSSLESS
    assert cell.pairing is not None and (cell.pairing["paired"], cell.pairing["unpaired_arm"],
                                         cell.pairing["unpaired_reference"]) == (40, 20, 0)
    assert any(r.startswith("40 paired episodes; 20 of the arm's") for r in cell.reasons)
    assert cell.verdict != "LOSSLESS"
    # pass^k only for k <= the fewest trials per task (2 here, though the arm ran 3)
    assert set(cell.pass_k["arm"] or {}) == {"1", "2"}
    # arms at different budgets: compared at the common one, and said
    short = [r.model_copy(update={"max_errors": 5}) for r in ref]
    c2 = analyze([CellInput("retail", "int4", arm, "bf16", short)]).cells[0]
    assert c2.success.run_budget == 5 and c2.budget.K == list(range(6))
    assert any("different error budgets (arm 10, reference 5)" in r and "K=5" in r
               for r in c2.reasons)
    # a reference without agent tool calls does not drop the channels silently
    silent = [r.model_copy(update={"calls": []}) for r in ref]
    c3 = analyze([CellInput("retail", "int4", arm, "bf16", silent)]).cells[0]
    assert c3.verdict == "INCONCLUSIVE"
    assert "agent tool calls: arm 573, reference 0; channels cannot be compared without calls " \
        "on both sides" in c3.reasons
    assert "unknown_tool: 35 vs 0 failures but a side has no agent tool call, so it cannot be " \
        "judged" in c3.reasons


def test_the_table_with_user_events_and_a_sequential_block_keeps_its_right_border_at_120() -> None:
    # the demo's table (two INCONCLUSIVE cells with user events, stopped at look 4 of 4) was
    # cropped at 120 columns: the user-events column's minimum width pushed the verdict
    # column past the edge
    from rich.console import Console

    from pytest_quantagent.report.terminal import build_table

    data = analyze([_cell(12, ratio={Channel.UNKNOWN_TOOL: 3.0}), _cell(13)]).model_dump(mode="json")
    for cell in data["cells"]:
        cell["user_side"] = {
            "arm": {"calls": 40, "failures": 0, "events": {"not_understood": 47, "premature_transfer": 18}},
            "reference": {"calls": 40, "failures": 0, "events": {"not_understood": 1, "premature_transfer": 14}}}
        cell["sequential"] = {"stopped": "cap", "looks_taken": 4, "planned_looks": [{}] * 4}
    console = Console(record=True, width=120, soft_wrap=False)
    console.print(build_table(data))
    table = [ln for ln in console.export_text().splitlines() if ln[:1] in "┏┃┡│├└"]
    assert table and all(ln.rstrip()[-1] in "┓┃┩│┤┘" for ln in table), "\n".join(table)
    text = "\n".join(table)
    assert "not understood" in text and "1 → 47" in text and "14 → 18" in text
    assert "user-side failures" not in text  # no failed user call on either side: no column

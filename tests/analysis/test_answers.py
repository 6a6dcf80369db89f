"""Answer-level channels in the cell (issue 38 item 1) on simulated cells with known truth,
records of schema 1 (no turns: unknown, not zero), the config's thresholds, and the
rendering of answer tests and serving settings (terminal, HTML escaped)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from rich.console import Console

from pytest_quantagent.metrics.episode import ANSWER_COLUMNS, answer_row, summarize_arm
from pytest_quantagent.metrics.synthetic import (
    Answers,
    World,
    add_answers,
    make_tasks,
    simulate_world,
    synthetic_episodes,
)
from pytest_quantagent.report.html import render_html
from pytest_quantagent.report.model import AnalysisConfig, CellInput, analyze
from pytest_quantagent.report.terminal import render_terminal
from pytest_quantagent.store.records import AnswerTurn, EpisodeRecord
from pytest_quantagent.vocab.channels import Channel

QUIET = World(n_tasks=300, trials=1, success_noise=0.0, shared=True,
              rates=((Channel.UNKNOWN_TOOL, 0.001),))


def _cell(truth: Answers, seed: int = 3, cfg: AnalysisConfig | None = None, **kw):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    a, r = add_answers(rng, *simulate_world(rng, QUIET), truth)
    return analyze([CellInput("telecom", "int4", a, "bf16", r, **kw)], cfg or AnalysisConfig()).cells[0]


def test_three_times_longer_answers_at_a_flat_score_are_masked_damage() -> None:
    c = _cell(Answers(token_ratio=3.0))
    assert c.success.diff == 0.0 and c.verdict == "MASKED_DAMAGE"
    t = c.answer_tests["output_tokens"]
    assert 2.5 < t["ratio"] < 3.5 and t["p_holm"] < 0.05 and t["threshold"] == 1.5
    assert any(r.startswith("output tokens per agent turn ×") and "above ×1.5 (Holm p=" in r
               for r in c.reasons), c.reasons


def test_longer_answers_below_the_length_ratio_are_not_damage_and_not_needed_for_lossless() -> None:
    c = _cell(Answers(token_ratio=1.2))  # x1.2 < x1.5: no damage
    assert c.verdict == "LOSSLESS", c.reasons
    assert c.answer_tests["output_tokens"]["p_holm"] > 0.05
    # the threshold is the config's
    strict = _cell(Answers(token_ratio=1.2), cfg=AnalysisConfig(length_ratio=1.05))
    assert strict.verdict == "MASKED_DAMAGE", strict.reasons


def test_empty_answers_twenty_times_the_reference_are_masked_damage_and_counted_once() -> None:
    c = _cell(Answers(empty=0.002, empty_ratio=20))
    assert c.verdict == "MASKED_DAMAGE", c.reasons
    t = c.answer_tests["empty_answer"]
    assert t["arm_total"] > 10 * max(t["reference_total"], 1) / 2
    assert any(r.startswith("empty answers (no text, no tool call)") for r in c.reasons)
    # the simulated empties were counted as malformed calls (as the engine does): the
    # channel is given them back, so the one event is in one test
    assert c.channels["malformed_call"].arm_count == 0
    assert "channel:malformed_call" not in c.holm["tests"]


def test_equal_empty_answers_are_shown_outside_the_region() -> None:
    c = _cell(Answers(empty=0.002))
    assert c.verdict == "LOSSLESS", c.reasons
    assert c.answer_tests["empty_answer"]["shown_outside"] is True


def test_cut_answers_use_the_channels_rule() -> None:
    c = _cell(Answers(cut=0.002, cut_ratio=15))
    assert c.verdict == "MASKED_DAMAGE"
    assert any(r.startswith("turns cut at the length limit") for r in c.reasons), c.reasons


def test_schema_1_records_are_unknown_not_zero() -> None:
    rng = np.random.default_rng(5)
    tasks = make_tasks(rng, 20)
    old = list(synthetic_episodes(rng, tasks, arm="bf16", trials=1))
    assert all(r.turns is None for r in old)
    d = summarize_arm(old, "retail", "bf16")
    assert d.answers is not None and np.isnan(d.answers).all()
    line = old[0].model_dump_json().replace('"schema_version":2', '"schema_version":1')
    line = line.replace(',"turns":null', "")
    back = EpisodeRecord.model_validate_json(line)
    assert back.schema_version == 1 and back.turns is None
    c = analyze([CellInput("retail", "int4", list(synthetic_episodes(rng, tasks, arm="int4", trials=1)),
                           "bf16", old)]).cells[0]
    assert c.answer_tests is None and "answer:output_tokens" not in c.holm["tests"]


def test_answer_row_unknown_fields_stay_unknown() -> None:
    row = answer_row([AnswerTurn(output_tokens=5, finish_reason="length"),
                      AnswerTurn(output_tokens=None, finish_reason="stop", empty=True)])
    got = dict(zip(ANSWER_COLUMNS, row, strict=True))
    assert got["turns"] == 2 and got["length_cut"] == 1 and got["empty"] == 1
    assert math.isnan(got["output_tokens"]) and math.isnan(got["reasoning_tokens"])
    assert got["reasoning_turns"] == 0
    assert all(math.isnan(x) for x in answer_row(None))


def test_a_partly_recorded_arm_keeps_empties_in_malformed_call() -> None:
    rng = np.random.default_rng(3)
    a, r = add_answers(rng, *simulate_world(rng, QUIET), Answers(empty=0.002, empty_ratio=20))
    ans = r.answers.copy()
    ans[:10] = np.nan  # ten reference episodes predate the turns
    c = analyze([CellInput("telecom", "int4", a, "bf16", replace(r, answers=ans))]).cells[0]
    assert c.channels["malformed_call"].arm_count > 0
    assert any("empty answers are counted in malformed_call too" in x for x in c.reasons)
    assert any("recorded for 290 of 300 paired episodes" in x for x in c.reasons)


@pytest.mark.parametrize(("kw", "bad"), [({"length_ratio": 1.0}, "length_ratio=1.0"),
                                         ({"length_ratio": math.inf}, "length_ratio=inf"),
                                         ({"answer_tolerance": 0.0}, "answer_tolerance=0.0"),
                                         ({"answer_tolerance": 1.5}, "answer_tolerance=1.5")])
def test_bad_thresholds_are_refused_naming_them(kw: dict[str, float], bad: str) -> None:
    with pytest.raises(ValueError, match=f"^{bad} is not allowed; "):
        AnalysisConfig(**kw)


def test_not_comparable_settings_make_the_cell_inconclusive_and_reports_show_them() -> None:
    evil = "<script>alert(1)</script>"
    block = {"reference": "bf16", "arm": "int4", "accepted": [], "settings": {
        "tool_parser": {"reference": "qwen3_coder", "arm": evil, "status": "differs",
                        "source": {"reference": "the server", "arm": "the server"}},
        "temperature": {"reference": "0", "arm": "0", "status": "same",
                        "source": {"reference": "x", "arm": "x"}}}}
    c = _cell(Answers(token_ratio=3.0), comparability=block)
    assert c.verdict == "INCONCLUSIVE"
    assert c.reasons[0] == f"not comparable: tool_parser: qwen3_coder vs {evil}"
    assert not any("Holm p" in r for r in c.reasons)  # no claim either way
    rng = np.random.default_rng(3)
    a, r = add_answers(rng, *simulate_world(rng, QUIET), Answers(token_ratio=3.0))
    report = analyze([CellInput("telecom", "int4", a, "bf16", r, comparability=block)]).model_dump(mode="json")
    page = render_html(report)
    assert evil not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "Serving settings compared before any episode" in page and "Answers per agent turn" in page
    con = Console(record=True, width=200)
    render_terminal(report, con)
    text = con.export_text()
    assert "telecom/int4: answers per agent turn (reference → arm): empty answer" in text
    assert "output tokens 1" in text and "telecom/int4: serving compared (reference vs arm): 2 " \
        f"settings; differs: tool_parser qwen3_coder vs {evil}; same: temperature" in text


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_length_ratio_matches_a_poisson_gee_reference(seed: int) -> None:
    # Independent reference: statsmodels 0.15 GEE, Poisson family, log(turns) offset, an arm
    # indicator, tasks as clusters, independence working correlation; its exp(beta) is the
    # ratio of mean tokens per turn (equal to 1e-9), its robust Wald 95% CI a different
    # interval from ours (score-inverted, strata by paired episode, t(G-1)), so its bounds
    # are compared within 8%.
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(seed)
    a, r = add_answers(rng, *simulate_world(rng, World(n_tasks=114, trials=1)),
                       Answers(token_ratio=2.0))
    t = analyze([CellInput("retail", "int4", a, "bf16", r)]).cells[0].answer_tests["output_tokens"]
    y = np.concatenate([a.answers[:, 1], r.answers[:, 1]])
    turns = np.concatenate([a.answers[:, 0], r.answers[:, 0]])
    x = sm.add_constant(np.concatenate([np.ones(a.n), np.zeros(r.n)]))
    _, groups = np.unique(np.concatenate([a.task_ids, r.task_ids]).astype(str), return_inverse=True)
    fit = sm.GEE(y, x, groups=groups, family=sm.families.Poisson(), offset=np.log(turns),
                 cov_struct=sm.cov_struct.Independence()).fit()
    assert t["ratio"] == pytest.approx(math.exp(fit.params[1]), rel=1e-9)
    lo, hi = np.exp(fit.conf_int()[1])
    assert t["ratio_ci"][0] == pytest.approx(lo, rel=0.08)
    assert t["ratio_ci"][1] == pytest.approx(hi, rel=0.08)

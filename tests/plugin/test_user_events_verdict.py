"""Issue 35 item 4: a difference the simulated user makes is not the model's damage.

On the fake cells of fakes.py int4 makes 3 unknown_tool failures where bf16 makes 1 (every
3rd task): MASKED_DAMAGE. Here the user also reports not understanding int4's phrasing in
exactly those episodes (20 tasks, against 2 for bf16): the arms differ through the user, and
the verdict says so instead of claiming damage.
"""

from __future__ import annotations

import json

import pytest

from tests.plugin.fakes import FAKE_CONFTEST

USER_EVENTS = FAKE_CONFTEST + '''
import os

_run_cell = pytest_quantagent_run_cell


def pytest_quantagent_run_cell(config, cell):
    eps = _run_cell(config, cell)
    if os.environ.get("FAKE_USER_EVENTS") != "1":
        return eps

    def misread(records, every):
        return [r.model_copy(update={"user_events": {"not_understood": 1}})
                if int(r.task_id) % every == 0 else r for r in records]

    return type(eps)(arm=misread(eps.arm, 3), reference=misread(eps.reference, 30))
'''

BODY = """
def test_cell(quant_cell):
    assert quant_cell.episodes
"""


@pytest.mark.parametrize("events", [False, True])
def test_misread_phrasing_is_reported_through_the_user_not_as_damage(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, events: bool) -> None:
    monkeypatch.setenv("FAKE_USER_EVENTS", "1" if events else "0")
    pytester.makeconftest(USER_EVENTS)
    pytester.makepyfile(BODY)
    result = pytester.runpytest("--domain=telecom", "--quant=int4", "--quant-report=r.json",
                                "--quant-html=r.html")
    result.assert_outcomes(passed=1)
    cell = json.loads((pytester.path / "r.json").read_text())["cells"][0]
    if not events:  # the control: the same failures with no user events are damage
        assert cell["verdict"] == "MASKED_DAMAGE", cell["reasons"]
        assert "events" not in cell["user_side"]["arm"]
        return
    assert cell["verdict"] == "INCONCLUSIVE", cell["reasons"]
    assert cell["reasons"][0].startswith(
        "the arms differ through the simulated user: 20 vs 2 not-understood turns (p=")
    assert cell["user_side"]["arm"]["events"] == {"not_understood": 20}
    assert cell["user_side"]["reference"]["events"] == {"not_understood": 2}
    result.stdout.fnmatch_lines(["*user events*", "*not understood*", "*2 → 20*"])
    page = (pytester.path / "r.html").read_text()
    assert "user events (of its own accord)" in page and "not_understood 20" in page

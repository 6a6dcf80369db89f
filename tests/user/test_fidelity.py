"""The scripted user against the fidelity corpus: agent messages in the style of real
instruction-tuned chat models, each with its expected reaction (see ``fidelity_harness``).

Reported: the exact-reaction rate overall, per domain and on the held-out batches (``*_b``, ``*_c``,
written after the classifier worked on ``*_a``; ``*_d`` and later, written by another hand
before reading the classifier's rules), and the number of spurious state-changing device calls. Run ``python3 -m pytest tests/user/test_fidelity.py -s`` to see the figures,
or ``PYTHONPATH=. python3 tests/user/fidelity_harness.py [GLOB]`` for every miss.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from fidelity_harness import Result, load, play, playable, report

from pytest_quantagent.env.registry import get_domain

#: The misreading kinds of issues 22 and 35, each covered by at least ten cases.
MISREADINGS = (
    "negation", "recap", "empathy", "conditional", "summary", "check_read", "repeat",
    "contradiction", "ignored_question", "offer", "transfer", "fact_question", "list_question",
    "address_zip",
    # issue 35
    "unwanted_offer", "wrong_detail", "multi_part", "keep", "not_understood", "first_turn",
)


@pytest.fixture(scope="module")
def results() -> list[Result]:
    return [play(c) for c in load() if not c.get("tau2")]


def test_the_corpus_is_big_varied_and_covers_every_kind() -> None:
    everything = load()  # bundled and official (``*_tau2_*``) files: unique across both
    for key in ("agent", "id"):
        seen: dict[str, str] = {}
        dups = []
        for c in everything:
            if c[key] in seen:
                dups.append(f"{seen[c[key]]} and {c['_where']}")
            seen.setdefault(c[key], c["_where"])
        assert not dups, f"duplicate {key}s: {dups}"
    cases = [c for c in everything if not c.get("tau2")]
    assert len(cases) >= 300
    kinds = Counter(k for c in cases for k in c["kinds"])
    thin = {k: kinds[k] for k in MISREADINGS if kinds[k] < 10}
    assert not thin, f"misreading kinds with fewer than 10 cases: {thin}"
    # Every telecom device tool the user has is exercised by some expected reaction.
    telecom = get_domain("telecom")
    expected = {n for c in cases for n in c["expect"].get("calls", [])}
    expected |= {n for c in cases for a in c.get("alt", []) for n in a.get("calls", [])}
    device_tools = {i.tool for i in telecom.device_intents}
    assert device_tools - expected == set()
    # Every retail scenario kind appears.
    retail = get_domain("retail")
    kinds_of = {t.id: (t.description.notes or "") for t in retail.tasks if t.description}
    used = {kinds_of[c["task"]] for c in cases if c["domain"] == "retail"}
    assert {n for n in kinds_of.values()} <= used


def test_exact_reaction_rates_and_no_spurious_state_changes(
    results: list[Result], record_property: Any
) -> None:
    rep = report(results)
    held_out = report([r for r in results if not r.case["_where"].split(":")[0].endswith("_a.jsonl")])
    figures = {k: v for k, v in rep.items() if k != "misses"}
    figures["held_out_exact"] = held_out["exact"]
    record_property("fidelity", json.dumps(figures))
    print("\nfidelity:", json.dumps(figures))
    misses = "\n".join(rep["misses"])
    assert rep["spurious_state_changes"] == 0, misses
    # Every batch is kept as a regression test once its first pass is reported: all exact.
    assert rep["exact"] == 1.0, misses


def test_a_wrong_reaction_is_caught_by_the_judge() -> None:
    """The harness itself: a case whose expectation is wrong fails with the reasons."""
    case = dict(next(c for c in load("telecom_a.jsonl") if c["id"] == "ta003"))
    case["expect"] = {"calls": ["toggle_data"], "say": ["no such words"], "end": "stop"}
    r = play(case)
    assert not r.exact
    assert any("calls" in p for p in r.problems)
    assert any("no such words" in p for p in r.problems)
    assert any("ended" in p for p in r.problems)
    assert r.spurious_writes == ["toggle_airplane_mode"]


def test_official_task_cases(record_property: Any) -> None:
    """Cases on official τ²-bench tasks (``"tau2": true``), played on the official data;
    skipped without it."""
    cases = [c for c in load() if c.get("tau2")]
    assert len(cases) >= 60
    if not all(playable(c) for c in cases):
        pytest.skip("tau2-bench data not found (set QUANTAGENT_TAU2_DATA or provide ../shared/tau2)")
    rep = report([play(c) for c in cases])
    figures = {k: v for k, v in rep.items() if k != "misses"}
    record_property("fidelity_tau2", json.dumps(figures))
    print("\nfidelity (official tasks):", json.dumps(figures))
    misses = "\n".join(rep["misses"])
    assert rep["spurious_state_changes"] == 0, misses
    assert rep["exact"] == 1.0, misses

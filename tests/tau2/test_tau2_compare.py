"""Grouping results files into reference/candidates per domain, and the pairing statement."""

from __future__ import annotations

from pathlib import Path

import pytest
from tau2_builders import Conversation, results, simulation, write_json

from pytest_quantagent.errors import DataFileError
from pytest_quantagent.tau2.compare import pairing_note, read_comparison


def _write(path: Path, domain: str, tasks: list[str]) -> Path:
    msgs = Conversation().call("get_order_details", '{"ok": 1}').messages
    return write_json(path, results([simulation(t, msgs) for t in tasks], domain=domain))


def test_first_file_is_the_reference_per_domain(tmp_path: Path) -> None:
    bf16 = _write(tmp_path / "bf16.json", "retail", ["1", "2"])
    int4 = _write(tmp_path / "int4.json", "retail", ["1", "2"])
    tel_bf16 = _write(tmp_path / "tel_bf16.json", "telecom", ["7"])
    tel_int4 = _write(tmp_path / "tel_int4.json", "telecom", ["8"])
    groups = read_comparison([bf16, int4, tel_bf16, tel_int4])
    assert [(g.domain, g.reference.label, [c.label for c in g.candidates]) for g in groups] == [
        ("retail", "bf16", ["int4"]),
        ("telecom", "tel_bf16", ["tel_int4"]),
    ]
    retail, telecom = groups
    assert pairing_note(retail.reference, retail.candidates[0]) == (
        "int4 vs bf16: paired by (task_id, trial) on 2 episodes (2 candidate, 2 reference)"
    )
    assert pairing_note(telecom.reference, telecom.candidates[0]).startswith(
        "tel_int4 vs tel_bf16: unpaired"
    )


def test_repeated_names_get_distinct_labels(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _write(tmp_path / "a" / "run.json", "retail", ["1"])
    second = _write(tmp_path / "b" / "run.json", "retail", ["1"])
    (group,) = read_comparison([first, second])
    assert (group.reference.label, group.candidates[0].label) == ("run", "run#2")
    assert {r.arm for r in group.candidates[0].records} == {"run#2"}


def test_explicit_labels(tmp_path: Path) -> None:
    a = _write(tmp_path / "x.json", "retail", ["1"])
    b = _write(tmp_path / "y.json", "retail", ["1"])
    (group,) = read_comparison([a, b], labels=["bf16", "int4"])
    assert [group.reference.label, group.candidates[0].label] == ["bf16", "int4"]
    with pytest.raises(ValueError, match="3 labels given for 2 files"):
        read_comparison([a, b], labels=["bf16", "int4", "fp8"])
    with pytest.raises(ValueError, match="repeated: int4"):
        read_comparison([a, b], labels=["int4", "int4"])


def test_needs_two_files_and_refuses_bad_ones(tmp_path: Path) -> None:
    a = _write(tmp_path / "x.json", "retail", ["1"])
    with pytest.raises(ValueError, match="at least one candidate"):
        read_comparison([a])
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    with pytest.raises(DataFileError, match=r"bad\.json"):
        read_comparison([a, bad])

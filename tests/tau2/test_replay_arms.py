"""Replay arms: arms of a ``--quant-config`` TOML that point at results files (an arm source,
spelled ``backend = "replay"``, for which no backend exists)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tau2_builders import Conversation, results, simulation, write_dir, write_json

from pytest_quantagent.backends.registry import get_backend_factory, list_backends
from pytest_quantagent.errors import DataFileError, UnknownNameError
from pytest_quantagent.quant.arms import load_arms_config
from pytest_quantagent.quant.replay import ReplayArmError
from pytest_quantagent.runner.preflight import preflight
from pytest_quantagent.tau2.arms import load_replay_arm, load_replay_runs


def _file(path: Path, domain: str, errors: int) -> Path:
    sims = []
    for t in range(3):
        conv = Conversation()
        for _ in range(errors):
            conv.call("get_order_details", "Error: Order not found", error=True)
        conv.call("get_order_details", '{"ok": 1}').say("user", "###STOP###")
        sims.append(simulation(str(t), conv.messages, reward=1.0 if t else 0.0))
    return write_json(path, results(sims, domain=domain))


@pytest.fixture
def config(tmp_path: Path) -> Path:
    _file(tmp_path / "bf16.json", "retail", errors=0)
    _file(tmp_path / "int4_retail.json", "retail", errors=2)
    write_dir(
        tmp_path / "int4_telecom",
        results(
            [
                simulation(
                    "9",
                    Conversation()
                    .call("get_order_details", "Error: Order not found", error=True)
                    .messages,
                )
            ],
            domain="telecom",
        ),
    )
    cfg = tmp_path / "arms.toml"
    cfg.write_text(
        "[arms.bf16]\n"
        'backend = "replay"\n'
        f'path = "{tmp_path / "bf16.json"}"\n'
        "\n[arms.int4]\n"
        'backend = "replay"\n'
        'model = "my-org/model-int4"\n'
        f'paths = ["{tmp_path / "int4_retail.json"}", "{tmp_path / "int4_telecom"}"]\n'
    )
    return cfg


def test_records_come_straight_from_the_files(config: Path) -> None:
    arms = load_arms_config(config)
    ref = load_replay_arm(arms["bf16"])
    cand = load_replay_arm(arms["int4"], domain="retail")
    assert [(r.task_id, r.trial) for r in ref] == [("0", 0), ("1", 0), ("2", 0)]
    assert {r.arm for r in ref} == {"bf16"} and {r.arm for r in cand} == {"int4"}
    assert {r.backend for r in ref + cand} == {"replay"}
    assert [r.n_errors for r in ref] == [0, 0, 0]
    assert [r.n_errors for r in cand] == [2, 2, 2]
    assert [r.success for r in cand] == [False, True, True]
    assert {r.model for r in ref} == {"test-model"}  # from the file's info
    assert {r.model for r in cand} == {"my-org/model-int4"}  # the config wins


def test_domain_selects_among_files(config: Path) -> None:
    arms = load_arms_config(config)
    tel = load_replay_arm(arms["int4"], domain="telecom")
    assert [(r.domain, r.task_id) for r in tel] == [("telecom", "9")]
    assert len(load_replay_arm(arms["int4"])) == 4  # every file when no domain is asked
    with pytest.raises(ReplayArmError, match=r"no results file for domain 'airline'.*retail"):
        load_replay_arm(arms["bf16"], domain="airline")


def test_flags_available_per_file(config: Path) -> None:
    runs = load_replay_runs(load_arms_config(config)["int4"])
    assert [(r.domain, r.format) for r in runs] == [("retail", "json"), ("telecom", "dir")]


def test_a_replay_arm_is_a_results_source_not_a_backend(config: Path) -> None:
    arms = load_arms_config(config)
    assert {a.source for a in arms.values()} == {"results"}
    assert {a.backend for a in arms.values()} == {"replay"}  # the user's spelling is kept
    assert "replay" not in list_backends()
    with pytest.raises(UnknownNameError, match="unknown backend 'replay'"):
        get_backend_factory("replay")
    # Its pre-flight is its files: present here, so nothing to report.
    assert preflight({f"arm {a.label!r}": a for a in arms.values()}) == []


def test_results_key_is_an_alias(tmp_path: Path) -> None:
    a = _file(tmp_path / "a.json", "retail", errors=0)
    b = _file(tmp_path / "b.json", "telecom", errors=1)
    cfg = tmp_path / "arms.toml"
    cfg.write_text(
        f'[arms.x]\nbackend = "replay"\nresults = "{a}"\n'
        f'[arms.y]\nbackend = "replay"\nresults = ["{a}", "{b}"]\n'
        '[arms.z]\nbackend = "replay"\npaths = 3\n'
    )
    arms = load_arms_config(cfg)
    assert len(load_replay_arm(arms["x"])) == 3
    assert [r.domain for r in load_replay_arm(arms["y"])] == ["retail"] * 3 + ["telecom"] * 3
    with pytest.raises(ReplayArmError, match="'paths' must be a list of results paths, got 3"):
        load_replay_arm(arms["z"])


def test_arm_without_path(tmp_path: Path) -> None:
    cfg = tmp_path / "arms.toml"
    cfg.write_text('[arms.int4]\nbackend = "replay"\n')
    arm = load_arms_config(cfg)["int4"]
    with pytest.raises(ReplayArmError, match=r'path = "results/int4.json"'):
        load_replay_arm(arm)
    [problem] = preflight({"arm 'int4'": arm})
    assert 'names no results file; add path = "results/int4.json"' in problem.cause


def test_missing_file_fails_at_preflight(tmp_path: Path) -> None:
    cfg = tmp_path / "arms.toml"
    cfg.write_text(f'[arms.int4]\nbackend = "replay"\npath = "{tmp_path / "gone.json"}"\n')
    arm = load_arms_config(cfg)["int4"]
    [problem] = preflight({"arm 'int4'": arm})
    assert problem.cause == f"results file(s) not found: {tmp_path / 'gone.json'}"
    assert problem.where == str(tmp_path / "gone.json")
    with pytest.raises(DataFileError, match=r"gone\.json"):
        load_replay_arm(arm)


def test_bad_file_refused_other_arms_unaffected(tmp_path: Path, config: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"info": {"environment_info": {"domain_name": "retail"}}, "simulations": [{')
    cfg = tmp_path / "more.toml"
    cfg.write_text(config.read_text() + f'\n[arms.fp8]\nbackend = "replay"\npath = "{bad}"\n')
    arms = load_arms_config(cfg)
    with pytest.raises(DataFileError, match=r"simulations\[0\]"):
        load_replay_arm(arms["fp8"])
    assert len(load_replay_arm(arms["bf16"])) == 3


def test_edited_file_is_read_again(tmp_path: Path) -> None:
    p = _file(tmp_path / "a.json", "retail", errors=0)
    cfg = tmp_path / "arms.toml"
    cfg.write_text(f'[arms.bf16]\nbackend = "replay"\npath = "{p}"\n')
    arm = load_arms_config(cfg)["bf16"]
    assert [r.n_errors for r in load_replay_arm(arm)] == [0, 0, 0]
    _file(p, "retail", errors=1)
    assert [r.n_errors for r in load_replay_arm(arm)] == [1, 1, 1]

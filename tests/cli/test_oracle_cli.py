"""`quantagent oracle`, `domains` and `replay` end to end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_quantagent.cli import main
from pytest_quantagent.env import registry
from pytest_quantagent.errors import EXIT_USAGE

TOY_DIR = Path(__file__).resolve().parent.parent / "env" / "toy_domains"


@pytest.fixture
def toy_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("QUANTAGENT_DOMAINS_DIR", str(TOY_DIR))
    registry.clear_cache()
    yield TOY_DIR
    registry.clear_cache()


def test_oracle_json_on_toy(toy_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["oracle", "--domain", "toy", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {k: out[k] for k in ("domain", "tasks", "succeeded", "success_rate", "failed")} == {
        "domain": "toy", "tasks": 3, "succeeded": 3, "success_rate": 1.0, "failed": []}
    assert "NL_ASSERTION not evaluated on 1 task" in out["note"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_conversational_oracle_on_toy(toy_dir: Path, seed: int, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_quantagent.runner.oracle import run_oracle

    domain = registry.get_domain("toy")
    results = run_oracle(domain, seed=seed, style="conversational")
    assert all(r.success for r in results), [r.reason for r in results]
    deposit = next(r for r in results if r.task_id == "deposit").outcome.messages
    texts = [m.content or "" for m in deposit if m.role == "assistant"]
    assert any("deposit" in t and ("confirm" in t or "go ahead" in t) for t in texts)
    assert any(m.role == "user" and "Ada Lovelace" in (m.content or "") for m in deposit)


def test_oracle_reports_failing_tasks_with_reason(toy_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = json.loads((toy_dir / "toy" / "tasks.json").read_text())
    # An assertion the gold actions cannot satisfy: wifi is on after the user toggles it.
    tasks[1]["evaluation_criteria"]["env_assertions"][0]["arguments"]["expected"] = False
    data = tmp_path / "domains" / "toy"
    data.mkdir(parents=True)
    (data / "tasks.json").write_text(json.dumps(tasks))
    assert main(["oracle", "--domain", "toy", "--tau2-data", str(tmp_path), "--json", "--tasks", "deposit,wifi"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["tasks"] == 2 and out["succeeded"] == 1
    [failed] = out["failed"]
    assert failed["task_id"] == "wifi"
    assert "env assertions failed: assert_wifi" in failed["reason"] and "termination=user_stop" in failed["reason"]


def test_unknown_domain_and_task(toy_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["oracle", "--domain", "nope"]) == EXIT_USAGE
    assert "unknown domain 'nope'; known domains: toy" in capsys.readouterr().err
    assert main(["oracle", "--domain", "toy", "--tasks", "zzz"]) == EXIT_USAGE
    assert "unknown toy task id 'zzz' (no close match; 3 task ids in domain 'toy')" in capsys.readouterr().err


def test_domains_listing(toy_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["domains", "--json"]) == 0
    [d] = json.loads(capsys.readouterr().out)["domains"]
    assert d["domain"] == "toy" and d["tasks"] == 3 and d["user_tools"] == ["check_wifi", "toggle_wifi"]
    assert "deposit" in d["agent_tools"] and d["splits"] == {"base": 3}


def _results_file(tmp_path: Path, tool_content: str) -> Path:
    sim = {"task_id": "deposit", "messages": [
        {"role": "assistant", "content": "Hi! How can I help you today?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "name": "deposit", "arguments": {"account_id": "a1", "amount": 5}, "requestor": "assistant"},
            {"id": "c2", "name": "get_account", "arguments": {"account_id": "nope"}, "requestor": "assistant"}]},
        {"role": "tool", "id": "c1", "content": tool_content, "requestor": "assistant", "error": False},
        {"role": "tool", "id": "c2", "content": "Error: Account not found", "requestor": "assistant", "error": True},
        {"role": "user", "content": None, "tool_calls": [{"id": "u1", "name": "check_wifi", "arguments": {}}]},
        {"role": "tool", "content": "wifi off"},
    ]}
    p = tmp_path / "results.json"
    p.write_text(json.dumps({"info": {"environment_info": {"domain_name": "toy"}}, "simulations": [sim]}))
    (tmp_path / "domains" / "toy").mkdir(parents=True, exist_ok=True)
    (tmp_path / "domains" / "toy" / "tasks.json").write_text((TOY_DIR / "toy" / "tasks.json").read_text())
    return p


def test_replay_matches_and_reports_mismatch(toy_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Whitespace differs from ours: results are compared as parsed JSON.
    good = '{"account_id":"a1","name":"Ada","balance":15.0,"frozen":false}'
    p = _results_file(tmp_path, good)
    assert main(["fidelity", "--tau2-results", str(p), "--tau2-data", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"episodes": 1, "calls": 3, "matched": 3, "mismatches": []}
    p = _results_file(tmp_path, good.replace("15.0", "16.0"))
    assert main(["fidelity", "--tau2-results", str(p), "--tau2-data", str(tmp_path), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["matched"] == 2
    [mm] = out["mismatches"]
    assert mm["task_id"] == "deposit" and mm["call"]["name"] == "deposit"
    assert json.loads(mm["ours"]["content"])["balance"] == 15.0 and mm["theirs"]["error"] is False


def test_replay_is_a_deprecated_alias_of_fidelity(toy_dir: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    good = '{"account_id":"a1","name":"Ada","balance":15.0,"frozen":false}'
    p = _results_file(tmp_path, good.replace("15.0", "16.0"))
    assert main(["replay", "--tau2-results", str(p), "--tau2-data", str(tmp_path), "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["matched"] == 2  # the same result as `fidelity`
    assert "quantagent replay is deprecated" in captured.err and "quantagent fidelity" in captured.err


@pytest.mark.tau2data
def test_official_replay_gpt41_retail_all_match(tau2_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry.clear_cache()
    results = tau2_data / "results" / "gpt-4.1_retail_1trial_feature-gym.json"
    rc = main(["fidelity", "--tau2-results", str(results), "--tau2-data", str(tau2_data), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert (out["episodes"], out["calls"]) == (40, 299)
    assert out["matched"] == out["calls"], out["mismatches"][:3]
    assert rc == 0


@pytest.mark.tau2data
@pytest.mark.parametrize(("domain", "tasks_file"), [("retail", None), ("telecom", "tasks_base_2025-06-10.json")])
def test_official_oracle(tau2_data: Path, domain: str, tasks_file: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    registry.clear_cache()
    args = ["oracle", "--domain", domain, "--tau2-data", str(tau2_data), "--json"]
    if tasks_file:
        args += ["--tau2-tasks", tasks_file]
    main(args)
    out = json.loads(capsys.readouterr().out)
    assert out["tasks"] == 114
    assert out["success_rate"] >= 0.97, out["failed"]


@pytest.mark.parametrize("style", ["direct", "conversational"])
@pytest.mark.parametrize("domain", ["retail", "telecom"])
def test_bundled_domains_oracle_all_succeed(
    domain: str, style: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("QUANTAGENT_DOMAINS_DIR", raising=False)
    registry.clear_cache()
    if domain not in registry.list_domains():
        pytest.skip(f"domain {domain} not present in this checkout")
    assert main(["oracle", "--domain", domain, "--json", "--style", style, "--seed", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tasks"] >= 100 and out["success_rate"] == 1.0, out["failed"][:3]


@pytest.mark.tau2data
def test_official_domains_listing_and_missing_task_file(tau2_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry.clear_cache()
    assert main(["domains", "--tau2-data", str(tau2_data), "--json"]) == 0
    by_name = {d["domain"]: d for d in json.loads(capsys.readouterr().out)["domains"]}
    assert by_name["retail"]["task_files"] == {"tasks.json": 114}
    assert by_name["telecom"]["task_files"]["tasks_base_2025-06-10.json"] == 114
    assert len(by_name["telecom"]["user_tools"]) == 30 and len(by_name["retail"]["agent_tools"]) == 16
    # The snapshot lacks telecom's tasks.json (the 2,285-task full set): without a split the
    # base split's file is read (τ²-bench's default split), split full names the missing file.
    assert main(["oracle", "--domain", "telecom", "--tau2-data", str(tau2_data), "--split", "full"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "telecom/tasks.json: file not found: split 'full' of split_tasks.json has 2285 task ids" in err
    assert "tasks_base_2025-06-10.json (114 tasks)" in err

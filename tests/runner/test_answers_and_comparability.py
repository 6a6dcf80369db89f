"""Answer-level channels and comparability (issue 38 items 1 and 4), end to end through
``quantagent run`` with loopback fake servers: an arm answering with 3x the tokens, or with
4% empty answers, at a flat score is named and MASKED_DAMAGE (the same arms at equal
behaviour are not); a candidate served with another chat template or tool parser is
INCONCLUSIVE "not comparable", and passes once the difference is accepted by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.analysis.gate import EXIT_NO_GO
from pytest_quantagent.cli import main
from pytest_quantagent.errors import EXIT_USAGE

#: Four lookups, then stop: five model turns per episode, each a turn both arms take alike;
#: no episode changes the email, so every episode fails in both arms (a flat score).
SCRIPT = [*[{"tool_calls": [{"name": "get_user", "arguments": {"user_id": "u0"}}]}] * 4,
          "###STOP###"]


def _arms(tmp_path: Path, ref_url: str, arm_url: str) -> Path:
    cfg = tmp_path / "arms.toml"
    cfg.write_text(f'[arms.bf16]\nbackend = "openai"\nmodel = "m"\nbase_url = "{ref_url}"\n'
                   f'[arms.int4]\nbackend = "openai"\nmodel = "m"\nbase_url = "{arm_url}"\n')
    return cfg


def _run(tmp_path: Path, cfg: Path, tasks: int, *extra: str) -> tuple[int, dict[str, Any]]:
    report = tmp_path / "r.json"
    rc = main(["run", "--domain", "mini", "--arms", "bf16,int4", "--config", str(cfg),
               "--out", str(tmp_path / "store"), "--num-tasks", str(tasks), "--concurrency", "8",
               "--json", str(report), "-q", *extra])
    return rc, json.loads(report.read_text()) if report.exists() else {}


@pytest.fixture
def mini_tasks(monkeypatch: pytest.MonkeyPatch, mini_domains_dir: Path) -> Any:
    def set_tasks(n: int) -> int:
        monkeypatch.setenv("QUANTAGENT_MINI_TASKS", str(n))
        return n

    return set_tasks


def test_three_times_the_tokens_at_a_flat_score_is_masked_damage(
        tmp_path: Path, serve: Any, mini_tasks: Any) -> None:
    n = mini_tasks(40)
    _, ref = serve(responses=SCRIPT, completion_tokens=40)
    _, arm = serve(responses=SCRIPT, completion_tokens=120)
    rc, report = _run(tmp_path, _arms(tmp_path, ref, arm), n)
    [cell] = report["cells"]
    assert rc == EXIT_NO_GO  # the release gate: damage
    assert cell["success"]["diff"] == 0.0  # every episode ends alike in both arms
    assert cell["verdict"] == "MASKED_DAMAGE", cell["reasons"]
    t = cell["answer_tests"]["output_tokens"]
    assert (t["arm_per_turn"], t["reference_per_turn"], t["ratio"]) == (120.0, 40.0, 3.0)
    assert t["p_holm"] < 0.05 and "answer:output_tokens" in cell["holm"]["tests"]
    assert any(r.startswith("output tokens per agent turn ×3 (120 vs 40): above ×1.5")
               for r in cell["reasons"]), cell["reasons"]
    # every setting compared is listed, and these arms are served alike
    assert {s["status"] for s in cell["comparability"]["settings"].values()} <= {
        "same", "unknown", "informational"}
    store = [json.loads(x) for x in (tmp_path / "store" / "episodes.jsonl").read_text().splitlines()]
    assert all(r["schema_version"] == 2 and r["turns"] for r in store)
    assert {t["output_tokens"] for r in store for t in r["turns"]} == {40, 120}


def test_equal_tokens_claim_nothing(tmp_path: Path, serve: Any, mini_tasks: Any) -> None:
    n = mini_tasks(40)
    _, ref = serve(responses=SCRIPT, completion_tokens=40)
    _, arm = serve(responses=SCRIPT, completion_tokens=40)
    _, report = _run(tmp_path, _arms(tmp_path, ref, arm), n)
    [cell] = report["cells"]
    assert cell["verdict"] not in ("MASKED_DAMAGE", "DEGRADED"), cell["reasons"]
    assert cell["answer_tests"]["output_tokens"]["ratio"] == 1.0
    assert not any("output tokens" in r for r in cell["reasons"])


def test_four_percent_empty_answers_at_a_flat_score_is_masked_damage(
        tmp_path: Path, serve: Any, mini_tasks: Any) -> None:
    # every 25th request of the candidate's server is answered empty: 4% of its turns (the
    # engine answers each as a malformed call; the script goes on at the next turn)
    n = mini_tasks(200)
    _, ref = serve(responses=SCRIPT)
    _, arm = serve(responses=SCRIPT, empty_every=25)
    _, report = _run(tmp_path, _arms(tmp_path, ref, arm), n)
    [cell] = report["cells"]
    assert cell["success"]["diff"] == 0.0
    t = cell["answer_tests"]["empty_answer"]
    assert (t["reference_total"], t["arm_total"]) == (0, 40)
    assert t["reference_turns"] == 1000 and abs(t["arm_per_turn"] - 0.04) < 0.001
    assert cell["verdict"] == "MASKED_DAMAGE", cell["reasons"]
    assert any(r.startswith("empty answers (no text, no tool call)") and "Holm p=" in r
               for r in cell["reasons"]), cell["reasons"]
    # counted once: an empty answer is not a malformed call in the channels
    assert cell["channels"]["malformed_call"]["arm_count"] == 0


def test_no_empty_answers_on_either_side_is_not_damage(
        tmp_path: Path, serve: Any, mini_tasks: Any) -> None:
    n = mini_tasks(200)
    _, ref = serve(responses=SCRIPT)
    _, arm = serve(responses=SCRIPT)
    _, report = _run(tmp_path, _arms(tmp_path, ref, arm), n)
    [cell] = report["cells"]
    assert cell["verdict"] not in ("MASKED_DAMAGE", "DEGRADED"), cell["reasons"]
    assert cell["answer_tests"]["empty_answer"]["shown_outside"] is True


@pytest.mark.parametrize(("field", "name", "ref_value", "arm_value"), [
    ("chat_template", "chat_template", "{{ messages }}", "{{ messages | tojson }}"),
    ("tool_call_parser", "tool_parser", "qwen3_coder", "hermes"),
])
def test_another_chat_template_or_tool_parser_is_not_comparable_until_accepted(
        tmp_path: Path, serve: Any, mini_tasks: Any, field: str, name: str, ref_value: str,
        arm_value: str) -> None:
    n = mini_tasks(6)
    _, ref = serve(model_fields={field: ref_value, "max_model_len": 32768}, version="0.11.0")
    _, arm = serve(model_fields={field: arm_value, "max_model_len": 32768}, version="0.11.0")
    cfg = _arms(tmp_path, ref, arm)
    _, report = _run(tmp_path, cfg, n)
    [cell] = report["cells"]
    s = cell["comparability"]["settings"]
    assert s[name]["status"] == "differs"
    assert s["max_model_len"] == {"reference": "32768", "arm": "32768", "status": "same",
                                  "source": {"reference": "the server", "arm": "the server"}}
    assert s["server_version"]["status"] == "same" and s["temperature"]["status"] == "same"
    assert cell["verdict"] == "INCONCLUSIVE"
    assert cell["reasons"][0] == f"not comparable: {name}: {s[name]['reference']} vs {s[name]['arm']}"
    if name == "tool_parser":
        assert cell["reasons"][0] == "not comparable: tool_parser: qwen3_coder vs hermes"
    else:
        assert s[name]["reference"].startswith("sha256:") and s[name]["arm"] != s[name]["reference"]

    _, accepted = _run(tmp_path, cfg, n, "--accept-difference", name)
    [cell] = accepted["cells"]
    assert cell["comparability"]["settings"][name]["status"] == "accepted"
    assert cell["comparability"]["accepted"] == [name]
    assert not any(r.startswith("not comparable") for r in cell["reasons"]), cell["reasons"]


def test_a_generation_setting_from_the_arms_toml_is_compared(
        tmp_path: Path, serve: Any, mini_tasks: Any) -> None:
    n = mini_tasks(4)
    _, ref = serve()
    _, arm = serve()
    cfg = tmp_path / "arms.toml"
    cfg.write_text(f'[arms.bf16]\nbackend = "openai"\nmodel = "m"\nbase_url = "{ref}"\n'
                   f'[arms.int4]\nbackend = "openai"\nmodel = "m"\nbase_url = "{arm}"\n'
                   'extra_body = {temperature = 0.7, chat_template_kwargs = {enable_thinking = true}}\n')
    _, report = _run(tmp_path, cfg, n)
    [cell] = report["cells"]
    assert cell["reasons"][:2] == [
        "not comparable: temperature: 0 vs 0.7",
        'not comparable: reasoning: none sent vs {"chat_template_kwargs":{"enable_thinking":true}}']


def test_an_unknown_accepted_name_is_refused_before_any_episode(
        tmp_path: Path, serve: Any, mini_tasks: Any, capsys: pytest.CaptureFixture[str]) -> None:
    mini_tasks(4)
    s_ref, ref = serve()
    _, arm = serve()
    rc, _ = _run(tmp_path, _arms(tmp_path, ref, arm), 4, "--accept-difference", "chat_templte")
    err = capsys.readouterr().err
    assert rc == EXIT_USAGE and s_ref.requests == 0
    assert "'chat_templte' is not a compared setting; allowed: backend, temperature" in err


# --------------------------------------------------------------------------- the plugin side

_PLUGIN_TEST = """
def test_cell(quant_cell):
    assert quant_cell.episodes
"""


def test_the_plugin_says_not_comparable_and_accepts_by_name_or_ini(
        pytester: pytest.Pytester, serve: Any, mini_domains_dir: Path) -> None:
    _, ref = serve(model_fields={"tool_call_parser": "qwen3_coder"})
    _, arm = serve(model_fields={"tool_call_parser": "hermes"})
    pytester.makefile(".toml", arms=_arms(pytester.path, ref, arm).read_text())
    pytester.makepyfile(_PLUGIN_TEST)
    args = ["--quant-config=arms.toml", "--domain=mini", "--quant=int4", "--quant-tasks=2",
            "--quant-cache-dir=cache", "--quant-report=report.json", "-p", "no:cacheprovider"]
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    [cell] = json.loads((pytester.path / "report.json").read_text())["cells"]
    assert cell["verdict"] == "INCONCLUSIVE"
    assert cell["reasons"][0] == "not comparable: tool_parser: qwen3_coder vs hermes"
    assert ("mini/int4: serving compared (reference vs arm): 16 settings; differs: tool_parser "
            "qwen3_coder vs hermes; same: backend, temperature") in result.stdout.str()

    result = pytester.runpytest(*args, "--quant-accept-difference=tool_parser")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    [cell] = json.loads((pytester.path / "report.json").read_text())["cells"]
    assert cell["comparability"]["settings"]["tool_parser"]["status"] == "accepted"
    assert not any(r.startswith("not comparable") for r in cell["reasons"])

    pytester.makeini("[pytest]\nquant_accept_difference = tool_parser\n")
    result = pytester.runpytest(*args)
    [cell] = json.loads((pytester.path / "report.json").read_text())["cells"]
    assert cell["comparability"]["accepted"] == ["tool_parser"]


def test_the_plugin_refuses_an_unknown_setting_name(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_PLUGIN_TEST)
    result = pytester.runpytest("--quant-accept-difference=tool_parsr")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "--quant-accept-difference: invalid value 'tool_parsr'; allowed: a comma-separated " \
           "list of compared settings: backend, temperature, top_p" in err, err


def test_until_decided_stops_a_cell_that_is_not_comparable_after_its_first_look(
        tmp_path: Path, serve: Any, mini_tasks: Any) -> None:
    # served with another tool parser, no number of episodes can decide the cell: it stops
    # after the first look (4 tasks of the 12-task pool) instead of running to the cap
    mini_tasks(12)
    _, ref = serve(model_fields={"tool_parser": "qwen3_coder"}, version="0.11.0")
    _, arm = serve(model_fields={"tool_parser": "hermes"}, version="0.11.0")
    cfg = _arms(tmp_path, ref, arm)
    _, report = _run(tmp_path, cfg, 4, "--until-decided", "--max-episodes", "12")
    [cell] = report["cells"]
    seq = cell["sequential"]
    assert len(seq["planned_looks"]) > 1
    assert seq["stopped"] == "not_comparable" and seq["looks_taken"] == 1
    assert seq["episodes_used"] == 4
    assert "not comparable: tool_parser: qwen3_coder vs hermes" in seq["why"]
    assert cell["verdict"] == "INCONCLUSIVE"
    assert cell["reasons"][0] == "not comparable: tool_parser: qwen3_coder vs hermes"

    _, accepted = _run(tmp_path, cfg, 4, "--until-decided", "--max-episodes", "12",
                       "--accept-difference", "tool_parser")
    [cell] = accepted["cells"]
    assert cell["sequential"]["stopped"] != "not_comparable"
    assert cell["sequential"]["looks_taken"] > 1 or cell["sequential"]["stopped"] == "decided"


def test_the_plugin_until_decided_stops_a_cell_that_is_not_comparable(
        pytester: pytest.Pytester, serve: Any, mini_domains_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUANTAGENT_MINI_TASKS", "12")
    _, ref = serve(model_fields={"tool_call_parser": "qwen3_coder"})
    _, arm = serve(model_fields={"tool_call_parser": "hermes"})
    pytester.makefile(".toml", arms=_arms(pytester.path, ref, arm).read_text())
    pytester.makepyfile(_PLUGIN_TEST)
    result = pytester.runpytest(
        "--quant-config=arms.toml", "--domain=mini", "--quant=int4", "--quant-tasks=4",
        "--quant-until-decided", "--quant-max-episodes=12", "--quant-cache-dir=cache",
        "--quant-report=report.json", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    [cell] = json.loads((pytester.path / "report.json").read_text())["cells"]
    assert cell["sequential"]["stopped"] == "not_comparable", cell["sequential"]
    assert cell["sequential"]["looks_taken"] == 1 and cell["sequential"]["episodes_used"] == 4
    assert cell["reasons"][0] == "not comparable: tool_parser: qwen3_coder vs hermes"


def test_each_endpoint_is_asked_for_its_models_once_per_run_and_again_next_run(
        tmp_path: Path, serve: Any, mini_tasks: Any) -> None:
    # The serving comparison reads GET /models (max_model_len, root, template, parsers) and
    # the pre-flight checks the key and the model name on the same answer: one request per
    # endpoint and run. A later run asks again: a server changed in between is seen.
    n = mini_tasks(2)
    s_ref, ref = serve(model_fields={"max_model_len": 4096})
    s_arm, arm = serve(model_fields={"max_model_len": 4096})
    cfg = _arms(tmp_path, ref, arm)
    _, report = _run(tmp_path, cfg, n)
    assert (s_ref.model_requests, s_arm.model_requests) == (1, 1)
    assert report["cells"][0]["comparability"]["settings"]["max_model_len"]["status"] == "same"
    s_arm.served_models = ["other"]  # the arm's server now serves another model: refused
    rc, _ = _run(tmp_path, cfg, n)
    assert (s_ref.model_requests, s_arm.model_requests) == (2, 2)
    assert rc == EXIT_USAGE

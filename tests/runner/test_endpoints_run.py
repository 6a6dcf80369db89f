"""``quantagent run`` with several endpoints per arm (issue 25): an endpoint that drops every
request, and one that refuses connections, cost retries on the other endpoint, never an
episode or an agent failure; the summary shows per-endpoint figures."""

from __future__ import annotations

import functools
import json
import socket
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.analysis.gate import EXIT_INCONCLUSIVE
from pytest_quantagent.backends import wrapper
from pytest_quantagent.cli import main
from pytest_quantagent.errors import EXIT_USAGE
from pytest_quantagent.testing.fault_server import FaultServer


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wrapper, "RetryPolicy",
                        functools.partial(wrapper.RetryPolicy, base_delay_s=0.001, max_delay_s=0.002))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_failover_keeps_every_episode_and_shows_endpoints(tmp_path: Path, mini_domains_dir: Path,
                                                          serve: Any, fast_retries: None,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    good1, u1 = serve()
    dropping, u_drop = serve(fault_rate=1.0, fault_mix=("drop",))  # dies on every request
    good2, u2 = serve()
    refused = f"http://127.0.0.1:{_closed_port()}/v1"
    # A dead endpoint stops the run at pre-flight; this one goes away after the pre-flight
    # (the pre-flight's answer for it is stubbed), as a server that dies early in a run.
    cfg = tmp_path / "arms.toml"
    cfg.write_text(
        '[arms.bf16]\nbackend = "openai"\nmodel = "m"\ntimeout_s = 2\n'
        f'base_url = ["{u_drop}", "{u1}"]\n'
        '[arms.int4]\nbackend = "openai"\nmodel = "m"\ntimeout_s = 2\n'
        f'endpoints = [{{url = "{u2}", weight = 1}}, {{url = "{refused}", weight = 4}}]\n')
    from pytest_quantagent.runner import preflight as pf

    real = pf._check_endpoint

    def check(spec: Any, url: str, key: Any, timeout_s: float) -> Any:
        return (None, "m") if url == refused else real(spec, url, key, timeout_s)

    monkeypatch.setattr(pf, "_check_endpoint", check)
    out = tmp_path / "s"
    report_path = tmp_path / "r.json"
    rc = main(["run", "--domain", "mini", "--arms", "bf16,int4", "--config", str(cfg),
               "--out", str(out), "--num-tasks", "3", "--trials", "2", "--concurrency", "3",
               "--json", str(report_path)])
    text = capsys.readouterr().out
    assert rc == EXIT_INCONCLUSIVE
    report = json.loads(report_path.read_text())
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines() if x.strip()]
    keys = Counter(r["key"] for r in lines)
    assert len(keys) == 12 and set(keys.values()) == {1}  # every episode stored exactly once
    assert all(r["termination"] != "infrastructure_error" for r in lines)
    faults = report["run"]["faults"]
    assert faults["bf16"]["scored"] == faults["int4"]["scored"] == 6
    assert faults["bf16"]["infrastructure_errors"] == faults["int4"]["infrastructure_errors"] == 0
    assert faults["bf16"]["retried_requests"] >= 1 and faults["int4"]["retried_requests"] >= 1
    eps = {e["url"]: e for arm in report["run"]["endpoints"].values() for e in arm}
    assert eps[u_drop]["failures"] == eps[u_drop]["requests"] == dropping.requests >= 1
    assert eps[refused]["failures"] == eps[refused]["requests"] >= 1
    assert eps[refused]["ejections"] >= 1  # a refused connection takes it out at once
    assert eps[u1]["failures"] == 0 and eps[u1]["requests"] == good1.requests
    assert eps[u2]["requests"] == good2.requests
    # Every failed request was retried: retries = the failed requests of the arm's endpoints.
    assert faults["bf16"]["retried_requests"] == eps[u_drop]["failures"]
    assert faults["int4"]["retried_requests"] == eps[refused]["failures"]
    assert f"bf16 endpoint {u_drop}: {dropping.requests} requests, {dropping.requests} failed" in text
    assert f"int4 endpoint {u2}: {good2.requests} requests, 0 failed, p50 " in text


def test_pytest_summary_shows_each_endpoint(pytester: pytest.Pytester, mini_domains_dir: Path) -> None:
    servers = [FaultServer() for _ in range(3)]
    a, b, c = (s.start_in_thread() for s in servers)
    try:
        pytester.makefile(".toml", arms=(
            f'[arms.bf16]\nbackend = "openai"\nmodel = "m"\nbase_url = "{a}"\n'
            f'[arms.int4]\nbackend = "openai"\nmodel = "m"\nbase_url = ["{b}", "{c}"]\n'))
        pytester.makepyfile("def test_gate(quant_cell):\n    assert quant_cell.episodes\n")
        result = pytester.runpytest("--quant-config=arms.toml", "--domain=mini", "--quant=int4",
                                    "--quant-tasks=4", "--quant-concurrency=2", "--quant-cache-dir=cache")
    finally:
        for s in servers:
            s.stop()
    result.assert_outcomes(passed=1)
    text = result.stdout.str()
    for url, server in ((b, servers[1]), (c, servers[2])):
        assert server.requests >= 1
        assert f"quantagent mini-int4 endpoint {url}: {server.requests} requests, 0 failed, p50 " in text
    assert f"endpoint {a}" not in text  # one endpoint: nothing to add to the run's own figures


def test_one_endpoint_down_at_pre_flight_warns_and_runs_on_the_others(
        tmp_path: Path, mini_domains_dir: Path, serve: Any, fast_retries: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 36 item 1: the pool fails over, so one dead endpoint of two must not refuse the
    # run; both dead still does.
    _, good = serve()
    dead1 = f"http://127.0.0.1:{_closed_port()}/v1"
    dead2 = f"http://127.0.0.1:{_closed_port()}/v1"
    cfg = tmp_path / "arms.toml"
    cfg.write_text('[arms.bf16]\nbackend = "openai"\nmodel = "m"\ntimeout_s = 2\n'
                   f'base_url = ["{good}", "{dead1}"]\n'
                   '[arms.int4]\nbackend = "openai"\nmodel = "m"\ntimeout_s = 2\n'
                   f'base_url = "{good}"\n')
    with pytest.warns(UserWarning, match=rf"'bf16': endpoint {dead1}: cannot reach the server.*"
                      r"the run goes on with the 1 endpoint\(s\) that answer"):
        rc = main(["run", "--domain", "mini", "--arms", "bf16,int4", "--config", str(cfg),
                   "--out", str(tmp_path / "s"), "--num-tasks", "2", "-q"])
    assert rc != EXIT_USAGE
    assert len((tmp_path / "s" / "episodes.jsonl").read_text().splitlines()) == 4
    cfg.write_text(cfg.read_text().replace(f'["{good}", "{dead1}"]', f'["{dead2}", "{dead1}"]'))
    capsys.readouterr()
    assert main(["run", "--domain", "mini", "--arms", "bf16,int4", "--config", str(cfg),
                 "--out", str(tmp_path / "s2"), "--num-tasks", "2", "-q"]) == EXIT_USAGE
    assert "pre-flight check failed, no episode was run" in capsys.readouterr().err

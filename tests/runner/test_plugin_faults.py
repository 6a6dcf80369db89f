"""Issue 28 / 26 from the user's side (pytester): a dead server stops the run before any
test, a refused key stops it with the arm named and leaks nowhere, and a cell lost to the
infrastructure is an error, not INCONCLUSIVE."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_quantagent.testing.fault_server import FaultServer

KEY = "sk-planted-PLUGIN-7731-never-print-me"
URL_KEY = "urlpass-PLANTED-5520"

_TEST = """
def test_gate(quant_cell):
    assert quant_cell.episodes
"""


def _arms(bf16_url: str, int4_url: str, key_env: str = "") -> str:
    key = f'api_key_env = "{key_env}"\n' if key_env else ""
    return (f'[arms.bf16]\nbackend = "openai"\nmodel = "m"\nbase_url = "{bf16_url}"\n'
            f'[arms.int4]\nbackend = "openai"\nmodel = "m"\nbase_url = "{int4_url}"\n{key}')


def test_dead_server_stops_the_run_before_any_test(pytester: pytest.Pytester,
                                                   mini_domains_dir: Path) -> None:
    good = FaultServer()
    url = good.start_in_thread()
    try:
        pytester.makefile(".toml", arms=_arms(url, "http://127.0.0.1:1/v1"))
        pytester.makepyfile(_TEST)
        result = pytester.runpytest("--quant-config=arms.toml", "--domain=mini", "--quant=int4")
    finally:
        good.stop()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stdout.str() + result.stderr.str()
    # printed once (issue 36 item 10: pytest.exit in sessionstart printed it twice)
    assert text.count("pre-flight check failed, no episode was run") == 1, text
    assert text.count("arm 'int4' (http://127.0.0.1:1/v1): cannot reach the server") == 1
    assert "arm 'bf16'" not in text  # the good arm has nothing to say
    assert good.requests == 0 and "1 passed" not in text and "1 failed" not in text


def test_a_refused_key_stops_the_run_and_leaks_nowhere(pytester: pytest.Pytester, mini_domains_dir: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QA_PLANTED", KEY)
    ref = FaultServer()
    bad = FaultServer(fault_rate=1.0, fault_mix=("echo_key",))  # models listed; every chat 401
    ref_url, bad_url = ref.start_in_thread(), bad.start_in_thread()
    cred_url = bad_url.replace("http://", f"http://bob:{URL_KEY}@")
    try:
        pytester.makefile(".toml", arms=_arms(ref_url, cred_url, key_env="QA_PLANTED"))
        pytester.makepyfile(_TEST)
        result = pytester.runpytest("--quant-config=arms.toml", "--domain=mini", "--quant=int4", "-l",
                                    "--junitxml=junit.xml", "--quant-report=report.json",
                                    "--quant-cache-dir=cache", "--quant-tasks=2",
                                    "--quant-concurrency=1")
    finally:
        ref.stop()
        bad.stop()
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert "arm 'int4'" in text and bad_url in text and "HTTP 401" in text
    assert bad.requests == 1  # stopped at the first refusal, nothing retried
    outputs = [text.encode()] + [f.read_bytes() for f in pytester.path.rglob("*")
                                 if f.is_file() and f.suffix != ".py" and f.name != "arms.toml"]
    assert any(b"HTTP 401" in o for o in outputs)
    for secret in (KEY, URL_KEY):
        assert not any(secret.encode() in o for o in outputs), secret
    store = pytester.path / "cache" / "episodes.jsonl"
    assert not store.exists() or b"int4" not in store.read_bytes()  # nothing of the failed arm


def test_a_cell_lost_to_the_infrastructure_is_an_error(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
from pytest_quantagent.session import CellEpisodes
from pytest_quantagent.store.records import EpisodeRecord

def _recs(arm, term):
    return [EpisodeRecord(key=f"{arm}{t}", model="m", arm=arm, backend="openai", domain=d,
                          task_id=str(t), trial=0, seed=t, max_errors=10, max_steps=200,
                          termination=term, reward=0.0, success=False, n_errors=0, steps=0,
                          infra_retries=6, error_message="HTTP 503 from http://h/v1: busy")
            for t in range(4)]

d = "telecom"

def pytest_quantagent_run_cell(config, cell):
    return CellEpisodes(arm=_recs(cell.arm, "infrastructure_error"),
                        reference=_recs(cell.reference, "user_stop"))
""")
    pytester.makepyfile(_TEST)
    result = pytester.runpytest("--domain=telecom", "--quant-report=r.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*cell telecom-int4: arm 'int4': all 4 episodes failed outside the model (4 infrastructure, "
        "0 task errors; 24 requests retried)*Last error: HTTP 503 from http://h/v1: busy*"])
    assert "INCONCLUSIVE" not in result.stdout.str()


def test_url_credentials_reach_no_report_of_a_good_run(pytester: pytest.Pytester,
                                                       mini_domains_dir: Path) -> None:
    """A run that completes: the password in ``base_url`` is in no output file (JSON report's
    ``run.arm_specs``, HTML, JUnit, store, cache names) and not on the terminal (issue 36)."""
    server = FaultServer()
    url = server.start_in_thread()
    cred_url = url.replace("http://", "http://user:s3cretpw@")
    try:
        pytester.makefile(".toml", arms=_arms(cred_url, cred_url))
        pytester.makepyfile(_TEST)
        result = pytester.runpytest("--quant-config=arms.toml", "--domain=mini", "--quant=int4",
                                    "--junitxml=junit.xml", "--quant-report=report.json",
                                    "--quant-html=report.html", "--quant-cache-dir=cache",
                                    "--quant-tasks=2", "--quant-concurrency=1")
    finally:
        server.stop()
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.OK, text
    report = (pytester.path / "report.json").read_text()
    assert '"arm_specs"' in report and "127.0.0.1" in report  # the server is named, without secret
    files = [f for f in pytester.path.rglob("*") if f.is_file() and f.suffix != ".py"
             and f.name != "arms.toml"]
    assert any(f.name == "report.html" for f in files)
    assert "s3cretpw" not in text
    for f in files:
        assert "s3cretpw" not in str(f.relative_to(pytester.path)), f
        assert b"s3cretpw" not in f.read_bytes(), f


def test_a_read_only_cache_dir_is_refused_before_any_test(pytester: pytest.Pytester,
                                                          mini_domains_dir: Path) -> None:
    # issue 36 item 8: a read-only store was a PermissionError in every test's setup
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes to read-only directories anyway")
    pytester.makefile(".toml", arms='[arms.bf16]\nbackend = "mock"\nmodel = "s"\n'
                                    '[arms.int4]\nbackend = "mock"\nmodel = "s"\n')
    pytester.makepyfile(_TEST)
    cache = pytester.path / "cache"
    cache.mkdir()
    cache.chmod(0o555)
    try:
        result = pytester.runpytest("--quant-config=arms.toml", "--domain=mini", "--quant=int4",
                                    f"--quant-cache-dir={cache}")
    finally:
        cache.chmod(0o755)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stdout.str() + result.stderr.str()
    problem = (f"--quant-cache-dir: the store directory {str(cache)!r} is not writable (permission "
               "denied); a run adds episodes and lock files there")
    assert text.count(problem) == 1, text
    assert "1 passed" not in text and "1 failed" not in text and not list(cache.iterdir())

"""Issue 28 / 26 from the user's side (pytester): a dead server stops the run before any
test, a refused key stops it with the arm named and leaks nowhere, and a cell lost to the
infrastructure is an error, not INCONCLUSIVE."""

from __future__ import annotations

from pathlib import Path

import pytest

# scipy (numpy.fft) imported once in this process, before any pytester run: a fresh import
# inside one (the LLM user's run reaches it first from a worker thread) fails with "cannot
# load module more than once per process".
import pytest_quantagent.metrics  # noqa: F401
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
    # the reference's URL holds a password (sent as Basic); the candidate's key is refused
    cred_url = ref_url.replace("http://", f"http://bob:{URL_KEY}@")
    try:
        pytester.makefile(".toml", arms=_arms(cred_url, bad_url, key_env="QA_PLANTED"))
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


_NL_DOMAIN = '''
import importlib.util
from pathlib import Path

from pytest_quantagent.env.tasks import RewardType

_spec = importlib.util.spec_from_file_location("_mini_base", {mini!r})
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)


def make_domain(data_dir: Path, tasks_file, official: bool):
    d = _base.make_mini_domain(2)
    d.name = "mininl"
    for t in d.tasks:  # judged by the LLM judge too: its cache file is written
        t.evaluation_criteria.nl_assertions = ["The agent answered the customer."]
        t.evaluation_criteria.reward_basis = [RewardType.DB, RewardType.NL_ASSERTION]
    return d
'''

_VERDICT = '{"verdicts": [{"index": 1, "met": true, "reason": "it answered"}]}'


def test_no_credential_reaches_any_output_of_a_run(pytester: pytest.Pytester,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36 item 3, end to end: every remote model of a run (two arms, the LLM user, the
    judge) on loopback, with a password in two base URLs (one on the httpx client, one on the
    native client), an API key in an environment variable for the others, and a proxy
    variable holding a password. Every output of the run — the JSON and HTML reports, JUnit
    XML, the store and its cache files (user turns, judge verdicts) and their names, the
    terminal with every log line at DEBUG — holds none of them. And one rule for the
    credentials, the pre-flight's requests and the run's alike: a URL's user:password is sent
    as HTTP Basic, the key as Bearer, each server got only its own (backends.secrets)."""
    import base64

    from tests.runner.conftest import MINI_DOMAINS_DIR

    password, key, proxy_pw = "s3cretpw", "sk-DISTINCT-key-40417-zz", "proxyPW-77123"
    monkeypatch.setenv("QA_SECRET_KEY", key)
    # the proxy is never used (loopback is excluded), but its variable holds a password too
    monkeypatch.setenv("HTTP_PROXY", f"http://pxuser:{proxy_pw}@127.0.0.1:9/")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    (pytester.path / "domains" / "mininl").mkdir(parents=True)
    (pytester.path / "domains" / "mininl" / "domain.py").write_text(
        _NL_DOMAIN.format(mini=str(MINI_DOMAINS_DIR / "mini" / "domain.py")))
    monkeypatch.setenv("QUANTAGENT_DOMAINS_DIR", str(pytester.path / "domains"))
    replies = {"judge": (_VERDICT,), "user": ("Please change my email.", "###STOP###")}
    servers = {role: FaultServer(responses=replies.get(role, ("Done, anything else?",)))
               for role in ("bf16", "int4", "user", "judge")}
    urls = {role: s.start_in_thread() for role, s in servers.items()}

    def with_pw(url: str) -> str:
        return url.replace("http://", f"http://user:{password}@")

    try:
        pytester.makefile(".toml", arms=(
            # bf16: password in the URL, httpx client; int4: key, native client
            f'[arms.bf16]\nbackend = "openai"\nmodel = "m"\nbase_url = "{with_pw(urls["bf16"])}"\n'
            'http_client = "httpx"\n'
            f'[arms.int4]\nbackend = "openai"\nmodel = "m"\nbase_url = "{urls["int4"]}"\n'
            'api_key_env = "QA_SECRET_KEY"\n'
            # the user (a model spec on the command line): password, native client; the
            # judge: key, httpx client
            f'[judge]\nbackend = "openai"\nmodel = "m"\nbase_url = "{urls["judge"]}"\n'
            'api_key_env = "QA_SECRET_KEY"\nhttp_client = "httpx"\n'))
        pytester.makepyfile(_TEST)
        result = pytester.runpytest(
            "--quant-config=arms.toml", "--domain=mininl", "--quant=int4", "--quant-user=llm",
            f"--quant-user-model=openai:m@{with_pw(urls['user'])}",
            "--junitxml=junit.xml", "--quant-report=report.json", "--quant-html=report.html",
            "--quant-cache-dir=cache", "--quant-concurrency=1", "-o", "log_cli=true",
            "--log-cli-level=DEBUG", "-rA")
    finally:
        for s in servers.values():
            s.stop()
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.OK, text
    basic = "Basic " + base64.b64encode(f"user:{password}".encode()).decode()
    # The pre-flight's GET /models and the run's chats sent the same credentials.
    for role, auth in (("bf16", basic), ("user", basic), ("int4", f"Bearer {key}"),
                       ("judge", f"Bearer {key}")):
        got = servers[role].authorizations
        assert set(got) == {auth}, (role, got)
        assert servers[role].model_requests >= 1 and servers[role].requests >= 1, role
    cache = pytester.path / "cache"
    assert (cache / "episodes.jsonl").is_file()
    assert list(cache.rglob("user_turns.jsonl")) and list(cache.rglob("judge_verdicts.jsonl"))
    report = (pytester.path / "report.json").read_text()
    assert urls["bf16"] in report  # the servers are named, without their secret
    files = [f for f in pytester.path.rglob("*") if f.is_file() and f.suffix != ".py"
             and f.name != "arms.toml"]
    assert {"report.json", "report.html", "junit.xml"} <= {f.name for f in files}
    b64 = basic.split()[1]
    for secret in (password, key, proxy_pw, b64):
        assert secret not in text, secret
        for f in files:
            assert secret not in str(f.relative_to(pytester.path)), (secret, f)
            assert secret.encode() not in f.read_bytes(), (secret, f)


def test_a_url_password_and_a_key_on_one_model_are_refused(pytester: pytest.Pytester,
                                                           mini_domains_dir: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """One Authorization header: a password in the URL and an api_key_env on the same arm is
    a configuration error naming the arm, before any request (the httpx client used to send
    the URL's Basic credentials in place of the key, the native one the key alone)."""
    monkeypatch.setenv("QA_SECRET_KEY", "sk-DISTINCT-key-40417-zz")
    server = FaultServer()
    url = server.start_in_thread()
    try:
        pytester.makefile(".toml", arms=_arms(url, url.replace("http://", "http://u:pw1234@"),
                                              key_env="QA_SECRET_KEY"))
        pytester.makepyfile(_TEST)
        result = pytester.runpytest("--quant-config=arms.toml", "--domain=mini", "--quant=int4")
    finally:
        server.stop()
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert text.count(f"arm 'int4' ({url}): base_url {url!r} carries a user name and password") == 1, text
    assert "api_key_env 'QA_SECRET_KEY' gives a key" in text
    assert "pw1234" not in text and server.requests == 0

"""Pre-flight (issue 26 item 1): every model checked before any episode, one line per
model naming the URL or path and the cause."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.errors import ConfigurationError
from pytest_quantagent.quant.arms import ArmSpec
from pytest_quantagent.runner.preflight import PreflightProblem, preflight, preflight_specs_or_raise
from pytest_quantagent.testing.fault_server import FaultServer

KEY = "sk-planted-PREFLIGHT-9911"


@pytest.fixture
def server() -> Iterator[tuple[FaultServer, str]]:
    s = FaultServer(served_models=["Qwen/Qwen3-8B", "Qwen/Qwen3-8B-AWQ"])
    url = s.start_in_thread()
    yield s, url
    s.stop()


def _openai(url: str, model: str = "Qwen/Qwen3-8B", **kw: Any) -> ArmSpec:
    return ArmSpec(label="x", backend="openai", model=model, base_url=url, **kw)


def test_a_served_model_passes_and_is_asked_once(server: tuple[FaultServer, str]) -> None:
    s, url = server
    assert preflight({"arm 'bf16'": _openai(url), "arm 'bf16b'": _openai(url)}) == []
    assert s.model_requests == 1 and s.requests == 0


def test_every_problem_named_by_model_url_and_cause(server: tuple[FaultServer, str], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _s, url = server
    monkeypatch.delenv("QA_UNSET_KEY", raising=False)
    models = {
        "arm 'bf16'": _openai(url),
        "arm 'int4'": _openai(url, model="Qwen/Qwen3-8B-AWK"),
        "arm 'fp8'": _openai("http://127.0.0.1:1/v1"),
        "arm 'keyless'": _openai(url, api_key_env="QA_UNSET_KEY"),
        "arm 'root'": _openai(url.removesuffix("/v1") + "/nope"),
        "user": ArmSpec(label="user", backend="transformers", model="m", path=str(tmp_path / "ckpt")),
        "arm 'replayed'": ArmSpec(label="r", backend="replay", model="r", path=str(tmp_path / "r.json")),
        "arm 'odd'": ArmSpec(label="o", backend="no-such-backend", model="m"),
    }
    got = {p.who: p for p in preflight(models, extra=[lambda: [PreflightProblem("judge", "J", "down")]])}
    assert set(got) == set(models) - {"arm 'bf16'", "arm 'root'"} | {"judge"}
    assert "not served there; did you mean 'Qwen/Qwen3-8B-AWQ'?" in got["arm 'int4'"].cause
    assert got["arm 'fp8'"].where == "http://127.0.0.1:1/v1" and "cannot reach" in got["arm 'fp8'"].cause
    assert "'QA_UNSET_KEY' (api_key_env) is not set" in got["arm 'keyless'"].cause
    assert "checkpoint" in got["user"].cause and got["user"].where == str(tmp_path / "ckpt")
    assert "results file(s) not found" in got["arm 'replayed'"].cause
    assert "unknown backend 'no-such-backend'" in got["arm 'odd'"].cause
    with pytest.raises(ConfigurationError, match=r"pre-flight check failed, no episode was run:\n  arm 'int4' "):
        preflight_specs_or_raise(models)


def test_a_refused_key_is_named_but_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QA_KEY", KEY)
    s = FaultServer(models_status=401)
    url = s.start_in_thread()
    try:
        [p] = preflight({"arm 'int4'": _openai(url, api_key_env="QA_KEY")})
    finally:
        s.stop()
    assert "HTTP 401: the API key was refused" in p.cause and KEY not in str(p)
    assert "[REDACTED]" in p.cause


def test_wrong_api_root_says_so() -> None:
    s = FaultServer(models_status=404)
    url = s.start_in_thread()
    try:
        [p] = preflight({"arm 'int4'": _openai(url)})
    finally:
        s.stop()
    assert "HTTP 404: is" in p.cause and "the API root" in p.cause


def test_a_misspelt_backend_is_named_with_the_closest_name_replay_included() -> None:
    # "replay" is an arm source, not a registered backend, but a user writes it as one.
    [p] = preflight({"arm 'bf16'": ArmSpec(label="bf16", backend="repaly", model="m")})
    assert "unknown backend 'repaly'" in p.cause and "did you mean 'replay'?" in p.cause
    assert "mock, openai, replay, transformers, vllm" in p.cause
    [p] = preflight({"arm 'bf16'": ArmSpec(label="bf16", backend="zzz", model="m")})
    assert "did you mean" not in p.cause and "replay" in p.cause


def test_an_hf_id_not_loadable_offline_is_one_preflight_line(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    # Issue 36 item 7: an HF id that is not cached, with offline mode on, used to surface
    # as 1,241 lines of traceback from the engine; now one problem before any work.
    pytest.importorskip("huggingface_hub")
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())  # engines "installed"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    spec = ArmSpec(label="int4", backend="transformers", model="nobody-org/no-such-model")
    [problem] = preflight({"arm 'int4'": spec})
    text = str(problem)
    assert "\n" not in text
    assert "'nobody-org/no-such-model' is not in the local cache" in text and "HF_HUB_OFFLINE" in text
    # A cached id passes without the network.
    snap = tmp_path / "empty-cache" / "models--nobody-org--cached" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (tmp_path / "empty-cache" / "models--nobody-org--cached" / "refs").mkdir()
    (tmp_path / "empty-cache" / "models--nobody-org--cached" / "refs" / "main").write_text("a" * 40)
    assert preflight({"arm 'int4'": ArmSpec(label="int4", backend="transformers",
                                            model="nobody-org/cached")}) == []


@pytest.mark.parametrize("client", ["httpx", "native"])
def test_preflight_takes_the_runs_network_route(client: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 36 item 3: with http_client = "httpx" the run goes through HTTP_PROXY; the
    # pre-flight must too (it used to ignore the proxy and check the server directly). With
    # the native client neither uses the proxy.
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    seen: list[str] = []

    class Proxy(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            body = json.dumps({"data": [{"id": "m"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    proxy = HTTPServer(("127.0.0.1", 0), Proxy)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        # An address only the proxy "reaches" (nothing listens on port 9 here).
        spec = ArmSpec(label="int4", backend="openai", model="m", base_url="http://10.255.255.1:9/v1",
                       options={"http_client": client, "timeout_s": 2})
        problems = preflight({"arm 'int4'": spec}, timeout_s=1)
    finally:
        proxy.shutdown()
        proxy.server_close()
    if client == "httpx":
        assert problems == [] and seen == ["http://10.255.255.1:9/v1/models"]
    else:
        assert seen == [] and len(problems) == 1

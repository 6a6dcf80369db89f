"""Pre-flight: before any episode, every model the run will call is checked.

For each arm (and the LLM user model, and a judge model — any named :class:`ArmSpec`):

- ``openai``: the base URL is an http(s) URL, the API key variable is set, every endpoint
  of the arm answers ``GET <url>/models`` (reachable, key accepted) and lists the arm's model
  (else the served ids, with a "did you mean"), and all of them serve the same checkpoint
  (vLLM's ``root``) under that name;
- ``transformers`` / ``vllm``: the engine is importable (looked up, not imported) and the
  checkpoint directory exists;
- a replay arm (``backend = "replay"``, an arm whose source is results files, not a
  backend): its results files exist (their τ²-bench versions are checked when they are read);
- any other backend: it is registered.

:func:`preflight` returns every problem, one per model, naming the arm, the URL or path and
the cause (secrets redacted); :func:`preflight_or_raise` raises one
:class:`~pytest_quantagent.errors.ConfigurationError` listing them all. Extra checks (a judge
model of another kind, a plugin's backend) plug in as callables returning problems, or by
registering a check for a backend name with :func:`register_check`.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_quantagent.errors import ConfigurationError
from pytest_quantagent.quant.arms import ArmSpec

DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class PreflightProblem:
    """One model that cannot be used: who (``arm 'int4'``, ``user``, ``judge``), where (URL
    or path) and why."""

    who: str
    where: str
    cause: str

    def __str__(self) -> str:
        where = f" ({self.where})" if self.where else ""
        return f"{self.who}{where}: {self.cause}"


BackendCheck = Callable[[ArmSpec, float], "str | None"]
"""(spec, timeout) → the cause of a problem, or None when the model is usable."""

ExtraCheck = Callable[[], Iterable[PreflightProblem]]

_CHECKS: dict[str, BackendCheck] = {}


def register_check(backend: str) -> Callable[[BackendCheck], BackendCheck]:
    """Decorator: the pre-flight check of backend ``backend`` (replaces a built-in one)."""

    def deco(fn: BackendCheck) -> BackendCheck:
        _CHECKS[backend] = fn
        return fn

    return deco


def _where(spec: ArmSpec) -> str:
    from pytest_quantagent.backends.secrets import without_userinfo

    endpoints = spec.options.get("endpoints")
    if endpoints and isinstance(endpoints, list) and len(endpoints) > 1:
        from pytest_quantagent.backends.options import arm_endpoints

        return ", ".join(without_userinfo(u) for u, _ in arm_endpoints(spec.base_url, spec.options))
    if spec.base_url:
        return without_userinfo(spec.base_url)
    return spec.path or ""


@register_check("openai")
def _check_openai(spec: ArmSpec, timeout_s: float) -> str | None:
    """Every endpoint of the arm is asked ``GET /models``; each must list the arm's model, and
    all must serve the same one (vLLM's ``root``, the checkpoint behind a served name, where
    the server reports it)."""
    from pydantic import SecretStr

    from pytest_quantagent.backends.options import arm_endpoints

    endpoints = arm_endpoints(spec.base_url, spec.options)
    if not endpoints:
        return "backend 'openai' needs base_url (e.g. http://127.0.0.1:8000/v1)"
    from pytest_quantagent.backends.secrets import credentials_conflict

    conflict = credentials_conflict([u for u, _ in endpoints], spec.api_key_env
                                    and f"api_key_env {spec.api_key_env!r}")
    if conflict is not None:
        return conflict
    key: SecretStr | None = None
    if spec.api_key_env:
        key = SecretStr(os.environ.get(spec.api_key_env) or "")
        if not key.get_secret_value():
            return f"environment variable {spec.api_key_env!r} (api_key_env) is not set"
    several = len(endpoints) > 1
    causes: list[str] = []
    down: list[str] = []
    roots: dict[str, str] = {}
    for url, _weight in endpoints:
        cause, root = _check_endpoint(spec, url, key, timeout_s)
        if cause is not None:
            line = f"endpoint {_shown(url)}: {cause}" if several else cause
            (down if cause.startswith(_DOWN) else causes).append(line)
        elif root is not None:
            roots[_shown(url)] = root
    if not causes and down and len(down) < len(endpoints):
        # Some endpoints are down but others answer: the endpoint pool fails over, so the
        # run goes on with the healthy ones (a misconfigured endpoint still refuses it).
        import warnings

        warnings.warn(f"{spec.label!r}: " + "; ".join(down) + f"; the run goes on with the "
                      f"{len(endpoints) - len(down)} endpoint(s) that answer", stacklevel=2)
        down = []
    if causes or down:
        return "; ".join([*causes, *down])
    if len(set(roots.values())) > 1:
        return (f"the arm's endpoints serve different models as {spec.model!r}: "
                + ", ".join(f"{u} serves {r!r}" for u, r in roots.items())
                + " (every endpoint of an arm must serve the same checkpoint)")
    return None


_DOWN = ("no answer to GET /models", "cannot reach the server")
"""How an endpoint that is down (not misconfigured) begins its cause."""


def _shown(url: str) -> str:
    from pytest_quantagent.backends.secrets import without_userinfo

    return without_userinfo(url)


_MODELS_FRESH_S = 30.0
"""How long the serving comparison's ``GET /models`` answer of an endpoint stands for the
pre-flight that follows it (one request per endpoint and run, not two). The pre-flight takes
the answer out (a later run asks again), and asks itself when there is none."""
_models_seen: dict[tuple[str, str], tuple[float, Any]] = {}


def _models_key(base_url: str, key: Any) -> tuple[str, str]:
    """The memo's key: the endpoint and a hash of the credentials it was asked with (never
    the credentials themselves)."""
    import hashlib

    secret = key.get_secret_value() if key is not None else ""
    auth = repr(sorted(_url_auth(base_url).items()))
    return _shown(base_url).rstrip("/"), hashlib.sha256(f"{secret}\x00{auth}".encode()).hexdigest()


def _remember_models(base_url: str, key: Any, data: Any) -> None:
    import time

    _models_seen[_models_key(base_url, key)] = (time.monotonic(), data)


def _recent_models(base_url: str, key: Any, *, take: bool = False) -> Any | None:
    """The ``/models`` answer the serving comparison just had from this endpoint, if recent
    (``take``: and forget it)."""
    import time

    k = _models_key(base_url, key)
    seen = _models_seen.pop(k, None) if take else _models_seen.get(k)
    if seen is None or time.monotonic() - seen[0] > _MODELS_FRESH_S:
        return None
    return seen[1]


def _get_models(spec: ArmSpec, base_url: str, key: Any, timeout_s: float) -> tuple[str | None, Any]:
    """``GET <base_url>/models``: (the cause of a problem, None) or (None, its JSON; None when
    the body is no JSON)."""
    import httpx

    from pytest_quantagent.backends.secrets import redact

    shown = _shown(base_url)
    try:
        with _client(spec, key, timeout_s) as client:
            resp = client.get(shown.rstrip("/") + "/models", headers=_url_auth(base_url))
    except httpx.TimeoutException:
        return f"no answer to GET /models within {timeout_s:g} s (is the server up?)", None
    except httpx.HTTPError as e:
        return f"cannot reach the server: {redact(f'{type(e).__name__}: {e}', (key,))}", None
    if 300 <= resp.status_code < 400:  # not followed, as the run does not follow them
        from pytest_quantagent.backends.http_client import redirect_cause

        return "GET /models: " + redirect_cause(resp.status_code, resp.headers.get("location"),
                                                "/models", (key,)), None
    body = redact(resp.text[:300], (key,))
    if resp.status_code in (401, 403):
        return f"GET /models: HTTP {resp.status_code}: the API key was refused ({body})", None
    if resp.status_code == 404:
        return (f"GET /models: HTTP 404: is {shown!r} the API root (it usually ends in /v1)?"), None
    if resp.status_code >= 400:
        return f"GET /models: HTTP {resp.status_code}: {body}", None
    try:
        return None, resp.json()
    except ValueError:
        return None, None


def _check_endpoint(spec: ArmSpec, base_url: str, key: Any, timeout_s: float
                    ) -> tuple[str | None, str | None]:
    """(cause of a problem or None, what the endpoint serves as the arm's model: its
    ``root`` when reported, else its id; None when the server lists no models)."""
    import httpx

    from pytest_quantagent.backends.options import did_you_mean

    shown = _shown(base_url)
    try:
        u = httpx.URL(base_url)
        ok = u.scheme in ("http", "https") and bool(u.host)
    except (httpx.InvalidURL, TypeError, ValueError):
        ok = False
    if not ok:
        return f"base_url {shown!r} is not an http:// or https:// URL with a host", None
    data = _recent_models(base_url, key, take=True)  # the serving comparison asked already
    if data is None:
        cause, data = _get_models(spec, base_url, key, timeout_s)
        if cause is not None:
            return cause, None
    try:
        entries = [m for m in data["data"] if isinstance(m, dict)]
        served = [str(m["id"]) for m in entries]
    except (KeyError, TypeError):
        return None, None  # a server without a model list: reachable is all we can check
    if served and spec.model not in served:
        return (f"model {spec.model!r} is not served there{did_you_mean(spec.model, served)} "
                f"(served: {', '.join(served[:10])})"), None
    for m in entries:
        if str(m["id"]) == spec.model:
            root = m.get("root")
            return None, str(root) if isinstance(root, str) and root else spec.model
    return None, None


def _run_uses_httpx(spec: ArmSpec) -> bool:
    """Whether the run's backend for ``spec`` talks through httpx (the rule of
    ``OpenAICompatBackend``: ``http_client = "httpx"``, or ``"auto"`` with any https://
    endpoint)."""
    from pytest_quantagent.backends.options import arm_endpoints

    choice = spec.options.get("http_client", "auto")
    if choice in ("httpx", "native"):
        return bool(choice == "httpx")
    return not all(u.startswith("http://") for u, _ in arm_endpoints(spec.base_url, spec.options))


def _client(spec: ArmSpec, key: Any, timeout_s: float) -> Any:
    """An ``httpx.Client`` on the run's route with the run's credentials: HTTP(S)_PROXY /
    NO_PROXY honoured (httpx's ``trust_env``) exactly when the run's client is httpx (the
    native one, plain http:// endpoints by default, connects directly); the key as Bearer.
    Requests go to the URL without its user:password (sent as Basic by :func:`_url_auth`),
    as the run sends them (``backends.secrets``' rule)."""
    import httpx

    headers = {} if key is None else {"Authorization": "Bearer " + key.get_secret_value()}
    return httpx.Client(timeout=timeout_s, trust_env=_run_uses_httpx(spec), headers=headers)


def _url_auth(url: str) -> dict[str, str]:
    """The Basic ``Authorization`` header of a URL's credentials (none without)."""
    from pytest_quantagent.backends.secrets import basic_authorization

    basic = basic_authorization(url)
    return {} if basic is None else {"Authorization": basic}


def _engine_check(modules: Sequence[str], extra: str) -> BackendCheck:
    def check(spec: ArmSpec, timeout_s: float) -> str | None:
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        if missing:
            return (f"backend {spec.backend!r} needs {', '.join(missing)}: "
                    f"pip install 'pytest-quantagent[{extra}]'")
        if spec.path and not Path(spec.path).expanduser().exists():
            return f"checkpoint {spec.path!r} does not exist"
        if not spec.path and spec.model:
            return _check_hf_id(spec.model, timeout_s)
        return None

    return check


def _offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _check_hf_id(model: str, timeout_s: float) -> str | None:
    """An HF id ``ORG/NAME`` is loadable: its ``config.json`` is in the local cache, or
    (online) the Hub answers for it. Offline and not cached, gated, or unknown: one line,
    before the engine's own traceback (issue 36 item 7)."""
    from pytest_quantagent.quant.checkpoint import checkpoint_kind

    if checkpoint_kind(model) != "hf":
        return None
    try:
        import huggingface_hub as hub
    except ImportError:
        return None  # the engine check above names the missing extra
    try:
        cached = hub.try_to_load_from_cache(model, "config.json")
    except Exception:  # a malformed id: the Hub call below says what is wrong
        cached = None
    if isinstance(cached, str):
        return None
    if _offline():
        return (f"Hugging Face model {model!r} is not in the local cache and offline mode is on "
                "(HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE): download it first "
                f"(huggingface-cli download {model}) or give a local checkpoint folder")
    try:
        hub.HfApi().model_info(model, timeout=timeout_s)
    except Exception as e:
        from pytest_quantagent.backends.secrets import redact

        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return (f"Hugging Face model {model!r} cannot be loaded: {type(e).__name__}: "
                f"{redact(first)[:200]} (not in the local cache; gated models need "
                "HF_TOKEN and accepted terms)")
    return None


_CHECKS["transformers"] = _engine_check(("torch", "transformers"), "transformers")
_CHECKS["vllm"] = _engine_check(("vllm",), "vllm")


def _unknown_backend(e: Any) -> str:
    """An unknown backend name, with ``replay`` among the names a user may write (it is an
    arm source, not a registered backend) and the closest name when one is near."""
    from pytest_quantagent.backends.options import did_you_mean
    from pytest_quantagent.errors import UnknownNameError
    from pytest_quantagent.quant.replay import REPLAY

    known = sorted({*e.known, REPLAY})
    return str(UnknownNameError("backend", e.value, known)) + did_you_mean(str(e.value), known)


def preflight(models: Mapping[str, ArmSpec], *, extra: Sequence[ExtraCheck] = (),
              timeout_s: float = DEFAULT_TIMEOUT_S) -> list[PreflightProblem]:
    """Check every model of ``models`` (who → spec, e.g. ``{"arm 'int4'": spec, "user":
    spec}``) and run the ``extra`` checks; every problem found, in order."""
    from pytest_quantagent.backends.registry import get_backend_factory
    from pytest_quantagent.errors import UnknownNameError

    problems: list[PreflightProblem] = []
    seen: dict[tuple[Any, ...], str | None] = {}
    for who, spec in models.items():
        if spec.source == "results":
            from pytest_quantagent.quant.replay import check_replay_files

            cause = check_replay_files(spec)
            if cause is not None:
                problems.append(PreflightProblem(who, _where(spec), cause))
            continue
        try:
            get_backend_factory(spec.backend)
        except UnknownNameError as e:
            problems.append(PreflightProblem(who, _where(spec), _unknown_backend(e)))
            continue
        except ImportError as e:
            problems.append(PreflightProblem(who, _where(spec), f"backend {spec.backend!r}: {e}"))
            continue
        check = _CHECKS.get(spec.backend)
        if check is None:
            continue
        # Two arms on one endpoint and model are checked once.
        ident = (spec.backend, spec.base_url, repr(spec.options.get("endpoints")), spec.model, spec.path, spec.api_key_env,
                 tuple(sorted((k, str(v)) for k, v in spec.options.items())))
        if ident not in seen:
            seen[ident] = check(spec, timeout_s)
        cause = seen[ident]
        if cause is not None:
            problems.append(PreflightProblem(who, _where(spec), cause))
    for fn in extra:
        problems.extend(fn())
    return problems


def store_check(run_dir: str | Path, who: str) -> ExtraCheck:
    """An extra check: the episode store ``run_dir`` (given as option ``who``, e.g.
    ``--quant-cache-dir``) can take the run's episodes
    (:func:`~pytest_quantagent.store.jsonl.store_dir_problem`)."""

    def check() -> list[PreflightProblem]:
        from pytest_quantagent.store.jsonl import store_dir_problem

        cause = store_dir_problem(run_dir)
        return [] if cause is None else [PreflightProblem(who, "", cause)]

    return check


def format_problems(problems: Sequence[PreflightProblem]) -> str:
    return "pre-flight check failed, no episode was run:\n" + "\n".join(f"  {p}" for p in problems)


def preflight_specs_or_raise(models: Mapping[str, ArmSpec], *, extra: Sequence[ExtraCheck] = (),
                             timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """:func:`preflight`, raising :class:`ConfigurationError` with one line per problem."""
    problems = preflight(models, extra=extra, timeout_s=timeout_s)
    if problems:
        raise ConfigurationError(format_problems(problems))


def preflight_or_raise(runtimes: Sequence[Any], user: Any = None, *,
                       extra: Sequence[ExtraCheck] = ()) -> None:
    """Pre-flight of built arms (``ArmRuntime``) and the run's LLM user (``UserRuntime``)."""
    models: dict[str, ArmSpec] = {f"arm {rt.arm.label!r}": rt.arm for rt in runtimes}
    if user is not None:
        models["user"] = user.arm
    preflight_specs_or_raise(models, extra=extra)


# --------------------------------------------------------------------------- comparability

#: The serving settings compared between a candidate arm and its reference before any
#: episode, and where each is read. A difference in any of them can change what the model
#: does, so it makes the cell INCONCLUSIVE "not comparable" unless the user accepts it by
#: name (``--quant-accept-difference``). Values the arms TOML does not set are the harness's
#: defaults; values a server does not expose are ``unknown`` (never a difference).
COMPARED_SETTINGS: dict[str, str] = {
    "backend": "the backend kind serving the arm (openai, transformers, vllm, mock)",
    "temperature": "sampling temperature: extra_body.temperature, else the agent's 0",
    "top_p": "nucleus sampling: extra_body.top_p, else not sent (the server's default)",
    "max_tokens": "token limit per answer: extra_body.max_tokens / max_completion_tokens, "
                  "the transformers option max_new_tokens, else the agent's 512",
    "reasoning": "reasoning switches: extra_body.chat_template_kwargs (enable_thinking...), "
                 "reasoning_effort, include_reasoning, reasoning, thinking",
    "extra_body": "every other request field the arm adds (extra_body's remaining keys)",
    "tool_schemas": "tool schema handling: strict (constrained = true) or as given",
    "max_output_chars": "the harness's cut of an over-long output (max_output_chars)",
    "chat_template": "the chat template: the server's (a /v1/models entry's chat_template) "
                     "or the checkpoint's tokenizer_config.json (sha256 of the text)",
    "tool_parser": "the server's tool-call parser (a /v1/models entry's tool_call_parser or "
                   "tool_parser; a vllm arm's tool_call_parser option)",
    "reasoning_parser": "the server's reasoning parser (a /v1/models entry's "
                        "reasoning_parser; a vllm arm's option)",
    "max_model_len": "the context length (a /v1/models entry's max_model_len; a vllm arm's "
                     "option)",
    "server_version": "the server's version (GET <root>/version, vLLM's)",
}
#: Read and listed, never a difference: what the arms differ in by design.
INFORMATIONAL_SETTINGS: dict[str, str] = {
    "served_model": "the model id the arm calls",
    "root": "the checkpoint behind the served name (a /v1/models entry's root)",
    "kv_cache_dtype": "the KV cache's dtype: the arm's (its label's +kv-DTYPE or the arms "
                      "TOML's kv_cache_dtype; auto = as served), or what the server exposes "
                      "(a /v1/models entry's kv_cache_dtype); a KV arm's intended difference",
}
UNKNOWN = "unknown"
_REASONING_KEYS = ("chat_template_kwargs", "reasoning_effort", "include_reasoning", "reasoning",
                   "thinking")
_GENERATION_KEYS = ("temperature", "top_p", "max_tokens", "max_completion_tokens")
_DEFAULT_AGENT_MAX_TOKENS = 512


def check_accepted(names: Sequence[str], where: str = "--quant-accept-difference") -> tuple[str, ...]:
    """``names`` checked against :data:`COMPARED_SETTINGS` (ValueError naming the bad ones and
    listing the allowed); returned deduplicated, in order."""
    bad = [n for n in names if n not in COMPARED_SETTINGS]
    if bad:
        raise ValueError(f"{where}={','.join(names)}: {', '.join(repr(b) for b in bad)} "
                         f"{'is' if len(bad) == 1 else 'are'} not a compared setting; allowed: "
                         + ", ".join(COMPARED_SETTINGS))
    return tuple(dict.fromkeys(names))


def _canon(v: Any) -> str:
    import json

    if isinstance(v, str):
        return v
    return json.dumps(v, sort_keys=True, separators=(",", ":"), default=str)


def _template_hash(text: Any) -> str | None:
    import hashlib

    if not isinstance(text, str) or not text:
        return None
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


def _server_fields(spec: ArmSpec, timeout_s: float) -> dict[str, str]:
    """What the arm's (first) endpoint exposes: the ``/v1/models`` entry of its model
    (``max_model_len``, ``root``, ``chat_template``, ``tool_call_parser``/``tool_parser``,
    ``reasoning_parser``) and ``GET <root>/version``'s ``version``. A field the server does
    not give, or a request that fails, is simply absent."""
    import httpx

    from pytest_quantagent.backends.options import arm_endpoints

    endpoints = arm_endpoints(spec.base_url, spec.options)
    if not endpoints:
        return {}
    from pydantic import SecretStr

    first = endpoints[0][0]
    base = _shown(first).rstrip("/")
    auth = _url_auth(first)
    key = None
    if spec.api_key_env and os.environ.get(spec.api_key_env):
        key = SecretStr(os.environ[spec.api_key_env])
    out: dict[str, str] = {}
    try:
        with _client(spec, key, timeout_s) as client:
            try:
                data = _recent_models(first, key)
                if data is None:
                    resp = client.get(base + "/models", headers=auth)
                    data = resp.json()
                    if resp.status_code == 200:
                        _remember_models(first, key, data)
                entry = next((m for m in data.get("data", []) if isinstance(m, dict)
                              and str(m.get("id")) == spec.model), None)
            except (httpx.HTTPError, ValueError, AttributeError, TypeError):
                entry = None
            if entry is not None:
                if entry.get("max_model_len") is not None:
                    out["max_model_len"] = _canon(entry["max_model_len"])
                if isinstance(entry.get("root"), str):
                    out["root"] = entry["root"]
                h = _template_hash(entry.get("chat_template"))
                if h:
                    out["chat_template"] = h
                parser = entry.get("tool_call_parser", entry.get("tool_parser"))
                if isinstance(parser, str) and parser:
                    out["tool_parser"] = parser
                rp = entry.get("reasoning_parser")
                if isinstance(rp, str) and rp:
                    out["reasoning_parser"] = rp
                kv = entry.get("kv_cache_dtype")
                if isinstance(kv, str) and kv:
                    out["kv_cache_dtype"] = kv
            root = base.removesuffix("/v1")
            try:
                resp = client.get(root + "/version", headers=auth)
                version = resp.json().get("version") if resp.status_code == 200 else None
            except (httpx.HTTPError, ValueError, AttributeError):
                version = None
            if isinstance(version, (str, int, float)) and not isinstance(version, bool):
                out["server_version"] = str(version)
    except httpx.HTTPError:
        pass
    return out


def serving_settings(spec: ArmSpec, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, tuple[str, str]]:
    """Every setting of :data:`COMPARED_SETTINGS` and :data:`INFORMATIONAL_SETTINGS` for one
    arm: name → (value, where it was read); ``unknown`` where nothing says."""
    opts = dict(spec.options)
    extra = opts.get("extra_body") if isinstance(opts.get("extra_body"), dict) else {}
    assert isinstance(extra, dict)
    toml = f"arm {spec.label!r}"
    s: dict[str, tuple[str, str]] = {name: (UNKNOWN, "") for name in
                                     (*COMPARED_SETTINGS, *INFORMATIONAL_SETTINGS)}
    s["backend"] = (spec.backend, toml)
    s["served_model"] = (spec.model, toml)
    s["kv_cache_dtype"] = (spec.kv_cache_dtype, toml)
    if spec.source == "results":
        return s
    s["temperature"] = ((_canon(extra["temperature"]), f"{toml} extra_body") if "temperature" in extra
                        else ("0", "the agent's request"))
    s["top_p"] = ((_canon(extra["top_p"]), f"{toml} extra_body") if "top_p" in extra
                  else ("not sent", "the agent's default"))
    mt = extra.get("max_tokens", extra.get("max_completion_tokens"))
    if mt is not None:
        s["max_tokens"] = (_canon(mt), f"{toml} extra_body")
    elif opts.get("max_new_tokens") is not None:
        s["max_tokens"] = (_canon(min(int(opts["max_new_tokens"]), _DEFAULT_AGENT_MAX_TOKENS)),
                           f"{toml} max_new_tokens")
    else:
        s["max_tokens"] = (str(_DEFAULT_AGENT_MAX_TOKENS), "the agent's request (a backend may cap it lower)")
    reasoning = {k: extra[k] for k in _REASONING_KEYS if k in extra}
    s["reasoning"] = ((_canon(reasoning), f"{toml} extra_body") if reasoning
                      else ("none sent", "the agent's default"))
    rest = {k: v for k, v in extra.items() if k not in (*_REASONING_KEYS, *_GENERATION_KEYS)}
    s["extra_body"] = (_canon(rest), f"{toml} extra_body") if rest else ("{}", toml)
    if spec.backend == "openai":
        s["tool_schemas"] = ("strict" if opts.get("constrained") else "as given", toml)
        s["max_output_chars"] = (_canon(opts.get("max_output_chars", 32_768)), toml)
        for name, value in _server_fields(spec, timeout_s).items():
            if name == "kv_cache_dtype" and value != spec.kv_cache_dtype != "auto":
                value = f"{value} (the arms TOML says {spec.kv_cache_dtype})"
            s[name] = (value, "the server")
    elif spec.backend == "vllm":
        for name, key in (("max_model_len", "max_model_len"), ("tool_parser", "tool_call_parser"),
                          ("reasoning_parser", "reasoning_parser")):
            if opts.get(key) is not None:
                s[name] = (_canon(opts[key]), toml)
        if isinstance(opts.get("chat_template"), str):
            s["chat_template"] = (_template_hash(opts["chat_template"]) or UNKNOWN, toml)
    if s["chat_template"][0] == UNKNOWN and spec.path:
        s["chat_template"] = _checkpoint_template(spec.path)
    return s


def _checkpoint_template(path: str) -> tuple[str, str]:
    """The chat template of a checkpoint directory's ``tokenizer_config.json`` (hashed)."""
    import json

    cfg = Path(path).expanduser() / "tokenizer_config.json"
    try:
        h = _template_hash(json.loads(cfg.read_text(encoding="utf-8")).get("chat_template"))
    except (OSError, ValueError, AttributeError):
        h = None
    return (h, f"{cfg}") if h else (UNKNOWN, "")


def compare_serving(reference: ArmSpec, arm: ArmSpec, *, accept: Sequence[str] = (),
                    timeout_s: float = DEFAULT_TIMEOUT_S,
                    read: Callable[[ArmSpec, float], dict[str, tuple[str, str]]] | None = None,
                    ) -> dict[str, Any]:
    """The comparability block of the cell (``arm`` against ``reference``): per setting, both
    values, where they were read and a status: ``same``; ``differs`` (the cell is
    INCONCLUSIVE "not comparable"); ``accepted`` (differs, and the user named it in
    ``accept``); ``unknown`` (a side does not say); ``informational`` (listed, by design
    different). ``accept`` must name settings of :data:`COMPARED_SETTINGS`."""
    accepted = check_accepted(accept)
    get = read or serving_settings
    ref, cand = get(reference, timeout_s), get(arm, timeout_s)
    settings: dict[str, dict[str, Any]] = {}
    for name in (*COMPARED_SETTINGS, *INFORMATIONAL_SETTINGS):
        (rv, rsrc), (av, asrc) = ref[name], cand[name]
        if name in INFORMATIONAL_SETTINGS:
            status = "informational"
        elif UNKNOWN in (rv, av):
            status = "unknown"
        elif rv == av:
            status = "same"
        else:
            status = "accepted" if name in accepted else "differs"
        settings[name] = {"reference": rv, "arm": av, "status": status,
                          "source": {"reference": rsrc, "arm": asrc}}
    return {"reference": reference.label, "arm": arm.label, "settings": settings,
            "accepted": list(accepted)}


def comparability_lines(block: dict[str, Any] | None) -> list[str]:
    """The settings of a comparability block in words, one line each (the reports')."""
    if not block:
        return []
    return [f"{name}: {s['reference']} vs {s['arm']} ({s['status']})"
            for name, s in (block.get("settings") or {}).items()]

"""Arms: one precision of one model, resolved to a backend and a checkpoint or endpoint.

Arms come from two places:

- a TOML arms config (``--config``)::

      [arms.bf16]
      backend = "openai"
      base_url = "http://127.0.0.1:8000/v1"
      model = "Qwen/Qwen3-8B"
      api_key_env = "OPENAI_API_KEY"   # optional; the key itself is never stored

  Keys other than the :class:`ArmSpec` fields go to ``ArmSpec.options`` (backend-specific,
  e.g. the ``mock`` backend's ``responses``);
- a *model spec* (``--model tiny-agent``) registered with :func:`register_model_spec`, which
  maps arm labels (``bf16``, ``int4``, ...) to arms. The bundled specs are registered by
  ``pytest_quantagent.quant.bundled``, imported lazily on first lookup.

An arm label is written ``PRECISION[+kv-DTYPE][+repair][@MODEL]``, modifiers in that order
(:data:`LABEL_FORM`; any other order is refused, naming the label and this form):

- ``+kv-DTYPE`` (``int4+kv-int8``, ``bf16+kv-fp8``): the same arm with its KV cache stored in
  ``DTYPE`` (:attr:`ArmSpec.kv_cache_dtype`, one of
  :data:`~pytest_quantagent.backends.kv_cache.KV_CACHE_DTYPES`); its reference is still the
  reference arm with the KV cache as served (``auto``);
- ``+repair`` (``int4+repair``): the same model with the reflexive-repair mode on;
- ``@MODEL`` (``int4@tiny-agent``, ``int4+kv-int8+repair@tiny-agent``): the arm of that model
  spec whatever the run's model, paired with the same model's reference arm
  (``bf16@tiny-agent``, :func:`reference_for`), so one run can hold the cells of several models.

An arms-TOML table may set ``kv_cache_dtype`` itself (``[arms.int4kv] kv_cache_dtype = "int8"``);
an arm ``[arms."int4+kv-int8"]`` gets it from its label.

The same TOML file may pin the LLM user simulator in a ``[user]`` table, written like an arm
plus the user's decoding settings (see :func:`load_user_config`)::

      [user]
      backend = "openai"
      base_url = "http://127.0.0.1:8001/v1"
      model = "gpt-4.1"
      api_key_env = "USER_API_KEY"
      temperature = 0.0     # default 0
      max_tokens = 512      # default 512

or be given as a spec string (:func:`parse_user_model`).
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pytest_quantagent.backends.kv_cache import AUTO as KV_AUTO
from pytest_quantagent.backends.kv_cache import (
    KV_CACHE_DTYPES,
    VLLM_KV_CACHE_DTYPES,
    check_kv_cache_dtype,
)
from pytest_quantagent.errors import DataFileError, UnknownNameError
from pytest_quantagent.quant.replay import REPLAY, options_model

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: Precision names the project knows (an arm label is one of these, plus modifiers).
KNOWN_PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp32", "fp8", "int8", "int4", "int4-rtn")
REPAIR_SUFFIX = "+repair"
KV_PREFIX = "+kv-"
"""Before an arm's KV-cache dtype in its label (``int4+kv-int8``)."""
MODEL_SEP = "@"
"""Between an arm label and the model spec it is taken from (``int4@tiny-agent``)."""
LABEL_FORM = "PRECISION[+kv-DTYPE][+repair][@MODEL]"
"""The one order of an arm label's modifiers (e.g. ``int4+kv-int8+repair@tiny-agent-prone``)."""
REPAIR_MODES: tuple[str, ...] = ("none", "reflexive")
DEFAULT_MODEL_SPEC = "tiny-agent"
#: KV-cache dtypes a ``+kv-DTYPE`` label modifier may name (``auto`` is the label without one).
LABEL_KV_DTYPES: tuple[str, ...] = tuple(d for d in KV_CACHE_DTYPES if d != KV_AUTO)
#: Backends that store the KV cache themselves, so a ``+kv-DTYPE`` label can set it on an arm
#: of theirs: the transformers backend emulates every dtype, vLLM's engine is given it. A
#: server (``openai``) keeps the KV cache it was started with: a KV arm served by one is its
#: own table, pointing at a server started with that dtype.
KV_SETTING_BACKENDS: frozenset[str] = frozenset({"transformers", "vllm"})

ArmSource = Literal["model", "results"]

_PRECISION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
_MODIFIER_RE = re.compile(r"\+(?:kv-[A-Za-z0-9_.\-]*|repair|[^+@]*)")


@dataclass(frozen=True)
class ArmLabel:
    """An arm label's parts: ``int4+kv-int8+repair@m`` → precision ``int4``, KV-cache dtype
    ``int8``, repair on, model ``m``."""

    precision: str
    kv_cache_dtype: str | None = None
    """The ``+kv-DTYPE`` modifier's dtype; None when the label has none."""
    repair: bool = False
    model: str | None = None

    @property
    def plain(self) -> str:
        """The label without ``@MODEL``."""
        kv = f"{KV_PREFIX}{self.kv_cache_dtype}" if self.kv_cache_dtype is not None else ""
        return f"{self.precision}{kv}{REPAIR_SUFFIX if self.repair else ''}"

    def __str__(self) -> str:
        return self.plain if self.model is None else f"{self.plain}{MODEL_SEP}{self.model}"


def parse_label(label: str) -> ArmLabel:
    """Split an arm label written :data:`LABEL_FORM` into its parts. ``ValueError`` for a
    label that is not of that form (modifiers out of order, repeated or unknown, a modifier
    after ``@MODEL``), naming the label and the allowed form; :class:`UnknownNameError` for a
    ``+kv-`` dtype outside :data:`LABEL_KV_DTYPES`."""
    plain, sep, model = label.partition(MODEL_SEP)
    example = "e.g. 'int4+kv-int8+repair@tiny-agent'"
    m = _PRECISION_RE.match(plain)
    if m is None:
        raise ValueError(f"arm label {label!r} must start with a precision (letters, digits, "
                         f"'-', '_', '.'); the form is {LABEL_FORM}, {example}")
    mods = _MODIFIER_RE.findall(plain, m.end())
    if "".join(mods) != plain[m.end():]:
        raise ValueError(f"arm label {label!r} is not of the form {LABEL_FORM} ({example})")
    kv: str | None = None
    repair = False
    for mod in mods:
        if mod.startswith(KV_PREFIX) and kv is None and not repair:
            kv = mod.removeprefix(KV_PREFIX)
            if kv not in LABEL_KV_DTYPES:
                raise UnknownNameError("KV-cache dtype", kv, LABEL_KV_DTYPES,
                                       hint=f"In arm label {label!r} ({LABEL_FORM}); a label "
                                       "without '+kv-' is the KV cache as served ('auto')")
        elif mod == REPAIR_SUFFIX and not repair:
            repair = True
        else:
            known = mod.startswith(KV_PREFIX) or mod == REPAIR_SUFFIX
            what = "repeated or out of order" if known else "not a modifier (+kv-DTYPE, +repair)"
            raise ValueError(f"arm label {label!r}: {mod!r} is {what}; modifiers go in the "
                             f"order {LABEL_FORM}, {example}")
    if sep and ("+" in model and (KV_PREFIX in model or model.endswith(REPAIR_SUFFIX))):
        raise ValueError(f"arm label {label!r}: a modifier after '@{model.split('+')[0]}'; "
                         f"modifiers go before the model, in the order {LABEL_FORM}, {example}")
    return ArmLabel(m.group(), kv, repair, model if sep else None)


def base_arm(label: str) -> str:
    """The arm ``label`` is resolved from: its precision, without ``+kv-DTYPE``, ``+repair``
    and ``@MODEL`` (``int4+kv-int8+repair@m`` → ``int4``)."""
    return parse_label(label).precision


@dataclass(frozen=True)
class ArmSpec:
    """Everything needed to build the backend of one arm (no secrets)."""

    label: str
    """Arm label as shown in reports, e.g. ``"bf16"``, ``"int4"``, ``"int4+repair"``."""
    backend: str
    """Backend registry name: ``mock``, ``openai``, ``transformers``, ``vllm``, ..."""
    model: str
    """Model id (HF id, served model name, or bundled model name)."""
    path: str | None = None
    """Local checkpoint directory, when the backend loads weights itself."""
    base_url: str | None = None
    """Endpoint of an OpenAI-compatible server."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key (the key is read at build time)."""
    quantization: str | None = None
    """Quantization scheme, e.g. ``"w4a16-awq-g128"``, ``"fp8-dynamic"``; None = as served."""
    revision: str | None = None
    repair: str = "none"
    """Repair mode: one of :data:`REPAIR_MODES`."""
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Backend-specific options (e.g. ``responses`` for ``mock``, ``timeout_s``)."""
    kv_cache_dtype: str = KV_AUTO
    """The KV cache's dtype (``+kv-DTYPE`` / the TOML key): one of
    :data:`~pytest_quantagent.backends.kv_cache.KV_CACHE_DTYPES`; ``auto`` = as served."""

    def __post_init__(self) -> None:
        if self.repair not in REPAIR_MODES:
            raise ValueError(
                f"repair ({self.repair!r}) of arm {self.label!r} must be one of "
                + ", ".join(repr(m) for m in REPAIR_MODES)
            )
        check_kv_cache_dtype(self.kv_cache_dtype, f"kv_cache_dtype of arm {self.label!r}:")

    @property
    def source(self) -> ArmSource:
        """Where the arm's episodes come from: ``"model"`` (a backend runs them) or
        ``"results"`` (``backend = "replay"``: read from τ²-bench results files, see
        :mod:`pytest_quantagent.quant.replay`; no backend is built)."""
        return "results" if self.backend == REPLAY else "model"

    @property
    def precision(self) -> str:
        """The label's weight precision, without its modifiers (``+kv-DTYPE``, ``+repair``,
        ``@MODEL``); the label itself when it is not of the form :data:`LABEL_FORM`."""
        try:
            return parse_label(self.label).precision
        except ValueError:
            return self.label

    def cache_fields(self) -> dict[str, Any]:
        """The fields that change an episode's outcome (for the cache key; no endpoint URL,
        no API key variable: moving a server or rotating a key changes nothing). The KV-cache
        dtype is there when it is not ``auto`` (the keys of earlier arms stay what they were)."""
        kv = {} if self.kv_cache_dtype == KV_AUTO else {"kv_cache_dtype": self.kv_cache_dtype}
        return {
            "label": self.label,
            "backend": self.backend,
            "model": self.model,
            "path": self.path,
            "quantization": self.quantization,
            "revision": self.revision,
            "repair": self.repair,
            "options": {k: self.options[k] for k in sorted(self.options)
                        if k not in _NON_OUTCOME_OPTIONS},
            **kv,
        }


#: Options that affect speed or plumbing only, never the model's output.
#: ``endpoints`` (where an arm is served, and with which weights) is in the cache key as the
#: backend's endpoint identity instead (see ``Backend.identity``).
_NON_OUTCOME_OPTIONS = frozenset({"timeout_s", "concurrency", "max_connections", "http_client",
                                  "endpoints"})

_SPEC_FIELDS = frozenset(
    {"backend", "model", "path", "base_url", "api_key_env", "quantization", "revision", "repair",
     "kv_cache_dtype"}
)

ModelSpecResolver = Callable[[str], ArmSpec]
"""Maps a precision (an arm label without modifiers, ``"int4"``) to its :class:`ArmSpec`; raises
:class:`UnknownNameError` for a label the model spec does not provide."""

_MODEL_SPECS: dict[str, tuple[ModelSpecResolver, tuple[str, ...]]] = {}
_bundled_loaded = False


def register_model_spec(
    name: str, resolver: ModelSpecResolver, arms: Iterable[str] = KNOWN_PRECISIONS
) -> None:
    """Register a model spec usable as ``--model NAME`` / ``--quant-model=NAME``.

    ``arms`` lists the arm labels the spec provides (used to validate ``--arms`` and in
    error messages). Registering a name twice replaces the earlier resolver.
    """
    _MODEL_SPECS[name] = (resolver, tuple(arms))


def _load_bundled() -> None:
    global _bundled_loaded
    if _bundled_loaded:
        return
    _bundled_loaded = True
    try:
        importlib.import_module("pytest_quantagent.quant.bundled")
    except ModuleNotFoundError as e:
        if e.name != "pytest_quantagent.quant.bundled":
            raise


def list_model_specs() -> list[str]:
    """Names of the registered model specs (bundled ones included)."""
    _load_bundled()
    return sorted(_MODEL_SPECS)


def model_spec_arms(name: str) -> tuple[str, ...]:
    """The arm labels model spec ``name`` provides."""
    _load_bundled()
    if name not in _MODEL_SPECS:
        raise UnknownNameError("model spec", name, _MODEL_SPECS)
    return _MODEL_SPECS[name][1]


def parse_arm_labels(value: str, allowed: Iterable[str] | None = None) -> list[str]:
    """Parse ``"bf16,int4"`` into labels; refuse empty, duplicate or malformed labels (see
    :func:`parse_label`), and (when ``allowed`` is given) labels outside it. Labels whose base
    arm is allowed (``int4+kv-int8+repair`` for ``int4``) are allowed."""
    labels = [p.strip() for p in value.split(",")]
    allowed_set = None if allowed is None else set(allowed)
    known = sorted(allowed_set) if allowed_set is not None else list(KNOWN_PRECISIONS)
    if not value.strip() or any(not p for p in labels):
        raise UnknownNameError("arm", value, known, hint="give a comma-separated list such as 'bf16,int4'")
    seen: set[str] = set()
    for label in labels:
        try:
            parsed = parse_label(label)
        except UnknownNameError:
            raise
        except ValueError as e:  # not of the form LABEL_FORM: say which arms there are too
            raise UnknownNameError("arm", label, known, hint=str(e)[:1].upper() + str(e)[1:]) from None
        if parsed.model == "":
            raise UnknownNameError("arm", label, known, hint=f"{label!r} names no model after '@'")
        if label in seen:
            raise ValueError(f"arm {label!r} is listed twice in {value!r}")
        seen.add(label)
        if parsed.model is not None:  # ARM@MODEL: resolve_arm checks the model spec and its arms
            continue
        if allowed_set is not None and not set(label_sources(label)) & allowed_set:
            raise UnknownNameError("arm", label, known,
                                   hint=f"a label may add modifiers to one of them ({LABEL_FORM})")
    return labels


def label_sources(label: str) -> tuple[str, ...]:
    """The labels an arm label may be taken from, in the order :func:`resolve_arm` tries an
    arms config: itself, without ``+repair``, without ``+kv-DTYPE``, the precision alone
    (``int4+kv-int8+repair`` → that, ``int4+kv-int8``, ``int4+repair``, ``int4``); no
    ``@MODEL``."""
    parsed = parse_label(label)
    kv, p = parsed.kv_cache_dtype, parsed.precision
    out = (parsed.plain, ArmLabel(p, kv).plain, ArmLabel(p, None, parsed.repair).plain, p)
    return tuple(dict.fromkeys(out))


def _read_config(p: Path) -> dict[str, Any]:
    """The arms config file's TOML; :class:`DataFileError` when missing or not TOML."""
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataFileError(p, "", "arms config file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise DataFileError(p, "", f"not valid TOML: {e}") from None


#: Top-level tables an arms config may have (``[judge]``: the judge model, same keys as
#: ``[user]``).
KNOWN_TABLES: tuple[str, ...] = ("arms", "user", "judge")
_STRING_FIELDS = ("model", "path", "base_url", "api_key_env", "quantization", "revision", "repair",
                  "kv_cache_dtype")
_USER_DECODING = ("temperature", "max_tokens")


def _check_tables(p: Path, data: Mapping[str, Any]) -> None:
    from pytest_quantagent.backends.options import did_you_mean

    for name in data:
        if name not in KNOWN_TABLES:
            raise DataFileError(
                p, name, f"unknown table or key [{name}]{did_you_mean(name, KNOWN_TABLES)} "
                f"(allowed top-level tables: {', '.join(f'[{t}]' for t in KNOWN_TABLES)})")


def _options_model(backend: str) -> Any:
    """The pydantic model of a built-in backend's options (or of a replay arm's), else None."""
    from pytest_quantagent.backends.options import OPTION_MODELS

    return options_model() if backend == REPLAY else OPTION_MODELS.get(backend)


def _option_names(backend: str) -> list[str] | None:
    """Option names of a built-in backend, or None for a backend whose options are its own."""
    model = _options_model(backend)
    if model is not None:
        return sorted(model.model_fields)
    if backend == "vllm":
        from pytest_quantagent.backends.options import VLLM_OPTIONS

        return sorted(VLLM_OPTIONS)
    return None


def _check_table(p: Path, where: str, table: Mapping[str, Any], *,
                 extra: tuple[str, ...] = ()) -> tuple[str, dict[str, Any]]:
    """Validate one arm-like table: ``backend`` a string, the spec fields strings,
    ``base_url`` an http(s) URL, every other key a known option of the backend with the
    right type and range. Returns (backend, options). Errors name file, table, key, value
    and the allowed keys or values."""
    from pydantic import ValidationError

    from pytest_quantagent.backends.options import did_you_mean, option_error

    backend = table.get("backend")
    if not isinstance(backend, str) or not backend:
        got = "" if backend is None else f", got {backend!r}"
        raise DataFileError(p, where, f"missing string key 'backend' (e.g. \"openai\", \"mock\"){got}")
    for key in _STRING_FIELDS:
        if key in table and not isinstance(table[key], str):
            raise DataFileError(p, f"{where}.{key}", f"must be a string, got {table[key]!r}")
    url = table.get("base_url")
    if isinstance(url, str):
        from urllib.parse import urlsplit

        from pytest_quantagent.backends.secrets import without_userinfo

        try:
            u = urlsplit(url)
            ok = u.scheme in ("http", "https") and bool(u.hostname)
        except ValueError:
            ok = False
        if not ok:
            raise DataFileError(p, f"{where}.base_url",
                                f"{without_userinfo(url)!r} is not an http:// or https:// URL "
                                "with a host (e.g. \"http://127.0.0.1:8000/v1\")")
    options = {k: v for k, v in table.items() if k not in _SPEC_FIELDS and k not in extra}
    names = _option_names(backend)
    if names is None:
        return backend, options
    allowed = sorted({*_SPEC_FIELDS, *extra, *names})
    for key in options:
        if key not in names:
            raise DataFileError(p, f"{where}.{key}",
                                f"unknown key {key!r} for backend {backend!r}"
                                f"{did_you_mean(key, allowed)} (allowed: {', '.join(allowed)})")
    model = _options_model(backend)
    if model is not None:
        try:
            model.model_validate(options)
        except ValidationError as e:
            msg = option_error(model, options, e, f"[{where}]")
            raise DataFileError(p, f"{where}.{e.errors()[0]['loc'][0]}",
                                msg.split(": ", 1)[1]) from None
    return backend, options


def load_arms_config(path: str | Path) -> dict[str, ArmSpec]:
    """Read a TOML arms config; each ``[arms.<label>]`` table becomes an :class:`ArmSpec`.

    Raises :class:`DataFileError` naming the file, the table and the key for anything
    malformed: unknown tables or keys (with "did you mean"), wrong types, bad ranges.
    """
    p = Path(path)
    data = _read_config(p)
    _check_tables(p, data)
    arms = data.get("arms")
    if not isinstance(arms, dict) or not arms:
        raise DataFileError(p, "arms", "no [arms.<label>] tables (e.g. [arms.bf16] backend = \"openai\" ...)")
    for name in ("user", "judge"):
        if name in data:
            _load_user_table(p, data, name)
    out: dict[str, ArmSpec] = {}
    for label, table in arms.items():
        where = f"arms.{label}"
        if not isinstance(table, dict):
            raise DataFileError(p, where, f"must be a table ([arms.{label}] backend = ...), got {table!r}")
        try:
            parsed = parse_label(label)
        except ValueError as e:
            raise DataFileError(p, where, f"bad arm label: {e}") from None
        if parsed.model is not None:
            raise DataFileError(p, where, f"bad arm label {label!r}: an arms-config label names no "
                                f"model ('@'); the form is {LABEL_FORM.removesuffix('[@MODEL]')}")
        if isinstance(table.get("base_url"), list):
            # base_url = [...] is the endpoints list (validated as the backend's option).
            if "endpoints" in table:
                raise DataFileError(p, f"{where}.base_url", "give base_url as a list or endpoints, not both")
            urls = table["base_url"]
            first = urls[0] if urls else None
            first = first.get("url") if isinstance(first, dict) else first
            table = {**table, "endpoints": urls, "base_url": first if isinstance(first, str) else ""}
        elif isinstance(table.get("endpoints"), list) and "base_url" not in table and table["endpoints"]:
            first = table["endpoints"][0]
            first = first.get("url") if isinstance(first, dict) else first
            if isinstance(first, str):
                table = {**table, "base_url": first}
        backend, options = _check_table(p, where, table)
        repair = table.get("repair", "reflexive" if parsed.repair else "none")
        if repair not in REPAIR_MODES:
            raise DataFileError(p, f"{where}.repair", f"{repair!r} is not one of {', '.join(REPAIR_MODES)}")
        kv = table.get("kv_cache_dtype", parsed.kv_cache_dtype or KV_AUTO)
        if kv not in KV_CACHE_DTYPES:
            raise DataFileError(p, f"{where}.kv_cache_dtype",
                                f"{kv!r} is not a KV-cache dtype; allowed: {', '.join(KV_CACHE_DTYPES)}")
        if parsed.kv_cache_dtype is not None and kv != parsed.kv_cache_dtype:
            raise DataFileError(p, f"{where}.kv_cache_dtype",
                                f"{kv!r} contradicts the label's '+kv-{parsed.kv_cache_dtype}'; "
                                "remove the key or rename the arm")
        if backend == "vllm" and kv not in VLLM_KV_CACHE_DTYPES:
            raise DataFileError(p, f"{where}.kv_cache_dtype",
                                f"vLLM serves no {kv!r} KV cache; it accepts "
                                f"{', '.join(VLLM_KV_CACHE_DTYPES)} ({kv!r} is emulated by the "
                                "transformers backend only)")
        out[label] = ArmSpec(
            label=label,
            backend=backend,
            model=table.get("model", backend),
            path=table.get("path"),
            base_url=table.get("base_url"),
            api_key_env=table.get("api_key_env"),
            quantization=table.get("quantization"),
            revision=table.get("revision"),
            repair=repair,
            options=options,
            kv_cache_dtype=kv,
        )
    return out


def split_model(label: str) -> tuple[str, str | None]:
    """``"int4+repair@tiny-agent"`` → ``("int4+repair", "tiny-agent")``; a label without
    ``@`` → ``(label, None)``."""
    base, sep, model = label.partition(MODEL_SEP)
    return (base, model) if sep else (label, None)


def reference_for(label: str, reference: str) -> str:
    """The reference arm a candidate is paired with: ``reference``, or for ``ARM@MODEL``
    the same model's reference arm (``bf16@MODEL`` when ``reference`` is ``bf16``)."""
    _, model = split_model(label)
    return reference if model is None else f"{split_model(reference)[0]}{MODEL_SEP}{model}"


def with_repair(label: str) -> str:
    """The ``+repair`` twin of a label (``int4+kv-int8@m`` → ``int4+kv-int8+repair@m``);
    itself when it has one."""
    base, model = split_model(label)
    if not base.endswith(REPAIR_SUFFIX):
        base += REPAIR_SUFFIX
    return base if model is None else f"{base}{MODEL_SEP}{model}"


def _with_modifiers(spec: ArmSpec, label: str, parsed: ArmLabel) -> ArmSpec:
    """``spec`` (the arm ``label`` is taken from) with the label's modifiers applied."""
    changes: dict[str, Any] = {"label": label}
    if parsed.repair:
        changes["repair"] = "reflexive"
    kv = parsed.kv_cache_dtype
    if kv is not None and spec.kv_cache_dtype != kv:
        if spec.kv_cache_dtype != KV_AUTO:
            raise ValueError(f"arm {label!r}: its base arm {spec.label!r} already sets "
                             f"kv_cache_dtype = {spec.kv_cache_dtype!r}; name the base arm "
                             "without a KV-cache dtype, or drop the label's '+kv-'")
        if spec.backend not in KV_SETTING_BACKENDS:
            raise ValueError(
                f"arm {label!r}: backend {spec.backend!r} of {spec.label!r} cannot change its KV "
                f"cache (backends that can: {', '.join(sorted(KV_SETTING_BACKENDS))}); a server "
                f"keeps the KV cache it was started with, so give {label!r} its own arms-config "
                f"table (a server started with that KV-cache dtype; kv_cache_dtype = {kv!r})")
        if spec.backend == "vllm" and kv not in VLLM_KV_CACHE_DTYPES:
            raise ValueError(f"arm {label!r}: vLLM serves no {kv!r} KV cache; it accepts "
                             f"{', '.join(VLLM_KV_CACHE_DTYPES)}")
        changes["kv_cache_dtype"] = kv
    return spec if changes == {"label": spec.label} else replace(spec, **changes)


def resolve_arm(
    label: str,
    model_spec: str | None = None,
    config: Mapping[str, ArmSpec] | None = None,
) -> ArmSpec:
    """Resolve one arm label (:data:`LABEL_FORM`), from ``config`` when given, else from a
    model spec (default :data:`DEFAULT_MODEL_SPEC`). ``X+kv-D+repair`` is taken from the
    config's ``X+kv-D+repair``, ``X+kv-D``, ``X+repair`` or ``X`` (the first there), with the
    label's modifiers applied; a model spec resolves the precision ``X``.
    ``X@MODEL`` is arm ``X`` of model spec (or checkpoint) ``MODEL``, whatever ``model_spec``
    and ``config`` say.
    """
    parsed = parse_label(label)
    if parsed.model is not None:
        if not parsed.model:
            raise UnknownNameError("model spec", "", list_model_specs(),
                                   hint=f"{label!r} names no model after '@'")
        return replace(resolve_arm(parsed.plain, model_spec=parsed.model), label=label)
    if config is not None:
        if label in config:
            return config[label]  # its table says everything (the label's modifiers included)
        for name in label_sources(label)[1:]:
            if name in config:
                return _with_modifiers(config[name], label, parsed)
        raise UnknownNameError("arm", label, config,
                               hint=f"arms come from the --config file ({LABEL_FORM})")
    name = model_spec or DEFAULT_MODEL_SPEC
    _load_bundled()
    if name not in _MODEL_SPECS:
        from pytest_quantagent.quant.checkpoint import checkpoint_kind, resolve_checkpoint_arm

        if checkpoint_kind(name) is None:
            raise UnknownNameError("model spec", name, _MODEL_SPECS,
                                   hint="or an HF id ORG/NAME, or a checkpoint folder")
        return _with_modifiers(resolve_checkpoint_arm(name, parsed.precision), label, parsed)
    resolver, arms = _MODEL_SPECS[name]
    if parsed.precision not in arms:
        raise UnknownNameError("arm", label, arms, hint=f"model spec {name!r} provides these arms "
                               f"(plus modifiers: {LABEL_FORM})")
    return _with_modifiers(resolver(parsed.precision), label, parsed)


# -- The LLM user simulator's model ---------------------------------------------------------

USER_LABEL = "user"
"""The label of the user simulator's :class:`ArmSpec` (it is never an arm of the comparison)."""
DEFAULT_USER_MAX_TOKENS = 512


@dataclass(frozen=True)
class UserModelConfig:
    """The model that plays the customer: an arm-like spec plus its decoding settings."""

    arm: ArmSpec
    temperature: float = 0.0
    max_tokens: int = DEFAULT_USER_MAX_TOKENS

    def __post_init__(self) -> None:
        if not (self.temperature >= 0):  # also refuses nan
            raise ValueError(f"user temperature must be >= 0, got {self.temperature!r}")
        if self.max_tokens < 1:
            raise ValueError(f"user max_tokens must be >= 1, got {self.max_tokens!r}")


def load_user_config(path: str | Path, table_name: str = "user") -> UserModelConfig | None:
    """The ``[user]`` table of an arms config (or ``[judge]``, same keys), or None when the
    file has none.

    Keys: ``backend`` (required), ``model``, ``path``, ``base_url``, ``api_key_env``,
    ``quantization``, ``revision``, ``temperature`` (>= 0, default 0), ``max_tokens``
    (>= 1, default 512); any other key is a backend option, as in an arm table. Raises
    :class:`DataFileError` naming the file and the key for anything malformed.
    """
    p = Path(path)
    data = _read_config(p)
    _check_tables(p, data)
    return _load_user_table(p, data, table_name)


def _load_user_table(p: Path, data: Mapping[str, Any], name: str) -> UserModelConfig | None:
    table = data.get(name)
    if table is None:
        return None
    if not isinstance(table, dict):
        raise DataFileError(p, name, f"must be a table ([{name}] backend = \"openai\" model = ...)")
    if "repair" in table:
        raise DataFileError(p, f"{name}.repair", f"the {name} model has no repair mode; remove the key")
    backend, options = _check_table(p, name, table, extra=_USER_DECODING)
    temperature = table.get("temperature", 0.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
            temperature >= 0 and temperature != float("inf")):
        raise DataFileError(p, f"{name}.temperature", f"must be a number >= 0, got {temperature!r}")
    max_tokens = table.get("max_tokens", DEFAULT_USER_MAX_TOKENS)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise DataFileError(p, f"{name}.max_tokens", f"must be an integer >= 1, got {max_tokens!r}")
    arm = ArmSpec(
        label=USER_LABEL if name == "user" else name, backend=backend,
        model=table.get("model", backend),
        path=table.get("path"), base_url=table.get("base_url"),
        api_key_env=table.get("api_key_env"), quantization=table.get("quantization"),
        revision=table.get("revision"), options=options,
    )
    return UserModelConfig(arm=arm, temperature=float(temperature), max_tokens=max_tokens)


JUDGE_TABLE = "judge"


def load_judge_config(path: str | Path) -> UserModelConfig | None:
    """The ``[judge]`` table of an arms config (the NL-assertion judge), or None when the file
    has none. Same keys and validation as ``[user]`` (:func:`load_user_config`), errors naming
    ``judge.<key>``; the judge decodes at temperature 0 (pinned), so any other value is refused."""
    p = Path(path)
    cfg = load_user_config(p, table_name=JUDGE_TABLE)
    if cfg is None:
        return None
    if cfg.temperature != 0:
        raise DataFileError(p, f"{JUDGE_TABLE}.temperature",
                            f"the judge decodes at temperature 0 (pinned), got {cfg.temperature!r}")
    return cfg


def parse_user_model(
    spec: str, *, temperature: float = 0.0, max_tokens: int = DEFAULT_USER_MAX_TOKENS
) -> UserModelConfig:
    """A ``--user-model`` / ``--quant-user-model`` spec → :class:`UserModelConfig`.

    Accepted forms:

    - ``BACKEND:MODEL@BASE_URL`` — e.g. ``openai:gpt-4.1@http://127.0.0.1:8001/v1``
      (``@BASE_URL`` is required by ``openai``, optional otherwise);
    - ``BACKEND:MODEL`` — e.g. ``transformers:/ckpt/qwen3-8b``, ``vllm:Qwen/Qwen3-8B``
      (an existing directory is also the checkpoint ``path``);
    - ``NAME`` or ``NAME:ARM`` — a registered model spec and one of its arms (default
      ``bf16``), e.g. ``tiny-agent`` or ``tiny-agent:int4``.

    Anything else raises :class:`UnknownNameError` listing the backends and model specs.
    """
    from pytest_quantagent.backends.registry import list_backends

    value = spec.strip()
    if not value or any(c.isspace() for c in value):
        raise ValueError(f"user model spec {spec!r} must be non-empty and contain no spaces")
    head, sep, rest = value.partition(":")
    backends = list_backends()
    if sep and head in backends:
        model, at, base_url = rest.partition("@")
        if not model:
            raise ValueError(f"user model spec {spec!r}: no model after {head + ':'!r} "
                             f"(e.g. '{head}:MODEL' or 'openai:MODEL@http://HOST:PORT/v1')")
        if at and not base_url:
            raise ValueError(f"user model spec {spec!r}: empty base URL after '@'")
        if head == "openai" and not base_url:
            raise ValueError(f"user model spec {spec!r}: backend 'openai' needs a base URL, "
                             f"e.g. 'openai:{model}@http://127.0.0.1:8000/v1'")
        path = model if Path(model).is_dir() else None
        arm = ArmSpec(label=USER_LABEL, backend=head, model=model, path=path,
                      base_url=base_url or None)
        return UserModelConfig(arm=arm, temperature=temperature, max_tokens=max_tokens)
    _load_bundled()
    if head in _MODEL_SPECS:
        label = rest if sep else "bf16"
        arm = resolve_arm(label, model_spec=head)
        return UserModelConfig(arm=replace(arm, label=USER_LABEL), temperature=temperature,
                               max_tokens=max_tokens)
    known = [f"{b}:MODEL" for b in backends] + sorted(_MODEL_SPECS)
    raise UnknownNameError("user model spec", value, known,
                           hint="e.g. openai:MODEL@http://127.0.0.1:8000/v1 or tiny-agent")

"""The run configuration of the ``quantagent`` plugin: one frozen, typed object.

Precedence: command line > ini (``[tool.pytest.ini_options]``) > defaults. Values are parsed by
the ``parse_*`` functions of :mod:`pytest_quantagent.options`; contradictions between options
raise :class:`pytest.UsageError` saying what to do. Checks that need the domain registry or
the arms config (unknown domain, unknown arm) are done here too, lazily importing those
modules only when a quant option is in use.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.options import OPTIONS
from pytest_quantagent.quant.replay import REPLAY
from pytest_quantagent.runner.selection import TaskSelection

DEFAULT_ARMS: tuple[str, ...] = ("int4",)
DEFAULT_REFERENCE = "bf16"
DEFAULT_ERROR_BUDGET = 10
DEFAULT_CACHE_DIR = ".quantagent"


@dataclass(frozen=True)
class QuantAgentConfig:
    """Parsed and validated settings of one pytest run."""

    arms: tuple[str, ...] = DEFAULT_ARMS
    """Candidate arm labels (``--quant``)."""
    reference: str = DEFAULT_REFERENCE
    domains: tuple[str, ...] | None = None
    """Domains to run; None means every installed domain."""
    model: str | None = None
    backend: str | None = None
    config_path: Path | None = None
    trials: int = 1
    tasks: TaskSelection = field(default_factory=lambda: TaskSelection("all"))
    seed: int = 0
    error_budget: int = DEFAULT_ERROR_BUDGET
    user: str = "scripted"
    user_model: str | None = None
    concurrency: int | None = None
    cache_dir: Path = Path(DEFAULT_CACHE_DIR)
    report_path: Path | None = None
    html_path: Path | None = None
    repair: str = "none"
    tau2_data: Path | None = None
    judge_model: str | None = None
    """NL-assertion judge (``--quant-judge-model``); None: the ``[judge]`` table, if any."""
    allow_mixed_tau2: str = "no"
    """``--quant-allow-mixed-tau2``: ``yes`` pairs replay arms of differently-accounting
    τ²-bench versions (the difference is then stated)."""
    margin: float | None = None
    max_ratio: float | None = None
    rare_tolerance: float | None = None
    tight_budgets: tuple[int, ...] | None = None
    holm_scope: str | None = None
    """The verdict's thresholds (None: :mod:`pytest_quantagent.verdict`'s defaults)."""
    accept_difference: tuple[str, ...] = ()
    """``--quant-accept-difference``: serving settings the arms may differ in (see
    :func:`pytest_quantagent.runner.preflight.compare_serving`)."""
    require: str = "none"
    """``--quant-require``: ``none``, ``decision`` or ``lossless`` (the release gate,
    :mod:`pytest_quantagent.analysis.gate`)."""
    episode_timeout: float | None = None
    """``--quant-episode-timeout``: seconds per episode attempt (None: 900)."""
    max_steps: int | None = None
    """``--quant-max-steps`` (None: 200)."""
    run_timeout: float | None = None
    """``--quant-run-timeout``: seconds after the session starts past which no episode
    starts (None: no cap)."""
    until_decided: bool = False
    """``--quant-until-decided``: each cell runs in waves until decided
    (:mod:`pytest_quantagent.analysis.sequential`)."""
    max_episodes: int | None = None
    """``--quant-max-episodes``: episodes per arm of a cell's last look (None: 1000)."""
    explicit: frozenset[str] = frozenset()
    """Flags given on the command line or in the ini file (``{"--quant", ...}``)."""

    @property
    def active(self) -> bool:
        """True when any quant option or ini key was given."""
        return bool(self.explicit)

    def run_dict(self) -> dict[str, Any]:
        """The settings as plain JSON data (the report's ``run`` section); a model spec's URL
        credentials (``--quant-user-model=openai:m@https://user:pw@host/v1``) redacted."""
        from pytest_quantagent.backends.secrets import redact

        def shown(spec: str | None) -> str | None:
            return None if spec is None else redact(spec)

        return {
            "model": self.model,
            "arms": list(self.arms),
            "reference": self.reference,
            "domains": None if self.domains is None else list(self.domains),
            "backend": self.backend,
            "config": None if self.config_path is None else str(self.config_path),
            "trials": self.trials,
            "tasks": str(self.tasks),
            "seed": self.seed,
            "budget": self.error_budget,
            "user": self.user,
            "user_model": shown(self.user_model),
            "repair": self.repair,
            "tau2_data": None if self.tau2_data is None else str(self.tau2_data),
            "judge_model": shown(self.judge_model),
            "max_steps": self.max_steps,
            "until_decided": self.until_decided,
            "max_episodes": self.max_episodes,
        }


_FIELD_OF_DEST: dict[str, str] = {
    "quantagent_quant": "arms",
    "quantagent_quant_reference": "reference",
    "quantagent_domain": "domains",
    "quantagent_quant_model": "model",
    "quantagent_quant_backend": "backend",
    "quantagent_quant_config": "config_path",
    "quantagent_quant_trials": "trials",
    "quantagent_quant_tasks": "tasks",
    "quantagent_quant_seed": "seed",
    "quantagent_error_budget": "error_budget",
    "quantagent_quant_user": "user",
    "quantagent_quant_user_model": "user_model",
    "quantagent_quant_concurrency": "concurrency",
    "quantagent_quant_cache_dir": "cache_dir",
    "quantagent_quant_report": "report_path",
    "quantagent_quant_html": "html_path",
    "quantagent_quant_repair": "repair",
    "quantagent_quant_tau2_data": "tau2_data",
    "quantagent_quant_judge_model": "judge_model",
    "quantagent_quant_allow_mixed_tau2": "allow_mixed_tau2",
    "quantagent_quant_margin": "margin",
    "quantagent_quant_max_ratio": "max_ratio",
    "quantagent_quant_rare_tolerance": "rare_tolerance",
    "quantagent_quant_tight_budgets": "tight_budgets",
    "quantagent_quant_holm_scope": "holm_scope",
    "quantagent_quant_require": "require",
    "quantagent_quant_accept_difference": "accept_difference",
    "quantagent_quant_episode_timeout": "episode_timeout",
    "quantagent_quant_max_steps": "max_steps",
    "quantagent_quant_run_timeout": "run_timeout",
    "quantagent_quant_until_decided": "until_decided",
    "quantagent_quant_max_episodes": "max_episodes",
}


def read_config(config: pytest.Config) -> QuantAgentConfig:
    """Build the run configuration from the command line and the ini file.

    Raises
    ------
    pytest.UsageError
        For a bad ini value (naming the ini key) or contradictory options.
    """
    values: dict[str, Any] = {}
    explicit: set[str] = set()
    rootdir = Path(str(config.rootpath))
    for o in OPTIONS:
        value = config.getoption(o.dest, None)
        if value is None:
            raw = config.getini(o.ini)
            if isinstance(raw, str) and raw.strip():
                try:
                    value = o.parse(raw)
                except argparse.ArgumentTypeError as e:
                    raise pytest.UsageError(
                        f"ini key {o.ini} (twin of {o.flag}) in {config.inipath}: {e}"
                    ) from None
                if isinstance(value, Path) and not value.is_absolute():
                    # ini paths are relative to the ini file, as pytest does for testpaths.
                    base = Path(config.inipath).parent if config.inipath else rootdir
                    value = base / value
        if value is not None:
            values[_FIELD_OF_DEST[o.dest]] = value
            explicit.add(o.flag)
    if "cache_dir" not in values:
        values["cache_dir"] = rootdir / DEFAULT_CACHE_DIR
    qc = QuantAgentConfig(**values, explicit=frozenset(explicit))
    check_contradictions(qc)
    return qc


def check_contradictions(qc: QuantAgentConfig) -> None:
    """Raise :class:`pytest.UsageError` for options that cannot hold together."""
    if qc.reference in qc.arms:
        rest = [a for a in qc.arms if a != qc.reference]
        fix = f"use --quant={','.join(rest)}" if rest else "pick a candidate arm such as --quant=int4"
        raise pytest.UsageError(
            f"--quant lists the reference arm {qc.reference!r}: a candidate cannot be compared "
            f"with itself; {fix}, or choose another reference with --quant-reference"
        )
    from pytest_quantagent.quant.arms import reference_for, split_model

    own = [a for a in qc.arms if reference_for(a, qc.reference) == a]
    if own:
        raise pytest.UsageError(
            f"--quant lists {own[0]!r}, the reference arm of model {split_model(own[0])[1]!r}: "
            f"a candidate ARM@MODEL is compared with {split_model(qc.reference)[0]}@MODEL; "
            "list only candidates")
    if qc.user_model is not None and qc.user != "llm":
        raise pytest.UsageError(
            f"--quant-user-model={qc.user_model} needs the LLM user simulator, but the user "
            f"is {qc.user!r}; add --quant-user=llm or drop --quant-user-model"
        )
    if qc.user == "llm" and qc.user_model is None and qc.config_path is None:
        raise pytest.UsageError(
            "--quant-user=llm needs a model for the simulated user; add "
            "--quant-user-model=SPEC (e.g. openai:gpt-4.1@http://host:8000/v1 or tiny-agent) "
            "or a [user] table in --quant-config"
        )
    if qc.backend == REPLAY and qc.config_path is None:
        raise pytest.UsageError(
            "--quant-backend=replay reads τ²-bench results files named per arm in the arms "
            "config; add --quant-config=arms.toml with [arms.<label>] backend = \"replay\" and "
            "path = \"results/<label>.json\""
        )
    if qc.config_path is not None and qc.model is not None:
        raise pytest.UsageError(
            f"--quant-model={qc.model} and --quant-config={qc.config_path} both say which model "
            "each arm runs; put the model in the config file's [arms.<label>] tables and drop "
            "--quant-model"
        )
    if qc.report_path is not None and qc.html_path is not None and (
        qc.report_path.resolve() == qc.html_path.resolve()
    ):
        raise pytest.UsageError("--quant-report and --quant-html name the same file; give two paths")
    if qc.max_episodes is not None and not qc.until_decided:
        raise pytest.UsageError(
            f"--quant-max-episodes={qc.max_episodes} caps --quant-until-decided; add "
            "--quant-until-decided or drop --quant-max-episodes")
    if qc.until_decided and qc.backend == REPLAY:
        raise pytest.UsageError(
            "--quant-until-decided runs more episodes after each look, but replay arms hold a "
            "fixed set of τ²-bench results; drop one of the two")
    if qc.until_decided and qc.holm_scope == "report":
        raise pytest.UsageError(
            "--quant-until-decided judges each cell at its own look, so Holm's family is the "
            "cell's; drop --quant-holm-scope=report")
    if qc.tau2_data is not None and qc.backend == REPLAY:
        raise pytest.UsageError(
            "--quant-tau2-data runs τ²-bench's tasks through our engine with live models, while "
            "--quant-backend=replay reads finished τ²-bench results; use one of the two"
        )


def check_names(qc: QuantAgentConfig) -> None:
    """Check domain and arm names against the registry and the arms config.

    Imports the registry and arms modules lazily; a module that is not installed yet skips its
    check (the runner then raises the same error on first use).
    """
    from pytest_quantagent.errors import QuantAgentError

    try:
        _check_domains(qc)
        _check_arms(qc)
        _check_tasks(qc)
    except QuantAgentError as e:
        raise pytest.UsageError(str(e)) from None


def known_domains() -> list[str] | None:
    """Installed domain names, or None when the registry is unavailable."""
    try:
        from pytest_quantagent.env.registry import list_domains
    except ImportError:
        return None
    return sorted(list_domains())


def _check_domains(qc: QuantAgentConfig) -> None:
    if qc.domains is None:
        return
    known = known_domains()
    if known is None:
        return
    for d in qc.domains:
        if d not in known:
            listing = ", ".join(known)
            raise pytest.UsageError(
                f"--domain: unknown domain {d!r}; known domains: {listing}"
            )


def _check_tasks(qc: QuantAgentConfig) -> None:
    """``--quant-tasks`` split names and task ids, and the task file a split needs, checked
    against every domain of the run before collection (the error names the closest ids)."""
    if qc.tasks.kind not in ("split", "ids", "fresh") and qc.tau2_data is None:
        return
    from pytest_quantagent.env.registry import get_domain_for_split
    from pytest_quantagent.runner.selection import pool_size

    for name in qc.domains or known_domains() or ():
        try:
            dom = get_domain_for_split(name, qc.tau2_data, qc.tasks.split)
            if qc.tasks.kind == "fresh":
                pool_size(dom, qc.tasks)
            else:
                qc.tasks.select([t.id for t in dom.tasks], dom.splits, domain=name)
        except ValueError as e:  # UnknownNameError and DataFileError are ValueErrors
            raise pytest.UsageError(f"--quant-tasks={qc.tasks}: {e}") from None


def allowed_arms(qc: QuantAgentConfig) -> tuple[set[str], str]:
    """The arm labels ``--quant`` accepts in this run (without ``+repair`` and ``@MODEL``
    forms) and where they come from: the arms config's tables, else the model spec's arms,
    else a checkpoint's. One list for ``--quant`` and the ``precision`` marker."""
    from pytest_quantagent.quant import arms as arms_mod

    if qc.config_path is not None:
        return set(arms_mod.load_arms_config(qc.config_path)), f"the arms config {qc.config_path}"
    name = qc.model or arms_mod.DEFAULT_MODEL_SPEC
    if name in arms_mod.list_model_specs():
        return set(arms_mod.model_spec_arms(name)), f"model spec {name!r}"
    # an HF id or checkpoint folder (options.parse_model checked the form)
    from pytest_quantagent.quant.checkpoint import CHECKPOINT_ARMS

    return set(CHECKPOINT_ARMS), f"the checkpoint {name!r} (--quant-model)"


def _check_arms(qc: QuantAgentConfig) -> None:
    try:
        from pytest_quantagent.quant import arms as arms_mod
    except ImportError:
        return
    allowed, source = allowed_arms(qc)
    for label in (qc.reference, *qc.arms):
        flag = "--quant-reference" if label == qc.reference else "--quant"
        plain, own_model = arms_mod.split_model(label)
        try:
            sources = arms_mod.label_sources(label)
        except ValueError as e:  # not PRECISION[+kv-DTYPE][+repair][@MODEL]
            raise pytest.UsageError(f"{flag}: {e}") from None
        if own_model is not None:  # ARM@MODEL: an arm of another model spec
            _check_model_arm(label, plain, own_model, qc, arms_mod)
            continue
        if not set(sources) & allowed:
            raise pytest.UsageError(
                f"{flag}: unknown arm {label!r}; arms of {source}: {', '.join(sorted(allowed))}"
            )


def _check_model_arm(label: str, plain: str, model: str, qc: QuantAgentConfig, arms_mod: Any) -> None:
    """``ARM@MODEL``: MODEL a registered model spec providing ARM."""
    flag = "--quant-reference" if label == qc.reference else "--quant"
    specs_known = arms_mod.list_model_specs()
    if model not in specs_known:
        raise pytest.UsageError(f"{flag}: {label!r} names an unknown model spec {model!r}; "
                                f"model specs: {', '.join(sorted(specs_known))}")
    allowed = set(arms_mod.model_spec_arms(model))
    if arms_mod.base_arm(plain) not in allowed:
        raise pytest.UsageError(f"{flag}: unknown arm {plain!r} in {label!r}; arms of model "
                                f"spec {model!r}: {', '.join(sorted(allowed))}")
    ref = arms_mod.reference_for(label, qc.reference)
    if label != qc.reference and str(arms_mod.split_model(ref)[0]) not in allowed:
        raise pytest.UsageError(f"{flag}: {label!r} is paired with {ref!r}, which model spec "
                                f"{model!r} does not provide; its arms: {', '.join(sorted(allowed))}")

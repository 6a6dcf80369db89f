"""What the plugin's options resolve to, apart from pytest: the run's arms, its run request,
the models to pre-flight, the report's ``run`` section and the verdict's thresholds.

:class:`RunSetup` is built by the session from the run's :class:`QuantAgentConfig` and a
resolver of arm labels (the session passes the ``pytest_quantagent_resolve_arm`` hook, whose
default is :func:`default_arm`); every arm label is resolved once per run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_quantagent.config import QuantAgentConfig

if TYPE_CHECKING:
    from pytest_quantagent.quant.arms import ArmSpec, UserModelConfig
    from pytest_quantagent.runner.service import RunRequest
    from pytest_quantagent.verdict import AnalysisConfig


def default_arm(qc: QuantAgentConfig, label: str) -> ArmSpec:
    """An arm label resolved from the run's options: the arms config (``--quant-config``) or
    the model spec / checkpoint (``--quant-model``), then ``--quant-backend`` and
    ``--quant-repair`` (never on the reference arm) applied."""
    from dataclasses import replace

    from pytest_quantagent.quant.arms import load_arms_config, reference_for, resolve_arm

    table = load_arms_config(qc.config_path) if qc.config_path else None
    spec = resolve_arm(label, qc.model, table)
    if qc.backend is not None and spec.backend != qc.backend:
        spec = replace(spec, backend=qc.backend)
    candidate = reference_for(label, qc.reference) != label
    if qc.repair != "none" and candidate and spec.repair == "none":
        spec = replace(spec, repair=qc.repair)
    return spec


class RunSetup:
    """The run's arms (resolved once each), and the run's settings in the runner's and the
    report's terms."""

    def __init__(self, qc: QuantAgentConfig, resolve: Callable[[str], ArmSpec | None]) -> None:
        import time

        self.qc = qc
        self._resolve = resolve
        self.started = time.monotonic()
        """When the run's setup was made (the session's start: ``--quant-run-timeout``'s origin)."""
        self._arms: dict[str, ArmSpec] = {}
        self._known: tuple[str, ...] | None = None
        self._helpers: tuple[UserModelConfig | None, UserModelConfig | None] | None = None
        self._comparability: dict[str, dict[str, Any]] = {}

    def helper_models(self) -> tuple[UserModelConfig | None, UserModelConfig | None]:
        """The LLM user's model (None unless ``--user-sim=llm``) and the judge's (None
        without one), each read from its spec or the config file once per run."""
        if self._helpers is None:
            from pytest_quantagent.runner.build import resolve_user
            from pytest_quantagent.runner.judge import resolve_judge

            qc = self.qc
            user = resolve_user(qc.user_model, config_path=qc.config_path) if qc.user == "llm" else None
            self._helpers = (user, resolve_judge(qc.judge_model, qc.config_path))
        return self._helpers

    def arm(self, label: str) -> ArmSpec:
        """The arm ``label``, resolved on first use."""
        if label not in self._arms:
            spec = self._resolve(label)
            if spec is None:
                raise RuntimeError(f"no plugin resolved arm {label!r}")
            self._arms[label] = spec
        return self._arms[label]

    def reference_of(self, label: str) -> str:
        """The reference arm candidate ``label`` is paired with (``--quant-reference``, or
        for ``ARM@MODEL`` that model's own reference arm)."""
        from pytest_quantagent.quant.arms import reference_for

        return reference_for(label, self.qc.reference)

    def labels(self) -> tuple[str, ...]:
        """The run's arm labels, references first (``--quant-reference``, then each other
        model's), each once."""
        refs = [self.reference_of(a) for a in self.qc.arms]
        return tuple(dict.fromkeys((self.qc.reference, *refs, *self.qc.arms)))

    def arms(self) -> list[ArmSpec]:
        """Every arm of the run (reference first): the arms the task pool depends on."""
        return [self.arm(label) for label in self.labels()]

    def known_arms(self) -> tuple[str, ...]:
        """Arm labels a ``precision`` marker may name: the run's arms and every arm
        ``--quant`` accepts in this run (:func:`~pytest_quantagent.config.allowed_arms`: the
        arms config's, else the model spec's or checkpoint's), with their ``+repair``
        variants: a marker never names an arm that ``--quant`` would then refuse."""
        if self._known is None:
            from pytest_quantagent.config import allowed_arms
            from pytest_quantagent.quant import arms as arms_mod

            labels = {*self.qc.arms, self.qc.reference, *allowed_arms(self.qc)[0]}
            labels.update([f"{a}{arms_mod.REPAIR_SUFFIX}" for a in labels
                           if not a.endswith(arms_mod.REPAIR_SUFFIX)])
            self._known = tuple(sorted(labels))
        return self._known

    def preflight_models(self) -> dict[str, ArmSpec]:
        """Every model the run will call: the arms, the reference, the LLM user and the judge."""
        models = {f"arm {label!r}": self.arm(label) for label in self.labels()}
        user, judge = self.helper_models()
        if user is not None:
            models["user"] = user.arm
        if judge is not None:
            models["judge"] = judge.arm
        return models

    def comparability(self, label: str) -> dict[str, Any]:
        """How arm ``label`` and its reference are served, compared once per run (the
        pre-flight asks before any episode; see
        :func:`pytest_quantagent.runner.preflight.compare_serving`)."""
        if label not in self._comparability:
            from pytest_quantagent.runner.preflight import compare_serving

            self._comparability[label] = compare_serving(
                self.arm(self.reference_of(label)), self.arm(label),
                accept=self.qc.accept_difference)
        return self._comparability[label]

    def request(self) -> RunRequest:
        """The run's options as a :class:`~pytest_quantagent.runner.service.RunRequest`
        (the same for every cell and for the screen plugin's reference run)."""
        from pytest_quantagent.runner.batch import RunSettings
        from pytest_quantagent.runner.service import RunRequest

        qc = self.qc
        user, judge = self.helper_models()
        concurrency = qc.concurrency or RunSettings().concurrency
        return RunRequest(
            tasks=qc.tasks, trials=qc.trials, seed=qc.seed,
            settings=RunSettings(
                max_errors=qc.error_budget, concurrency=concurrency, user_sim=qc.user,
                max_steps=qc.max_steps or RunSettings().max_steps,
                episode_timeout_s=qc.episode_timeout or RunSettings().episode_timeout_s,
                deadline=None if qc.run_timeout is None else self.started + qc.run_timeout),
            user=user, judge=judge,
            tau2_data=qc.tau2_data, allow_mixed_tau2=qc.allow_mixed_tau2 == "yes",
        )

    def analysis_config(self) -> AnalysisConfig:
        """The verdict's thresholds from ``--quant-margin``/``--quant-max-ratio``/
        ``--quant-rare-tolerance``/``--quant-tight-budgets``/``--quant-holm-scope`` (the
        assertions' defaults too)."""
        from pytest_quantagent.verdict import AnalysisConfig

        kw: dict[str, Any] = {}
        for name in ("margin", "max_ratio", "rare_tolerance", "tight_budgets", "holm_scope"):
            if getattr(self.qc, name, None) is not None:
                kw[name] = getattr(self.qc, name)
        return AnalysisConfig(**kw)

    def run_info(self, versions: dict[str, str]) -> dict[str, Any]:
        """The report's ``run`` section: settings, the judge, resolved arms, and ``versions``
        (the package's and Python's added)."""
        import platform

        from pytest_quantagent.backends.secrets import without_userinfo
        from pytest_quantagent.runner.judge import judge_identity
        from pytest_quantagent.version import __version__

        info = self.qc.run_dict()
        info["judge"] = judge_identity(self.qc.judge_model, self.qc.config_path)
        info["require"] = self.qc.require  # not in run_dict: it does not change the episodes
        specs: dict[str, Any] = {}
        for label in self.labels():
            try:
                a = self.arm(label)
            except Exception:
                continue
            specs[label] = {k: v for k, v in (("backend", a.backend), ("model", a.model),
                                              ("path", a.path),
                                              ("base_url", a.base_url and without_userinfo(a.base_url)),
                                              ("quantization", a.quantization)) if v}
        info["arm_specs"] = specs
        info["versions"] = {"pytest_quantagent": __version__, **versions,
                            "python": platform.python_version()}
        return info

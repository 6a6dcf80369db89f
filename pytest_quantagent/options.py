"""Command-line options and ini keys of the ``quantagent`` group, and their parsers.

Every option has an ini twin (``[tool.pytest.ini_options]``); the twin's name is the option's
name without dashes, with ``-`` turned into ``_`` and prefixed with ``quant_`` when it does not
already start with it (``--domain`` → ``quant_domain``, ``--error-budget`` →
``quant_error_budget``).

Each value goes through a ``parse_*`` function at the boundary: on the command line as the
argparse ``type=`` (so a bad value fails before collection with pytest's usage banner), and
for ini values in :mod:`pytest_quantagent.config`. A parser raises
:class:`argparse.ArgumentTypeError` whose message names the option, quotes the bad value and
lists the allowed values. This module imports nothing heavy: it loads in every pytest run.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.quant.replay import REPLAY
from pytest_quantagent.runner.selection import TaskSelection

#: Backends shipped with the package (third parties add more through the
#: ``pytest_quantagent.backends`` entry-point group), and ``replay``: spelled like a backend,
#: it makes every arm read τ²-bench results files (an arm source, see quant/replay.py).
BUILTIN_BACKENDS: tuple[str, ...] = tuple(sorted(("mock", "openai", "transformers", "vllm", REPLAY)))
USER_KINDS: tuple[str, ...] = ("llm", "scripted")
REPAIR_KINDS: tuple[str, ...] = ("none", "reflexive")

MAX_TRIALS = 10_000  # trials per task and arm; more is a typo, not a design (issue 36)
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*(@[A-Za-z0-9][A-Za-z0-9_./-]*)?$")
"""An arm or domain name; an arm may name its model spec after ``@`` (``int4@tiny-agent``)."""


def _bad(option: str, value: object, allowed: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(
        f"{option}: invalid value {value!r}; allowed: {allowed}"
    )


def known_backends() -> tuple[str, ...]:
    """Built-in backend names plus those registered through entry points."""
    from importlib.metadata import entry_points

    names = set(BUILTIN_BACKENDS)
    names.update(ep.name for ep in entry_points(group="pytest_quantagent.backends"))
    return tuple(sorted(names))


def parse_label_list(option: str) -> Callable[[str], tuple[str, ...]]:
    """Parser for a comma-separated list of labels (arms, domains), order kept, no repeats."""

    def parse(value: str) -> tuple[str, ...]:
        items = [v.strip() for v in str(value).split(",")]
        if not items or any(not v for v in items):
            raise _bad(option, value, "a comma-separated list of names, e.g. int4,fp8")
        for v in items:
            if not _LABEL.match(v):
                raise _bad(
                    option, value,
                    f"names made of letters, digits and _ . + - (an arm may add @MODEL, e.g. "
                    f"int4@tiny-agent; {v!r} is not one)",
                )
        seen: dict[str, None] = {}
        for v in items:
            seen.setdefault(v, None)
        return tuple(seen)

    parse.__name__ = f"parse {option}"
    return parse


def parse_label(option: str) -> Callable[[str], str]:
    """Parser for a single label (the reference arm)."""

    def parse(value: str) -> str:
        v = str(value).strip()
        if not _LABEL.match(v):
            raise _bad(option, value, "one name made of letters, digits and _ . + -, e.g. bf16")
        return v

    parse.__name__ = f"parse {option}"
    return parse


def parse_choice(option: str, choices: tuple[str, ...] | Callable[[], tuple[str, ...]]) -> Callable[[str], str]:
    """Parser for one value out of a fixed (or lazily computed) set."""

    def parse(value: str) -> str:
        allowed = choices() if callable(choices) else choices
        v = str(value).strip().lower()
        if v not in allowed:
            raise _bad(option, value, ", ".join(sorted(allowed)))
        return v

    parse.__name__ = f"parse {option}"
    return parse


def parse_int(option: str, minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """Parser for an integer in ``[minimum, maximum]``."""
    if maximum is None:
        allowed = f"an integer >= {minimum}"
    else:
        allowed = f"an integer from {minimum} to {maximum}"

    def parse(value: str) -> int:
        try:
            n = int(str(value).strip())
        except ValueError:
            raise _bad(option, value, allowed) from None
        if n < minimum or (maximum is not None and n > maximum):
            raise _bad(option, value, allowed)
        return n

    parse.__name__ = f"parse {option}"
    return parse


def parse_float(option: str, low: float, high: float | None, *, low_open: bool = True
                ) -> Callable[[str], float]:
    """Parser for a number above ``low`` (or at least ``low`` when not ``low_open``) and
    below ``high``."""
    allowed = (f"a finite number {'>' if low_open else '>='} {low:g}"
               + (f" and < {high:g}" if high is not None else ""))

    def parse(value: str) -> float:
        try:
            x = float(str(value).strip())
        except ValueError:
            raise _bad(option, value, allowed) from None
        if not (math.isfinite(x) and (x > low if low_open else x >= low) and (high is None or x < high)):
            raise _bad(option, value, allowed)
        return x

    parse.__name__ = f"parse {option}"
    return parse


def parse_int_list(option: str, minimum: int) -> Callable[[str], tuple[int, ...]]:
    """Parser for comma-separated integers ``>= minimum`` (e.g. ``2,5``)."""
    allowed = f"comma-separated integers >= {minimum}, e.g. 2,5"

    def parse(value: str) -> tuple[int, ...]:
        try:
            out = tuple(int(x) for x in str(value).split(",") if x.strip())
        except ValueError:
            raise _bad(option, value, allowed) from None
        if not out or any(k < minimum for k in out):
            raise _bad(option, value, allowed)
        return out

    parse.__name__ = f"parse {option}"
    return parse


def parse_spec(option: str) -> Callable[[str], str]:
    """Parser for a free-form non-empty spec (model name, HF id, path, URL)."""

    def parse(value: str) -> str:
        v = str(value).strip()
        if not v or any(c.isspace() for c in v):
            raise _bad(option, value, "a non-empty model name, path or URL without spaces")
        return v

    parse.__name__ = f"parse {option}"
    return parse


def parse_model(option: str) -> Callable[[str], str]:
    """Parser for ``--quant-model``: a registered model spec, an HF id ``ORG/NAME`` or a
    local checkpoint folder (with ``config.json``); anything else is refused by name."""

    def parse(value: str) -> str:
        from pytest_quantagent.quant import arms as arms_mod
        from pytest_quantagent.quant.checkpoint import checkpoint_kind, describe_problem

        v = parse_spec(option)(value)
        specs = arms_mod.list_model_specs()
        if v in specs or checkpoint_kind(v) is not None:
            return v
        raise _bad(option, value, f"a bundled model ({', '.join(specs)}), an HF id ORG/NAME "
                   f"(e.g. Qwen/Qwen3-8B) or a local checkpoint folder holding config.json "
                   f"({describe_problem(v)})")

    parse.__name__ = f"parse {option}"
    return parse


def parse_output_path(option: str, suffix: str) -> Callable[[str], Path]:
    """Parser for a report file path that must end in ``suffix``; its folder is created later."""

    def parse(value: str) -> Path:
        v = str(value).strip()
        if not v.lower().endswith(suffix):
            raise _bad(option, value, f"a file path ending in {suffix}")
        p = Path(v)
        if p.exists() and p.is_dir():
            raise _bad(option, value, f"a file path ending in {suffix} (this is a directory)")
        return p

    parse.__name__ = f"parse {option}"
    return parse


def parse_existing_file(option: str, suffix: str) -> Callable[[str], Path]:
    """Parser for an input file that must exist."""

    def parse(value: str) -> Path:
        p = Path(str(value).strip())
        if not p.is_file():
            raise _bad(option, value, f"an existing {suffix} file (no such file)")
        return p

    parse.__name__ = f"parse {option}"
    return parse


def parse_dir(option: str) -> Callable[[str], Path]:
    """Parser for a directory that may not exist yet (created on use)."""

    def parse(value: str) -> Path:
        v = str(value).strip()
        if not v:
            raise _bad(option, value, "a directory path")
        p = Path(v)
        if p.exists() and not p.is_dir():
            raise _bad(option, value, "a directory path (this is a file)")
        above = next((a for a in p.absolute().parents if a.exists()), None)
        if not p.exists() and above is not None and not above.is_dir():
            raise _bad(option, value, f"a directory path ({str(above)!r} is not a directory)")
        return p

    parse.__name__ = f"parse {option}"
    return parse


def parse_tau2_dir(option: str) -> Callable[[str], Path]:
    """Parser for a τ²-bench checkout's data folder (must contain ``domains/``)."""

    def parse(value: str) -> Path:
        p = Path(str(value).strip())
        if not p.is_dir():
            raise _bad(option, value, "an existing τ²-bench data directory (no such directory)")
        if (p / "domains").is_dir():
            return p
        if (p / "data" / "tau2" / "domains").is_dir():  # a τ²-bench checkout's root
            return p / "data" / "tau2"
        raise _bad(
            option, value,
            "a τ²-bench data directory containing domains/ (or a checkout with data/tau2/domains/)",
        )

    parse.__name__ = f"parse {option}"
    return parse


_TASKS_ALLOWED = "all, N (first N), A:B (slice), split:NAME, ids:ID1,ID2,..., fresh:N[@SEED]"


def parse_tasks(value: str) -> TaskSelection:
    """Parse ``--quant-tasks``: ``all``, ``N``, ``A:B``, ``split:NAME`` or ``ids:ID,...``."""
    v = str(value).strip()
    opt = "--quant-tasks"
    if v.lower() == "all":
        return TaskSelection("all")
    if v.isdigit():
        n = int(v)
        if n < 1:
            raise _bad(opt, value, _TASKS_ALLOWED + "; N >= 1")
        return TaskSelection("first", count=n)
    if v.startswith("split:"):
        name = v[len("split:") :].strip()
        if not _LABEL.match(name):
            raise _bad(opt, value, _TASKS_ALLOWED)
        return TaskSelection("split", split=name)
    if v.startswith("fresh:"):
        from pytest_quantagent.runner.selection import parse_fresh

        try:
            return parse_fresh(v, opt)
        except ValueError as e:
            raise _bad(opt, value, str(e).split("allowed: ", 1)[1]) from None
    if v.startswith("ids:"):
        ids = tuple(i.strip() for i in v[len("ids:") :].split(","))
        if not ids or any(not i for i in ids):
            raise _bad(opt, value, _TASKS_ALLOWED)
        return TaskSelection("ids", ids=ids)
    m = re.fullmatch(r"(\d*):(\d*)", v)
    if m:
        start = int(m.group(1)) if m.group(1) else None
        stop = int(m.group(2)) if m.group(2) else None
        if start is not None and stop is not None and stop <= start:
            raise _bad(opt, value, _TASKS_ALLOWED + "; in A:B, B must be above A")
        return TaskSelection("slice", start=start, stop=stop)
    raise _bad(opt, value, _TASKS_ALLOWED)


@dataclass(frozen=True)
class OptionSpec:
    """One option of the ``quantagent`` group and its ini twin."""

    flag: str
    dest: str
    ini: str
    parse: Callable[[str], Any]
    metavar: str
    help: str
    switch: bool = False
    """A flag without a value on the command line (its ini twin takes yes/no)."""

    @property
    def option(self) -> str:
        return self.flag


def _o(flag: str, parse: Callable[[str], Any], metavar: str, help: str, *,
       switch: bool = False) -> OptionSpec:
    name = flag.lstrip("-").replace("-", "_")
    ini = name if name.startswith("quant") else f"quant_{name}"
    return OptionSpec(flag, f"quantagent_{name}", ini, parse, metavar, help, switch)


_TRUE, _FALSE = ("yes", "true", "1", "on"), ("no", "false", "0", "off")


def parse_setting_list(option: str) -> Callable[[str], tuple[str, ...]]:
    """Parser for a comma-separated list of compared serving settings
    (:data:`pytest_quantagent.runner.preflight.COMPARED_SETTINGS`), order kept, no repeats."""

    def parse(value: str) -> tuple[str, ...]:
        from pytest_quantagent.runner.preflight import COMPARED_SETTINGS

        items = [v.strip() for v in str(value).split(",") if v.strip()]
        bad = [v for v in items if v not in COMPARED_SETTINGS]
        if not items or bad:
            raise _bad(option, value, "a comma-separated list of compared settings: "
                       + ", ".join(COMPARED_SETTINGS))
        return tuple(dict.fromkeys(items))

    parse.__name__ = f"parse {option}"
    return parse


def parse_switch(option: str) -> Callable[[str], bool]:
    """Parser of a switch's ini value: yes/true/1/on or no/false/0/off."""

    def parse(value: str) -> bool:
        v = str(value).strip().lower()
        if v in _TRUE or v in _FALSE:
            return v in _TRUE
        raise _bad(option, value, ", ".join((*_TRUE, *_FALSE)))

    parse.__name__ = f"parse {option}"
    return parse


#: Every option of the ``quantagent`` group, in --help order.
OPTIONS: tuple[OptionSpec, ...] = (
    _o("--quant", parse_label_list("--quant"), "ARM[,ARM]",
       "candidate arms to compare against the reference, e.g. int4 or int4,fp8 (default: int4)"),
    _o("--quant-reference", parse_label("--quant-reference"), "ARM",
       "reference arm every candidate is paired with (default: bf16)"),
    _o("--domain", parse_label_list("--domain"), "NAME[,NAME]",
       "domains to run, e.g. telecom or retail,telecom (default: every installed domain)"),
    _o("--quant-model", parse_model("--quant-model"), "SPEC",
       "model under test: a bundled model (tiny-agent, tiny-agent-prone), an HF id ORG/NAME "
       "or a local checkpoint folder; a checkpoint runs on the transformers backend with "
       "bf16 as stored and int4 (RTN W4A16 g128), int4-rtn, int3-rtn, int2-rtn and fp8 "
       "(e4m3 cast) made on load; for AWQ/served checkpoints use --quant-config "
       "(default: tiny-agent, bundled, CPU)"),
    _o("--quant-backend", parse_choice("--quant-backend", known_backends), "NAME",
       "serving backend: " + "|".join(BUILTIN_BACKENDS) + " (default: chosen per arm)"),
    _o("--quant-config", parse_existing_file("--quant-config", "TOML"), "PATH",
       "TOML file mapping each arm to a checkpoint, endpoint or results file"),
    _o("--quant-trials", parse_int("--quant-trials", 1, MAX_TRIALS), "N",
       "trials per task and arm (paired seeds across arms; default: 1)"),
    _o("--quant-tasks", parse_tasks, "SPEC",
       "tasks per domain: all, N, A:B, split:NAME or ids:ID,... (default: all)"),
    _o("--quant-seed", parse_int("--quant-seed", 0), "N", "run seed (default: 0)"),
    _o("--error-budget", parse_int("--error-budget", 1), "K",
       "failed tool calls that end an episode, as in τ²-bench (default: 10)"),
    _o("--quant-user", parse_choice("--quant-user", USER_KINDS), "KIND",
       "user simulator: scripted|llm (default: scripted)"),
    _o("--quant-user-model", parse_spec("--quant-user-model"), "SPEC",
       "model of the LLM user simulator (needs --quant-user=llm)"),
    _o("--quant-concurrency", parse_int("--quant-concurrency", 1), "N",
       "episodes in flight per arm (default: the backend's own limit)"),
    _o("--quant-cache-dir", parse_dir("--quant-cache-dir"), "DIR",
       "episode store, shared by xdist workers and reruns (default: .quantagent under rootdir)"),
    _o("--quant-report", parse_output_path("--quant-report", ".json"), "PATH.json",
       "write the report JSON (schema_version 1) here"),
    _o("--quant-html", parse_output_path("--quant-html", ".html"), "PATH.html",
       "write the self-contained HTML report here"),
    _o("--quant-repair", parse_choice("--quant-repair", REPAIR_KINDS), "KIND",
       "repair prompt for candidate arms: none|reflexive (default: none)"),
    _o("--quant-tau2-data", parse_tau2_dir("--quant-tau2-data"), "DIR",
       "run the official τ²-bench task/DB files from this τ²-bench data directory"),
    _o("--quant-judge-model", parse_spec("--quant-judge-model"), "SPEC",
       "LLM judge of τ²-bench's NL assertions, e.g. openai:gpt-4.1@http://host:8000/v1 "
       "(default: the [judge] table of --quant-config; none: NL assertions not evaluated)"),
    _o("--quant-allow-mixed-tau2", parse_choice("--quant-allow-mixed-tau2", ("no", "yes")), "yes|no",
       "pair replay arms whose τ²-bench versions account for failures differently "
       "(default: no, refused naming both files)"),
    _o("--quant-episode-timeout", parse_float("--quant-episode-timeout", 0.0, 86400.0), "SECONDS",
       "wall-clock limit of one episode attempt; past it the attempt is an infrastructure "
       "failure, re-run up to twice (default: 900)"),
    _o("--quant-max-steps", parse_int("--quant-max-steps", 1, 100_000), "N",
       "message hops before an episode ends as max_steps (default: 200)"),
    _o("--quant-run-timeout", parse_float("--quant-run-timeout", 0.0, 30 * 86400.0), "SECONDS",
       "the whole run's time cap: past it no new episode starts and the run stops (exit 2), "
       "keeping what was stored; a rerun resumes (default: none)"),
    # the verdict's thresholds (pytest_quantagent.verdict), shared with the assertions
    _o("--quant-margin", parse_float("--quant-margin", 0.0, 1.0), "X",
       "equivalence margin on success, absolute (default: 0.075 = 7.5 points)"),
    _o("--quant-max-ratio", parse_float("--quant-max-ratio", 1.0, None, low_open=False), "R",
       "channel amplification threshold on the per-agent-call rate ratio (default: 1.2)"),
    _o("--quant-rare-tolerance", parse_float("--quant-rare-tolerance", 0.0, 1.0), "X",
       "a channel's per-agent-call rate increase that, with a ratio above --quant-max-ratio, "
       "is damage; a channel is shown not amplified when its ratio or its increase is bounded "
       "below (default: 0.002 = +0.2 failed calls per 100 agent calls)"),
    _o("--quant-tight-budgets", parse_int_list("--quant-tight-budgets", 1), "K[,K]",
       "tight error budgets whose gap widening is tested (default: 2,5 below the run's)"),
    _o("--quant-holm-scope", parse_choice("--quant-holm-scope", ("cell", "report")), "SCOPE",
       "Holm's family: cell (each cell's tests, default) or report (every test)"),
    _o("--quant-accept-difference", parse_setting_list("--quant-accept-difference"),
       "NAME[,NAME]",
       "serving settings in which the arms may differ (e.g. chat_template,server_version): "
       "compared before any episode, any other difference makes a cell INCONCLUSIVE "
       "\"not comparable\" (default: none accepted)"),
    # the release gate (pytest_quantagent.analysis.gate)
    _o("--quant-require", parse_choice("--quant-require", ("none", "decision", "lossless")),
       "WHAT",
       "what the run must show: none (default: a test that cannot judge skips), decision "
       "(an INCONCLUSIVE cell or a test that cannot judge fails the run) or lossless (every "
       "cell must be LOSSLESS)"),
    # run until decided (pytest_quantagent.analysis.sequential)
    _o("--quant-until-decided", parse_switch("--quant-until-decided"), "",
       "run each cell in waves (the first is --quant-tasks x --quant-trials, each next about "
       "doubling the episodes: more tasks while the pool has them, then more trials), "
       "re-judged after each wave with alpha spent over the planned looks; a cell stops when "
       "decided or at --quant-max-episodes (ini: yes/no)", switch=True),
    _o("--quant-max-episodes", parse_int("--quant-max-episodes", 1, 1_000_000), "N",
       "with --quant-until-decided: episodes per arm of a cell's last look (default: 1000)"),
)

OPTIONS_BY_FLAG: dict[str, OptionSpec] = {o.flag: o for o in OPTIONS}


def add_options(parser: pytest.Parser) -> None:
    """Declare the ``quantagent`` group and its ini twins."""
    group = parser.getgroup("quantagent", "quantagent (what quantization does to tool-calling agents)")
    for o in OPTIONS:
        if o.switch:
            group.addoption(o.flag, dest=o.dest, action="store_const", const=True, default=None,
                            help=o.help)
        else:
            group.addoption(
                o.flag, dest=o.dest, type=o.parse, default=None, metavar=o.metavar, help=o.help,
            )
        parser.addini(o.ini, f"default for {o.flag}: {o.help}", type="string", default="")

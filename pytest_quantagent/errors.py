"""Errors users see. Each names the thing, the bad value and the allowed values."""

from __future__ import annotations

from collections.abc import Iterable


class QuantAgentError(Exception):
    """Base class of every error this package raises on purpose."""


class UnknownNameError(QuantAgentError, ValueError):
    """A name (domain, arm, backend, channel, task id, ...) that is not known."""

    def __init__(self, kind: str, value: object, known: Iterable[str], hint: str = "") -> None:
        self.kind = kind
        self.value = value
        self.known = sorted(known)
        listing = ", ".join(self.known) if self.known else "(none)"
        msg = f"unknown {kind} {value!r}; known {kind}s: {listing}"
        if hint:
            msg += f". {hint}"
        super().__init__(msg)


class DataFileError(QuantAgentError, ValueError):
    """A data file (tasks, DB, results, store) that cannot be read: names the file and the
    location of the problem inside it."""

    def __init__(self, path: object, location: str, problem: str) -> None:
        self.path = str(path)
        self.location = location
        self.problem = problem
        where = f" at {location}" if location else ""
        super().__init__(f"{self.path}{where}: {problem}")


class MissingDependencyError(QuantAgentError, ImportError):
    """An optional dependency is missing; the message has the exact pip line."""

    def __init__(self, feature: str, extra: str, packages: Iterable[str] = ()) -> None:
        pkgs = " ".join(packages)
        line = f"pip install 'pytest-quantagent[{extra}]'"
        msg = f"{feature} requires optional dependencies. Install with:\n\n    {line}\n"
        if pkgs:
            msg += f"\n(or: pip install {pkgs})"
        super().__init__(msg)
        self.pip_line = line


class InfrastructureError(QuantAgentError):
    """A failure of the serving stack (HTTP 5xx, timeout, dropped connection) after retries.
    Never scored as an agent failure."""


class ContextOverflowError(QuantAgentError):
    """The prompt no longer fits the model's context (a server's HTTP 400 "maximum context
    length", or :class:`ContextLengthError` in-process): the episode ends with its own
    termination, ``context_overflow``, counted apart from agent errors."""


class ContextLengthError(ContextOverflowError, ValueError):
    """A prompt that does not fit the model's context window, as a server's HTTP 400
    "maximum context length" answer. Not retryable: the episode ends with
    ``context_overflow``."""

    def __init__(self, model: str, prompt_tokens: int, limit: int) -> None:
        self.model = model
        self.prompt_tokens = prompt_tokens
        self.limit = limit
        super().__init__(
            f"prompt of {prompt_tokens} tokens does not fit the context of model {model!r}: "
            f"max_position_embeddings is {limit}, so prompts of at most {limit - 1} tokens "
            "leave room to generate"
        )


class ConfigurationError(QuantAgentError):
    """The configuration is wrong, not the model: a server that refuses the request (HTTP
    400/401/403/404/422, an unknown model), a URL without a scheme, a pre-flight check that
    failed. Never an episode: the run stops with a message naming the arm, URL and cause.

    ``role`` names the remote model that refused ("judge", "user model"); ``None`` means the
    arm whose episode raised it (the batch layer names the arm)."""

    def __init__(self, *args: object, role: str | None = None) -> None:
        super().__init__(*args)
        self.role = role


class RunStoppedError(ConfigurationError):
    """The run stops on purpose before its end (a dead server, the run's time cap): nothing
    is judged, the episodes stored so far are kept and the same command resumes."""


class RunTimeCapError(RunStoppedError):
    """The run's time cap (``--quant-run-timeout``) passed: no new episode starts."""


class ServerDownError(RunStoppedError):
    """A remote model stopped answering: every request failed for the breaker's time and
    count with no success in between (:class:`~pytest_quantagent.backends.wrapper.Breaker`).
    The run stops (what is stored is kept; the same command resumes) instead of retrying
    every episode against a dead server."""


class TaskSetupError(QuantAgentError):
    """An episode's setup failed (the task's initialization, the environment, the user):
    a fault of the task data, recorded as a task error naming the task; never scored."""


#: Exit code of a command given bad input (an option, a file, a name): nothing was run or
#: judged. The same as pytest's ``ExitCode.USAGE_ERROR``; 0/1/2 are the release gate's (GO,
#: NO-GO, INCONCLUSIVE: :mod:`pytest_quantagent.analysis.gate`).
EXIT_USAGE = 4
#: Exit code when the run stopped before its end (:class:`RunStoppedError`: a remote model
#: stopped answering, the run's time cap): nothing judged, what was stored is kept, a rerun
#: resumes.
EXIT_STOPPED = 3
#: Exit code after Ctrl-C: what was stored is kept, and a rerun resumes.
EXIT_INTERRUPTED = 130

"""The package's version, in a module of its own: the root package re-exports it and the
front ends (``quantagent --version``, the report's ``run.versions``) read it from here, so no
module imports the root package (whose lazy exports sit above everything). Keep it equal to
``version`` in ``pyproject.toml``."""

from __future__ import annotations

__version__ = "0.1.0"

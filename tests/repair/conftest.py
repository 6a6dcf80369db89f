"""Setup of the repair tests (their fixtures, ``mini_domains_dir`` and ``arms_toml``, are in
``tests/conftest.py``, shared with the screen and CLI tests)."""

from __future__ import annotations

# pytester's in-process runs restore sys.modules afterwards; a C extension (numpy, scipy)
# first imported inside such a run cannot be imported again in the next one. Importing the
# analysis and runner stack here keeps it loaded for every run.
import pytest_quantagent.report.model
import pytest_quantagent.report.screen
import pytest_quantagent.runner.batch
import pytest_quantagent.stats  # noqa: F401


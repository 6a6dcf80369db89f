"""``quantagent replay``: the old name of ``quantagent fidelity``, kept for one release.

"Replay" now means one thing: a replay arm (an arm whose episodes come from τ²-bench results
files). This alias prints a deprecation note on stderr and runs ``quantagent fidelity``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pytest_quantagent.commands import fidelity


def add_parser(subparsers: Any) -> None:
    fidelity.add_parser(subparsers, name="replay",
                         help="deprecated name of 'fidelity' (removed in the next release)")


def run(args: argparse.Namespace) -> int:
    print("quantagent replay is deprecated and will be removed in the next release; "
          "use quantagent fidelity (same options)", file=sys.stderr)
    return fidelity.run(args)

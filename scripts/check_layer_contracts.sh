#!/usr/bin/env bash
# Shows that the import-linter contracts of pyproject.toml catch the upward imports issues 24
# and 37 named (and a few more): in a throwaway clone of HEAD, each line below adds one import
# (or, with "\n", a few lines: an import under TYPE_CHECKING) to one file, runs lint-imports
# and prints the contracts it broke. Every line must break >= 1.
#   bash scripts/check_layer_contracts.sh
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
git clone -q "$here" "$tmp/c" && cp "$here/pyproject.toml" "$tmp/c/pyproject.toml" && cd "$tmp/c"
checks=(
  "pytest_quantagent/backends/openai_compat.py|import pytest_quantagent.tau2.arms"
  "pytest_quantagent/backends/registry.py|from pytest_quantagent.quant.replay import REPLAY"
  "pytest_quantagent/backends/base.py|import pytest_quantagent.env.domain"
  "pytest_quantagent/backends/wrapper.py|import pytest_quantagent.runner.service"
  "pytest_quantagent/bundled/chat.py|import pytest_quantagent.training.expert"
  "pytest_quantagent/bundled/chat.py|import pytest_quantagent.runner.episode"
  "pytest_quantagent/env/environment.py|import pytest_quantagent.runner.gold"
  "pytest_quantagent/env/environment.py|import pytest_quantagent.backends.base"
  "pytest_quantagent/metrics/__init__.py|import pytest"
  "pytest_quantagent/stats/__init__.py|import _pytest"
  "domains/telecom/troubleshooting.py|import pytest_quantagent.runner.gold"
  "domains/telecom/troubleshooting.py|import pytest_quantagent.training.expert"
  "pytest_quantagent/vocab/messages.py|import pytest_quantagent.env.domain"
  "pytest_quantagent/store/jsonl.py|import pytest_quantagent.report"
  "pytest_quantagent/runner/service.py|import pytest_quantagent.resolve"
  "pytest_quantagent/runner/gold.py|import pytest_quantagent.training.expert"
  "pytest_quantagent/report/pytest_terminal.py|import pytest_quantagent.session"
  "pytest_quantagent/metrics/__init__.py|import pytest_quantagent.report"
  # issue 37: backends take a BackendSpec and know no arm; quant/ (arms, quantizers) sits above
  "pytest_quantagent/backends/registry.py|from pytest_quantagent.quant.arms import ArmSpec"
  "pytest_quantagent/backends/mock.py|from typing import TYPE_CHECKING as _TC\nif _TC:\n    from pytest_quantagent.quant.arms import ArmSpec"
  "pytest_quantagent/backends/openai_compat.py|from pytest_quantagent.quant.arms import ArmSpec"
  "pytest_quantagent/backends/vllm.py|import pytest_quantagent.quant.loading"
  "pytest_quantagent/backends/transformers.py|from pytest_quantagent.quant.rtn import fake_quantize_model"
  "pytest_quantagent/backends/spec.py|import pytest_quantagent.quant.arms"
  "pytest_quantagent/store/keys.py|import pytest_quantagent.quant.arms"
  "pytest_quantagent/quant/arms.py|import pytest_quantagent.runner.build"
  # issue 37: the OpenAI backend's parts: openai_compat > endpoints > http_client | openai_parse > json_codec
  "pytest_quantagent/backends/openai_parse.py|import pytest_quantagent.backends.http_client"
  "pytest_quantagent/backends/openai_parse.py|from typing import TYPE_CHECKING as _TC\nif _TC:\n    from pytest_quantagent.backends.endpoints import Endpoint"
  "pytest_quantagent/backends/openai_parse.py|import httpx"
  "pytest_quantagent/backends/http_client.py|from pytest_quantagent.backends.openai_parse import parse_completion"
  "pytest_quantagent/backends/http_client.py|import pytest_quantagent.backends.endpoints"
  "pytest_quantagent/backends/endpoints.py|from pytest_quantagent.backends.openai_compat import OpenAICompatBackend"
  "pytest_quantagent/backends/json_codec.py|import pytest_quantagent.backends.openai_parse"
  "pytest_quantagent/backends/json_codec.py|import socket"
  "pytest_quantagent/backends/http_client.py|import pytest_quantagent.quant.arms"
  # issue 37: reports render finished data (no runner), and no arrow runs back up
  "pytest_quantagent/report/cells.py|import pytest_quantagent.runner.judge"
  "pytest_quantagent/report/pytest_terminal.py|import pytest_quantagent.runner.progress"
  "pytest_quantagent/report/pytest_terminal.py|import pytest_quantagent.runner.endpoints"
  "pytest_quantagent/report/notes.py|import pytest_quantagent.runner.service"
  "pytest_quantagent/assertions.py|from pytest_quantagent.session import QuantCell"
  "pytest_quantagent/assertions.py|from typing import TYPE_CHECKING as _TC\nif _TC:\n    from pytest_quantagent.session import QuantCell"
  "pytest_quantagent/quant_cell.py|import pytest_quantagent.session"
  "pytest_quantagent/config.py|import pytest_quantagent.resolve"
  "pytest_quantagent/resolve.py|from pytest_quantagent import __version__"
  "pytest_quantagent/cli.py|import pytest_quantagent"
  "pytest_quantagent/verdict.py|import pytest_quantagent.analysis.cell"
  "pytest_quantagent/stats/__init__.py|import pytest_quantagent.metrics"
  "pytest_quantagent/tau2/reader.py|import pytest_quantagent.runner.service"
  "pytest_quantagent/testing/fault_server.py|import pytest_quantagent.quant.arms"
  "pytest_quantagent/store/records.py|import pytest_quantagent.env.tasks"
)
fail=0
for c in "${checks[@]}"; do
  f="${c%%|*}"; imp="${c#*|}"
  cp "$f" "$tmp/bak"; printf '\n%b  # noqa\n' "$imp" >> "$f"
  broken="$(lint-imports 2>&1 | grep ' BROKEN$' | sed 's/ BROKEN$//' | paste -sd ';' -)"
  cp "$tmp/bak" "$f"
  if [ -z "$broken" ]; then fail=1; echo "NOT CAUGHT  $f + $imp"; else echo "caught      $f + $imp: $broken"; fi
done
# Issue 37: quant/ reads only public names of backends/ (import-linter sees modules, not
# names; it was backends.vllm._ALLOWED_OPTIONS, now backends.options.VLLM_OPTIONS).
private="$(cd "$here" && python3 - <<'PY'
import ast, pathlib
for f in sorted(pathlib.Path("pytest_quantagent/quant").rglob("*.py")):
    for n in ast.walk(ast.parse(f.read_text())):
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("pytest_quantagent.backends"):
            for a in n.names:
                if a.name.startswith("_"):
                    print(f"{f}:{n.lineno}: {n.module}.{a.name}")
PY
)"
if [ -n "$private" ]; then fail=1; echo "PRIVATE     $private"; else echo "ok          quant/ imports no private name of backends/"; fi
exit "$fail"

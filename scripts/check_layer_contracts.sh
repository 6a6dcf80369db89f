#!/usr/bin/env bash
# Shows that the import-linter contracts of pyproject.toml catch the upward imports issue 24
# named (and a few more): in a throwaway clone of HEAD, each line below adds one import to
# one file, runs lint-imports and prints the contracts it broke. Every line must break >= 1.
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
)
fail=0
for c in "${checks[@]}"; do
  f="${c%%|*}"; imp="${c#*|}"
  cp "$f" "$tmp/bak"; printf '\n%s  # noqa\n' "$imp" >> "$f"
  broken="$(lint-imports 2>&1 | grep ' BROKEN$' | sed 's/ BROKEN$//' | paste -sd ';' -)"
  cp "$tmp/bak" "$f"
  if [ -z "$broken" ]; then fail=1; echo "NOT CAUGHT  $f + $imp"; else echo "caught      $f + $imp: $broken"; fi
done
exit "$fail"

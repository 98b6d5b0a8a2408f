#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine (routers, load generators, Prometheus with promtool and
# node_exporter, the package with its test extras in .venv) and runs the quality gates and the test suite.
# Usage: scripts/test.sh [--fast] [pytest args...]
#   --fast  only the fast tier: no integration or slow tests (about 2 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
for tool in nginx haproxy wrk hey chromium prometheus prometheus-node-exporter iperf3; do
  command -v "$tool" >/dev/null 2>&1 || [[ -x /usr/sbin/$tool ]] || need_pkgs+=("$tool")
done
if ((${#need_pkgs[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "installing Debian packages: ${need_pkgs[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
  else
    echo "missing ${need_pkgs[*]}: tests that need them will be skipped (run as root to install)" >&2
  fi
fi

PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# torch is pinned to the CPU build; the package itself keeps torch optional.
.venv/bin/python -m pip install -q -e '.[test]'

.venv/bin/ruff check src tests benchmarks scripts
.venv/bin/mypy
if [[ ${1:-} == --fast ]]; then
  shift
  exec .venv/bin/python -m pytest -m "not integration and not slow and not gpu" "$@"
fi
.venv/bin/python -m pytest "$@"

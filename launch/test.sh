#!/usr/bin/env bash
# Installs what the tests need into .venv, then runs pytest on an 8-device CPU mesh.
# Extra arguments pass through to pytest, e.g. ./launch/test.sh -k sampling -x
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
ensure_venv requirements-test.txt
cd "$ROOT"
export XLA_FLAGS="--xla_force_host_platform_device_count=8 ${XLA_FLAGS:-}"
export JAX_PLATFORMS=cpu
exec "$VENV/bin/python" -m pytest -q tests "$@"

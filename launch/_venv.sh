# Sourced by the launch scripts: creates .venv (Python 3.11) and installs a requirements file
# into it when that file changed since the last install. Packages go in with uv (parallel
# downloads and unpacking, sdists built side by side), itself pip-installed into the venv.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${GENENV_VENV:-$ROOT/.venv}"
PYTHON_BIN="${PYTHON:-python3.11}"
command -v "$PYTHON_BIN" >/dev/null 2>&1 || PYTHON_BIN=python3
UV_VERSION=0.13.9

venv_install() {  # uv pip install into $VENV; pip's find-links (config or env) pass on to uv
  local links=() link
  for link in $("$VENV/bin/pip" config get global.find-links 2>/dev/null || true) \
              ${PIP_FIND_LINKS:-}; do
    links+=(--find-links "$link")
  done
  "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" "${links[@]}" "$@"
}

ensure_venv() {  # $1: requirements file
  local req="$ROOT/$1" stamp
  [[ -x "$VENV/bin/python" ]] || "$PYTHON_BIN" -m venv "$VENV"
  "$VENV/bin/uv" --version 2>/dev/null | grep -qF " $UV_VERSION" \
    || "$VENV/bin/pip" install -q "uv==$UV_VERSION"
  stamp="$VENV/.installed-$(basename "$req")"
  if [[ ! -f "$stamp" ]] || ! cmp -s "$stamp" <(cat "$ROOT"/requirements*.txt); then
    echo "Installing $(basename "$req") into $VENV ..."
    venv_install -r "$req"
    venv_install --no-deps -r "$ROOT/requirements-nodeps.txt"
    cat "$ROOT"/requirements*.txt > "$stamp"
  fi
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
}

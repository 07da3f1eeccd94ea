#!/usr/bin/env bash
# Installs into .venv if needed, then runs the default job (the CPU demo).
# Extra flags pass through to `python -m train.main`, e.g.
#   ./launch/local.sh --config.curriculum.alpha=0.3 --workdir=runs/alpha03
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
ensure_venv requirements.txt
cd "$ROOT"
args=("$@")
has_flag() { local f; for f in "${args[@]}"; do [[ $f == "$1"* ]] && return 0; done; return 1; }
has_flag --config || args=(--config=configs/default.py "${args[@]}")
has_flag --workdir || args=(--workdir=runs/default "${args[@]}")
exec "$VENV/bin/python" -m train.main "${args[@]}"

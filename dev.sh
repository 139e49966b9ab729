#!/usr/bin/env bash
# Roxxel's developer entry point.
#   ./dev.sh main   set up .venv, then run the main job
#   ./dev.sh test   set up .venv, then run the whole test suite
# Needs only Python >= 3.11 (PYTHON=... picks the interpreter).
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=.venv

setup() {
  if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
  fi
  # Reinstall only when the dependency list changed.
  local stamp="$VENV/.roxxel-installed"
  if [ ! -f "$stamp" ] || ! cmp -s pyproject.toml "$stamp"; then
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e '.[dev]'
    cp pyproject.toml "$stamp"
  fi
}

main_job() {
  # Until the launcher lands, the main job packs real text (the .py sources of the Python
  # standard library, byte-level tokens) and checks the dataset end to end.
  local data=runs/data/stdlib-py
  local stdlib
  stdlib=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
  if [ -f "$data/dataset.json" ]; then
    echo "dataset already packed at $data"
  else
    "$VENV/bin/roxxel" pack "$stdlib" --include '*.py' --exclude '*/site-packages/*' --output "$data"
  fi
  "$VENV/bin/roxxel" info "$data"
  "$VENV/bin/roxxel" verify "$data"
}

case "${1:-}" in
  main) setup; main_job ;;
  test) setup; shift; exec "$VENV/bin/python" -m pytest -q "$@" ;;
  *) echo "usage: ./dev.sh main | ./dev.sh test [pytest args]" >&2; exit 2 ;;
esac

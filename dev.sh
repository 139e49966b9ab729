#!/usr/bin/env bash
# Roxxel's developer entry point.
#   ./dev.sh main   set up .venv, then run the main job
#   ./dev.sh test   set up .venv, then run the whole test suite
#   ./dev.sh lint   set up .venv, then ruff check (lint) and mypy (types) over the repository
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
  # The main job: pack real text (the Python standard library, byte-level tokens), then
  # train a small Transformer on it as a 2-worker local pod through roxxel-launch.
  local bin="$VENV/bin"
  "$bin/python" examples/lm/prepare.py runs/data/lm
  # Start afresh: forget an earlier local run of this job and its checkpoints.
  "$bin/roxxel-launch" delete lm --local >/dev/null 2>&1 || true
  rm -rf runs/lm
  "$bin/roxxel-launch" submit examples/lm/job.yaml --local --data-dir runs/data/lm \
    --set "checkpoint_dir=$PWD/runs/lm/checkpoints"
}

lint() {
  # Lint rules and the type checker's settings are in pyproject.toml ([tool.ruff], [tool.mypy]).
  "$VENV/bin/ruff" check .
  "$VENV/bin/mypy"
}

case "${1:-}" in
  main) setup; main_job ;;
  test) setup; shift; exec "$VENV/bin/python" -m pytest -q "$@" ;;
  lint) setup; lint ;;
  *) echo "usage: ./dev.sh main | ./dev.sh test [pytest args] | ./dev.sh lint" >&2; exit 2 ;;
esac

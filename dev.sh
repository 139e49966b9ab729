#!/usr/bin/env bash
# Roxxel's developer entry point.
#   ./dev.sh main   set up .venv, then run the main job
#   ./dev.sh test   set up .venv, then run the whole test suite
#   ./dev.sh lint   set up .venv, then ruff check (lint), ruff format --check (layout) and mypy (types) over the repository
#   ./dev.sh cluster up|down|status|build
#                   a real Kubernetes control plane on this machine (API server, controllers, scheduler,
#                   JobSet, Kueue, kwok nodes shaped like GKE node pools), built once from k8s/cluster/go.mod
#                   (needs Go >= 1.26); `up` prints the KUBECONFIG to export, `down` stops it
# Needs only Python >= 3.11 (PYTHON=... picks the interpreter).
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=.venv

setup() {
  # $1: the extra to install: `main` (what the main job needs) or `dev` (tests, lint, docs; includes main).
  local extra=$1
  if [ ! -x "$VENV/bin/python" ]; then
    echo "dev.sh: creating the virtual environment $VENV ($("$PYTHON" --version 2>&1))"
    "$PYTHON" -m venv "$VENV"
  fi
  # Reinstall only when what the install is made of changed (the dependency list, or the native
  # map reader that the editable install compiles in place); a dev install covers main.
  local stamp="$VENV/.roxxel-installed-$extra" inputs="$VENV/.roxxel-install-inputs"
  cat pyproject.toml setup.py roxxel/format/_mapread.c > "$inputs"
  if cmp -s "$inputs" "$stamp" || { [ "$extra" = main ] && cmp -s "$inputs" "$VENV/.roxxel-installed-dev"; }; then
    return
  fi
  local quiet=(--quiet)
  if [ -f "$stamp" ]; then
    echo "dev.sh: pyproject.toml, setup.py or roxxel/format/_mapread.c changed since $VENV was set up: updating it ($extra extra)"
  else
    quiet=()  # the first install of an extra takes a while: show pip's progress
    case $extra in
      main) echo "dev.sh: installing Roxxel and what the main job needs into $VENV: JAX, Flax, Optax, Orbax," \
                 "the Kubernetes client, tokenizers (its data's BPE), matplotlib (the loss plot), TensorBoard (the logs):" \
                 "about 260 MB of wheels (jaxlib alone is 82 MB), unpacked into 38,000 files (17,000 of them" \
                 "the official Kubernetes schemas, with which the launcher checks what it renders). Minutes, once." ;;
      dev) echo "dev.sh: installing Roxxel with its development extra into $VENV: what the main job needs," \
                "pytest, the docs toolchain (MkDocs), ruff, mypy and the optional formats' libraries. Minutes, once." ;;
    esac
  fi
  "$VENV/bin/python" -m pip install --quiet --upgrade 'pip>=23'  # an older pip lacks what pyproject.toml uses
  "$VENV/bin/python" -m pip install ${quiet[@]+"${quiet[@]}"} -e ".[$extra]"
  cp "$inputs" "$stamp"
}

main_job() {
  # The main job: pack real text (the Python standard library, BPE tokens), then
  # train a small Transformer on it as a 2-worker local pod through roxxel-launch.
  local bin="$VENV/bin" rc=0
  "$bin/python" examples/lm/prepare.py runs/data/lm
  case $(job_state) in
    Pending|Running|Restarting)
      echo "dev.sh: the main job (lm) is already running: follow it with .venv/bin/roxxel-launch logs lm --local -f," \
           "or stop it at a checkpoint with .venv/bin/roxxel-launch suspend lm --local (./dev.sh main then resumes it)" >&2
      exit 1 ;;
    Preempted)  # stopped at a checkpoint (Ctrl-C, a preemption): go on from there
      echo "dev.sh: the previous main job stopped at a checkpoint; resuming it (to train afresh: rm -rf runs/lm runs/local/lm)"
      "$bin/roxxel-launch" resume lm --local || rc=$?
      venv_hint; return $rc ;;
  esac
  forget_previous_run
  "$bin/roxxel-launch" submit examples/lm/job.yaml --local --data-dir runs/data/lm \
    --set "checkpoint_dir=$PWD/runs/lm/checkpoints" || rc=$?
  venv_hint
  return $rc
}

job_state() {
  # The state of the local job `lm` (Running, Succeeded, Preempted, ...), or nothing when there is none.
  "$VENV/bin/roxxel-launch" status lm --local --json 2>/dev/null | "$VENV/bin/python" -c \
    'import json, sys; print(json.load(sys.stdin)["state"])' 2>/dev/null || true
}

venv_hint() {
  # The commands the job prints (roxxel-launch, tensorboard, roxxel) are installed in .venv.
  if [ "${VIRTUAL_ENV:-}" != "$PWD/$VENV" ]; then
    echo "dev.sh: the commands printed above are in $VENV: run 'source $VENV/bin/activate' first (or prefix them with $VENV/bin/)"
  fi
}

forget_previous_run() {
  # Start afresh: a previous run's checkpoints would be restored (its last step ends training at
  # once). Its outputs are runs/lm (checkpoints, logs, plot) and the launcher's record of job `lm`.
  local old=() dir
  for dir in runs/lm "${ROXXEL_LOCAL_ROOT:-runs/local}/lm"; do
    if [ -e "$dir" ]; then old+=("$dir"); fi
  done
  if [ ${#old[@]} -eq 0 ]; then return; fi
  if [ -t 0 ] && [ -t 1 ]; then
    local answer=""
    read -r -p "dev.sh: a previous run of the main job is in ${old[*]}. Delete it and train afresh? [y/N] " answer || true
    case $answer in
      [yY]*) ;;
      *) echo "dev.sh: kept ${old[*]}; nothing run. Move it aside (or answer y) to train again."; exit 0 ;;
    esac
  fi
  echo "dev.sh: removing the previous run's outputs: ${old[*]}"
  "$VENV/bin/roxxel-launch" delete lm --local >/dev/null 2>&1 || true  # stops it, should it still run
  rm -rf "${old[@]}"
}

lint() {
  # Lint rules and the type checker's settings are in pyproject.toml ([tool.ruff], [tool.mypy]).
  "$VENV/bin/ruff" check .
  "$VENV/bin/ruff" format --check --quiet . || { echo "dev.sh: run $VENV/bin/ruff format . (the code's layout is ruff format's)"; return 1; }
  "$VENV/bin/mypy"
}

usage() {
  echo "usage: ./dev.sh main | ./dev.sh test [pytest args] | ./dev.sh lint | ./dev.sh cluster up|down|status|build"
}

case "${1:-}" in
  main)
    if [ $# -gt 1 ]; then usage >&2; echo "dev.sh: main takes no arguments (got: ${*:2})" >&2; exit 2; fi
    setup main; main_job ;;
  # Two pytest-xdist workers, a test file each at a time (module fixtures run once): about half
  # of the suite waits (subprocess start-up, pip, timeouts), so two files in flight keep 2 cores
  # busy. ROXXEL_TEST_WORKERS=0 runs in one process; a later -n in the arguments wins.
  test) setup dev; shift; exec "$VENV/bin/python" -m pytest -q -n "${ROXXEL_TEST_WORKERS:-2}" --dist loadfile "$@" ;;
  lint)
    if [ $# -gt 1 ]; then usage >&2; echo "dev.sh: lint takes no arguments (got: ${*:2})" >&2; exit 2; fi
    setup dev; lint ;;
  cluster)
    case "${2:-}" in
      up|down|status|build) ;;
      *) usage >&2; echo "dev.sh: cluster takes up, down, status or build" >&2; exit 2 ;;
    esac
    setup main
    PYTHONPATH="$PWD/tests" exec "$VENV/bin/python" -m support.control_plane "${@:2}" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac

#!/bin/sh
# Installs the worker's Python environment into the virtual environment $VIRTUAL_ENV.
#
#   docker/install.sh ACCELERATOR               the pinned JAX for ACCELERATOR only
#   docker/install.sh ACCELERATOR PROJECT_DIR   the same, plus Roxxel from the source tree
#
# ACCELERATOR is tpu, cuda or cpu and selects docker/requirements-ACCELERATOR.txt. The
# virtual environment is created with ${PYTHON:-python3} when it does not exist yet.
#
# The Dockerfile runs this twice: JAX first (its large layer stays cached while only
# Roxxel's sources change), then the project. tests/image/test_image.py runs the Dockerfile's
# own RUN lines, which call this script, in a fresh virtual environment: the image and
# the test share one install procedure and cannot drift apart.
set -eu

usage() {
  echo "usage: $0 tpu|cuda|cpu [PROJECT_DIR]" >&2
  exit 2
}

if [ "$#" -lt 1 ] || [ "$#" -gt 2 ]; then
  usage
fi
accelerator=$1
case "$accelerator" in
  tpu | cuda | cpu) ;;
  *) usage ;;
esac
: "${VIRTUAL_ENV:?set VIRTUAL_ENV to the virtual environment to install into}"
requirements="$(dirname "$0")/requirements-$accelerator.txt"

if [ ! -x "$VIRTUAL_ENV/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$VIRTUAL_ENV"
fi

# The requirements file goes with every install, so that resolving the project's own
# dependencies can never move JAX off its pin.
if [ "$#" -eq 2 ]; then
  "$VIRTUAL_ENV/bin/python" -m pip install --requirement "$requirements" "$2"
  "$VIRTUAL_ENV/bin/python" -m pip check
else
  "$VIRTUAL_ENV/bin/python" -m pip install --requirement "$requirements"
fi

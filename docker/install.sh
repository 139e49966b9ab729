#!/bin/sh
# Installs the worker's Python environment into the virtual environment $VIRTUAL_ENV.
#
#   docker/install.sh ACCELERATOR                          the pinned JAX for ACCELERATOR only
#   docker/install.sh ACCELERATOR --dependencies PYPROJECT the pinned JAX and the dependencies
#                                                          that PYPROJECT (pyproject.toml) lists,
#                                                          with those of the extras named in
#                                                          $ROXXEL_EXTRAS (comma-separated),
#                                                          without the project itself
#   docker/install.sh ACCELERATOR PROJECT_DIR              the pinned JAX and Roxxel from the
#                                                          source tree (with its dependencies)
#   docker/install.sh ACCELERATOR --prefix PREFIX PROJECT_DIR
#                                                          Roxxel alone (--no-deps) under PREFIX
#                                                          (PREFIX/lib/pythonX.Y/site-packages,
#                                                          PREFIX/bin), checked with `pip check`
#                                                          against $VIRTUAL_ENV's packages
#
# ACCELERATOR is tpu, cuda or cpu and selects docker/requirements-ACCELERATOR.txt. The
# virtual environment is created with ${PYTHON:-python3} when it does not exist yet.
#
# The Dockerfile uses --dependencies and then --prefix: the dependencies' large layer depends
# on pyproject.toml and the requirements files only, so it stays cached while Roxxel's sources
# change, and the project lands in a small layer of its own (PREFIX, copied over the virtual
# environment). tests/image/test_image.py runs the Dockerfile's own RUN lines, which call this
# script, in a fresh virtual environment: the image and the test share one install procedure.
set -eu

usage() {
  echo "usage: $0 tpu|cuda|cpu [PROJECT_DIR | --dependencies PYPROJECT | --prefix PREFIX PROJECT_DIR]" >&2
  exit 2
}

[ "$#" -ge 1 ] || usage
accelerator=$1
shift
case "$accelerator" in
  tpu | cuda | cpu) ;;
  *) usage ;;
esac
: "${VIRTUAL_ENV:?set VIRTUAL_ENV to the virtual environment to install into}"
requirements="$(dirname "$0")/requirements-$accelerator.txt"
python="$VIRTUAL_ENV/bin/python"
# A CA bundle for a TLS-intercepting proxy, given to an image build as the secret pip-cert.
if [ -z "${PIP_CERT:-}" ] && [ -s /run/secrets/pip-cert ]; then
  PIP_CERT=/run/secrets/pip-cert
  export PIP_CERT
fi

if [ ! -x "$python" ]; then
  "${PYTHON:-python3}" -m venv "$VIRTUAL_ENV"
fi

# With ROXXEL_WHEEL_CACHE set (the Dockerfile sets it to a build cache mount), the wheels are
# downloaded into that directory first, where `pip download` skips the files it has already,
# and installed from it: a rebuild after pyproject.toml changed downloads only what is new.
# pip's own HTTP cache cannot be relied on for this: it keeps only responses whose headers
# allow it, and proxies may drop those headers.
pip_install() {
  if [ -n "${ROXXEL_WHEEL_CACHE:-}" ]; then
    mkdir -p "$ROXXEL_WHEEL_CACHE"
    "$python" -m pip download --quiet --dest "$ROXXEL_WHEEL_CACHE" "$@"
    "$python" -m pip install --no-index --find-links "$ROXXEL_WHEEL_CACHE" "$@"
  else
    "$python" -m pip install "$@"
  fi
}

# The requirements file goes with every install that resolves dependencies, so that the
# project's own dependencies can never move JAX off its pin.
case "$#:${1:-}" in
  0:)
    pip_install --requirement "$requirements"
    ;;
  2:--dependencies)
    dependencies="$VIRTUAL_ENV/roxxel-dependencies.txt"
    "$python" - "$2" "${ROXXEL_EXTRAS:-}" >"$dependencies" <<'PY'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
extras = [e.strip() for e in sys.argv[2].split(",") if e.strip()]
unknown = sorted(set(extras) - set(project.get("optional-dependencies", {})))
if unknown:
    sys.exit(f"install.sh: ROXXEL_EXTRAS names extras that {sys.argv[1]} does not define: {', '.join(unknown)}")
print("\n".join([*project["dependencies"], *(d for e in extras for d in project["optional-dependencies"][e])]))
PY
    pip_install --requirement "$requirements" --requirement "$dependencies"
    rm -f "$dependencies"
    ;;
  3:--prefix)
    prefix=$2
    "$python" -m pip install --no-deps --prefix "$prefix" "$3"
    site=$("$python" -c 'import sys, sysconfig; print(sysconfig.get_path("purelib", vars={"base": sys.argv[1]}))' "$prefix")
    # Every dependency of the project is in the virtual environment already (--dependencies).
    PYTHONPATH="$site" "$python" -m pip check
    ;;
  1:-*) usage ;;
  1:*)
    "$python" -m pip install --requirement "$requirements" "$1"
    "$python" -m pip check
    ;;
  *) usage ;;
esac

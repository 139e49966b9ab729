#!/bin/sh
# Makes a local base image for the worker image from Debian's packages, for machines that
# reach Debian's mirrors and PyPI but no container registry (the Dockerfile's default base,
# python:3.11-slim-bookworm, comes from Docker Hub).
#
#   docker/make-base.sh [IMAGE]        IMAGE defaults to localhost/roxxel-base:bookworm
#
# then build the worker image on it:
#
#   roxxel-launch image build --base localhost/roxxel-base:bookworm
#
# What it does: mmdebstrap writes a minimal Debian bookworm root filesystem with python3,
# python3-venv and ca-certificates (about 2.5 minutes, 225 MB) to a tarball, and
# `podman import` (or `docker import`) turns the tarball into IMAGE (about 20 seconds).
# Python is Debian's 3.11 (/usr/bin/python3), the same minor version as the default base.
#
# Idempotent: nothing is done when IMAGE exists already, and the tarball is kept in
# $ROXXEL_CACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/roxxel) so that a machine
# whose image store was wiped imports it again without downloading. Delete IMAGE and the
# tarball to take newer Debian packages.
#
# Needs mmdebstrap (apt-get install mmdebstrap; as non-root also uidmap) and podman or
# docker ($ROXXEL_CONTAINER_ENGINE picks one). On a machine without systemd, pass podman
# the settings of docker/containers.conf: CONTAINERS_CONF=docker/containers.conf.
set -eu

image=${1:-localhost/roxxel-base:bookworm}
suite=bookworm
mirror=${ROXXEL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${ROXXEL_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
cache_dir=${ROXXEL_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:?set HOME or ROXXEL_CACHE_DIR}/.cache}/roxxel}
tarball="$cache_dir/base-$suite.tar"

fail() {
  echo "make-base.sh: $*" >&2
  exit 1
}

engine=${ROXXEL_CONTAINER_ENGINE:-}
if [ -z "$engine" ]; then
  if command -v podman >/dev/null 2>&1; then
    engine=podman
  elif command -v docker >/dev/null 2>&1; then
    engine=docker
  else
    fail "neither podman nor docker is installed: apt-get install podman (or install Docker)"
  fi
fi
command -v "$engine" >/dev/null 2>&1 || fail "ROXXEL_CONTAINER_ENGINE=$engine is not installed"

if "$engine" image inspect "$image" >/dev/null 2>&1; then
  echo "make-base.sh: $image exists already; nothing to do (remove it with '$engine rmi $image' to make it again);" \
    "build the worker image on it: roxxel-launch image build --base $image"
  exit 0
fi

if [ ! -s "$tarball" ]; then
  command -v mmdebstrap >/dev/null 2>&1 \
    || fail "mmdebstrap is not installed: apt-get install mmdebstrap (it writes the Debian root filesystem)"
  mkdir -p "$cache_dir"
  partial="$tarball.partial.$$"
  trap 'rm -f "$partial"' EXIT
  echo "make-base.sh: writing a Debian $suite root filesystem with python3 to $tarball (mmdebstrap, about 2.5 minutes)"
  mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
    --format=tar "$suite" "$partial" \
    "deb $mirror $suite main" \
    "deb $mirror $suite-updates main" \
    "deb $security_mirror $suite-security main" \
    || fail "mmdebstrap failed (see above); check that $mirror is reachable (ROXXEL_DEBIAN_MIRROR overrides it)"
  mv "$partial" "$tarball"
  trap - EXIT
else
  echo "make-base.sh: using the cached root filesystem $tarball"
fi

echo "make-base.sh: importing it as $image ($engine import)"
"$engine" import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["python3"]' \
  "$tarball" "$image" >/dev/null
echo "make-base.sh: made $image; build the worker image on it: roxxel-launch image build --base $image"

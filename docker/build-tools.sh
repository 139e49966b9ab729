#!/bin/sh
# Installs, in the image's build stage only, what compiling the native map reader
# (roxxel/format/_mapread.c, see setup.py) needs: gcc, the C library's headers and, where the
# interpreter's own headers are missing (Debian's python3, as in docker/make-base.sh's base;
# the python:3.11-slim images ship them), python3-dev. The worker stage gets the built
# module, never the compiler.
set -eu

packages="gcc libc6-dev"
if ! python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  packages="$packages python3-dev"
fi
apt-get update -q
# shellcheck disable=SC2086  # one word per package
apt-get install -y -q --no-install-recommends $packages
rm -rf /var/lib/apt/lists/*

# The Roxxel worker image: JAX for one accelerator, Roxxel, and `roxxel-worker` under tini.
#
#   docker build --build-arg ACCELERATOR=tpu  -t REGION-docker.pkg.dev/PROJECT/roxxel/worker:tpu .
#   docker build --build-arg ACCELERATOR=cuda -t REGION-docker.pkg.dev/PROJECT/roxxel/worker:cuda .
#   docker build                              -t REGION-docker.pkg.dev/PROJECT/roxxel/worker:cpu .
#
# `docker run IMAGE CMD...` runs `tini -- roxxel-worker -- CMD...`: tini (PID 1) reaps
# orphans and passes SIGTERM to roxxel-worker, which passes it to CMD once and exits with
# CMD's code (42 = preempted after a checkpoint, 128+N = killed by signal N). tini runs
# without -g: roxxel-worker keeps CMD in its own process group and forwards signals
# itself, so signalling the whole group would deliver every SIGTERM to CMD twice.
#
# Pods rendered by roxxel-launch set `command: [roxxel-worker, --]`, which replaces this
# ENTRYPOINT; roxxel-worker is then PID 1 and reaps orphans itself.
#
# tests/image/test_image.py lints this file with hadolint, runs its install steps (the cpu
# variant) in a fresh virtual environment and runs its ENTRYPOINT with signals;
# tests/image/test_container.py builds the cpu image with podman and runs it as a rendered
# pod's container. `roxxel-launch image build` builds it with podman or docker.

# Both stages must use the same base: the virtual environment links to its Python.
# python:3.11-slim-bookworm, pinned by digest; override with --build-arg BASE_IMAGE=...
# (docker/make-base.sh makes a local one from Debian's packages where no registry is reachable).
ARG BASE_IMAGE=python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91

# Layers from the least to the most often changed, so that a change to Roxxel's code rebuilds
# one small layer: JAX and the project's dependencies (they depend on docker/ and
# pyproject.toml only), then Roxxel itself under /opt/roxxel (copied over the virtual
# environment in the final stage), and the labels (the revision changes every commit) last.
# The wheels are kept in a build cache mount (BuildKit, podman >= 4; docker/install.sh's
# ROXXEL_WHEEL_CACHE): a rebuild after pyproject.toml changed takes the wheels it downloaded
# before from there, and no layer keeps the cache.
# Behind a TLS-intercepting proxy, pip trusts the CA bundle passed as the build secret
# pip-cert (`--secret id=pip-cert,src=FILE`; roxxel-launch image build passes $PIP_CERT), which
# no layer keeps either.
FROM ${BASE_IMAGE} AS build
ARG ACCELERATOR=cpu
# Extras of pyproject.toml installed with the dependencies: tokenizers, so that the main job's
# prepare.py (BPE) and the sample its training prints run in the image too. Not `launch`: the
# pods run roxxel-worker, and the launcher's dependencies (the Kubernetes client and its schemas,
# ~230 MB) stay where jobs are submitted from; roxxel-launch here says to install that extra.
ARG EXTRAS=tokenizers
ENV VIRTUAL_ENV=/opt/venv \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY docker/install.sh docker/requirements-*.txt docker/
COPY pyproject.toml ./
RUN --mount=type=cache,target=/root/.cache,sharing=locked --mount=type=secret,id=pip-cert \
    ROXXEL_WHEEL_CACHE=/root/.cache/roxxel-wheels ROXXEL_EXTRAS="$EXTRAS" \
    sh docker/install.sh "$ACCELERATOR" --dependencies pyproject.toml
# The native map reader (roxxel/format/_mapread.c) is compiled here; ROXXEL_REQUIRE_MAPREAD makes
# a failed compile fail the build (elsewhere the streamer falls back to pread, slower).
COPY docker/build-tools.sh docker/
RUN sh docker/build-tools.sh
COPY README.md LICENSE setup.py ./
COPY roxxel/ roxxel/
COPY launcher/ launcher/
RUN --mount=type=cache,target=/root/.cache,sharing=locked --mount=type=secret,id=pip-cert \
    ROXXEL_REQUIRE_MAPREAD=1 sh docker/install.sh "$ACCELERATOR" --prefix /opt/roxxel .

FROM ${BASE_IMAGE}

RUN apt-get update \
    && apt-get install -y --no-install-recommends tini=0.19.0-1+b3 \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*

# A fixed numeric UID, so that a pod's runAsNonRoot can verify it. HOME is a directory of
# its own, which rendered pods mount as an emptyDir (contract.HOME_MOUNT_PATH): the root
# filesystem is read-only there, and an emptyDir on /home/roxxel would hide examples/.
RUN groupadd --system --gid 10001 roxxel \
    && useradd --system --uid 10001 --gid roxxel --create-home --home-dir /home/roxxel \
       --shell /usr/sbin/nologin roxxel \
    && install -d -o 10001 -g 10001 -m 0700 /var/lib/roxxel-home

# Owned by root: the worker can read its code but not change it. The dependencies first
# (large, rarely changed), then Roxxel (small).
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/roxxel/ /opt/venv/
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HOME=/var/lib/roxxel-home \
    PYTHONUNBUFFERED=1

# The examples (examples/lm) sit in the working directory, readable, owned by root.
COPY examples/ /home/roxxel/examples/

USER 10001:10001
WORKDIR /home/roxxel
ENTRYPOINT ["/usr/bin/tini", "--", "roxxel-worker", "--"]
CMD ["python", "-c", "import jax, roxxel; print('roxxel', roxxel.__version__, 'jax', jax.__version__, jax.devices())"]

# Last: the revision changes with every commit, and a LABEL above would rebuild every layer below it.
ARG BASE_IMAGE
ARG ACCELERATOR=cpu
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="roxxel-worker" \
      org.opencontainers.image.description="Roxxel worker for ${ACCELERATOR}: train JAX models on multi-host pods" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.vendor="The Roxxel authors" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      dev.roxxel.accelerator="${ACCELERATOR}"

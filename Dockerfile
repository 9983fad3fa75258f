# One image for every beatflow process: worker, beat, flower, exporter, web, CLI and migrations.
# The command picks the process (see docker-compose.yml, k8s/ and helm/); nothing here runs as root.
#
# Build it with `make image` (deploy/image.sh): the wheels (beatflow's and every dependency's) are
# built on the host into .wheelhouse/ and installed here with --no-index, so the build itself needs
# no network. The base is a build argument:
#   PYTHON_IMAGE=python:3.11-slim                 with a registry (the default)
#   PYTHON_IMAGE=localhost/beatflow-base:<hash>   without one: Debian bookworm's python3, made
#                                                 with mmdebstrap and `podman import` (image.sh)
# Either base has `python3` (Debian's has no `python`); the host's Python must be 3.11 too.

ARG PYTHON_IMAGE=python:3.11-slim

# ---- build: a virtualenv from the wheelhouse, dependencies first (a cached layer) ------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INDEX=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv /opt/beatflow
COPY .wheelhouse/deps/ /wheels/deps/
RUN /opt/beatflow/bin/pip install --no-index --find-links /wheels/deps /wheels/deps/*.whl
COPY .wheelhouse/app/ /wheels/app/
# beatflow[all]: the extras of every process the image runs (web, postgres, flower); the plain
# core is what a worker and a beat need, but one image serves them all.
RUN /opt/beatflow/bin/pip install --no-index --find-links /wheels/deps --find-links /wheels/app \
       'beatflow[all]' \
    && /opt/beatflow/bin/pip check \
    && /opt/beatflow/bin/python -m compileall -q /opt/beatflow

# ---- runtime: the virtualenv and the dags folder, no wheels, no pip cache, uid 10001 ----------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="beatflow" \
      org.opencontainers.image.description="Celery-based DAG platform: worker, beat, flower, exporter, web" \
      org.opencontainers.image.licenses="Apache-2.0"
# HOME and every file the processes write (celerybeat-schedule, Python's temp files) are under
# /tmp: run with a read-only root filesystem and a tmpfs on /tmp.
ENV PATH=/opt/beatflow/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    BEATFLOW_DAGS_FOLDER=/app/dags \
    BEATFLOW_LOG_FORMAT=json \
    HOME=/tmp
RUN groupadd --system --gid 10001 beatflow \
    && useradd --system --uid 10001 --gid 10001 --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin beatflow
COPY --from=build /opt/beatflow /opt/beatflow
WORKDIR /app
# The dags folder is baked in, owned by root and read-only to the process; mount a volume over
# /app/dags to ship DAGs separately.
COPY dags/ /app/dags/
USER 10001:10001
EXPOSE 5555 8080 9808
STOPSIGNAL SIGTERM
# `auto` tells the process (worker, beat, flower, exporter, web) from the container's command line.
HEALTHCHECK --interval=30s --timeout=15s --start-period=30s --retries=3 \
    CMD ["beatflow", "health", "auto", "--timeout", "10"]
# With no command the container is a worker on the default queues (BEATFLOW_QUEUES).
CMD ["celery", "-A", "beatflow", "worker", "-l", "info", "-E"]

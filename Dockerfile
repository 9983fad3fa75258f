# syntax=docker/dockerfile:1
# One image for every beatflow process: worker, beat, flower, exporter, CLI and migrations.
# The command picks the process (see docker-compose.yml, k8s/ and helm/); nothing here runs as root.

ARG PYTHON_IMAGE=python:3.11-slim

# ---- build: compile wheels and install them into a virtualenv ---------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/beatflow
WORKDIR /src
COPY pyproject.toml README.md ./
COPY platform/ platform/
RUN /opt/beatflow/bin/pip install --upgrade pip \
    && /opt/beatflow/bin/pip install . \
    && /opt/beatflow/bin/python -m compileall -q /opt/beatflow

# ---- runtime: the virtualenv and the dags folder, no compilers, uid 10001 ---------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="beatflow" \
      org.opencontainers.image.description="Celery-based DAG platform: worker, beat, flower, exporter" \
      org.opencontainers.image.licenses="Apache-2.0"
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
EXPOSE 5555 9808
# `auto` tells the process (worker, beat, flower, exporter) from the container's command line.
HEALTHCHECK --interval=30s --timeout=15s --start-period=30s --retries=3 \
    CMD ["beatflow", "health", "auto", "--timeout", "10"]
CMD ["beatflow", "--help"]

# syntax=docker/dockerfile:1
#
# One image, all three entry points: `accel-exporter` (deploy/'s DaemonSet),
# `accel-autoscaler` (its Deployment) and `accel-node-agent` (its own DaemonSet),
# which pick theirs with `command:`.
#
#   docker build -t accel-fleet:0.1.0 .                              # every vendor
#   docker build --build-arg EXTRAS=nvidia -t accel-fleet:0.1.0-nvidia .
#   docker build --build-arg EXTRAS=none -t accel-fleet:0.1.0-slim .  # cpu, kubelet, sim
#   docker run --rm -p 9835:9835 accel-fleet:0.1.0 accel-exporter --sim-devices nvidia:8
#
# EXTRAS is the pyproject extras to install: all (default), none, or a comma-
# separated choice of nvidia, amd, oneapi. A vendor left out costs nothing at run
# time: its backend reports accel_exporter_backend_up 0 with one log line.
#
# tests/integration/test_dockerfile.py lints this file (pinned bases, non-root USER, no
# secrets, HEALTHCHECK); no container engine runs at test time.

# Exact version tags, the same in both stages, so the venv built in the first
# runs on the same Python in the second. Bump both together.
FROM python:3.11.13-slim-bookworm AS build
ARG EXTRAS=all
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/accel-fleet
WORKDIR /src
# Only what the distribution is built from (.dockerignore keeps the rest out).
COPY pyproject.toml README.md ./
COPY accel_common/ accel_common/
COPY exporter/ exporter/
COPY autoscaler/ autoscaler/
COPY nodeagent/ nodeagent/
RUN case "$EXTRAS" in \
      none|"") spec="." ;; \
      *) spec=".[$EXTRAS]" ;; \
    esac \
 && /opt/accel-fleet/bin/pip install "$spec" \
 && /opt/accel-fleet/bin/accel-exporter --version \
 && /opt/accel-fleet/bin/accel-autoscaler --help >/dev/null \
 && /opt/accel-fleet/bin/accel-node-agent --help >/dev/null

FROM python:3.11.13-slim-bookworm
ARG EXTRAS=all
# Intel GPUs: the oneapi backend finds them through dpctl and Intel's OpenCL GPU
# runtime, and reads Sysman through the Level Zero loader; both are Debian
# packages, installed only when the oneapi extra is. Debian 12's runtime
# (22.43) predates some data-center GPUs and ships no Level Zero GPU driver, so
# telemetry comes from i915/xe sysfs; for Sysman, install Intel's own
# compute-runtime packages here instead. Then the non-root user the Deployment
# runs as (the DaemonSet runs as uid 0 with no capabilities: see
# deploy/base/exporter.yaml).
RUN case ",$EXTRAS," in \
      *,all,*|*,oneapi,*) \
        apt-get update \
        && apt-get install -y --no-install-recommends intel-opencl-icd libze1 \
        && rm -rf /var/lib/apt/lists/* ;; \
    esac \
 && groupadd --system --gid 65532 accel \
 && useradd --system --uid 65532 --gid 65532 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin accel
COPY --from=build /opt/accel-fleet /opt/accel-fleet
ENV PATH=/opt/accel-fleet/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    ACCEL_HEALTHCHECK_URL=http://127.0.0.1:9835/healthz
USER 65532:65532
# 9835: accel-exporter; 9836: accel-autoscaler.
EXPOSE 9835 9836
# For `docker run`; Kubernetes ignores it and uses the manifests' probes. The
# default URL is the exporter's; run the autoscaler with
# -e ACCEL_HEALTHCHECK_URL=http://127.0.0.1:9836/healthz. The slim base has no
# curl, and Python is already here.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['ACCEL_HEALTHCHECK_URL'], timeout=4)"]
CMD ["accel-exporter"]

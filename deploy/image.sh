#!/usr/bin/env bash
# Build the beatflow image with Podman (`make image`), with or without a container registry.
#
#   deploy/image.sh                                  # base from Debian packages (no registry)
#   BEATFLOW_BASE_IMAGE=python:3.11-slim deploy/image.sh   # base from a registry
#
# 1. Base: without BEATFLOW_BASE_IMAGE, Debian bookworm with python3 made by mmdebstrap and
#    `podman import`ed as localhost/beatflow-base:<hash>.
# 2. Wheels: beatflow's dependencies as wheels (`pip wheel`) built on the host, then beatflow's
#    own wheel, into .wheelhouse/{deps,app}; the Dockerfile installs them with --no-index, so
#    the build needs no network.
# 3. `podman build --format docker` (HEALTHCHECK is a Docker-format field) tagged
#    $BEATFLOW_IMAGE (default localhost/beatflow:local).
#
# The base tarball and the dependency wheels are cached under $BEATFLOW_IMAGE_CACHE (default
# ~/.cache/beatflow-image), keyed by a hash of what made them (mmdebstrap's arguments; the
# dependency list and the Python version), so a rebuild on a kept machine takes seconds.
# BEATFLOW_PODMAN_FLAGS: extra flags for the build's containers; the default lowers the rlimits
# to values Podman may set where it cannot raise them (containers without CAP_SYS_RESOURCE).
# BEATFLOW_PODMAN_RUNTIME: the OCI runtime; default runc when installed, since Debian's crun
# refuses hosts with cgroups in hybrid mode ("drop all controllers from cgroupv2").
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${BEATFLOW_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/beatflow-image}"
IMAGE="${BEATFLOW_IMAGE:-localhost/beatflow:local}"
BASE="${BEATFLOW_BASE_IMAGE:-}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON="$(command -v python3)"
RUNTIME="${BEATFLOW_PODMAN_RUNTIME:-$(command -v runc || true)}"
read -r -a PODMAN_FLAGS <<<"${BEATFLOW_PODMAN_FLAGS---ulimit nofile=1024:1024 --ulimit nproc=1000:1000}"
MMDEBSTRAP_ARGS=(--variant=minbase --include=python3,python3-venv,ca-certificates bookworm)

say() { printf 'image: %s\n' "$*" >&2; }
die() { printf 'image: error: %s\n' "$*" >&2; exit 1; }
command -v podman >/dev/null 2>&1 || die "podman not found (apt-get install podman, or make deps-system as root)"
mkdir -p "$CACHE"

# ---- 1. base ----------------------------------------------------------------------------------
if [ -z "$BASE" ]; then
    key="$(printf '%s\n' "${MMDEBSTRAP_ARGS[@]}" | sha256sum | cut -c1-12)"
    BASE="localhost/beatflow-base:$key"
    if ! podman image exists "$BASE"; then
        tarball="$CACHE/base-$key.tar"
        if [ ! -f "$tarball" ] || [ ! -s "$tarball" ]; then
            command -v mmdebstrap >/dev/null 2>&1 \
                || die "mmdebstrap not found (apt-get install mmdebstrap), or set BEATFLOW_BASE_IMAGE=python:3.11-slim"
            say "making the base from Debian packages (mmdebstrap ${MMDEBSTRAP_ARGS[*]}; ~1-3 min, cached)"
            # --format=tar: mmdebstrap picks the format from the target's name, and "*.tar.part"
            # would make a directory (which `podman import` refuses); a stale one is replaced
            rm -rf "$tarball" "$tarball.part"
            mmdebstrap --quiet --format=tar "${MMDEBSTRAP_ARGS[@]}" "$tarball.part"
            mv "$tarball.part" "$tarball"
        fi
        say "importing $tarball as $BASE"
        podman import --quiet "$tarball" "$BASE" >/dev/null
    fi
fi
say "base $BASE"

# ---- 2. wheels --------------------------------------------------------------------------------
# The base's own Python decides which wheels fit: Debian's python3 is 3.11.2, and markers such as
# redis' `async-timeout; python_full_version < "3.11.3"` differ from the host's 3.11.x.
podman_run=(podman ${RUNTIME:+--runtime "$RUNTIME"} run --rm --network none "${PODMAN_FLAGS[@]}")
pyver="$("${podman_run[@]}" "$BASE" python3 -c 'import platform; print(platform.python_version())')"
reqs="$CACHE/requirements-$$.txt"
deps_key="$("$PYTHON" - "$ROOT/pyproject.toml" "$pyver" "$reqs" <<'PY'
import hashlib, re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
extras = project["optional-dependencies"]
def expand(extra):  # an extra's requirements, with beatflow[...] self-references followed
    for req in extras[extra]:
        own = re.fullmatch(r"beatflow\[([^\]]+)\]", req.replace(" ", ""))
        yield from (r for name in own.group(1).split(",") for r in expand(name)) if own else [req]
# the image runs every process: the core and the `all` extra (web, postgres, flower)
deps = sorted({*project["dependencies"], *expand("all")})
open(sys.argv[3], "w").write("\n".join(deps) + "\n")
# the dependency list and the two interpreters' versions decide which wheels fit
key = repr((deps, sys.argv[2], sys.version_info[:2]))
print(hashlib.sha256(key.encode()).hexdigest()[:12])
PY
)"
deps="$CACHE/wheels-$deps_key"
if [ ! -f "$deps/.complete" ]; then
    say "building dependency wheels for Python $pyver into $deps (cached)"
    rm -rf "$deps.part"
    mkdir -p "$deps.part"
    # pip evaluates markers against the interpreter it runs on, so the wheels are resolved by a
    # Python of exactly the base's version: one on the host (Debian's python3 for the Debian
    # base), else the base's own python3 in a container with network (only this step has it).
    wheel_python=""
    for candidate in "$PYTHON" /usr/bin/python3 "$(command -v python3 || true)"; do
        [ -x "$candidate" ] || continue
        if [ "$("$candidate" -c 'import platform; print(platform.python_version())')" = "$pyver" ]; then
            wheel_python="$candidate"
            break
        fi
    done
    if [ -n "$wheel_python" ]; then
        wheel_venv="$CACHE/venv-$pyver"
        [ -x "$wheel_venv/bin/pip" ] || "$wheel_python" -m venv --clear "$wheel_venv"
        "$wheel_venv/bin/pip" wheel --quiet --disable-pip-version-check -w "$deps.part" -r "$reqs" >&2
    else
        say "no Python $pyver on the host: resolving the wheels in the base image"
        podman ${RUNTIME:+--runtime "$RUNTIME"} run --rm --network host "${PODMAN_FLAGS[@]}" \
            -v "$deps.part:/out" -v "$reqs:/requirements.txt:ro" "$BASE" \
            sh -c 'python3 -m venv /tmp/v && /tmp/v/bin/pip wheel -q -w /out -r /requirements.txt' >&2
    fi
    touch "$deps.part/.complete"
    rm -rf "$deps"
    mv "$deps.part" "$deps"
fi
rm -f "$reqs"
house="$ROOT/.wheelhouse"
rm -rf "$house"
mkdir -p "$house/deps" "$house/app"
cp -p "$deps"/*.whl "$house/deps/"
"$PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$house/app" "$ROOT" >&2

# ---- 3. image ---------------------------------------------------------------------------------
say "building $IMAGE"
podman ${RUNTIME:+--runtime "$RUNTIME"} build --quiet --format docker "${PODMAN_FLAGS[@]}" \
    --build-arg "PYTHON_IMAGE=$BASE" -t "$IMAGE" -f "$ROOT/Dockerfile" "$ROOT" >/dev/null
size="$(podman image inspect --format '{{.Size}}' "$IMAGE")"
say "built $IMAGE ($((size / 1000000)) MB)"

# ---- 4. optional: Redis and PostgreSQL for docker-compose.yml without a registry -------------
# BEATFLOW_SERVICE_IMAGES=1: localhost/beatflow-redis:local and localhost/beatflow-postgres:local
# from Debian's packages on the same base (apt needs the network, this step only); used by
# deploy/compose/debian-services.yml.
if [ -n "${BEATFLOW_SERVICE_IMAGES:-}" ]; then
    for service in redis postgres; do
        say "building localhost/beatflow-$service:local (Debian's package)"
        podman ${RUNTIME:+--runtime "$RUNTIME"} build --quiet --format docker --network host \
            "${PODMAN_FLAGS[@]}" --build-arg "BASE=$BASE" -t "localhost/beatflow-$service:local" \
            -f "$ROOT/deploy/compose/images/$service.Containerfile" "$ROOT/deploy/compose/images" >/dev/null
    done
fi
echo "$IMAGE"

#!/usr/bin/env bash
# Start a private Docker daemon and build the base image the project's Dockerfile runs on, from
# Debian packages (no image registry is needed). Prints the daemon's DOCKER_HOST on stdout.
#
# The base mirrors the layout of the official python:3.11-slim-bookworm: Debian bookworm (debootstrap,
# minbase) with python3, a venv at /usr/local/venv whose python and pip come first on PATH, and the
# CA bundle this host's pip trusts, so pip inside `docker build --network host` reaches the same index.
# Everything lives in directory $1 (made by the caller, one per run: the daemon's data, its socket and
# PID file). Needs root; installs docker.io and debootstrap if missing. Stop it with .ci/docker-stop.sh $1.
set -euo pipefail
DIR="${1:?usage: docker-start.sh DIR}"
BASE="${BCETUNE_DOCKER_BASE:-bcetune-base:bookworm}"
MIRROR="${BCETUNE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >&2
fi
mkdir -p "$DIR"
SOCK="unix://$DIR/docker.sock"
dockerd --data-root "$DIR/data" --exec-root "$DIR/exec" -H "$SOCK" --pidfile "$DIR/dockerd.pid" \
    > "$DIR/dockerd.log" 2>&1 &
export DOCKER_HOST="$SOCK"
DOCKER=$(command -v /usr/bin/docker || command -v docker)
for _ in $(seq 60); do "$DOCKER" info >/dev/null 2>&1 && break; sleep 0.5; done
"$DOCKER" info >/dev/null 2>&1 || { echo "docker-start: dockerd did not come up (see $DIR/dockerd.log)" >&2; exit 1; }

ROOT="$DIR/rootfs"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$ROOT" "$MIRROR" >&2
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* "$ROOT"/usr/share/doc "$ROOT"/usr/share/man \
    "$ROOT"/usr/share/locale
chroot "$ROOT" python3 -m venv /usr/local/venv >&2
CA="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"
[ -f "$CA" ] && cp "$CA" "$ROOT/etc/ssl/certs/ca-certificates.crt"
tar -C "$ROOT" -c . | "$DOCKER" import \
    --change 'ENV PATH=/usr/local/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["python3"]' - "$BASE" >&2
rm -rf "$ROOT"
echo "$SOCK"

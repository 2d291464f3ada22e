#!/usr/bin/env bash
# Run a command (the test suite) with the servers some tests need beside the project: a throwaway
# PostgreSQL (multi-worker sweep test) and a private Docker daemon with a Debian base image (container
# test), and Debian's Chromium for the explorer's browser test. `make test` and `.ci/run` both come through here, so a fresh clone runs the same tests as CI.
#
# Each server starts only where it can: as root (PostgreSQL runs as user postgres, dockerd needs root)
# and with its Debian packages installed; under CI=true missing packages are installed first. Where one
# cannot start, its tests skip and say why. BCETUNE_SERVICES=none runs without them (quick local runs);
# a BCETUNE_TEST_POSTGRES / BCETUNE_TEST_DOCKER already set is used as it is.
set -uo pipefail
cd "$(dirname "$0")/.."
started_pg="" started_docker=""
cleanup() {
    [ -z "$started_pg" ] || bash .ci/stop-postgres.sh || true
    [ -z "$started_docker" ] || bash .ci/docker-stop.sh || true
}
trap cleanup EXIT
can_start() {  # $1: a binary that shows the package is installed
    [ "$(id -u)" = "0" ] && [ "${BCETUNE_SERVICES:-auto}" != "none" ] \
        && { [ "${CI:-}" = "true" ] || ls $1 >/dev/null 2>&1; }
}
if [ -z "${BCETUNE_TEST_POSTGRES:-}" ] && can_start '/usr/lib/postgresql/*/bin/initdb'; then
    # a free port (a server left over from an interrupted run must not make this one skip)
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    if url=$(bash .ci/start-postgres.sh "$port"); then
        export BCETUNE_TEST_POSTGRES="$url" started_pg=1
    else
        echo "warning: PostgreSQL did not start; the multi-worker sweep test will skip" >&2
    fi
fi
if [ -z "${BCETUNE_TEST_DOCKER:-}" ] && can_start /usr/sbin/dockerd && can_start /usr/sbin/debootstrap; then
    if host=$(bash .ci/docker-start.sh); then
        export BCETUNE_TEST_DOCKER="$host" started_docker=1
    else
        echo "warning: Docker did not start; the container tests will skip" >&2
    fi
fi
# Headless Chromium and its driver for the explorer's browser test (Debian's packages; nothing else is
# downloaded: no browser build of a test tool's own)
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    if [ "$(id -u)" = "0" ] && [ "${CI:-}" = "true" ] && [ "${BCETUNE_SERVICES:-auto}" != "none" ]; then
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            chromium chromium-driver; } >&2 || echo "warning: Chromium did not install; the browser test will skip" >&2
    fi
fi
"$@"

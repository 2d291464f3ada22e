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
# Everything this run starts lives in one directory of its own (two runs on one machine never share a
# path): the servers' data, sockets and PID files. It is stopped and removed on any exit, an interrupt
# or a kill included; BCETUNE_RUN_DIR names it for the tests (and for a look while a run is going).
RUN_DIR=$(mktemp -d /tmp/bcetune-run.XXXXXX)
chmod 711 "$RUN_DIR"  # the servers run as their own users (postgres) and must reach their subdirectory
export BCETUNE_RUN_DIR="$RUN_DIR"
started_pg="" started_docker="" child=""
cleanup() {
    trap '' INT TERM HUP
    [ -z "$child" ] || { kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; }
    [ -z "$started_pg" ] || bash .ci/stop-postgres.sh "$RUN_DIR/postgres" || true
    [ -z "$started_docker" ] || bash .ci/docker-stop.sh "$RUN_DIR/docker" || true
    rm -rf "$RUN_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
can_start() {  # $1: a binary that shows the package is installed
    [ "$(id -u)" = "0" ] && [ "${BCETUNE_SERVICES:-auto}" != "none" ] \
        && { [ "${CI:-}" = "true" ] || ls $1 >/dev/null 2>&1; }
}
if [ -z "${BCETUNE_TEST_POSTGRES:-}" ] && can_start '/usr/lib/postgresql/*/bin/initdb'; then
    # a free port (a server left over from an interrupted run must not make this one skip)
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    started_pg=1  # from here on, whatever start-postgres.sh got to is stopped at exit
    if url=$(bash .ci/start-postgres.sh "$RUN_DIR/postgres" "$port"); then
        export BCETUNE_TEST_POSTGRES="$url"
        echo "with-services: PostgreSQL on port $port (data in $RUN_DIR/postgres)" >&2
    else
        echo "warning: PostgreSQL did not start; the multi-worker sweep test will skip" >&2
    fi
fi
if [ -z "${BCETUNE_TEST_DOCKER:-}" ] && can_start /usr/sbin/dockerd && can_start /usr/sbin/debootstrap; then
    started_docker=1
    if host=$(bash .ci/docker-start.sh "$RUN_DIR/docker"); then
        export BCETUNE_TEST_DOCKER="$host"
        echo "with-services: Docker at $host" >&2
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
# nginx (the production proxy, deploy/nginx) and wrk (the attack benchmark's victim) for the proxy tests
if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ] || ! command -v wrk >/dev/null; then
    if [ "$(id -u)" = "0" ] && [ "${CI:-}" = "true" ] && [ "${BCETUNE_SERVICES:-auto}" != "none" ]; then
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            nginx-light wrk; } >&2 || echo "warning: nginx or wrk did not install; the proxy tests will skip" >&2
    fi
fi
# what the optional suites will do, before the long run starts
say() { echo "with-services: $*" >&2; }
if [ -n "${BCETUNE_TEST_POSTGRES:-}" ]; then say "database tests: run (PostgreSQL)"
else say "database tests: skip (no PostgreSQL: needs root and Debian's postgresql, or BCETUNE_SERVICES=none)"; fi
if [ -n "${BCETUNE_TEST_DOCKER:-}" ]; then say "container tests: run (Docker)"
else say "container tests: skip (no Docker: needs root, docker.io and debootstrap, or BCETUNE_SERVICES=none)"; fi
if { command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; } && command -v wrk >/dev/null; then
    say "proxy tests: run (nginx, wrk)"
else say "proxy tests: skip (no Debian nginx-light + wrk; CI=true installs them as root)"; fi
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then say "browser tests: run (Chromium)"
else say "browser tests: skip (no Debian chromium + chromium-driver; CI=true installs them as root)"; fi
toolchain="${BCETUNE_CANN_TOOLCHAIN:-$(pwd)/../shared/toolchain/cann-8.5.0}"
if [ -d "$toolchain" ]; then say "CANN compile checks: run ($toolchain)"
else say "CANN compile checks: skip (no CANN 8.5.0 headers at $toolchain)"; fi
# in the background, so a signal to this script is handled at once (bash runs traps only between
# foreground commands) and the command is stopped before the servers it uses. bash starts a background
# command with SIGINT ignored, and an ignored signal stays ignored across exec: a run of this script
# under the suite (tests/project/test_ci_services.py) could then never be interrupted. env gives the
# command SIGINT back (GNU coreutils >= 8.31).
env --default-signal=INT "$@" &
child=$!
wait "$child"
rc=$?
child=""
exit "$rc"

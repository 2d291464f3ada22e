#!/usr/bin/env bash
# Start a throwaway PostgreSQL for the multi-worker sweep test in directory $1 (made by the caller, one
# per run: data/, log, the server's own postmaster.pid) on port $2; print its URL on stdout. Stop it with
# .ci/stop-postgres.sh $1. Installs Debian's postgresql if it is missing. Needs root (the server runs as
# user postgres).
set -euo pipefail
DIR="${1:?usage: start-postgres.sh DIR PORT}"
PORT="${2:?usage: start-postgres.sh DIR PORT}"
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi
PGBIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")
mkdir -p "$DIR"
chown postgres "$DIR"
su postgres -s /bin/sh -c "'$PGBIN/initdb' -D '$DIR/data' -A trust -U postgres" >&2
su postgres -s /bin/sh -c "'$PGBIN/pg_ctl' -D '$DIR/data' -l '$DIR/log' -w \
    -o \"-p $PORT -k '$DIR' -c listen_addresses=127.0.0.1\" start" >&2
su postgres -s /bin/sh -c "'$PGBIN/createdb' -h 127.0.0.1 -p $PORT bcetune_test" >&2
echo "postgresql+psycopg2://postgres@127.0.0.1:$PORT/bcetune_test"

#!/usr/bin/env bash
# Start a throwaway PostgreSQL for the multi-worker sweep test; print its URL on stdout.
# Installs Debian's postgresql if it is missing. Needs root (the server runs as user postgres).
set -euo pipefail
PORT="${1:-54329}"
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi
PGBIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")
DIR=$(mktemp -d /tmp/bcetune-pg.XXXXXX)
chown postgres "$DIR"
su postgres -s /bin/sh -c "'$PGBIN/initdb' -D '$DIR/data' -A trust -U postgres" >&2
su postgres -s /bin/sh -c "'$PGBIN/pg_ctl' -D '$DIR/data' -l '$DIR/log' -w \
    -o \"-p $PORT -k '$DIR' -c listen_addresses=127.0.0.1\" start" >&2
su postgres -s /bin/sh -c "'$PGBIN/createdb' -h 127.0.0.1 -p $PORT bcetune_test" >&2
echo "$DIR" > /tmp/bcetune-pg.dir
echo "postgresql+psycopg2://postgres@127.0.0.1:$PORT/bcetune_test"

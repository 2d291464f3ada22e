#!/usr/bin/env bash
# Stop the PostgreSQL that start-postgres.sh started in directory $1 (if it runs) and remove the directory.
set -u
DIR="${1:?usage: stop-postgres.sh DIR}"
[ -d "$DIR" ] || exit 0
if [ -f "$DIR/data/postmaster.pid" ]; then
    PGBIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/pg_ctl | sort -V | tail -n 1)")
    su postgres -s /bin/sh -c "'$PGBIN/pg_ctl' -D '$DIR/data' -m fast -w stop" >/dev/null 2>&1
    pid=$(head -n 1 "$DIR/data/postmaster.pid" 2>/dev/null)  # still there: pg_ctl could not stop it
    [ -z "$pid" ] || kill -9 "$pid" 2>/dev/null
fi
rm -rf "$DIR"
exit 0

#!/usr/bin/env bash
# Stop the PostgreSQL that start-postgres.sh started (if any).
set -u
DIR=$(cat /tmp/bcetune-pg.dir 2>/dev/null) || exit 0
PGBIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/pg_ctl | sort -V | tail -n 1)")
su postgres -s /bin/sh -c "'$PGBIN/pg_ctl' -D '$DIR/data' -m fast stop" >/dev/null 2>&1
rm -rf "$DIR" /tmp/bcetune-pg.dir

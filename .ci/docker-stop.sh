#!/usr/bin/env bash
# Stop the Docker daemon docker-start.sh started in directory $1 (by its PID file) and remove the directory.
set -u
DIR="${1:?usage: docker-stop.sh DIR}"
[ -d "$DIR" ] || exit 0
DOCKER=$(command -v /usr/bin/docker || command -v docker)
DOCKER_HOST="unix://$DIR/docker.sock" "$DOCKER" ps -aq 2>/dev/null | xargs -r env DOCKER_HOST="unix://$DIR/docker.sock" "$DOCKER" rm -f >/dev/null 2>&1
if [ -f "$DIR/dockerd.pid" ]; then
    pid=$(cat "$DIR/dockerd.pid")
    kill "$pid" 2>/dev/null
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null
fi
# dockerd leaves its network namespace and overlay mounts behind: unmount them (lazily) before removing
grep -o " $DIR[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
rm -rf "$DIR" 2>/dev/null
exit 0

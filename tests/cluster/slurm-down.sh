#!/usr/bin/env bash
# Stop the daemons that slurm-up.sh started in DIR (by their pid files), nothing else.
set -uo pipefail
DIR=${1:-/tmp/rankcollapse-slurm}
stop() {  # pid file
  [ -f "$1" ] || return 0
  pid=$(cat "$1")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}
for f in slurm.conf gres.conf; do
  [ "$(readlink "/etc/slurm/$f" 2>/dev/null)" = "$DIR/$f" ] && rm -f "/etc/slurm/$f"
done
stop "$DIR/slurmd.pid"
stop "$DIR/slurmctld.pid"
if [ -f "$DIR/munge/started-by-us" ]; then
  stop "$(cat "$DIR/munge/started-by-us")"
  rm -f "$DIR/munge/started-by-us"
fi
exit 0

#!/usr/bin/env bash
# Start a real one-node SLURM cluster on this machine, for tests (see ../../docs/gpu-and-cluster.md, Cluster).
#   tests/cluster/slurm-up.sh [DIR]      (DIR defaults to /tmp/rankcollapse-slurm)
# Installs Debian's slurm-wlm and munge when missing (needs root), writes slurm.conf and a
# gres.conf declaring two fake GPUs (dummy device files) into DIR, starts munged, slurmctld and
# slurmd, and waits until the node is idle. Clients need `export SLURM_CONF=DIR/slurm.conf`.
# tests/cluster/slurm-down.sh DIR stops exactly the daemons started here (by their pid files).
set -euo pipefail
DIR=${1:-/tmp/rankcollapse-slurm}
mkdir -p "$DIR"/{state,spool,log,dev,munge}
DIR=$(cd "$DIR" && pwd)

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  echo "installing slurm-wlm and munge" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq slurm-wlm munge >/dev/null
fi

if pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null; then
  # Another cluster on this machine would answer on the same ports and silently take the jobs.
  echo "slurmctld/slurmd already running (pids: $(pgrep -d' ' -x 'slurmctld|slurmd')); stop them first" >&2
  exit 1
fi

HOST=$(hostname -s)
# Declare 4 CPUs per core: the test's jobs are mostly interpreter start-up and I/O, and each
# bundle of N tiny jobs asks for N CPUs (config_overrides lets slurmd accept the count).
CPUS=$(( 4 * $(nproc) ))
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 8 / 10 ))
touch "$DIR"/dev/gpu0 "$DIR"/dev/gpu1  # stand-ins for /dev/nvidia0,1: scheduling only

cat > "$DIR/slurm.conf" <<CONF
ClusterName=rankcollapse-test
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
# A job runs at the nice value of the sbatch that submitted it (the tests lower the smoke run's).
PropagatePrioProcess=1
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
GresTypes=gpu
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
MinJobAge=300
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
cat > "$DIR/gres.conf" <<CONF
NodeName=$HOST Name=gpu File=$DIR/dev/gpu[0-1]
CONF
export SLURM_CONF=$DIR/slurm.conf
# Job steps (the executor runs `srun` inside each job) look for the default path, not for
# SLURM_CONF: point /etc/slurm at this cluster while it runs (slurm-down.sh removes the links).
for f in slurm.conf gres.conf; do
  if [ -e "/etc/slurm/$f" ] && [ ! -L "/etc/slurm/$f" ]; then
    echo "/etc/slurm/$f exists and is not ours; refusing to replace it" >&2
    exit 1
  fi
  mkdir -p /etc/slurm && ln -sfn "$DIR/$f" "/etc/slurm/$f"
done

# munge: its own daemon as the munge user, with a socket and pid file of ours.
if ! munge -n >/dev/null 2>&1 || ! munge -n | unmunge >/dev/null 2>&1; then
  # munged runs as the munge user, who cannot enter a private (0700) DIR: pid file in /run/munge.
  mkdir -p /run/munge && chown munge:munge /run/munge
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/rankcollapse-munged.pid
  echo /run/munge/rankcollapse-munged.pid > "$DIR/munge/started-by-us"
fi
for _ in $(seq 50); do munge -n | unmunge >/dev/null 2>&1 && break; sleep 0.1; done

/usr/sbin/slurmctld -f "$DIR/slurm.conf"
/usr/sbin/slurmd -f "$DIR/slurm.conf"
for _ in $(seq 100); do
  state=$(sinfo -h -n "$HOST" -o %t 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.2
done
if [ "${state:-}" != idle ]; then
  echo "slurm node did not become idle (state: ${state:-none}); logs in $DIR/log" >&2
  tail -20 "$DIR"/log/*.log >&2 || true
  exit 1
fi
echo "SLURM_CONF=$DIR/slurm.conf"

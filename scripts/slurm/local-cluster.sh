#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests: its own munged, slurmctld
# and slurmd (Debian slurm-wlm and munge), all state, sockets and logs under one
# folder, ports away from Slurm's defaults, so it neither needs nor touches a
# system Slurm or munge. Needs root (slurmd runs jobs as the submitting user).
#
#   eval "$(scripts/slurm/local-cluster.sh start DIR)"   # prints: export SLURM_CONF=DIR/slurm.conf
#   sbatch ...; squeue; sinfo
#   scripts/slurm/local-cluster.sh stop DIR
#
# start waits (≤ 60 s) until the node accepts jobs and fails with the daemons'
# logs otherwise. PORT (default 26817; slurmd uses PORT+1) picks the ports.
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)
port=${PORT:-26817}

stop() {
  for p in slurmd slurmctld munged; do
    if [ -s "$dir/$p.pid" ]; then
      pid=$(cat "$dir/$p.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$dir/$p.pid"
    fi
  done
}

logs() {
  for f in munged.log slurmctld.log slurmd.log; do
    [ -f "$dir/$f" ] && { echo "--- $dir/$f (last 30 lines)"; tail -30 "$dir/$f"; }
  done >&2
}

case "$cmd" in
stop) stop; exit 0 ;;
start) ;;
*) usage ;;
esac

[ "$(id -u)" -eq 0 ] || { echo "$0: needs root (slurmd and munged)" >&2; exit 1; }
for b in munged mungekey slurmctld slurmd sinfo; do
  command -v "$b" >/dev/null || { echo "$0: $b not found (apt-get install slurm-wlm munge)" >&2; exit 1; }
done
stop # a previous cluster in the same folder
mkdir -p "$dir/munge" "$dir/state" "$dir/spool"
chmod 700 "$dir/munge"

# munge: a private key and socket
[ -s "$dir/munge/munge.key" ] || mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null
chmod 600 "$dir/munge/munge.key"
munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/munged.seed"

# slurm.conf: this host as controller and only node, with the CPUs and memory
# slurmd detects; no cgroups, no accounting.
host=$(hostname -s)
node=$(slurmd -C | head -1 | sed "s/^NodeName=[^ ]*/NodeName=$host NodeAddr=127.0.0.1/")
cat > "$dir/slurm.conf" <<EOF
ClusterName=probe-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MinJobAge=600
KillWait=5
$node State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$dir/slurm.conf

slurmctld -f "$SLURM_CONF" -c || { logs; stop; exit 1; }
slurmd -f "$SLURM_CONF" || { logs; stop; exit 1; }

for _ in $(seq 120); do
  state=$(sinfo -h -n "$host" -o %t 2>/dev/null || true)
  case "$state" in
  idle*|mix*|alloc*) echo "export SLURM_CONF=$SLURM_CONF"; exit 0 ;;
  esac
  sleep 0.5
done
echo "$0: node $host did not become ready in 60 s (state: ${state:-none})" >&2
logs
stop
exit 1

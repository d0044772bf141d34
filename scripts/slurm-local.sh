#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for trying tfdist's Slurm path and for its tests.
#
#   scripts/slurm-local.sh start    install Debian's slurm + munge if missing, start munged/slurmctld/slurmd
#   scripts/slurm-local.sh status   show the daemons and the node state
#   scripts/slurm-local.sh stop     stop the daemons (by their own PIDs) and keep the directory
#   scripts/slurm-local.sh env      print the `export SLURM_CONF=...` line for clients (sbatch, squeue, ...)
#
# Everything lives in $TFDIST_SLURM_DIR (default /tmp/tfdist-slurm): config, munge key and socket, state,
# spool and logs. No system file is written; the daemons run in the foreground (-D / -F) in the background
# and are stopped by their recorded PIDs. Needs root (the daemons' user).
set -euo pipefail
DIR="${TFDIST_SLURM_DIR:-/tmp/tfdist-slurm}"
CPUS="${TFDIST_SLURM_CPUS:-8}"                 # declared CPUs: more than the real cores so tests can run 2-4 tasks
PORT_BASE="${TFDIST_SLURM_PORT:-16817}"         # slurmctld port; slurmd uses the next one
HOST="$(hostname)"
CONF="$DIR/slurm.conf"

log() { echo "slurm-local: $*" >&2; }

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
     && command -v munged >/dev/null && command -v mungekey >/dev/null; then
    return
  fi
  [ "$(id -u)" = 0 ] || { log "Slurm is not installed and installing it needs root (apt-get)"; exit 2; }
  log "installing slurmctld slurmd slurm-client munge (Debian packages)"
  apt-get update -qq
  # Services must not be started by the packages: this script runs its own daemons.
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
}

write_config() {
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/munge"
  chmod 755 "$DIR" "$DIR/munge"
  if [ ! -s "$DIR/munge/munge.key" ]; then
    mungekey --create --keyfile="$DIR/munge/munge.key" --force
  fi
  chown root:root "$DIR/munge/munge.key"
  chmod 0400 "$DIR/munge/munge.key"
  cat > "$CONF" <<CONF
ClusterName=tfdist
SlurmctldHost=${HOST}(127.0.0.1)
SlurmctldPort=${PORT_BASE}
SlurmdPort=$((PORT_BASE + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=${DIR}/munge/munge.socket
StateSaveLocation=${DIR}/state
SlurmdSpoolDir=${DIR}/spool
SlurmctldPidFile=${DIR}/slurmctld.pid
SlurmdPidFile=${DIR}/slurmd.pid
SlurmctldLogFile=${DIR}/log/slurmctld.log
SlurmdLogFile=${DIR}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# Trust the CPUs declared below even though the machine has fewer: tests run more tasks than cores.
SlurmdParameters=config_overrides
JobRequeue=1
MinJobAge=600
KillWait=10
NodeName=${HOST} NodeAddr=127.0.0.1 CPUs=${CPUS} State=UNKNOWN
PartitionName=debug Nodes=${HOST} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_idle() {
  local i
  for i in $(seq 1 120); do
    state=$(SLURM_CONF="$CONF" timeout 5 sinfo -h -N -o %t 2>/dev/null | head -n1 || true)
    case "$state" in idle*|mix*|alloc*) return 0 ;; esac
    sleep 0.5
  done
  log "node did not become idle within 60 s (state: ${state:-unknown}); logs in $DIR/log"
  return 1
}

start() {
  install_packages
  if alive "$DIR/slurmctld.run.pid" && alive "$DIR/slurmd.run.pid"; then
    log "already running ($CONF)"
    return 0
  fi
  stop_daemons quiet
  write_config
  munged -F --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munge.seed" \
    </dev/null >>"$DIR/log/munged.out" 2>&1 &
  echo $! > "$DIR/munged.run.pid"
  for _ in $(seq 1 50); do [ -S "$DIR/munge/munge.socket" ] && break; sleep 0.1; done
  SLURM_CONF="$CONF" slurmctld -D -c -f "$CONF" </dev/null >>"$DIR/log/slurmctld.out" 2>&1 &
  echo $! > "$DIR/slurmctld.run.pid"
  SLURM_CONF="$CONF" slurmd -D -f "$CONF" </dev/null >>"$DIR/log/slurmd.out" 2>&1 &
  echo $! > "$DIR/slurmd.run.pid"
  wait_idle
  log "running; clients need: export SLURM_CONF=$CONF"
}

stop_daemons() {
  local name pidfile pid
  for name in slurmd slurmctld munged; do
    pidfile="$DIR/$name.run.pid"
    if alive "$pidfile"; then
      pid=$(cat "$pidfile")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  done
  [ "${1:-}" = quiet ] || log "stopped"
}

status() {
  local name
  for name in munged slurmctld slurmd; do
    if alive "$DIR/$name.run.pid"; then echo "$name: running (pid $(cat "$DIR/$name.run.pid"))"; else echo "$name: stopped"; fi
  done
  if alive "$DIR/slurmctld.run.pid"; then SLURM_CONF="$CONF" timeout 5 sinfo -N || true; fi
}

case "${1:-status}" in
  start) start ;;
  stop) stop_daemons ;;
  status) status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: scripts/slurm-local.sh start|stop|status|env" >&2; exit 2 ;;
esac

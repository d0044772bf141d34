#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for trying tfdist's Slurm path and for its tests.
#
#   scripts/slurm-local.sh start [--nodes N]
#                                   install Debian's slurm + munge if missing, start munged/slurmctld/slurmd;
#                                   with --nodes N (N >= 2): on N test hosts (scripts/testhosts.sh), slurmctld
#                                   on the first, one slurmd per host under the host's name and address
#   scripts/slurm-local.sh status   show the daemons and the node state
#   scripts/slurm-local.sh stop     stop the daemons (by their own PIDs), and remove the test hosts it made
#   scripts/slurm-local.sh env      print the `export SLURM_CONF=...` line for clients (sbatch, squeue, ...)
#
# On test hosts, Slurm's clients must run on one of them (the machine's own network has no route to the
# switch): `scripts/testhosts.sh exec node1 -- tfdist slurm submit --nodes 2 -- python train.py`.
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
HERE="$(cd "$(dirname "$0")" && pwd)"
HOSTS="$HERE/testhosts.sh"
NODE_NAME="${TFDIST_HOSTS_NAME:-node}"
SUBNET="${TFDIST_HOSTS_SUBNET:-10.77.0}"

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
  local nodes="$1" i
  if [ "$nodes" -gt 1 ]; then
    CTLD_HOST="${NODE_NAME}1" CTLD_ADDR="${SUBNET}.1" NODE_LIST="${NODE_NAME}[1-${nodes}]" NODE_LINES=""
    for i in $(seq 1 "$nodes"); do
      NODE_LINES+="NodeName=${NODE_NAME}${i} NodeAddr=${SUBNET}.${i} CPUs=${CPUS} State=UNKNOWN"$'\n'
    done
  else
    CTLD_HOST="$HOST" CTLD_ADDR=127.0.0.1 NODE_LIST="$HOST"
    NODE_LINES="NodeName=${HOST} NodeAddr=127.0.0.1 CPUs=${CPUS} State=UNKNOWN"
  fi
  SLURMD_TIMEOUT="${TFDIST_SLURMD_TIMEOUT:-300}"
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/munge"
  chmod 755 "$DIR" "$DIR/munge"
  if [ ! -s "$DIR/munge/munge.key" ]; then
    mungekey --create --keyfile="$DIR/munge/munge.key" --force
  fi
  chown root:root "$DIR/munge/munge.key"
  chmod 0400 "$DIR/munge/munge.key"
  cat > "$CONF" <<CONF
ClusterName=tfdist
SlurmctldHost=${CTLD_HOST}(${CTLD_ADDR})
SlurmctldPort=${PORT_BASE}
SlurmdPort=$((PORT_BASE + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=${DIR}/munge/munge.socket
StateSaveLocation=${DIR}/state
SlurmdSpoolDir=${DIR}/spool/%n
SlurmctldPidFile=${DIR}/slurmctld.pid
SlurmdPidFile=${DIR}/slurmd-%n.pid
SlurmctldLogFile=${DIR}/log/slurmctld.log
SlurmdLogFile=${DIR}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
MpiDefault=none
# A node that stops answering is marked DOWN after this long and its jobs end (default 300 s).
SlurmdTimeout=${SLURMD_TIMEOUT}
ReturnToService=2
# Trust the CPUs declared below even though the machine has fewer: tests run more tasks than cores.
SlurmdParameters=config_overrides
JobRequeue=1
MinJobAge=600
KillWait=10
${NODE_LINES}
PartitionName=debug Nodes=${NODE_LIST} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

node_count() { cat "$DIR/nodes" 2>/dev/null || echo 1; }

# Slurm's clients: on the first test host when the cluster lives on test hosts (no route from here).
client() {
  if [ "$(node_count)" -gt 1 ]; then
    SLURM_CONF="$CONF" "$HOSTS" exec "${NODE_NAME}1" -- "$@"
  else
    SLURM_CONF="$CONF" "$@"
  fi
}

wait_idle() {
  local want="$1" i ready
  for i in $(seq 1 120); do
    ready=$(client timeout 5 sinfo -h -N -o %t 2>/dev/null | grep -cE '^(idle|mix|alloc)' || true)
    [ "$ready" -ge "$want" ] && return 0
    sleep 0.5
  done
  log "$want node(s) did not become idle within 60 s (ready: ${ready:-0}); logs in $DIR/log"
  return 1
}

# A daemon in the background, its PID recorded: on a test host (through testhosts.sh, which execs into it)
# or here.
daemon() {
  local name="$1" host="$2"
  shift 2
  if [ -n "$host" ]; then
    SLURM_CONF="$CONF" "$HOSTS" exec "$host" -- "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 &
  else
    SLURM_CONF="$CONF" "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 &
  fi
  echo $! > "$DIR/$name.run.pid"
}

start() {
  local nodes=1 i
  while [ "$#" -gt 0 ]; do
    case "$1" in
      --nodes) nodes="${2:-}"; shift 2 || { log "--nodes needs a number"; exit 2; } ;;
      --nodes=*) nodes="${1#--nodes=}"; shift ;;
      *) log "unknown option '$1' (start [--nodes N])"; exit 2 ;;
    esac
  done
  [[ "$nodes" =~ ^[0-9]+$ ]] && [ "$nodes" -ge 1 ] || { log "--nodes '$nodes' must be a positive number"; exit 2; }
  install_packages
  if [ "$(node_count)" = "$nodes" ] && alive "$DIR/slurmctld.run.pid"; then
    log "already running ($CONF)"
    return 0
  fi
  stop_daemons quiet
  if [ "$nodes" -gt 1 ]; then
    "$HOSTS" up "$nodes"
  fi
  write_config "$nodes"
  echo "$nodes" > "$DIR/nodes"
  munged -F --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munge.seed" \
    </dev/null >>"$DIR/log/munged.out" 2>&1 &
  echo $! > "$DIR/munged.run.pid"
  for _ in $(seq 1 50); do [ -S "$DIR/munge/munge.socket" ] && break; sleep 0.1; done
  if [ "$nodes" -gt 1 ]; then
    # munge's socket is a file: every host reaches the one munged through it.
    daemon slurmctld "${NODE_NAME}1" slurmctld -D -c -f "$CONF"
    for i in $(seq 1 "$nodes"); do
      mkdir -p "$DIR/spool/${NODE_NAME}${i}"
      daemon "slurmd-${NODE_NAME}${i}" "${NODE_NAME}${i}" slurmd -D -f "$CONF" -N "${NODE_NAME}${i}"
    done
  else
    mkdir -p "$DIR/spool/$HOST"
    daemon slurmctld "" slurmctld -D -c -f "$CONF"
    daemon "slurmd-$HOST" "" slurmd -D -f "$CONF"
  fi
  wait_idle "$nodes"
  if [ "$nodes" -gt 1 ]; then
    log "running on $nodes test hosts; clients run on a host: SLURM_CONF=$CONF $HOSTS exec ${NODE_NAME}1 -- sinfo"
  else
    log "running; clients need: export SLURM_CONF=$CONF"
  fi
}

stop_pid() {
  local pidfile="$1" pid
  if alive "$pidfile"; then
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

stop_daemons() {
  local pidfile
  for pidfile in "$DIR"/slurmd-*.run.pid; do [ -e "$pidfile" ] && stop_pid "$pidfile"; done
  stop_pid "$DIR/slurmctld.run.pid"
  stop_pid "$DIR/munged.run.pid"
  if [ "$(node_count)" -gt 1 ]; then
    "$HOSTS" down
  fi
  rm -f "$DIR/nodes"
  [ "${1:-}" = quiet ] || log "stopped"
}

# Stop (or start again) the slurmd of one test host: a node that is lost, then comes back.
node_daemon() {
  local action="$1" host="$2"
  [ "$(node_count)" -gt 1 ] || { log "node-$action needs a cluster on test hosts (start --nodes N)"; exit 2; }
  case "$action" in
    stop) stop_pid "$DIR/slurmd-$host.run.pid" ;;
    start) daemon "slurmd-$host" "$host" slurmd -D -f "$CONF" -N "$host" ;;
  esac
}

status() {
  local pidfile name
  for pidfile in "$DIR/munged.run.pid" "$DIR/slurmctld.run.pid" "$DIR"/slurmd-*.run.pid; do
    name=$(basename "$pidfile" .run.pid)
    [ "$name" = "slurmd-*" ] && continue
    if alive "$pidfile"; then echo "$name: running (pid $(cat "$pidfile"))"; else echo "$name: stopped"; fi
  done
  if alive "$DIR/slurmctld.run.pid"; then client timeout 5 sinfo -N || true; fi
}

case "${1:-status}" in
  start) shift; start "$@" ;;
  stop) stop_daemons ;;
  status) status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  node-stop|node-start) node_daemon "${1#node-}" "${2:?host name}" ;;
  *) echo "usage: scripts/slurm-local.sh start [--nodes N]|stop|status|env|node-stop HOST|node-start HOST" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Test hosts on one machine: N Linux network namespaces on one switch, each a "host" with its own address,
# hostname and link, for trying and testing what crosses a network (multi-node Slurm, launches across hosts,
# cut or slow links). Needs root. Nothing in the machine's own network namespace is touched: the switch is a
# bridge inside a namespace of its own, and every veth pair is created there with one end moved straight
# into its host.
#
#   scripts/testhosts.sh up [N]              make N hosts (default 2): <name>1..<name>N
#   scripts/testhosts.sh down                remove every host, the switch and the processes running on them
#   scripts/testhosts.sh exec HOST -- CMD..  run CMD "on" HOST (its network, hostname and hosts file)
#   scripts/testhosts.sh cap HOST RATE|off   cap HOST's link both ways (tc tbf), e.g. 1gbit
#   scripts/testhosts.sh cut HOST            unplug HOST from the switch (packets vanish: no reset, no error)
#   scripts/testhosts.sh plug HOST           plug it back
#   scripts/testhosts.sh kill HOST           SIGKILL every process running on HOST (a host that loses power)
#   scripts/testhosts.sh loopback-name HOST on|self|off
#                                            on: HOST's name resolves to 127.0.1.1 on every host (the hosts
#                                            file of an image made on HOST, Debian's "127.0.1.1 HOST" line,
#                                            copied to every node); self: on HOST only (Debian's default)
#   scripts/testhosts.sh alias HOST [NAME..] extra names of HOST on every host (e.g. a pod's DNS name
#                                            train-0.train); no NAME removes them
#   scripts/testhosts.sh sshd HOST..         an ssh server on each HOST (port 22 of its address; installs
#                                            Debian's openssh-server if missing); root logs in with the key
#                                            that `ssh-command` names, nothing else
#   scripts/testhosts.sh ssh-command         the ssh client command that reaches those servers
#   scripts/testhosts.sh list                hosts with their addresses
#   scripts/testhosts.sh check               exit 0 when this machine can make hosts (root, ip, nsenter)
#
# Names come from TFDIST_HOSTS_PREFIX (default "tfdist"): namespaces <prefix>-sw and <prefix>-<name>N, state
# in /tmp/<prefix>-hosts. Tests use their own prefix and subnet, so a cluster made by hand is never touched.
set -euo pipefail
PREFIX="${TFDIST_HOSTS_PREFIX:-tfdist}"
SUBNET="${TFDIST_HOSTS_SUBNET:-10.77.0}"      # host i gets $SUBNET.i/24
NAME="${TFDIST_HOSTS_NAME:-node}"             # hostnames: node1, node2, ...
DIR="${TFDIST_HOSTS_DIR:-/tmp/${PREFIX}-hosts}"
SWITCH="${PREFIX}-sw"

log() { echo "testhosts: $*" >&2; }
die() { echo "testhosts: $*" >&2; exit 2; }

check() {
  [ "$(id -u)" = 0 ] || { echo "test hosts need root (network namespaces)"; return 1; }
  command -v ip >/dev/null || { echo "test hosts need iproute2 (ip)"; return 1; }
  command -v nsenter >/dev/null && command -v unshare >/dev/null \
    || { echo "test hosts need util-linux (nsenter, unshare)"; return 1; }
  # A namespace we cannot make (a container without CAP_SYS_ADMIN) is the common reason to skip.
  local probe="${PREFIX}-probe$$"
  ip netns add "$probe" 2>/dev/null || { echo "cannot create network namespaces here (ip netns add failed)"; return 1; }
  ip netns del "$probe"
}

host_ns() { echo "${PREFIX}-$1"; }
host_index() {
  local host="$1"
  [[ "$host" =~ ^${NAME}([0-9]+)$ ]] || die "unknown host '$host': hosts are named ${NAME}1..${NAME}N"
  [ -e "/run/netns/$(host_ns "$host")" ] || die "host '$host' does not exist (scripts/testhosts.sh up)"
  echo "${BASH_REMATCH[1]}"
}

write_hosts_file() {  # HOST N: the file bound over /etc/hosts on HOST (rewritten in place)
  local host="$1" n="$2" i looped file="$DIR/hosts.$1"
  {
    echo "127.0.0.1 localhost"
    echo "::1 localhost ip6-localhost ip6-loopback"
    # First match wins: a looped name listed here hides its real address below.
    for looped in $(cat "$DIR/loopback" 2>/dev/null); do echo "127.0.1.1 ${looped}"; done
    grep -qx "$host" "$DIR/loopback-self" 2>/dev/null && echo "127.0.1.1 ${host}"
    for i in $(seq 1 "$n"); do echo "${SUBNET}.${i} ${NAME}${i}$(aliases_of "${NAME}${i}")"; done
  } > "$file.tmp"
  # In place (same inode): processes already running on the host see the change through their bind mount.
  if [ -f "$file" ]; then cat "$file.tmp" > "$file"; rm -f "$file.tmp"; else mv "$file.tmp" "$file"; fi
}

aliases_of() {  # HOST: " name1 name2" (its extra names, with a leading space), or nothing
  awk -v h="$1" '$1 == h { $1 = ""; printf "%s", $0 }' "$DIR/aliases" 2>/dev/null || true
}

set_aliases() {
  local host="$1" n i name
  shift
  host_index "$host" >/dev/null
  for name in "$@"; do
    [[ "$name" =~ ^[A-Za-z0-9]([-.A-Za-z0-9]*[A-Za-z0-9])?$ ]] || die "alias '$name' is not a host name"
  done
  n=$(cat "$DIR/count")
  { grep -v "^${host} " "$DIR/aliases" 2>/dev/null || true; } > "$DIR/aliases.tmp"
  if [ "$#" -gt 0 ]; then echo "$host $*" >> "$DIR/aliases.tmp"; fi
  mv "$DIR/aliases.tmp" "$DIR/aliases"
  for i in $(seq 1 "$n"); do write_hosts_file "${NAME}${i}" "$n"; done
  log "$host also answers to: ${*:-(no other name)}"
}

up() {
  local n="${1:-2}" i ns
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "host count '$n' must be 1..200"
  check >/dev/null || die "$(check)"
  down quiet
  mkdir -p "$DIR"
  echo "$n" > "$DIR/count"
  ip netns add "$SWITCH"
  ip -n "$SWITCH" link add br0 type bridge
  ip -n "$SWITCH" link set br0 up
  for i in $(seq 1 "$n"); do
    ns=$(host_ns "${NAME}${i}")
    ip netns add "$ns"
    ip -n "$SWITCH" link add "p${i}" type veth peer name eth0 netns "$ns"
    ip -n "$SWITCH" link set "p${i}" master br0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "${SUBNET}.${i}/24" dev eth0
    ip -n "$ns" link set eth0 up
    write_hosts_file "${NAME}${i}" "$n"
  done
  log "$n host(s) up: ${NAME}1..${NAME}${n} on ${SUBNET}.0/24 (scripts/testhosts.sh exec ${NAME}1 -- CMD)"
}

down() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    case "$ns" in "${PREFIX}-${NAME}"[0-9]*|"$SWITCH") ;; *) continue ;; esac
    # Processes still running on the host (daemons, workers of a crashed test): all started on it by us.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$DIR"
  [ "${1:-}" = quiet ] || log "removed"
}

run_on() {
  local host="$1" i
  shift
  i=$(host_index "$host")
  [ "$#" -gt 0 ] || die "no command: scripts/testhosts.sh exec $host -- CMD..."
  # nsenter --net, not `ip netns exec`: that remounts /sys, hiding the cgroup mounts slurmd needs. A private
  # mount namespace carries the host's /etc/hosts, a UTS namespace its hostname.
  # UCX (the mpich wheel's default network module) takes processes with the same kernel boot id for one
  # machine and would carry "cross-host" MPI traffic through shared memory: on test hosts it must use TCP,
  # as between real machines. MPICH's own shared memory still serves ranks of one host.
  export UCX_TLS="${UCX_TLS:-tcp,self}"
  exec nsenter --net="/run/netns/$(host_ns "$host")" \
    unshare --mount --uts --propagation private -- \
    sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"' \
    sh "$host" "$DIR/hosts.$host" "$@"
}

cap() {
  local host="$1" rate="$2" i ns
  i=$(host_index "$host")
  ns=$(host_ns "$host")
  if [ "$rate" = off ]; then
    ip -n "$ns" link show eth0 >/dev/null
    tc -n "$ns" qdisc del dev eth0 root 2>/dev/null || true
    tc -n "$SWITCH" qdisc del dev "p${i}" root 2>/dev/null || true
    log "$host: link uncapped"
    return
  fi
  [[ "$rate" =~ ^[0-9]+(\.[0-9]+)?([kmg]bit|bit)$ ]] || die "rate '$rate' must look like 1gbit, 100mbit or off"
  # Both directions: the host's egress and the switch port's egress towards the host.
  tc -n "$ns" qdisc replace dev eth0 root tbf rate "$rate" burst 256kb latency 100ms
  tc -n "$SWITCH" qdisc replace dev "p${i}" root tbf rate "$rate" burst 256kb latency 100ms
  log "$host: link capped at $rate"
}

cut_link() {
  local i
  i=$(host_index "$1")
  # Off the bridge, not link down: frames are dropped silently, as when a switch port or cable fails,
  # so peers see a host that stops answering rather than an error.
  ip -n "$SWITCH" link set "p${i}" nomaster
  log "$1: unplugged"
}

plug_link() {
  local i
  i=$(host_index "$1")
  ip -n "$SWITCH" link set "p${i}" master br0 up
  log "$1: plugged in"
}

kill_host() {
  # A power loss: every process of the host, including those forked while the first ones were killed
  # (a launcher's probe, a rank's helper), so the sweep repeats until the host is empty (bounded).
  local host="$1" pid n=0 round pids
  host_index "$host" >/dev/null
  for round in $(seq 1 50); do
    pids=$(ip netns pids "$(host_ns "$host")" 2>/dev/null || true)
    [ -n "$pids" ] || break
    for pid in $pids; do kill -9 "$pid" 2>/dev/null && n=$((n + 1)); done
    sleep 0.1
  done
  [ -z "$(ip netns pids "$(host_ns "$host")" 2>/dev/null || true)" ] || die "$host: processes survive kill -9"
  log "$host: killed $n process(es) in $round round(s)"
}

loopback_name() {
  local host="$1" mode="${2:-}" n i list
  host_index "$host" >/dev/null
  n=$(cat "$DIR/count")
  for list in loopback loopback-self; do
    { grep -vx "$host" "$DIR/$list" 2>/dev/null || true; } > "$DIR/$list.tmp"
    mv "$DIR/$list.tmp" "$DIR/$list"
  done
  case "$mode" in
    on) echo "$host" >> "$DIR/loopback" ;;
    self) echo "$host" >> "$DIR/loopback-self" ;;
    off) ;;
    *) die "loopback-name $host on|self|off" ;;
  esac
  for i in $(seq 1 "$n"); do write_hosts_file "${NAME}${i}" "$n"; done
  log "$host resolves to $([ "$mode" = off ] && echo its address || echo "127.0.1.1 ($mode)")"
}

ssh_dir() { echo "$DIR/ssh"; }

ssh_command() {  # the client side: the hosts' own key, their host keys are throw-away (no known_hosts)
  echo "ssh -i $(ssh_dir)/id_ed25519 -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
}

start_sshd() {
  local host i d
  d=$(ssh_dir)
  if [ ! -x /usr/sbin/sshd ]; then
    log "installing openssh-server (Debian package) for the test hosts' ssh servers"
    apt-get update -qq
    # The package must not start its own server on this machine: RUNLEVEL=1 keeps invoke-rc.d quiet.
    DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq --no-install-recommends openssh-server >/dev/null
  fi
  mkdir -p "$d" /run/sshd
  chmod 700 "$d"
  [ -f "$d/host_key" ] || ssh-keygen -q -t ed25519 -N '' -f "$d/host_key"
  [ -f "$d/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$d/id_ed25519"
  cp "$d/id_ed25519.pub" "$d/authorized_keys"
  chmod 600 "$d/authorized_keys"
  for host in "$@"; do
    i=$(host_index "$host")
    cat > "$d/sshd_config.$host" <<CONF
ListenAddress ${SUBNET}.${i}
Port 22
HostKey $d/host_key
AuthorizedKeysFile $d/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile $d/sshd.$host.pid
CONF
    # Started inside the host (its network, name and hosts file); it daemonizes there and `down` ends it.
    ( run_on "$host" /usr/sbin/sshd -f "$d/sshd_config.$host" )
    log "$host: ssh server on ${SUBNET}.${i}:22"
  done
}

list() {
  [ -f "$DIR/count" ] || { log "no hosts (scripts/testhosts.sh up N)"; return 0; }
  local i
  for i in $(seq 1 "$(cat "$DIR/count")"); do echo "${NAME}${i} ${SUBNET}.${i} netns=$(host_ns "${NAME}${i}")"; done
}

cmd="${1:-list}"
shift || true
case "$cmd" in
  up) up "$@" ;;
  down) down ;;
  exec)
    host="${1:-}"; shift || true
    [ "${1:-}" = "--" ] && shift
    run_on "$host" "$@" ;;
  cap) [ "$#" = 2 ] || die "usage: cap HOST RATE|off"; cap "$1" "$2" ;;
  cut) [ "$#" = 1 ] || die "usage: cut HOST"; cut_link "$1" ;;
  plug) [ "$#" = 1 ] || die "usage: plug HOST"; plug_link "$1" ;;
  kill) [ "$#" = 1 ] || die "usage: kill HOST"; kill_host "$1" ;;
  loopback-name) loopback_name "$@" ;;
  alias) [ "$#" -ge 1 ] || die "usage: alias HOST [NAME...]"; set_aliases "$@" ;;
  sshd) [ "$#" -ge 1 ] || die "usage: sshd HOST..."; start_sshd "$@" ;;
  ssh-command) ssh_command ;;
  list) list ;;
  check) check ;;
  *) die "usage: scripts/testhosts.sh up [N]|down|exec HOST -- CMD|cap HOST RATE|cut HOST|plug HOST|kill HOST|loopback-name HOST on|off|alias HOST [NAME..]|sshd HOST..|ssh-command|list|check" ;;
esac

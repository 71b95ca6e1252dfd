#!/usr/bin/env bash
# A throwaway 3-member Galera cluster (MariaDB + Debian galera-4) on loopback, for
# tests, the demo and benchmarks.
#
#   dir=$(scripts/galera.sh start)    # new cluster in a temp folder; prints its path
#   scripts/galera.sh url DIR         # mysql://dsync:<pw>@127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/dsync
#   scripts/galera.sh url DIR 2       # the same list starting at member 2 (P2,P3,P1)
#   scripts/galera.sh port DIR N      # member N's client port
#   scripts/galera.sh root DIR N      # mariadb client as root on member N's socket
#   scripts/galera.sh kill DIR N      # kill -9 member N, keep its data
#   scripts/galera.sh restart DIR N   # start member N again; it rejoins by IST
#   scripts/galera.sh status DIR      # one line per member: N pid state cluster_size
#   scripts/galera.sh stop DIR        # stop every member by PID and remove DIR
#
# Every member has its own datadir, socket, client port, group port (gmcast), IST port
# and SST port on 127.0.0.1, innodb_flush_log_at_trx_commit=1, a user `dsync` with a
# random password and all privileges, and an empty schema `dsync`.
#
# How it avoids a full state transfer (SST), which is slow and, by rsync, fails as root
# in some sandboxes: member 1 is installed and bootstrapped alone, gets its users and
# schema, and is stopped cleanly (its grastate.dat then records a seqno); its datadir
# is copied to members 2 and 3 (without galera.cache and gvwstate.dat); then member 1
# bootstraps the cluster again and 2 and 3 join by IST (incremental, from member 1's
# gcache). A member killed with -9 loses its seqno (-1 in grastate.dat): `restart`
# runs `mariadbd --wsrep-recover` on its datadir first and starts it with
# --wsrep-start-position=UUID:SEQNO, so it too rejoins by IST. State transfers use
# mariabackup (Debian mariadb-backup + socat).
#
# Only processes this script started are ever signalled, by their PID files.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/mariadb_common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/ports.sh"

MEMBERS=3
PROVIDER=${GALERA_PROVIDER:-/usr/lib/galera/libgalera_smm.so}

die() { echo "galera.sh: $*" >&2; exit 1; }
user_opt() { ((EUID == 0)) && echo --user=root || true; }

mdir() { echo "$1/m$2"; }

# status_of DIR N VAR: a wsrep status variable of member N (empty if unreachable).
status_of() {
  mariadb --socket="$(mdir "$1" "$2")/sock" -uroot -N -B --connect-timeout=1 \
    -e "SHOW GLOBAL STATUS LIKE '$3'" 2>/dev/null | cut -f2
}

write_cnf() {  # dir n
  local dir=$1 n=$2 m
  m=$(mdir "$dir" "$n")
  local client group ist sst cluster=""
  read -r client group ist sst < "$m/ports"
  for i in $(seq 1 $MEMBERS); do
    cluster+="${cluster:+,}127.0.0.1:$(cut -d' ' -f2 "$(mdir "$dir" "$i")/ports")"
  done
  server_cnf "$m" "$client" 128M 64M > "$m/my.cnf"
  cat >> "$m/my.cnf" <<CNF
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
wsrep_on=ON
wsrep_provider=$PROVIDER
wsrep_cluster_name=dsync_test
wsrep_cluster_address=gcomm://$cluster
wsrep_node_name=m$n
wsrep_node_address=127.0.0.1:$group
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:$group;ist.recv_addr=127.0.0.1:$ist;gcache.size=256M"
wsrep_sst_method=mariabackup
wsrep_sst_auth=root:
wsrep_sst_receive_address=127.0.0.1:$sst
CNF
}

# launch DIR N [extra mariadbd options...]: starts member N, records its PID.
launch() {
  local dir=$1 n=$2 m
  shift 2
  m=$(mdir "$dir" "$n")
  # shellcheck disable=SC2046
  setsid mariadbd --defaults-file="$m/my.cnf" $(user_opt) "$@" >>"$m/err.log" 2>&1 < /dev/null &
  echo $! > "$m/pid"
}

# wait_synced DIR N SECONDS: until member N is Synced and ready (or its process died).
wait_synced() {
  local dir=$1 n=$2 pid
  pid=$(cat "$(mdir "$dir" "$n")/pid")
  for _ in $(seq 1 $(($3 * 10))); do
    if [[ $(status_of "$dir" "$n" wsrep_local_state_comment) == Synced &&
          $(status_of "$dir" "$n" wsrep_ready) == ON ]]; then
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

fail_member() {  # dir n what
  if grep -q "Address already in use" "$(mdir "$1" "$2")/err.log" && ((attempt < 3)); then
    echo "galera.sh: member $2 lost a race for its port; starting over" >&2
    cmd_stop "$1" >/dev/null 2>&1 || true
    retry=1
    return
  fi
  tail -n 25 "$(mdir "$1" "$2")/err.log" >&2
  cmd_stop "$1" >/dev/null 2>&1 || true
  die "member $2 $3"
}

stop_pid() {  # pid: TERM, wait up to 20 s, then -9
  local pid=$1
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

attempt=0 retry=0
cmd_start() {
  for attempt in 1 2 3; do
    retry=0
    start_once
    ((retry)) || { echo "$started_dir"; return; }
  done
  die "could not start a cluster"
}

start_once() {
  command -v mariadbd >/dev/null || die "mariadbd not found: run scripts/setup.sh"
  [[ -f $PROVIDER ]] || die "$PROVIDER not found: install galera-4 (scripts/setup.sh galera-4)"
  command -v mariabackup >/dev/null || die "mariabackup not found: install mariadb-backup"
  local dir
  dir=$(new_server_dir galera)
  touch "$dir/galera"
  local ports=()
  mapfile -t ports < <(free_ports $((MEMBERS * 4)))
  for n in $(seq 1 $MEMBERS); do
    mkdir -p "$(mdir "$dir" "$n")/tmp"
    local i=$(((n - 1) * 4))
    echo "${ports[i]} ${ports[i + 1]} ${ports[i + 2]} ${ports[i + 3]}" > "$(mdir "$dir" "$n")/ports"
  done
  for n in $(seq 1 $MEMBERS); do write_cnf "$dir" "$n"; done

  local m1
  m1=$(mdir "$dir" 1)
  install_datadir "$m1" "$dir/install.log" || { rm -rf "$dir"; die "mariadb-install-db failed"; }
  # 1. Member 1 alone: users and schema, then a clean stop (grastate.dat gets a seqno).
  launch "$dir" 1 --wsrep-new-cluster
  wait_synced "$dir" 1 60 || { fail_member "$dir" 1 "did not bootstrap"; return; }
  local password
  password=$(new_password)
  create_dsync_user "$m1/sock" "$password"
  stop_pid "$(cat "$m1/pid")"
  # 2. Its datadir becomes the others' (same history: they join by IST, not SST).
  for n in $(seq 2 $MEMBERS); do
    cp -a "$m1/data" "$(mdir "$dir" "$n")/data"
    rm -f "$(mdir "$dir" "$n")/data/galera.cache" "$(mdir "$dir" "$n")/data/gvwstate.dat"
  done
  sed -i 's/^safe_to_bootstrap:.*/safe_to_bootstrap: 1/' "$m1/data/grastate.dat"
  # 3. Member 1 bootstraps the cluster again; the others join it one by one.
  launch "$dir" 1 --wsrep-new-cluster
  wait_synced "$dir" 1 60 || { fail_member "$dir" 1 "did not bootstrap again"; return; }
  for n in $(seq 2 $MEMBERS); do
    launch "$dir" "$n"
    wait_synced "$dir" "$n" 120 || { fail_member "$dir" "$n" "did not join"; return; }
  done
  local hosts=""
  for n in $(seq 1 $MEMBERS); do hosts+="${hosts:+,}127.0.0.1:$(cut -d' ' -f1 "$(mdir "$dir" "$n")/ports")"; done
  echo "dsync $password $hosts" > "$dir/credentials"
  started_dir=$dir
}

need_dir() {
  [[ -n ${1:-} && -f $1/galera ]] || die "not a throwaway Galera dir: '${1:-}'"
}
need_member() {
  [[ ${1:-} =~ ^[1-9]$ ]] && (($1 <= MEMBERS)) || die "member must be 1..$MEMBERS, got '${1:-}'"
}

cmd_url() {  # dir [first member]
  need_dir "$1"
  local first=${2:-1} user password hosts list=() out=""
  need_member "$first"
  read -r user password hosts < "$1/credentials"
  IFS=, read -r -a list <<< "$hosts"
  for i in $(seq 0 $((MEMBERS - 1))); do
    out+="${out:+,}${list[(first - 1 + i) % MEMBERS]}"
  done
  echo "mysql://$user:$password@$out/dsync"
}

cmd_kill() {  # dir n
  need_dir "$1"; need_member "$2"
  local pid
  pid=$(cat "$(mdir "$1" "$2")/pid")
  kill -9 "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
}

cmd_restart() {  # dir n
  need_dir "$1"; need_member "$2"
  local dir=$1 n=$2 m position
  m=$(mdir "$dir" "$n")
  stop_pid "$(cat "$m/pid")"
  # Recover the last committed seqno from InnoDB (a kill -9 left -1 in grastate.dat).
  # shellcheck disable=SC2046
  mariadbd --defaults-file="$m/my.cnf" $(user_opt) --wsrep-recover --log-error="$m/recover.log" \
    >/dev/null 2>&1 < /dev/null || true
  position=$(sed -n 's/.*WSREP: Recovered position: *\([0-9a-f-]*:-\{0,1\}[0-9]*\).*/\1/p' "$m/recover.log" | tail -n 1)
  rm -f "$m/recover.log"
  if [[ -n $position ]]; then
    launch "$dir" "$n" --wsrep-start-position="$position"
  else
    launch "$dir" "$n"
  fi
  wait_synced "$dir" "$n" 120 || { tail -n 25 "$m/err.log" >&2; die "member $n did not rejoin"; }
}

cmd_status() {
  need_dir "$1"
  local pid state
  for n in $(seq 1 $MEMBERS); do
    pid=$(cat "$(mdir "$1" "$n")/pid")
    kill -0 "$pid" 2>/dev/null || { echo "$n $pid down"; continue; }
    state=$(status_of "$1" "$n" wsrep_local_state_comment)
    echo "$n $pid ${state:-starting} $(status_of "$1" "$n" wsrep_cluster_size)"
  done
}

cmd_stop() {
  need_dir "${1:-}"
  for n in $(seq 1 $MEMBERS); do
    [[ -f $(mdir "$1" "$n")/pid ]] && stop_pid "$(cat "$(mdir "$1" "$n")/pid")"
  done
  rm -rf "$1"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop "${2:-}" ;;
  url) cmd_url "${2:-}" "${3:-1}" ;;
  port) need_dir "${2:-}"; need_member "${3:-}"; cut -d' ' -f1 "$(mdir "$2" "$3")/ports" ;;
  kill) cmd_kill "${2:-}" "${3:-}" ;;
  restart) cmd_restart "${2:-}" "${3:-}" ;;
  status) cmd_status "${2:-}" ;;
  root) need_dir "${2:-}"; need_member "${3:-}"; dir=$2; n=$3; shift 3
        exec mariadb --socket="$(mdir "$dir" "$n")/sock" -uroot "$@" ;;
  *) echo "usage: $0 start | url DIR [N] | port DIR N | root DIR N [args] | kill DIR N | restart DIR N | status DIR | stop DIR" >&2
     exit 2 ;;
esac

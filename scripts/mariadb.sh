#!/usr/bin/env bash
# A throwaway MariaDB server for tests, the demo and benchmarks.
#
#   dir=$(scripts/mariadb.sh start)   # new datadir in a temp folder; prints its path
#   scripts/mariadb.sh url  "$dir"    # mysql://dsync:<pw>@127.0.0.1:<port>/dsync
#   scripts/mariadb.sh root "$dir"    # mariadb client as root over the unix socket
#   scripts/mariadb.sh kill "$dir"    # kill -9 the server, keep its data
#   scripts/mariadb.sh restart "$dir" # start it again on the same port (after kill/stop)
#   scripts/mariadb.sh stop "$dir"    # stop by PID and remove the datadir
#   DSYNC_MARIADB_BINLOG=1 scripts/mariadb.sh start   # with a binlog a capture can read
#   DSYNC_DB_TMPDIR=/dev/shm scripts/mariadb.sh start  # the datadir's parent folder
#                                       # (default $TMPDIR, else /tmp; scripts/test.sh: /dev/shm)
#
# The server listens on 127.0.0.1 at a free port and on "$dir/sock", with
# innodb_flush_log_at_trx_commit=1 (every commit durable), and has a user `dsync`
# with a random password and all privileges, and an empty schema `dsync`.
# Only the process this script started is ever signalled, by its PID file.
#
# Binary log: off by default. DSYNC_MARIADB_BINLOG=1 at `start` turns it on as a source
# of `dsync capture` needs it (docs/capture.md): log_bin, binlog_format=ROW,
# binlog_row_image=FULL, GTIDs (always on in MariaDB) and a server_id of its own (the
# port); `restart` keeps it (it is in the datadir's my.cnf).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/mariadb_common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/ports.sh"

die() { echo "mariadb.sh: $*" >&2; exit 1; }

wait_ready() {  # dir pid
  local dir=$1 pid=$2
  for _ in $(seq 1 300); do
    if mariadb-admin --socket="$dir/sock" -uroot --connect-timeout=1 ping >/dev/null 2>&1; then
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

launch() {  # dir: starts mariadbd with dir/my.cnf, records the PID
  local dir=$1
  local user=()
  ((EUID == 0)) && user=(--user=root)
  setsid mariadbd --defaults-file="$dir/my.cnf" "${user[@]}" >>"$dir/err.log" 2>&1 < /dev/null &
  local pid=$!
  echo "$pid" > "$dir/pid"
  wait_ready "$dir" "$pid"
}

write_cnf() {  # dir port; DSYNC_MARIADB_BUFFER_POOL (default 256M) sizes the buffer pool
  {
    server_cnf "$1" "$2" "${DSYNC_MARIADB_BUFFER_POOL:-256M}" 256M
    if [[ ${DSYNC_MARIADB_BINLOG:-0} == 1 ]]; then
      printf '%s\n' "log-bin=$1/data/binlog" "binlog_format=ROW" "binlog_row_image=FULL" "server_id=$2" \
        "sync_binlog=1"
    else
      echo "skip-log-bin"
    fi
  } > "$1/my.cnf"
}

cmd_start() {
  command -v mariadbd >/dev/null || die "mariadbd not found: run scripts/setup.sh"
  local dir
  dir=$(new_server_dir mariadb)
  # A tmpdir of its own: at start mariadbd deletes every "#sql*" file in its tmpdir,
  # which in a shared /tmp are the temporary tables of the other servers running.
  mkdir "$dir/data" "$dir/tmp"
  install_datadir "$dir" "$dir/install.log" || { rm -rf "$dir"; die "mariadb-install-db failed"; }
  local password
  password=$(new_password)
  local port started=0
  for _ in $(seq 1 20); do
    port=$(free_port)
    write_cnf "$dir" "$port"
    if launch "$dir"; then started=1; break; fi
    # Lost a race for the port (or failed otherwise): stop what we started and retry.
    kill -9 "$(cat "$dir/pid")" 2>/dev/null || true
    grep -q "Address already in use\|Can't start server: Bind" "$dir/err.log" || break
  done
  if ((started == 0)); then
    tail -n 20 "$dir/err.log" >&2
    rm -rf "$dir"
    die "mariadbd did not start"
  fi
  create_dsync_user "$dir/sock" "$password"
  echo "mysql://dsync:$password@127.0.0.1:$port/dsync" > "$dir/url"
  echo "$port" > "$dir/port"
  echo "$dir"
}

need_dir() {
  [[ -n ${1:-} && -f $1/my.cnf ]] || die "not a throwaway MariaDB dir: '${1:-}'"
}

cmd_stop() {
  need_dir "${1:-}"
  local dir=$1 pid
  pid=$(cat "$dir/pid" 2>/dev/null || true)
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}

cmd_kill() {
  need_dir "${1:-}"
  local pid
  pid=$(cat "$1/pid")
  kill -9 "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
}

cmd_restart() {
  need_dir "${1:-}"
  local pid
  pid=$(cat "$1/pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  fi
  launch "$1" || { tail -n 20 "$1/err.log" >&2; die "mariadbd did not restart"; }
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop "${2:-}" ;;
  kill) cmd_kill "${2:-}" ;;
  restart) cmd_restart "${2:-}" ;;
  url) need_dir "${2:-}"; cat "$2/url" ;;
  root) need_dir "${2:-}"; dir=$2; shift 2; exec mariadb --socket="$dir/sock" -uroot "$@" ;;
  *) echo "usage: $0 start | url DIR | root DIR [args] | kill DIR | restart DIR | stop DIR" >&2; exit 2 ;;
esac

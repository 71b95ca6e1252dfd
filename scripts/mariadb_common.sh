# Shared by scripts/mariadb.sh and scripts/galera.sh (sourced, not run): the server
# options both write into my.cnf, the datadir install, and the `dsync` user and schema.

# new_server_dir KIND: a new folder for a throwaway server's files, in DSYNC_DB_TMPDIR
# (scripts/test.sh sets /dev/shm), else $TMPDIR, else /tmp.
new_server_dir() { mktemp -d "${DSYNC_DB_TMPDIR:-${TMPDIR:-/tmp}}/dsync-$1.XXXXXX"; }

# servers_in_memory GIB: unless DSYNC_DB_TMPDIR is set already, sets it to /dev/shm when
# that is a writable tmpfs and both it and the machine's available memory have GIB GiB
# free (about 0.3 GB per server: its 256 MB redo log). There an fsync costs nothing,
# while on a disk each commit and each DDL waits for it; a process killed with -9 (a
# node, a dispatcher, mariadbd itself) loses nothing its database committed either way,
# since what a commit wrote is in the kernel's page cache: only a crash of the machine
# would tell the two apart. Used by scripts/test.sh and scripts/demo.sh; benchmarks
# (scripts/bench.sh) keep their servers on disk.
servers_in_memory() {
  local kib=$(($1 * 1024 * 1024))
  if [[ -z ${DSYNC_DB_TMPDIR:-} && -w /dev/shm && $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs ]] &&
    (($(df -Pk /dev/shm | awk 'NR == 2 {print $4}') >= kib)) &&
    (($(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) >= kib)); then
    export DSYNC_DB_TMPDIR=/dev/shm
  fi
}

# server_cnf DIR PORT BUFFER_POOL LOG_FILE_SIZE: the [mariadbd] lines every throwaway
# server has (datadir, socket, port and logs in DIR; durable commits; utf8mb4).
server_cnf() {
  cat <<CNF
[mariadbd]
datadir=$1/data
socket=$1/sock
port=$2
bind-address=127.0.0.1
pid-file=$1/mariadbd.pid
tmpdir=$1/tmp
log-error=$1/err.log
skip-name-resolve
innodb_flush_log_at_trx_commit=1
innodb_buffer_pool_size=$3
innodb_log_file_size=$4
max_connections=1000
character-set-server=utf8mb4
collation-server=utf8mb4_general_ci
CNF
}

# install_datadir DIR LOG: mariadb-install-db into DIR/data (temporary files in DIR/tmp);
# prints LOG and returns non-zero on failure.
install_datadir() {
  local user=()
  ((EUID == 0)) && user=(--user=root)
  if ! TMPDIR=$1/tmp mariadb-install-db "${user[@]}" --datadir="$1/data" --auth-root-authentication-method=normal \
      --skip-test-db >"$2" 2>&1; then
    cat "$2" >&2
    return 1
  fi
}

# new_password: 24 random hex characters.
new_password() { od -An -N12 -tx1 /dev/urandom | tr -d ' \n'; }

# create_dsync_user SOCKET PASSWORD: user `dsync` (all privileges) and schema `dsync`.
create_dsync_user() {
  mariadb --socket="$1" -uroot <<SQL
CREATE USER 'dsync'@'127.0.0.1' IDENTIFIED BY '$2';
CREATE USER 'dsync'@'localhost' IDENTIFIED BY '$2';
GRANT ALL PRIVILEGES ON *.* TO 'dsync'@'127.0.0.1' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON *.* TO 'dsync'@'localhost' WITH GRANT OPTION;
CREATE DATABASE dsync;
SQL
}

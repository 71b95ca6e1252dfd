#!/usr/bin/env bash
# Installs every build and runtime dependency of dsync from Debian packages (with --demo,
# only what building dsync and running the demo need).
# Idempotent: when everything is already there it prints nothing and exits 0.
# Needs root (or sudo) only when something is missing.
set -euo pipefail

# What building dsync and running the demo need.
packages=(
  build-essential cmake pkg-config ninja-build
  libmysqlcppconn-dev libpoco-dev nlohmann-json3-dev libspdlog-dev
  libssl-dev  # the http step type's TLS (OpenSSL)
  libgtest-dev googletest  # found when the build is configured, tests or not
  libmariadb-dev  # mariadb_rpl.h: the binlog reader of `dsync capture` (capture/binlog_stream.h)
  mariadb-server mariadb-client
  curl jq
)
# What only the tests need (`setup.sh --demo` leaves them out: the demo needs none).
test_packages=(
  chromium  # the web console's browser tests (headless, driven over the DevTools protocol)
  # the Galera tests' throwaway cluster (scripts/galera.sh): provider, and state transfer by mariabackup
  galera-4 mariadb-backup socat
  # the step-type examples' receivers (examples/receivers/, tests/cli/examples_test.sh)
  python3 nodejs golang-go
)
if [[ ${1:-} == --demo ]]; then
  shift
else
  packages+=("${test_packages[@]}")
fi
# Extra packages a caller needs (bench uses sysbench/postgresql): setup.sh sysbench ...
packages+=("$@")

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ $status == installed ]] || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0

echo "setup: installing ${missing[*]}" >&2
sudo=()
((EUID == 0)) || sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >/dev/null
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# mariadb-server's package scripts may start a system-wide server; dsync never uses it
# (tests and the demo start their own throwaway server), so leave it as the system set it.
echo "setup: done" >&2

#!/usr/bin/env bash
# The one build configuration of dsync, shared by the demo, the tests and the chaos
# suite, so that `bash scripts/demo.sh` then `bash scripts/test.sh` compile every file
# once: the same folder, the same flags (RelWithDebInfo, warnings as errors).
#
#   bash scripts/build.sh                 # everything the tests need
#   bash scripts/build.sh dsync           # only the named targets
#
# Options (environment): DSYNC_BUILD_DIR (default build). ccache is used when it is
# installed (never required).
set -euo pipefail
cd "$(dirname "$0")/.."

build=${DSYNC_BUILD_DIR:-build}
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSYNC_WERROR=ON)
if command -v ccache >/dev/null; then
  flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
else
  flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER=)
fi
cmake -S . -B "$build" "${flags[@]}" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}"

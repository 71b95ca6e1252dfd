#!/usr/bin/env bash
# The one build configuration of dsync, shared by the demo, the tests and the chaos
# suite, so that `bash scripts/demo.sh` then `bash scripts/test.sh` compile every file
# once: the same folder, the same flags (RelWithDebInfo, warnings as errors). The product
# compiles one translation unit per source folder (cmake/unity.cmake) with -g1; the tests
# at -O0 (tests/CMakeLists.txt).
#
#   bash scripts/build.sh                 # everything the tests need
#   bash scripts/build.sh dsync           # only the named targets
#
# Options (environment): DSYNC_BUILD_DIR (default build), DSYNC_CMAKE_ARGS (more
# configure arguments, e.g. "-DDSYNC_UNITY_BUILD=OFF": file by file, which checks each
# file's own #includes; a later run without it goes back to the defaults). ccache is
# used when it is installed (never required).
set -euo pipefail
cd "$(dirname "$0")/.."

build=${DSYNC_BUILD_DIR:-build}
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSYNC_WERROR=ON -DDSYNC_UNITY_BUILD=ON -DDSYNC_FULL_DEBUG_INFO=OFF)
read -r -a extra <<<"${DSYNC_CMAKE_ARGS:-}"
flags+=("${extra[@]}")
if command -v ccache >/dev/null; then
  flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
else
  flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER=)
fi
cmake -S . -B "$build" "${flags[@]}" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}"

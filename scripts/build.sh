#!/usr/bin/env bash
# The one build configuration of dsync, shared by the demo, the tests and the chaos
# suite, so that `bash scripts/demo.sh` then `bash scripts/test.sh` compile every file
# once: the same folder, the same flags (RelWithDebInfo, warnings as errors). The product
# compiles as a few translation units of whole folders (cmake/unity.cmake) with -g1; the tests
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
# Ninja when it is installed (scripts/setup.sh installs it): unlike Makefiles, it compiles
# a target's files while the libraries it links are still being built (the app's and the
# tests' files need only the product's headers), so both cores stay busy to the end. A
# folder configured with the other generator is reconfigured from scratch (its objects
# are rebuilt once).
generator="Unix Makefiles"
command -v ninja >/dev/null && generator=Ninja
if [[ -f $build/CMakeCache.txt ]] && ! grep -qx "CMAKE_GENERATOR:INTERNAL=$generator" "$build/CMakeCache.txt"; then
  echo "build: $build/ was configured for another generator; configuring it for $generator" >&2
  rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
fi
cmake -S . -B "$build" -G "$generator" "${flags[@]}" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}"

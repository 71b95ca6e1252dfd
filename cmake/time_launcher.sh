#!/usr/bin/env bash
# A compiler (or linker) launcher that measures: runs the command under /usr/bin/time and
# appends "<user+sys CPU-seconds> <output file> <exit status>" to $DSYNC_TIME_LOG (default
# build-times.log in the working directory). For measuring where a build's time goes:
#
#   CCACHE_DISABLE=1 DSYNC_TIME_LOG=$PWD/times.log cmake -S . -B build-m \
#     -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSYNC_WERROR=ON \
#     -DCMAKE_CXX_COMPILER_LAUNCHER=$PWD/cmake/time_launcher.sh \
#     -DCMAKE_CXX_LINKER_LAUNCHER=$PWD/cmake/time_launcher.sh
#   cmake --build build-m --target dsync
#   sort -rn times.log | head; awk '{s+=$1} END {print s}' times.log
set -uo pipefail
log=${DSYNC_TIME_LOG:-$PWD/build-times.log}
out=?
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [[ ${args[i]} == -o ]] && out=${args[i + 1]:-?}
done
tf=$(mktemp)
/usr/bin/time -o "$tf" -f "%U %S" "$@"
rc=$?
read -r u s < <(tail -n 1 "$tf")
rm -f "$tf"
echo "$(echo "$u + $s" | bc) $out $rc" >>"$log"
exit $rc

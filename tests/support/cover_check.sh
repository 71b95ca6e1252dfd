#!/usr/bin/env bash
# cover_check.sh EXE SUITE...: fails unless every test suite that EXE holds (from
# --gtest_list_tests; "Prefix/Suite" for a parameterised one) is among SUITE..., the
# suites that the folder's ctest entries select by file (tests/CMakeLists.txt). A test
# that no entry would run (a suite defined through a macro the scan does not see, say)
# fails here instead of being skipped in silence.
set -euo pipefail
exe=$1
shift
declare -A known=()
for s in "$@"; do known[$s]=1; done
missing=()
total=0
while IFS= read -r line; do
  [[ $line =~ ^[A-Za-z0-9_/]+\.([[:space:]]|$) ]] || continue  # a suite line, not a test or a banner
  suite=${line%%.*}
  suite=${suite##*/}  # Prefix/Suite -> Suite
  total=$((total + 1))
  [[ -n ${known[$suite]:-} ]] || missing+=("$suite")
done < <("$exe" --gtest_list_tests)
((total > 0)) || { echo "cover_check: $exe lists no test suite" >&2; exit 1; }
if ((${#missing[@]} > 0)); then
  echo "cover_check: no ctest entry selects suite(s) ${missing[*]} of $exe" >&2
  exit 1
fi
echo "cover_check: the $# suites selected by file cover all $total suite entries of $(basename "$exe")"

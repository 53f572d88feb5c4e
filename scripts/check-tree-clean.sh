#!/usr/bin/env bash
# Tests and benchmarks keep their state in temporary directories, never in the source tree.
#   check-tree-clean.sh snapshot   records the untracked/ignored files present now
#   check-tree-clean.sh compare    fails listing every file that appeared since, outside
#                                  the build directories (build/, build-*/)
# `make check` takes the snapshot first and compares last, so a developer's own untracked
# files do not count. Outside a git checkout there is nothing to compare, and it says so.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: check-tree-clean.sh snapshot|compare}
state=build/.tree-before
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "tree check: not a git checkout, nothing to compare against"
  exit 0
fi
list() {
  git status --porcelain --ignored --untracked-files=all |
    grep -E '^(\?\?|!!) ' | grep -vE '^(\?\?|!!) (build|build-[^/]+)/' | sort || true
}
case $mode in
snapshot) mkdir -p build && list >"$state" ;;
compare)
  [ -f "$state" ] || { echo "tree check: no snapshot (run with 'snapshot' first)" >&2; exit 2; }
  stray=$(comm -13 "$state" <(list))
  if [ -n "$stray" ]; then
    echo "tree check: files written into the source tree by the build or tests:" >&2
    echo "$stray" >&2
    exit 1
  fi
  echo "tree check: ok (nothing written outside build directories)" ;;
*) echo "usage: check-tree-clean.sh snapshot|compare" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# `make te-demo` must keep working: run scripts/te_demo.sh with a small buffer and check its verdict.
set -euo pipefail
out="$(MC_DEMO_SIZE_MIB=40 timeout 80 bash "${MC_SOURCE_DIR:?}/scripts/te_demo.sh" 2>&1)" || {
    echo "$out"; exit 1; }
echo "$out"
grep -q "demo OK" <<<"$out"
[[ "$(grep -c verified <<<"$out")" -ge 7 ]]

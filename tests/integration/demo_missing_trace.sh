#!/usr/bin/env bash
# `make demo` without its trace fails loudly: scripts/demo.sh exits non-zero before starting
# anything and names the missing file on stderr (a demo that silently "succeeds" without data
# would hide a broken checkout).
set -euo pipefail
SRC=${MC_SOURCE_DIR:?MC_SOURCE_DIR not set}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
gone=$TMP/conversation_trace.jsonl
cp "$SRC/data/traces/conversation_trace.jsonl" "$gone"
rm "$gone" # the trace as a user who deleted it would have it
rc=0
TRACE=$gone MC_BIN_DIR=${MC_BIN_DIR:?} bash "$SRC/scripts/demo.sh" >"$TMP/out" 2>"$TMP/err" || rc=$?
[ "$rc" -ne 0 ] || { echo "FAIL: demo exited 0 without its trace" >&2; exit 1; }
grep -qF "$gone" "$TMP/err" || { echo "FAIL: stderr does not name $gone:" >&2; cat "$TMP/err" >&2; exit 1; }
if grep -q "master" "$TMP/out"; then
  echo "FAIL: demo started a cluster before checking its trace" >&2; exit 1
fi
echo "demo without its trace: exit $rc, message: $(cat "$TMP/err")"

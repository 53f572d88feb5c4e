#!/usr/bin/env bash
# mooncake_master --metrics_host: the admin/metrics HTTP port binds that address only (seen in
# the kernel's listening sockets), answers there, and an address that is not IPv4 is refused
# (exit 2) rather than falling back to every interface. Stopped by PID.
set -euo pipefail
BIN=${MC_BIN_DIR:?MC_BIN_DIR not set}
TMP=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
rc=0
"$BIN/mooncake_master" --metrics_host=example.com --wal_dir= >/dev/null 2>"$TMP/bad.err" || rc=$?
[ "$rc" -eq 2 ] || fail "--metrics_host=example.com exited $rc, want 2"
grep -q "must be an IPv4 address" "$TMP/bad.err" || fail "no clear message: $(cat "$TMP/bad.err")"
"$BIN/mooncake_master" --port=0 --metrics_port=0 --metrics_host=127.0.0.1 --wal_dir= \
  --log_level=warn >"$TMP/out" 2>"$TMP/err" &
pid=$!
for _ in $(seq 100); do grep -q "listening" "$TMP/out" && break; sleep 0.05; done
mport=$(sed -n 's/.*metrics_port=\([0-9]*\).*/\1/p' "$TMP/out")
[ -n "$mport" ] || fail "master did not start: $(cat "$TMP/err")"
ss -Hltn "sport = :$mport" >"$TMP/ss"
grep -q "127.0.0.1:$mport" "$TMP/ss" || fail "not bound to 127.0.0.1: $(cat "$TMP/ss")"
if grep -qE "(0\.0\.0\.0|\*|\[::\]):$mport" "$TMP/ss"; then fail "bound to all interfaces"; fi
curl -sf "http://127.0.0.1:$mport/health" >/dev/null || fail "/health does not answer"
echo "master metrics_host: ok"

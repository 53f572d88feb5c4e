#!/usr/bin/env bash
# A storage server killed with -9 and restarted at once at the same address (what a service
# manager does) comes back: its segment name (host:port) is still held by the dead process
# until the master drops it client_ttl after its last ping, and the new one waits for that
# (saying so in its log) instead of exiting with SEGMENT_ALREADY_EXISTS. Processes are stopped
# by PID.
set -euo pipefail
BIN=${MC_BIN_DIR:?MC_BIN_DIR not set}
SRC=${MC_SOURCE_DIR:?MC_SOURCE_DIR not set}
. "$SRC/scripts/lib/cluster.sh"
mc_cluster_init storage_restart
fail() { echo "FAIL: $*" >&2; exit 1; }
port=$(mc_free_port)
mc_start_master master "$port" --client_ttl=2
# a fixed address: the restarted server takes the same one
te_port=$(mc_free_port)
addr=127.0.0.1:$te_port
mc_start_server s1 "127.0.0.1:$port" --global_segment_size=32MB --local_hostname="$addr" --log_level=info
first=${MC_PIDS[-1]}
kill -9 "$first"
wait "$first" 2>/dev/null || true
start=$SECONDS
mc_start_server s2 "127.0.0.1:$port" --global_segment_size=32MB --local_hostname="$addr" --log_level=info
log=$MC_WORK/s2.log
grep -q "still held by an earlier owner" "$log" ||
  fail "the restarted server did not meet the dead one's segment (test did not test): $(cat "$log")"
grep -q "mounted segment $addr" "$log" || fail "no mount: $(cat "$log")"
echo "storage server restarted at $addr: mounted after $((SECONDS - start)) s (client_ttl 2 s)"

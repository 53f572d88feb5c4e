#!/usr/bin/env bash
# `make demo` — store demo: a master and two storage servers on loopback, then a slice of the FAST'25
# conversation trace replayed as KV-block put/get (one object per 512-token block, scaled to
# BLOCK_BYTES). Everything is stopped by PID at the end, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${MC_BIN_DIR:-build/bin}
TRACE=${TRACE:-../shared/traces/conversation_trace.jsonl}
REQUESTS=${REQUESTS:-2000}
BLOCK_BYTES=${BLOCK_BYTES:-64KiB}
SEGMENT=${SEGMENT:-256MB}
[ -f "$TRACE" ] || TRACE=$(ls ../shared/traces/*.jsonl 2>/dev/null | head -1)
work=$(mktemp -d /tmp/mc_demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { # file pattern seconds
  for _ in $(seq 1 $(( $3 * 20 ))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  echo "demo: timed out waiting for '$2' in $1" >&2; cat "$1" >&2; return 1
}

port=$(free_port)
"$BIN/mooncake_master" --port="$port" --metrics_port=0 --wal_dir="$work/wal" \
  --log_level=warn >"$work/master.log" 2>&1 &
pids+=($!)
wait_for "$work/master.log" "listening" 10
for i in 1 2; do
  "$BIN/mooncake_client" --master_server_address="127.0.0.1:$port" \
    --global_segment_size="$SEGMENT" --host_label="host$i" --log_level=warn \
    >"$work/server$i.log" 2>&1 &
  pids+=($!)
  wait_for "$work/server$i.log" "ready" 10
done
echo "== Mooncake-C store demo: master 127.0.0.1:$port, 2 storage servers x $SEGMENT, blocks of $BLOCK_BYTES"
echo "== replaying $REQUESTS requests of $(basename "$TRACE")"
MC_LOG_LEVEL=${MC_LOG_LEVEL:-warn} "$BIN/mc_store_replay" --trace="$TRACE" --master_server_address="127.0.0.1:$port" \
  --requests="$REQUESTS" --block_bytes="$BLOCK_BYTES" --threads=2
echo "== shutting down"

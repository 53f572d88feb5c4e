#!/usr/bin/env bash
# `make demo` — store demo: a master and two storage servers on loopback, then a slice of the FAST'25
# conversation trace replayed as KV-block put/get (one object per 512-token block, scaled to
# BLOCK_BYTES). Everything is stopped by PID at the end, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${MC_BIN_DIR:-build/bin}
TRACE=${TRACE:-data/traces/conversation_trace.jsonl}
REQUESTS=${REQUESTS:-2000}
BLOCK_BYTES=${BLOCK_BYTES:-64KiB}
SEGMENT=${SEGMENT:-256MB}
# Checked before anything starts: a missing trace is an error that names the file, never a
# silent success.
[ -r "$TRACE" ] || { echo "demo: trace $TRACE not found or not readable (set TRACE=path)" >&2; exit 1; }
# shellcheck source=lib/cluster.sh
. scripts/lib/cluster.sh
mc_cluster_init mc_demo
port=$(mc_free_port)
mc_start_master master "$port"
for i in 1 2; do
  mc_start_server "server$i" "127.0.0.1:$port" --global_segment_size="$SEGMENT" --host_label="host$i"
done
echo "== Mooncake-C store demo: master 127.0.0.1:$port, 2 storage servers x $SEGMENT, blocks of $BLOCK_BYTES"
echo "== replaying $REQUESTS requests of $(basename "$TRACE")"
MC_LOG_LEVEL=${MC_LOG_LEVEL:-warn} "$BIN/mc_store_replay" --trace="$TRACE" --master_server_address="127.0.0.1:$port" \
  --requests="$REQUESTS" --block_bytes="$BLOCK_BYTES" --threads=2
echo "== shutting down"

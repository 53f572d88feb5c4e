#!/usr/bin/env bash
# The conversation trace through a real store, once per master eviction policy, next to the
# simulator's cache replay of the same requests at the same capacity.
#   per policy: mooncake_master --eviction_policy=POLICY and one storage server whose segment
#   holds CAPACITY_BLOCKS blocks of BLOCK_BYTES, on free loopback ports; mc_store_replay replays
#   REQUESTS requests with one thread (exist, get the longest present prefix, put the rest), with
#   the client's lease cache off (MC_STORE_LEASE_CACHE=0) so that every get reaches the master as
#   the simulator's every hit reaches its cache. The master evicts only when a put does not fit
#   (high watermark 1, 0.2 % of the pool per round), so the pool stays within 0.2 % of full, and
#   its read lease is 1 ms: the replay runs the trace's hours in seconds, and a 10 s lease would
#   keep every block read in the whole run unevictable (the simulator has no leases; with one
#   replay thread a block is read before the next put can evict it).
#   Then mc_sim --experiment=cache_sweep on the same requests at the same capacity.
# Prints one JSON line per policy ("store_replay_policy": the replay's own JSON fields plus the
# policy, capacity, date and command) and the simulator's line ("sim_cache_sweep"); OUT=FILE
# appends them there too. Every process is stopped by PID (trap). About 1-2 min per policy.
#
# Usage: scripts/store_replay_policies.sh [BIN_DIR]   (default: $MC_BIN_DIR, else build/bin)
# Env:   TRACE, REQUESTS (12031 = the whole trace), BLOCK_BYTES (16384), CAPACITIES (5000; a
#        space-separated list of pool sizes in blocks),
#        POLICIES ("lru adaptive"), MASTER_FLAGS (extra master flags), OUT (a JSONL file)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-${MC_BIN_DIR:-$ROOT/build/bin}}
TRACE=${TRACE:-$ROOT/data/traces/conversation_trace.jsonl}
REQUESTS=${REQUESTS:-12031}
BLOCK_BYTES=${BLOCK_BYTES:-16384}
CAPACITIES=${CAPACITIES:-5000}
POLICIES=${POLICIES:-lru adaptive}
MASTER_FLAGS=${MASTER_FLAGS:---eviction_high_watermark_ratio=1 --eviction_ratio=0.002 --default_kv_lease_ttl=1}
OUT=${OUT:-}
for t in mooncake_master mooncake_client mc_store_replay mc_sim; do
  [ -x "$BIN/$t" ] || { echo "store_replay_policies: $BIN/$t missing" >&2; exit 1; }
done
[ -r "$TRACE" ] || { echo "store_replay_policies: trace $TRACE not readable" >&2; exit 1; }
# shellcheck source=lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
mc_cluster_init mc_replay_policies
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
emit() { echo "$1"; [ -z "$OUT" ] || echo "$1" >>"$OUT"; }

for cap in $CAPACITIES; do
  seg=$((cap * BLOCK_BYTES))
  for p in $POLICIES; do
    port=$(mc_free_port)
    # shellcheck disable=SC2086
    mc_start_master "master_${p}_$cap" "$port" --eviction_policy="$p" $MASTER_FLAGS
    mc_start_server "server_${p}_$cap" "127.0.0.1:$port" --global_segment_size="$seg"
    cmd="MC_STORE_LEASE_CACHE=0 mc_store_replay --trace=$(basename "$TRACE") --requests=$REQUESTS --block_bytes=$BLOCK_BYTES --threads=1 --json (master: --eviction_policy=$p $MASTER_FLAGS; one server, --global_segment_size=$seg)"
    line=$(MC_STORE_LEASE_CACHE=0 "$BIN/mc_store_replay" --trace="$TRACE" \
      --master_server_address="127.0.0.1:$port" --requests="$REQUESTS" \
      --block_bytes="$BLOCK_BYTES" --threads=1 --json | grep '^{"bench":"store_replay"')
    mc_stop_all
    emit "{\"bench\":\"store_replay_policy\",\"date\":\"$date\",\"eviction_policy\":\"$p\",\"capacity_blocks\":$cap,\"segment_bytes\":$seg,\"command\":\"$cmd\",${line#\{\"bench\":\"store_replay\",}"
  done
  sim=$("$BIN/mc_sim" --experiment=cache_sweep --trace="$TRACE" --max_requests="$REQUESTS" \
    --capacities="$cap" --out_dir="$MC_WORK" | grep '^{"experiment":"cache_sweep"')
  emit "{\"bench\":\"sim_cache_sweep\",\"date\":\"$date\",\"command\":\"mc_sim --experiment=cache_sweep --trace=$(basename "$TRACE") --max_requests=$REQUESTS --capacities=$cap\",${sim#\{}"
done

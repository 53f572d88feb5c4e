#!/usr/bin/env bash
# Live mode: the trace drives a real store, and the measured store latencies replace
# the simulator's bandwidth model.
#   1. per transport (shm: same-host peers use shared memory, the default on loopback; tcp:
#      MC_FORCE_TCP=1), start a master + 2 storage servers on free loopback ports;
#   2. mc_store_replay replays the first REQUESTS requests of the trace as KV-block
#      exist/get/put with BLOCK_BYTES blocks and writes the measured-store profile;
#   3. mc_sim replays the same requests with --measured_store=<profile> and with the modelled
#      store (--net_gib_s/--latency_us), and both results are printed.
# Every process is stopped by PID (trap). About 20-60 s with the defaults.
#
# Usage: scripts/live_replay.sh [BIN_DIR]   (default: $MC_BIN_DIR, else build/bin)
# Env:   TRACE, REQUESTS (300), BLOCK_BYTES (256KiB), SEGMENT (512MB per storage server),
#        THREADS (2), TRANSPORTS ("shm tcp"), SIM_FLAGS (extra mc_sim flags),
#        MASTER_FLAGS (extra mooncake_master flags, e.g. --eviction_policy=adaptive),
#        OUT_DIR (keep profiles and results there; default: a temp dir, removed)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-${MC_BIN_DIR:-$ROOT/build/bin}}
TRACE=${TRACE:-$ROOT/data/traces/conversation_trace.jsonl}
REQUESTS=${REQUESTS:-300}
BLOCK_BYTES=${BLOCK_BYTES:-256KiB}
SEGMENT=${SEGMENT:-512MB}
THREADS=${THREADS:-2}
TRANSPORTS=${TRANSPORTS:-shm tcp}
SIM_FLAGS=${SIM_FLAGS:-}
MASTER_FLAGS=${MASTER_FLAGS:-}
for t in mooncake_master mooncake_client mc_store_replay mc_sim; do
  [ -x "$BIN/$t" ] || { echo "live_replay: $BIN/$t missing" >&2; exit 1; }
done
[ -r "$TRACE" ] || { echo "live_replay: trace $TRACE not readable" >&2; exit 1; }
# shellcheck source=lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
mc_cluster_init mc_live
work=$MC_WORK
OUT=${OUT_DIR:-$work/out}
mkdir -p "$OUT"

for tr in $TRANSPORTS; do
  case $tr in
    tcp) force=1 ;;
    shm) force=0 ;;
    *) echo "live_replay: unknown transport $tr (shm|tcp)" >&2; exit 2 ;;
  esac
  port=$(mc_free_port)
  export MC_FORCE_TCP=$force
  # shellcheck disable=SC2086
  mc_start_master "master_$tr" "$port" $MASTER_FLAGS
  for i in 1 2; do
    mc_start_server "server${i}_$tr" "127.0.0.1:$port" --global_segment_size="$SEGMENT" \
      --host_label="host$i"
  done
  echo "== live replay, transport $tr: master 127.0.0.1:$port, 2 storage servers x $SEGMENT," \
       "$REQUESTS requests, blocks of $BLOCK_BYTES, $THREADS threads"
  "$BIN/mc_store_replay" --trace="$TRACE" --master_server_address="127.0.0.1:$port" \
    --requests="$REQUESTS" --block_bytes="$BLOCK_BYTES" --threads="$THREADS" \
    --profile_out="$OUT/store_profile_$tr.json" --json | tee "$OUT/replay_$tr.txt"
  mc_stop_all
  echo "== measured store profile ($OUT/store_profile_$tr.json)"
  cat "$OUT/store_profile_$tr.json"
  # shellcheck disable=SC2086
  "$BIN/mc_sim" --trace="$TRACE" --max_requests="$REQUESTS" $SIM_FLAGS \
    --measured_store="$OUT/store_profile_$tr.json" >"$OUT/sim_measured_$tr.json"
done
# shellcheck disable=SC2086
"$BIN/mc_sim" --trace="$TRACE" --max_requests="$REQUESTS" $SIM_FLAGS >"$OUT/sim_model.json"

field() { sed -E "s/.*\"$2\":\"?([^,\"}]*).*/\1/" "$1"; }
echo "== mc_sim on the same $REQUESTS requests: modelled store vs measured store (64 MiB blocks)"
printf '%-14s %9s %9s %10s %9s %9s %9s %10s %10s %11s %9s\n' store fetch_GiB/s call_us exist_us \
  put_GiB/s ttft_p50 ttft_p99 ttft_mean hit_ratio writeback_s goodput
for f in "$OUT/sim_model.json" "$OUT"/sim_measured_*.json; do
  [ -f "$f" ] || continue
  label=$(basename "$f" .json); label=${label#sim_}
  printf '%-14s %9s %9s %10s %9s %9s %9s %10s %10s %11s %9s\n' "$label" \
    "$(field "$f" pool_fetch_gib_s)" "$(field "$f" pool_call_us)" "$(field "$f" store_exist_us)" \
    "$(field "$f" put_gib_s)" "$(field "$f" ttft_p50)" "$(field "$f" ttft_p99)" \
    "$(field "$f" ttft_mean)" "$(field "$f" block_hit_ratio)" "$(field "$f" writeback_s)" \
    "$(field "$f" goodput_rps)"
done
[ -n "${OUT_DIR:-}" ] && echo "== results kept in $OUT"
exit 0

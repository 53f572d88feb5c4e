#!/usr/bin/env bash
# Tool-level checks: --help everywhere, mc_plan numbers (flags, --json, --config_path, bad input),
# mooncake_conductor event/gap/resync session and hostile lines, mc_sim reproducibility and the
# trace facts. Runs in a few seconds; no servers.
set -euo pipefail
BIN=${MC_BIN_DIR:?MC_BIN_DIR not set}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
has() { grep -qF -- "$2" <<<"$1" || fail "expected '$2' in: $1"; }

for t in mc_plan mc_sim mooncake_conductor mc_conductor_bench; do
  out=$("$BIN/$t" --help) || fail "$t --help exit"
  has "$out" "Usage: $t"
done

# planner: the seed's numbers
j=$("$BIN/mc_plan" --json)
for kv in '"new_kv_gib_s":20.0' '"working_set_gib":6000.0' '"physical_gib":12000.0' \
          '"node_usable_gib":358.4' '"nodes_capacity":34' '"remote_read_gib_s":80.0' \
          '"replica_write_gib_s":40.0' '"aggregate_gib_s":120.0' '"endpoints_read":4' \
          '"chunk_mib":32.0' '"chunks":192000.0' '"keys":1536000.0' '"metadata_gib":0.732421875'; do
  has "$j" "$kv"
done
txt=$("$BIN/mc_plan")
has "$txt" "34"
has "$txt" "0.73 GiB"
echo '{"bytes_per_object": 1024, "replicas": 3}' >"$TMP/plan.json"
j=$("$BIN/mc_plan" --config_path="$TMP/plan.json" --json)
has "$j" '"metadata_gib":1.46484375'
has "$j" '"physical_gib":18000.0'
j=$("$BIN/mc_plan" --json --bytes_per_object=256)
has "$j" '"metadata_gib":0.3662109375'
if "$BIN/mc_plan" --reuse_share=2 2>/dev/null; then fail "reuse_share=2 accepted"; fi
if "$BIN/mc_plan" --dtype=fp12 2>/dev/null; then fail "dtype fp12 accepted"; fi

# conductor service: events, query, route, gap -> stale -> resync, hostile lines
long=$(head -c 3000 /dev/zero | tr '\0' 'x')
out=$(printf '%s\n' \
  '{"seq":1,"kind":"committed","hash":10,"segment":"h0/dram","host":"h0","tier":"pool"}' \
  '{"seq":2,"kind":"committed","hash":11,"segment":"h0/dram","host":"h0"}' \
  '{"op":"query","hashes":[10,11,12],"hosts":["h0","h1"]}' \
  '{"op":"route","input_tokens":2000,"hashes":[10,11,12,13],"candidates":[{"host":"h0","queue_s":0.5},{"host":"h1"}]}' \
  "{\"junk\":\"$long\"}" \
  '{"seq":4,"kind":"evicted","hash":10,"segment":"h0/dram"}' \
  '{"op":"query","hashes":[10,11],"hosts":["h0"]}' \
  '{"seq":"x","kind":"committed"}' \
  '[1,2' \
  '{"op":"query","hashes":[-1],"hosts":["h0"]}' \
  '{"op":"resync_begin"}' \
  '{"op":"snapshot","hash":11,"segment":"h0/dram","host":"h0"}' \
  '{"op":"resync_end","next_seq":5}' \
  '{"op":"query","hashes":[10,11],"hosts":["h0"]}' \
  '{"seq":5,"kind":"committed","hash":10,"segment":"h0/dram","host":"h0"}' \
  '{"op":"query","hashes":[10,11],"hosts":["h0"]}' \
  '{"op":"stats"}' | "$BIN/mooncake_conductor" --max_line_bytes=1024 --log_level=off)
lines=$(wc -l <<<"$out")
[ "$lines" -eq 13 ] || fail "expected 13 reply lines, got $lines: $out"
has "$(sed -n 1p <<<"$out")" '{"host":"h0","local":2,"pool":2,"any":2},{"host":"h1","local":0,"pool":2,"any":2}'
has "$(sed -n 2p <<<"$out")" '"decision":"accept"'
has "$(sed -n 3p <<<"$out")" '"status":"TOO_LARGE"'
has "$(sed -n 4p <<<"$out")" '"event":"gap","expected":3,"got":4'
has "$(sed -n 5p <<<"$out")" '"state":"stale","error":"UNAVAILABLE_IN_CURRENT_STATUS"'
has "$(sed -n 6p <<<"$out")" '"error":"bad event"'
has "$(sed -n 7p <<<"$out")" '"status":"PROTOCOL_ERROR"'
has "$(sed -n 8p <<<"$out")" '"error":"bad hashes/keys'
has "$(sed -n 10p <<<"$out")" '"op":"resync_end","state":"ok"'
has "$(sed -n 11p <<<"$out")" '"local":0,"pool":0,"any":0'
has "$(sed -n 12p <<<"$out")" '"local":2,"pool":2,"any":2'
has "$(sed -n 13p <<<"$out")" '"gaps":1,"resyncs":1,"next_seq":6'

# simulator: reproducible for a seed, conserved requests
TRACE=${MC_TRACE:-${MC_SOURCE_DIR:?MC_SOURCE_DIR not set}/data/traces/conversation_trace.jsonl}
[ -r "$TRACE" ] || fail "trace $TRACE not readable"
a=$("$BIN/mc_sim" --trace="$TRACE" --max_requests=400 --policy=random --event_loss=0.01 --seed=7)
b=$("$BIN/mc_sim" --trace="$TRACE" --max_requests=400 --policy=random --event_loss=0.01 --seed=7)
[ "$a" = "$b" ] || fail "same seed, different output"
has "$a" '"requests":400,"completed":400,"rejected":0'
s=$("$BIN/mc_sim" --trace="$TRACE" --experiment=trace_stats)
has "$s" '"requests":12031,"blocks_requested":288500,"blocks_distinct":182790'
has "$s" '"prefix_hit_ratio":0.3664'
"$BIN/mc_sim" --trace="$TRACE" --max_requests=300 --experiment=cache_sweep \
  --capacities=100,1000 --out_dir="$TMP/x" >/dev/null
[ "$(wc -l <"$TMP/x/cache_sweep.csv")" -eq 3 ] || fail "cache_sweep csv"
if "$BIN/mc_sim" --trace=/nonexistent 2>/dev/null; then fail "missing trace accepted"; fi
if "$BIN/mc_sim" --experiment=nope --trace="$TRACE" 2>/dev/null; then fail "bad experiment accepted"; fi
echo "conductor tools: ok"

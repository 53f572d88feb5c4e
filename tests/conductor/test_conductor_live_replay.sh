#!/usr/bin/env bash
# Live mode end to end, tiny: scripts/live_replay.sh starts a master + 2 storage servers on
# loopback per transport (shm, tcp), replays 40 trace requests with 64 KiB blocks, writes the
# measured-store profiles, and runs mc_sim with --measured_store and with the modelled store.
# Checks: every profile parses and carries the fields mc_sim needs, no wrong bytes were read,
# mc_sim accepted each profile (its result says "store":"measured" with the profile's terms),
# and mc_sim refuses a broken profile. All processes are stopped by PID by the script's trap.
set -euo pipefail
BIN=${MC_BIN_DIR:?MC_BIN_DIR not set}
SRC=${MC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
TRACE=$SRC/data/traces/conversation_trace.jsonl
[ -r "$TRACE" ] || { echo "FAIL: no trace at $TRACE" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
PY=/usr/bin/python3

OUT_DIR=$TMP/out REQUESTS=40 BLOCK_BYTES=64KiB SEGMENT=64MB TRACE=$TRACE \
  timeout 100 bash "$SRC/scripts/live_replay.sh" "$BIN" >"$TMP/log" 2>&1 ||
  { cat "$TMP/log" >&2; fail "live_replay.sh exit"; }
for tr in shm tcp; do
  p=$TMP/out/store_profile_$tr.json
  [ -s "$p" ] || fail "no profile for $tr"
  $PY - "$p" "$TMP/out/sim_measured_$tr.json" <<'PYEOF' || fail "profile/result check for $tr"
import json, sys
prof = json.load(open(sys.argv[1]))
assert prof["profile"] == "mc_store" and prof["block_bytes"] == 65536, prof
assert prof["wrong_blocks"] == 0 and prof["requests"] == 40
for op in ("exist", "get", "put"):
    o = prof[op]
    assert o["calls"] >= 1 and o["blocks"] >= o["calls"], (op, o)
    assert 0 < o["p50_us"] <= o["p90_us"] <= o["p99_us"], (op, o)
    assert o["per_block_us"] > 0 and o["fixed_us"] >= 0, (op, o)
    assert o["fit"] in ("least_squares", "bandwidth_only")
sim = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
assert sim["store"] == "measured", sim
assert sim["requests"] == 40 and sim["completed"] + sim["rejected"] == 40
want_bw = prof["block_bytes"] / (prof["get"]["per_block_us"] * 1e-6) / 2**30
assert abs(sim["pool_fetch_gib_s"] - want_bw) <= 1e-3 * want_bw + 1e-4, (sim["pool_fetch_gib_s"], want_bw)
assert sim["writeback_s"] > 0
PYEOF
done
grep -q '"store":"model"' "$TMP/out/sim_model.json" || fail "modelled run missing"
grep -q "measured_tcp" "$TMP/log" || fail "comparison table missing"
# a broken profile is refused with a clear message
sed 's/"per_block_us": [0-9.]*/"per_block_us": -1/' "$TMP/out/store_profile_tcp.json" >"$TMP/bad.json"
if "$BIN/mc_sim" --trace="$TRACE" --max_requests=10 --measured_store="$TMP/bad.json" \
     >/dev/null 2>"$TMP/err"; then fail "broken profile accepted"; fi
grep -q "out of range" "$TMP/err" || fail "no reason given: $(cat "$TMP/err")"
if "$BIN/mc_sim" --trace="$TRACE" --max_requests=10 --measured_store="$TMP/none.json" \
     >/dev/null 2>&1; then fail "missing profile accepted"; fi
echo "PASS"

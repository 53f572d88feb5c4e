#!/usr/bin/env bash
# Real compute on the store: mc_engine_replay runs the first REQUESTS requests of the trace
# three times and compares them:
#   nostore  no store at all (every token computed: the reference);
#   cold     against a fresh master + 1 storage server (reuse only what this pass stored);
#   warm     the same again on the now-filled store (every stored prefix reused).
# Prints each pass's summary, checks that every request's generated tokens (first and last) and
# final logits (their XXH3) are the same in all three passes (exit 1 if not), and prints TTFT
# and compute skipped side by side.
# Every process is stopped by PID (trap).
#
# Usage: scripts/engine_replay.sh [BIN_DIR]   (default: $MC_BIN_DIR, else build/bin)
# Env:   TRACE, REQUESTS (30), MAX_PROMPT (8192), THREADS (2), SEGMENT (1GB), ENGINE_FLAGS
#        (extra mc_engine_replay flags, e.g. --tiny --block 16), OUT_DIR (keep the JSON lines
#        there; default: a temp dir, removed)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-${MC_BIN_DIR:-$ROOT/build/bin}}
TRACE=${TRACE:-$ROOT/data/traces/conversation_trace.jsonl}
REQUESTS=${REQUESTS:-30}
MAX_PROMPT=${MAX_PROMPT:-8192}
THREADS=${THREADS:-2}
SEGMENT=${SEGMENT:-1GB}
ENGINE_FLAGS=${ENGINE_FLAGS:-}
for t in mooncake_master mooncake_client mc_engine_replay; do
  [ -x "$BIN/$t" ] || { echo "engine_replay: $BIN/$t missing" >&2; exit 1; }
done
[ -r "$TRACE" ] || { echo "engine_replay: trace $TRACE not readable" >&2; exit 1; }
# shellcheck source=lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
mc_cluster_init mc_engine
OUT=${OUT_DIR:-$MC_WORK/out}
mkdir -p "$OUT"

port=$(mc_free_port)
mc_start_master master "$port"
mc_start_server server "127.0.0.1:$port" --global_segment_size="$SEGMENT" \
  --local_hostname=127.0.0.1
run() { # name [store flags...]
  local name=$1; shift
  # shellcheck disable=SC2086
  "$BIN/mc_engine_replay" --trace "$TRACE" --requests "$REQUESTS" --max_prompt "$MAX_PROMPT" \
    --threads "$THREADS" $ENGINE_FLAGS "$@" >"$OUT/$name.jsonl" 2>"$OUT/$name.log"
  echo "== $name: $(tail -n 1 "$OUT/$name.jsonl")"
}
run nostore
run cold --master "127.0.0.1:$port" --segment_size 0
run warm --master "127.0.0.1:$port" --segment_size 0
mc_stop_all

/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def load(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    return [r for r in rows if "req" in r], rows[-1]
runs = {n: load(n) for n in ("nostore", "cold", "warm")}
reqs = [runs[n][0] for n in runs]
same = all(len(r) == len(reqs[0]) for r in reqs) and all(
    len({(r[i]["first_token"], r[i]["last_token"], r[i]["logits_hash"]) for r in reqs}) == 1
    for i in range(len(reqs[0])))
print(f"{'pass':8} {'prompt_tok':>10} {'reused':>9} {'skipped':>8} {'ideal':>7} "
      f"{'ttft_mean_ms':>12} {'prefill_mean_ms':>15}")
for n, (_, s) in runs.items():
    print(f"{n:8} {s['prompt_tokens']:>10} {s['tokens_reused']:>9} {s['compute_skipped']:>8.3f} "
          f"{s['ideal_hit_ratio']:>7.3f} {s['mean_ttft_ms']:>12.1f} {s['mean_prefill_ms']:>15.1f}")
print("tokens and final logits bit-identical in all passes:", "yes" if same else "NO")
sys.exit(0 if same else 1)
PY

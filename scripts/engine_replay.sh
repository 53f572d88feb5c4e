#!/usr/bin/env bash
# Real compute on the store: mc_engine_replay runs the first REQUESTS requests of the trace
# (written first as a trace slice, each request cut to MAX_PROMPT tokens and the blocks those
# need: $OUT/trace_slice.jsonl, the exact requests replayed, which the simulator can replay too)
# several times and compares them:
#   nostore     no store at all (every token computed: the reference);
#   cold        against a fresh master + 1 storage server, the replay contributing no memory: a
#               remote pool (reuse only what this pass stored);
#   warm        the same again on the now-filled store (every stored prefix reused);
#   local_cold, local_warm (LOCAL=1): the same against a second master with no storage server,
#               the replay's own SEGMENT of memory holding the blocks (a local pool), as two
#               rounds of one process (--repeat 2).
# Prints each pass's summary, checks that every request's generated tokens (first and last) and
# final logits (their XXH3) are the same in all passes (exit 1 if not), and prints TTFT and
# compute skipped side by side. RECORD=FILE also writes every pass's JSON lines to FILE, each
# tagged with its pass, after a header line (command, date, settings) and copies the trace
# slice next to it (FILE minus .jsonl, plus _trace.jsonl).
# Every process is stopped by PID (trap).
#
# Usage: scripts/engine_replay.sh [BIN_DIR]   (default: $MC_BIN_DIR, else build/bin)
# Env:   TRACE, REQUESTS (30), MAX_PROMPT (8192), THREADS (2), SEGMENT (1GB), LOCAL (0),
#        ENGINE_FLAGS (extra mc_engine_replay flags, e.g. --tiny --block 16), RECORD, OUT_DIR
#        (keep the JSON lines there; default: a temp dir, removed)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-${MC_BIN_DIR:-$ROOT/build/bin}}
TRACE=${TRACE:-$ROOT/data/traces/conversation_trace.jsonl}
REQUESTS=${REQUESTS:-30}
MAX_PROMPT=${MAX_PROMPT:-8192}
THREADS=${THREADS:-2}
SEGMENT=${SEGMENT:-1GB}
ENGINE_FLAGS=${ENGINE_FLAGS:-}
LOCAL=${LOCAL:-0}
RECORD=${RECORD:-}
for t in mooncake_master mooncake_client mc_engine_replay; do
  [ -x "$BIN/$t" ] || { echo "engine_replay: $BIN/$t missing" >&2; exit 1; }
done
[ -r "$TRACE" ] || { echo "engine_replay: trace $TRACE not readable" >&2; exit 1; }
# shellcheck source=lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
mc_cluster_init mc_engine
OUT=${OUT_DIR:-$MC_WORK/out}
mkdir -p "$OUT"
SLICE=$OUT/trace_slice.jsonl
/usr/bin/python3 - "$TRACE" "$REQUESTS" "$MAX_PROMPT" "$SLICE" <<'PY'
import json, sys
src, n, cap, dst = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
with open(src) as f, open(dst, "w") as out:
    for i, line in zip(range(n), f):
        r = json.loads(line)
        r["input_length"] = min(r["input_length"], cap, 512 * len(r["hash_ids"]))
        r["hash_ids"] = r["hash_ids"][:(r["input_length"] + 511) // 512]
        out.write(json.dumps(r) + "\n")
PY

port=$(mc_free_port)
mc_start_master master "$port"
mc_start_server server "127.0.0.1:$port" --global_segment_size="$SEGMENT" \
  --local_hostname=127.0.0.1
run() { # name [store flags...]
  local name=$1; shift
  # shellcheck disable=SC2086
  "$BIN/mc_engine_replay" --trace "$SLICE" --requests "$REQUESTS" --max_prompt "$MAX_PROMPT" \
    --threads "$THREADS" $ENGINE_FLAGS "$@" >"$OUT/$name.jsonl" 2>"$OUT/$name.log"
  echo "== $name: $(tail -n 1 "$OUT/$name.jsonl")"
}
run nostore
run cold --master "127.0.0.1:$port" --segment_size 0
run warm --master "127.0.0.1:$port" --segment_size 0
PASSES="nostore cold warm"
if [ "$LOCAL" = 1 ]; then
  lport=$(mc_free_port)
  mc_start_master local_master "$lport"
  seg_mb=$(/usr/bin/python3 -c "import re,sys; m=re.fullmatch(r'(\d+)(MB|GB)', sys.argv[1]); \
print(int(m[1]) * (1024 if m[2] == 'GB' else 1))" "$SEGMENT")
  # one process, two rounds: its own segment (the pool) lives as long as the process
  run local --master "127.0.0.1:$lport" --segment_size "$seg_mb" --repeat 2
  for r in 0 1; do
    name=$([ $r = 0 ] && echo local_cold || echo local_warm)
    grep "\"round\":$r," "$OUT/local.jsonl" >"$OUT/$name.jsonl"
  done
  PASSES="$PASSES local_cold local_warm"
fi
mc_stop_all
if [ -n "$RECORD" ]; then
  /usr/bin/python3 - "$RECORD" "$OUT" "$PASSES" "$*" "$REQUESTS" "$MAX_PROMPT" "$THREADS" \
    "$SEGMENT" "$LOCAL" "$ENGINE_FLAGS" "$(nproc)" "${TRACE#"$ROOT"/}" <<'PY'
import datetime, json, sys
rec, out, passes, args, req, mp, thr, seg, local, flags, cpus, trace = sys.argv[1:]
cmd = (f"TRACE={trace} REQUESTS={req} MAX_PROMPT={mp} THREADS={thr} SEGMENT={seg} "
       f"LOCAL={local} ENGINE_FLAGS='{flags}' scripts/engine_replay.sh {args}").strip()
hdr = {"record": "engine_replay", "command": cmd,
       "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
       "requests": int(req), "max_prompt": int(mp), "threads": int(thr), "segment": seg,
       "engine_flags": flags, "cpus": int(cpus), "passes": passes.split()}
with open(rec, "w") as f:
    f.write(json.dumps(hdr) + "\n")
    for p in passes.split():
        for line in open(f"{out}/{p}.jsonl"):
            d = json.loads(line)
            f.write(json.dumps({"pass": p, **d}) + "\n")
PY
  cp "$SLICE" "${RECORD%.jsonl}_trace.jsonl"
  echo "engine_replay: recorded $RECORD"
fi

/usr/bin/python3 - "$OUT" "$PASSES" <<'PY'
import json, sys
out, passes = sys.argv[1], sys.argv[2].split()
def load(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    return [r for r in rows if "req" in r], rows[-1]
runs = {n: load(n) for n in passes}
reqs = [runs[n][0] for n in runs]
same = all(len(r) == len(reqs[0]) for r in reqs) and all(
    len({(r[i]["first_token"], r[i]["last_token"], r[i]["logits_hash"]) for r in reqs}) == 1
    for i in range(len(reqs[0])))
print(f"{'pass':10} {'prompt_tok':>10} {'reused':>9} {'skipped':>8} {'ideal':>7} "
      f"{'ttft_mean_ms':>12} {'prefill_mean_ms':>15}")
for n, (_, s) in runs.items():
    print(f"{n:10} {s['prompt_tokens']:>10} {s['tokens_reused']:>9} {s['compute_skipped']:>8.3f} "
          f"{s['ideal_hit_ratio']:>7.3f} {s['mean_ttft_ms']:>12.1f} {s['mean_prefill_ms']:>15.1f}")
print("tokens and final logits bit-identical in all passes:", "yes" if same else "NO")
sys.exit(0 if same else 1)
PY

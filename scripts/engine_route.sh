#!/usr/bin/env bash
# engine_route.sh [BIN_DIR]: the conductor routes engine requests on the store's events.
#
# INSTANCES engine processes (mc_engine_replay --serve), each contributing its own segment to
# one master and keeping its blocks there under its own keys (--scope eI: a private cache per
# instance), a conductor following the master's event stream (live mode), and a driver
# (scripts/engine_route.py) that routes every request of a trace slice with {"op":"route"}
# and runs it on the chosen instance. One pass per policy in POLICIES, each on a fresh master,
# after a reference pass without a store. Prints per pass the tokens reused (compute skipped)
# and the mean TTFT; exit 1 unless every request's first and last tokens and final-logits hash
# equal the reference's in every pass (and, with CHECK=1, unless cache_aware reused every
# reusable prefix of the slice, more than least_loaded and no less than any other policy).
#
# Env: TRACE (the FAST'25 conversation trace), REQUESTS (40), WINDOW (3000: the slice is
# REQUESTS requests of whole multi-turn conversations among the first WINDOW requests, the
# earliest conversations first, in trace order; 0 = the first REQUESTS requests of TRACE), MAX_PROMPT (4096), INSTANCES (2), THREADS (1),
# BLOCK (512), TINY (0), SEGMENT_MB (512), POLICIES ("cache_aware least_loaded random"), LOAD
# (0.8: requests arrive every mean-reference-TTFT / INSTANCES / LOAD ms), SEED (1), CHECK (0;
# 1 also queues instances for the conductor's modelled TTFT instead of the measured one),
# RECORD (a .jsonl file: header with command and date, then every pass's lines), OUT_DIR.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-${MC_BIN_DIR:-$ROOT/build/bin}}
TRACE=${TRACE:-$ROOT/data/traces/conversation_trace.jsonl}
REQUESTS=${REQUESTS:-40}
WINDOW=${WINDOW:-3000}
MAX_PROMPT=${MAX_PROMPT:-4096}
INSTANCES=${INSTANCES:-2}
THREADS=${THREADS:-1}
BLOCK=${BLOCK:-512}
TINY=${TINY:-0}
SEGMENT_MB=${SEGMENT_MB:-512}
POLICIES=${POLICIES:-cache_aware least_loaded random}
LOAD=${LOAD:-0.8}
SEED=${SEED:-1}
CHECK=${CHECK:-0}
RECORD=${RECORD:-}
DRIVER="/usr/bin/python3 $ROOT/scripts/engine_route.py"
for t in mooncake_master mooncake_conductor mc_engine_replay; do
  [ -x "$BIN/$t" ] || { echo "engine_route: $BIN/$t missing" >&2; exit 1; }
done
[ -r "$TRACE" ] || { echo "engine_route: trace $TRACE not readable" >&2; exit 1; }
. "$(dirname "$0")/lib/cluster.sh"
mc_cluster_init mc_route
OUT=${OUT_DIR:-$MC_WORK/out}
mkdir -p "$OUT"
SLICE=$OUT/trace_slice.jsonl
if [ "$WINDOW" = 0 ]; then
  head -n "$REQUESTS" "$TRACE" >"$SLICE"
else
  $DRIVER slice "$TRACE" "$SLICE" --requests "$REQUESTS" --window "$WINDOW" \
    --max_prompt "$MAX_PROMPT" >/dev/null
fi
TINY_FLAG=
if [ "$TINY" = 1 ]; then TINY_FLAG=--tiny; fi
# CHECK=1 queues each instance for the modelled TTFT, not the measured one: the routes and so
# the check do not depend on how loaded the machine is
QUEUE_FLAG=
if [ "$CHECK" = 1 ]; then QUEUE_FLAG=--modelled_queue; fi
# shellcheck disable=SC2086
"$BIN/mc_engine_replay" --trace "$SLICE" --requests "$REQUESTS" --max_prompt "$MAX_PROMPT" \
  --threads "$THREADS" --block "$BLOCK" $TINY_FLAG >"$OUT/nostore.jsonl" 2>"$OUT/nostore.log"
echo "== nostore: $(tail -n 1 "$OUT/nostore.jsonl")"
# shellcheck disable=SC2086
read -r TFLOPS MEAN_TTFT < <($DRIVER tflops "$OUT/nostore.jsonl" $TINY_FLAG)
INTERVAL=$(/usr/bin/python3 -c "print(round($MEAN_TTFT / $INSTANCES / $LOAD, 3))")
echo "engine: $TFLOPS TFLOP/s in the conductor's terms; arrivals every $INTERVAL ms"

for pol in $POLICIES; do
  port=$(mc_free_port)
  mc_start_master "master_$pol" "$port"
  # shellcheck disable=SC2086
  $DRIVER run --bin "$BIN" --master "127.0.0.1:$port" --trace "$SLICE" --policy "$pol" \
    --instances "$INSTANCES" --requests "$REQUESTS" --max_prompt "$MAX_PROMPT" \
    --threads "$THREADS" --block "$BLOCK" --segment_mb "$SEGMENT_MB" \
    --interval_ms "$INTERVAL" --tflops "$TFLOPS" --seed "$SEED" --out_dir "$OUT" $TINY_FLAG $QUEUE_FLAG \
    >"$OUT/$pol.jsonl" 2>"$OUT/$pol.log" || { cat "$OUT/$pol.log" >&2; exit 1; }
  mc_stop_all
  echo "== $pol: $(tail -n 1 "$OUT/$pol.jsonl")"
done

if [ -n "$RECORD" ]; then
  /usr/bin/python3 - "$RECORD" "$OUT" "nostore $POLICIES" "$*" "${TRACE#"$ROOT"/}" "$REQUESTS" \
    "$WINDOW" "$MAX_PROMPT" "$INSTANCES" "$THREADS" "$LOAD" "$SEED" "$INTERVAL" "$TFLOPS" \
    "$(nproc)" <<'PY'
import datetime, json, sys
(rec, out, passes, args, trace, req, win, mp, inst, thr, load, seed, interval, tfl,
 cpus) = sys.argv[1:]
cmd = (f"TRACE={trace} REQUESTS={req} WINDOW={win} MAX_PROMPT={mp} INSTANCES={inst} "
       f"THREADS={thr} LOAD={load} SEED={seed} scripts/engine_route.sh {args}").strip()
hdr = {"record": "engine_route", "command": cmd,
       "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
       "requests": int(req), "window": int(win), "max_prompt": int(mp), "instances": int(inst),
       "threads": int(thr), "interval_ms": float(interval), "engine_tflops": float(tfl),
       "cpus": int(cpus), "passes": passes.split()}
with open(rec, "w") as f:
    f.write(json.dumps(hdr) + "\n")
    for p in passes.split():
        for line in open(f"{out}/{p}.jsonl"):
            d = json.loads(line)
            f.write(json.dumps({"pass": p, **d}) + "\n")
PY
  cp "$SLICE" "${RECORD%.jsonl}_trace.jsonl"
  echo "engine_route: recorded $RECORD"
fi

/usr/bin/python3 - "$OUT" "$POLICIES" "$CHECK" <<'PY'
import json, sys
out, pols, check = sys.argv[1], sys.argv[2].split(), sys.argv[3] == "1"
def load(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    return {r["req"]: r for r in rows if "req" in r}, rows[-1]
ref, ref_sum = load("nostore")
ideal = sum(r["ideal_reused"] for r in ref.values())
ok = True
print(f"{'pass':13} {'prompt_tok':>10} {'reused':>8} {'skipped':>8} {'ttft_ms':>8} "
      f"{'+queue_ms':>9} per_instance")
print(f"{'nostore':13} {ref_sum['prompt_tokens']:>10} {0:>8} {0:>8.3f} "
      f"{ref_sum['mean_ttft_ms']:>8.1f} {'':>9} (ideal reuse: {ideal} tokens)")
reused = {}
for p in pols:
    reqs, s = load(p)
    same = set(reqs) == set(ref) and all(
        (reqs[i]["first_token"], reqs[i]["last_token"], reqs[i]["logits_hash"]) ==
        (ref[i]["first_token"], ref[i]["last_token"], ref[i]["logits_hash"]) for i in ref)
    ok &= same
    reused[p] = s["tokens_reused"]
    print(f"{p:13} {s['prompt_tokens']:>10} {s['tokens_reused']:>8} {s['compute_skipped']:>8.3f} "
          f"{s['mean_ttft_ms']:>8.1f} {s['mean_ttft_with_queue_ms']:>9.1f} {s['per_instance']}"
          + ("" if same else "  RESULTS DIFFER"))
print("tokens and final logits bit-identical to nostore in all passes:", "yes" if ok else "NO")
if check:
    ca = reused.get("cache_aware", -1)
    good = (ca == ideal > 0 and all(v <= ca for v in reused.values())
            and reused.get("least_loaded", -1) < ca)
    print("cache_aware reused every reusable prefix, more than least_loaded, no less than any:",
          "yes" if good else "NO")
    ok &= good
sys.exit(0 if ok else 1)
PY

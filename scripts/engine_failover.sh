#!/usr/bin/env bash
# Failure path with real compute: mc_engine_replay against a master and TWO storage servers,
# one of which is killed (SIGKILL) in the middle of a warm pass.
#   nostore  no store (the reference: every token computed);
#   fill     a fresh store (stores every computed block, spread over both servers);
#   warm     the same requests again, nothing failed (what reuse looks like without the kill);
#   killed   the same requests again; after PAUSE_AFTER requests the replay pauses
#            (--pause_after), server 2 is killed with SIGKILL, the replay goes on.
# Exits 1 unless: every request of every pass completed, every request's first and last tokens
# and final-logits hash equal the reference's, and the requests after the kill reused fewer
# tokens than the same requests in the warm pass (their blocks on the dead server were
# recomputed). Every process is stopped by PID (trap).
#
# Usage: scripts/engine_failover.sh [BIN_DIR]   (default: $MC_BIN_DIR, else build/bin)
# Env:   TRACE, REQUESTS (20), PAUSE_AFTER (REQUESTS/2), MAX_PROMPT (8192), THREADS (2),
#        SEGMENT (512MB per server), ENGINE_FLAGS (extra replay flags, e.g. --tiny --block 16),
#        OUT_DIR (keep the JSON lines there; default: a temp dir, removed),
#        RECORD (after a successful run, write one file for the report there: a header line with
#        the command and date, then every pass's lines tagged with "pass")
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-${MC_BIN_DIR:-$ROOT/build/bin}}
TRACE=${TRACE:-$ROOT/data/traces/conversation_trace.jsonl}
REQUESTS=${REQUESTS:-20}
PAUSE_AFTER=${PAUSE_AFTER:-$((REQUESTS / 2))}
MAX_PROMPT=${MAX_PROMPT:-8192}
THREADS=${THREADS:-2}
SEGMENT=${SEGMENT:-512MB}
ENGINE_FLAGS=${ENGINE_FLAGS:-}
for t in mooncake_master mooncake_client mc_engine_replay; do
  [ -x "$BIN/$t" ] || { echo "engine_failover: $BIN/$t missing" >&2; exit 1; }
done
[ -r "$TRACE" ] || { echo "engine_failover: trace $TRACE not readable" >&2; exit 1; }
# shellcheck source=lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
mc_cluster_init mc_engine_failover
OUT=${OUT_DIR:-$MC_WORK/out}
mkdir -p "$OUT"

port=$(mc_free_port)
mc_start_master master "$port"
mc_start_server server1 "127.0.0.1:$port" --global_segment_size="$SEGMENT" \
  --local_hostname=127.0.0.1
mc_start_server server2 "127.0.0.1:$port" --global_segment_size="$SEGMENT" \
  --local_hostname=127.0.0.1
victim=${MC_PIDS[-1]}
replay() { # name [flags...]
  local name=$1; shift
  # shellcheck disable=SC2086
  "$BIN/mc_engine_replay" --trace "$TRACE" --requests "$REQUESTS" --max_prompt "$MAX_PROMPT" \
    --threads "$THREADS" $ENGINE_FLAGS "$@" >"$OUT/$name.jsonl" 2>"$OUT/$name.log"
}
replay nostore
replay fill --master "127.0.0.1:$port" --segment_size 0
replay warm --master "127.0.0.1:$port" --segment_size 0

# killed: the replay reads its "go on" line from a fifo held open here
mkfifo "$MC_WORK/go"
exec 9<>"$MC_WORK/go"
replay killed --master "127.0.0.1:$port" --segment_size 0 --pause_after "$PAUSE_AFTER" <&9 &
rpid=$!
MC_PIDS+=("$rpid")
mc_wait_log "$OUT/killed.jsonl" '"paused"' 300 "$rpid"
kill -KILL "$victim"
wait "$victim" 2>/dev/null || true
echo "engine_failover: server2 (pid $victim) killed after $PAUSE_AFTER requests"
echo go >&9
rc=0
wait "$rpid" || rc=$?
exec 9>&-
mc_stop_all
[ "$rc" = 0 ] || { echo "engine_failover: the killed pass failed (rc $rc):" >&2;
                   tail -n 20 "$OUT/killed.log" >&2; exit 1; }

/usr/bin/python3 - "$OUT" "$PAUSE_AFTER" "$REQUESTS" <<'PY'
import json, sys
out, pause, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def reqs(name):
    return [r for r in map(json.loads, open(f"{out}/{name}.jsonl")) if "req" in r]
runs = {k: reqs(k) for k in ("nostore", "fill", "warm", "killed")}
ok = True
for k, rows in runs.items():
    if len(rows) != len(runs["nostore"]):
        print(f"{k}: {len(rows)} requests completed, want {len(runs['nostore'])}"); ok = False
ref = [(r["first_token"], r["last_token"], r["logits_hash"]) for r in runs["nostore"]]
for k, rows in runs.items():
    bad = [r["req"] for r, want in zip(rows, ref)
           if (r["first_token"], r["last_token"], r["logits_hash"]) != want]
    if bad:
        print(f"{k}: wrong tokens/logits in requests {bad}"); ok = False
after = lambda k, f: sum(r[f] for r in runs[k][pause:])
warm_after, killed_after = after("warm", "tokens_reused"), after("killed", "tokens_reused")
print(f"{'pass':8} {'reused':>8} {'prefilled':>9} {'rejected':>8} {'ttft_mean_ms':>12}")
for k, rows in runs.items():
    print(f"{k:8} {sum(r['tokens_reused'] for r in rows):>8} "
          f"{sum(r['tokens_prefilled'] for r in rows):>9} "
          f"{sum(r['blocks_rejected'] for r in rows):>8} "
          f"{sum(r['ttft_ms'] for r in rows) / max(len(rows), 1):>12.1f}")
print(f"after the kill (requests {pause}..{n - 1}): reused {killed_after} tokens "
      f"(warm pass: {warm_after}), blocks rejected {after('killed', 'blocks_rejected')}")
if not killed_after < warm_after:
    print("the kill did not reduce reuse: the failure path was not exercised"); ok = False
print("every request completed, tokens and final logits equal to the no-store run:",
      "yes" if ok else "NO")
sys.exit(0 if ok else 1)
PY

if [ -n "${RECORD:-}" ]; then
  /usr/bin/python3 - "$OUT" "$RECORD" "$PAUSE_AFTER" "$REQUESTS" \
    "REQUESTS=$REQUESTS PAUSE_AFTER=$PAUSE_AFTER MAX_PROMPT=$MAX_PROMPT THREADS=$THREADS SEGMENT=$SEGMENT ENGINE_FLAGS='$ENGINE_FLAGS' scripts/engine_failover.sh" <<'PY'
import datetime, json, sys
out, record, pause, n, cmd = sys.argv[1:6]
with open(record, "w") as f:
    f.write(json.dumps({"record": "engine_failover", "command": cmd, "requests": int(n),
                        "pause_after": int(pause),
                        "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")}) + "\n")
    for name in ("nostore", "fill", "warm", "killed"):
        for line in open(f"{out}/{name}.jsonl"):
            r = json.loads(line)
            r["pass"] = name
            f.write(json.dumps(r) + "\n")
PY
  echo "engine_failover: recorded in $RECORD"
fi

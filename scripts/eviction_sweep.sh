#!/usr/bin/env bash
# Eviction-policy sweep (docs/internals/eviction.md, "Admission and eviction policies"): every
# policy of mc_sim's cache_sweep and Belady's bound, at every capacity, on the FAST'25
# conversation trace and on each synthetic workload (src/conductor/workload.h, seeds 1-6), plus
# the slru parameter scans on the conversation trace. Writes JSON lines, each with the date and
# the exact mc_sim command that produced it. About three minutes of CPU (run it with nice).
#
# Usage: scripts/eviction_sweep.sh [BIN_DIR] [OUT]   (defaults: build/bin,
#        docs/report/data/eviction_sweep.jsonl)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-${MC_BIN_DIR:-$ROOT/build/bin}}
OUT=${2:-$ROOT/docs/report/data/eviction_sweep.jsonl}
[ -x "$BIN/mc_sim" ] || { echo "eviction_sweep: $BIN/mc_sim missing" >&2; exit 1; }
DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
CAPS=500,1000,2000,5000,10000,20000,50000,100000
TRACE=data/traces/conversation_trace.jsonl
: >"$OUT"

# run LABEL_FIELDS ARGS...: one mc_sim cache_sweep, each output line prefixed with the date, the
# command (relative to the repository root) and extra JSON fields.
run() {
  local extra=$1
  shift
  local cmd="build/bin/mc_sim --experiment=cache_sweep $*"
  (cd "$ROOT" && "$BIN/mc_sim" --experiment=cache_sweep "$@") |
    sed "s|^{|{\"date\":\"$DATE\",\"command\":\"$cmd\",$extra|" >>"$OUT"
}

run '"seed":1,' --trace=$TRACE --capacities=$CAPS,182790
# seeds 1-3 are the ones the policies were tuned on; 4-6 and the last two workloads are held out
for w in zipf zipf_shift recency scan_hot loop conv_short conv_long conv_shared docs conv_bursty \
    phases; do
  for seed in 1 2 3 4 5 6; do
    run "\"seed\":$seed," --workload=$w --seed=$seed --capacities=$CAPS
  done
done
# slru parameters on the conversation trace (the slru columns are the ones that change)
for pp in 1000 500 250 100 50 20 5; do
  run "\"probation_permille\":$pp,\"ghost_factor\":5," --trace=$TRACE --capacities=2000,5000,20000 \
      --probation_permille=$pp
done
for gf in 1 2 3 4 5 6 8 16; do
  run "\"probation_permille\":20,\"ghost_factor\":$gf," --trace=$TRACE --capacities=2000,5000,20000 \
      --ghost_factor=$gf
done
echo "eviction_sweep: $(wc -l <"$OUT") lines in $OUT" >&2

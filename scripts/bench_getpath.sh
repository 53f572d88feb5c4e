#!/usr/bin/env bash
# `make bench-getpath`: the store's get path next to the raw Transfer Engine moving the same
# bytes in the same run (mc_store_bench --getpath): 128 x 4 KiB, 64 x 4 MiB, 1 x 32 MiB and
# 8 threads x 32 x 4 MiB, each warm (the writer under its read leases), cold (the writer's
# first get: hints, no lease), first read (a client that never saw the keys: lookup, then
# read) and first_fed (a client that never read them either but follows the placement feed
# for their prefix: reads under the pushed leases, no lookup), over tcp and same host (shm).
# About 40 s per transport on a 2-vCPU VM.
# Appends every JSON line to a results file after a header line (command, date, load,
# nr_hugepages) and prints one summary line per shape: store_over_te_warm / _first / _cold /
# _first_fed are store req/s over the engine's (medians over MC_BENCH_GETPATH_REPS repetitions on fresh
# keys; the engine measured right before and right after the store's rounds).
#
# Environment:
#   MC_BIN_DIR               where mc_store_bench is (default build/bin)
#   MC_BENCH_RESULTS         results file to append to (default <build>/bench-results/getpath.jsonl)
#   MC_BENCH_GETPATH_REPS    repetitions per shape (default 3)
#   MC_BENCH_GETPATH_CASES   shapes (default all: 4k128,4m64,32m1,4m32x8)
#   MC_BENCH_GETPATH_TRANSPORTS  (default "tcp shm")
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/bench.sh"
mc_bench_setup mc_store_bench getpath.jsonl
reps="${MC_BENCH_GETPATH_REPS:-3}"
cases="${MC_BENCH_GETPATH_CASES:-}"

for transport in ${MC_BENCH_GETPATH_TRANSPORTS:-tcp shm}; do
    args=(--getpath --transport="$transport" --get_rounds=3 --getpath_reps="$reps")
    [[ -n "$cases" ]] && args+=(--cases="$cases")
    printf '{"bench":"header","label":"getpath-%s","cmd":"mc_store_bench %s","date":"%s","load":"%s","nr_hugepages":%s}\n' \
        "$transport" "${args[*]}" "$(date -u +%FT%TZ)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
        "$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo null)" >>"$results"
    out="$(mktemp)"
    if ! "$bench" "${args[@]}" >"$out"; then
        echo "bench_getpath.sh: mc_store_bench ${args[*]} failed" >&2
        rm -f "$out"
        exit 1
    fi
    grep '^{' "$out" >>"$results"
    grep '"bench":"getpath"' "$out" | sed -E 's/.*"shape":"([^"]*)","transport":"([^"]*)".*"errors":([0-9]+).*"te_req_s":([0-9]+).*"store_over_te_warm":([0-9.]+),"store_over_te_first":([0-9.]+),"store_over_te_cold":([0-9.]+).*"store_over_te_first_fed":([0-9.]+),"fed_lookups":([0-9]+).*/== \2 \1: te \4 req\/s, store\/te warm \5 first \6 cold \7 first_fed \8 (fed lookups \9, errors \3)/'
    rm -f "$out"
done
echo "results appended to $results"

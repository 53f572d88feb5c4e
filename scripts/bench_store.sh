#!/usr/bin/env bash
# `make bench-store`: the store benchmark with its peers and targets, as
# docs/benchmarks.md "Store" runs it: mc_store_bench --peers over tcp (remote path, one client
# thread, MC_BENCH_STORE_RUNS times), tcp with two client threads, and same host (shm).
# Appends every JSON line to a results file after a header line (command, date, load) and
# prints the bracketed ratios (store_ratios_paired: store vs the peer measured right before
# and right after each case; latency ratios are Redis p50 / store p50; the same-host run also
# store_ratios_unix: its 4 KiB batches vs Redis over its unix socket).
#
# The storage server puts its segment on huge pages when the host has them reserved
# (`sysctl vm.nr_hugepages=N`) and on 4 KiB pages otherwise, as users get it; the targets in
# docs/benchmarks.md are claimed on 4 KiB pages, with huge-page figures alongside. The header
# line records the host's setting, each run's store_setup line the page size the segment got;
# MC_TE_HUGEPAGES=0 forces 4 KiB pages on a host that has huge pages reserved.
#
# Environment:
#   MC_BIN_DIR              where mc_store_bench is (default build/bin)
#   MC_BENCH_RESULTS        results file to append to (default <build>/bench-results/store.jsonl)
#   MC_BENCH_STORE_RUNS     one-thread tcp runs (default 3)
#   MC_BENCH_STORE_ROUNDS   get rounds per case: round 1 cold, the rest warm (default 4)
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/bench.sh"
mc_bench_setup mc_store_bench store.jsonl
runs="${MC_BENCH_STORE_RUNS:-3}"
rounds="${MC_BENCH_STORE_ROUNDS:-4}"

run() { # run <label> <mc_store_bench args...>
    local label="$1"
    shift
    local out
    out="$(mktemp)"
    printf '{"bench":"header","label":"%s","cmd":"%s","date":"%s","load":"%s","nr_hugepages":%s}\n' \
        "$label" "mc_store_bench $*" "$(date -u +%FT%TZ)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
        "$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo null)" >>"$results"
    if ! "$bench" "$@" >"$out"; then
        echo "bench_store.sh: mc_store_bench $* failed" >&2
        rm -f "$out"
        return 1
    fi
    grep '^{' "$out" >>"$results"
    echo "== $label: $(grep -E '"store_ratios_(paired|unix)"' "$out" || echo 'no ratios line')"
    rm -f "$out"
}

for i in $(seq "$runs"); do
    run "tcp-$i" --peers --transport=tcp --get_rounds="$rounds"
done
run tcp-2threads --peers --transport=tcp --threads=2 --cases=4k128,32m1 --get_rounds="$rounds"
run same-host --peers --get_rounds="$rounds"
echo "results appended to $results"

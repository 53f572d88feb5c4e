# Shared prologue of the benchmark scripts (bench.sh, bench_store.sh). Source it, then call
#   mc_bench_setup PROGRAM RESULTS_FILE_NAME
# which sets root (the checkout), bin (MC_BIN_DIR, default build/bin), bench (the program,
# checked to be built) and results (MC_BENCH_RESULTS, default
# <build>/bench-results/RESULTS_FILE_NAME; its directory is created).

mc_bench_setup() {
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    bin="${MC_BIN_DIR:-$root/build/bin}"
    bench="$bin/$1"
    [[ -x "$bench" ]] || { echo "$(basename "$0"): $bench not built (run 'make build')" >&2; exit 1; }
    results="${MC_BENCH_RESULTS:-$bin/../bench-results/$2}"
    mkdir -p "$(dirname "$results")"
}

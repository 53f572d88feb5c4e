#!/usr/bin/env bash
# `make bench-disk`: the disk tier's storage engine against fio on the same file system, as
# docs/benchmarks.md "Disk tier" runs it: mc_disk_bench with 4 MiB and 32 MiB values read one
# at a time (direct and deadline modes) and a batch of 64 x 4 MiB, fio with O_DIRECT and
# io_uring on a file in the same directory, in the same run. Appends every JSON line to a
# results file after a header line and prints the ratio lines (store GB/s / fio GB/s).
#
# Environment:
#   MC_BIN_DIR             where mc_disk_bench is (default build/bin)
#   MC_BENCH_RESULTS       results file to append to (default <build>/bench-results/disk.jsonl)
#   MC_BENCH_DISK_DIR      directory on the file system to measure (default $TMPDIR or /var/tmp;
#                          not a tmpfs: the point is the disk)
#   MC_BENCH_DISK_COUNT    objects per size (default 16)
#   MC_BENCH_DISK_REPS     passes per mode (default 3)
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/bench.sh"
mc_bench_setup mc_disk_bench disk.jsonl
command -v fio >/dev/null || echo "bench_disk.sh: fio not found (scripts/install-deps.sh installs it); ratios will be null" >&2
args=(--sizes=4MiB,32MiB --count="${MC_BENCH_DISK_COUNT:-16}" --reps="${MC_BENCH_DISK_REPS:-3}" --batch=64)
[[ -n "${MC_BENCH_DISK_DIR:-}" ]] && args+=(--dir="$MC_BENCH_DISK_DIR")
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
printf '{"bench":"header","label":"disk","cmd":"mc_disk_bench %s","date":"%s","load":"%s","fio":"%s"}\n' \
    "${args[*]}" "$(date -u +%FT%TZ)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
    "$(fio --version 2>/dev/null || echo none)" >>"$results"
MC_LOG_LEVEL=warn "$bench" "${args[@]}" >"$out"
grep '^{' "$out" >>"$results"
grep '"disk_ratio"' "$out" || true
echo "results appended to $results"

#!/usr/bin/env bash
# Gets served from the disk tier through a real cluster next to fio, in the same run and the
# same directory (docs/benchmarks.md, "Disk tier"): mc_disk_e2e_bench (a master, a storage
# server whose objects are all disk-only after a restart, a reader: 4 MiB and 32 MiB gets at
# queue depth 1 and one batch get of 64 x 4 MiB), each case --rounds times, read by a reader
# over tcp (the figure the target is about) and one over the TE's same-host transport (shm,
# "transport":"shm": an extra figure), with fio --direct=1 --ioengine=io_uring reading the same
# shape (depth 1, or 64 for the batch) on a file in the same directory before, between and
# after them: each reader's ratio is to the mean of the fio runs right before and after it.
# Appends every JSON line to a results file after a header line and prints the
# "disk_e2e_ratio" lines (store GB/s / fio GB/s, median, min and max over the rounds, per
# transport).
#
# Environment:
#   MC_BIN_DIR            where the programs are (default build/bin)
#   MC_BENCH_RESULTS      results file (default <build>/bench-results/disk_e2e.jsonl)
#   MC_BENCH_DISK_DIR     directory on the disk to measure (default $TMPDIR or /var/tmp)
#   MC_BENCH_DISK_COUNT   objects per size (default 8);  MC_BENCH_DISK_REPS  reads each (2)
#   MC_BENCH_DISK_ROUNDS  rounds of every case, each next to fio (default 3)
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/bench.sh"
mc_bench_setup mc_disk_e2e_bench disk_e2e.jsonl
command -v fio >/dev/null || { echo "bench_disk_e2e.sh: fio not found" >&2; exit 1; }
parent="${MC_BENCH_DISK_DIR:-${TMPDIR:-/var/tmp}}"
dir="$(mktemp -d "$parent/mc_disk_e2e.XXXXXX")"
trap 'rm -rf "$dir"' EXIT
args=(--dir="$dir" --sizes=4MiB,32MiB --count="${MC_BENCH_DISK_COUNT:-8}"
      --reps="${MC_BENCH_DISK_REPS:-2}" --batch=64 --rounds="${MC_BENCH_DISK_ROUNDS:-3}")
printf '{"bench":"header","label":"disk_e2e","cmd":"mc_disk_e2e_bench %s","date":"%s","load":"%s","fio":"%s"}\n' \
    "${args[*]}" "$(date -u +%FT%TZ)" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(fio --version)" \
    | tee -a "$results"
MC_BIN_DIR="$bin" MC_LOG_LEVEL=warn "$bench" "${args[@]}" | grep '^{' | tee -a "$results"
echo "results appended to $results"

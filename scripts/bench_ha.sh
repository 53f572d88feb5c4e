#!/usr/bin/env bash
# `make bench-ha`: master high availability on a real 3-member etcd (loopback), as
# docs/benchmarks.md "Master HA" runs it: mc_ha_bench's failover trials (kill -9 of the leader,
# time to the first get served and to the first successful put through the new leader, at lease
# TTL 2 s and 5 s, against p50 <= TTL + 1 s and max <= 2 x TTL + 1 s), put and lookup
# throughput with HA on vs a single master with its local WAL in the same run (target put
# ratio >= 0.5), and the standby's log lag under that put load; next to the HA figure, what
# bounds it in the same run: the disk's fsync latency where etcd keeps its data (fio),
# etcd's own latency for a txn of the append's shape at 1 and 4 in flight, etcd's fsync /
# backend-commit histograms and the leader's append counters during the HA puts
# (`ha_disk_fsync`, `ha_etcd_commit`, `ha_append`: puts/s <= BatchPuts in flight x batch /
# etcd commit latency, and <= etcd txns/s x objects per txn). Appends every JSON line to a results file after
# a header line and prints the summary lines. Needs etcd and fio (scripts/install-deps.sh).
# Not part of `make check`.
#
# Environment:
#   MC_BIN_DIR             where mc_ha_bench is (default build/bin)
#   MC_BENCH_RESULTS       results file to append to (default <build>/bench-results/ha.jsonl)
#   MC_BENCH_HA_TRIALS     kill -9 trials per TTL (default 20)
#   MC_BENCH_HA_TTLS       lease TTLs in seconds, comma-separated (default 2,5)
#   MC_BENCH_HA_THREADS    client threads of the throughput phase (default 4)
#   MC_BENCH_HA_CLIENTS    store clients the threads share (default 1; 4 master connections each)
#   MC_BENCH_HA_SECONDS    seconds per throughput phase (default 3)
#   MC_BENCH_HA_ETCD_DIR   parent directory of etcd's data dirs (default $TMPDIR or /tmp: the
#                          VM's disk here; the HA figure is only a claim on a real disk)
#   MC_BENCH_HA_TMPFS      1: one more throughput run with etcd's data on /dev/shm, its lines
#                          marked "etcd_fs":"tmpfs" (NOT durable against power loss: an extra
#                          figure showing the design with fast commits, never the claim)
# etcd runs with its default raft timing (election 1000 ms): slower timing raises short lease
# TTLs (etcd's minimum TTL is 1.5 x the election timeout).
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/bench.sh"
mc_bench_setup mc_ha_bench ha.jsonl
args=(--trials="${MC_BENCH_HA_TRIALS:-20}" --ttls="${MC_BENCH_HA_TTLS:-2,5}"
      --threads="${MC_BENCH_HA_THREADS:-4}"
      --clients="${MC_BENCH_HA_CLIENTS:-1}" --seconds="${MC_BENCH_HA_SECONDS:-3}")
[[ -n "${MC_BENCH_HA_ETCD_DIR:-}" ]] && args+=(--etcd_dir="$MC_BENCH_HA_ETCD_DIR")
out="$(mktemp)" err="$(mktemp)"
trap 'rm -f "$out" "$err"' EXIT
printf '{"bench":"header","label":"ha","cmd":"mc_ha_bench %s","date":"%s","load":"%s"}\n' \
    "${args[*]}" "$(date -u +%FT%TZ)" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$results"
MC_BIN_DIR="$bin" "$bench" "${args[@]}" >"$out" 2>"$err" || { tail -n 40 "$err" >&2; exit 1; }
if [[ "${MC_BENCH_HA_TMPFS:-0}" == 1 ]]; then
    MC_BIN_DIR="$bin" "$bench" --phase=throughput --etcd_dir=/dev/shm \
        --threads="${MC_BENCH_HA_THREADS:-4}" --clients="${MC_BENCH_HA_CLIENTS:-1}" \
        --seconds="${MC_BENCH_HA_SECONDS:-3}" >>"$out" 2>>"$err" ||
        { tail -n 40 "$err" >&2; exit 1; }
fi
grep '^{' "$out" >>"$results"
grep -E '"ha_failover"|"ha_throughput|"ha_append"|"ha_etcd_commit"|"ha_disk_fsync"' "$out" || true
echo "results appended to $results"

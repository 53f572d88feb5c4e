#!/usr/bin/env bash
# `make bench`: the Transfer Engine benchmark with its peers, in one run.
# Runs mc_te_bench --role all --peers over the full matrix (tcp and shm, READ and WRITE,
# 4 KiB..64 MiB, batch 1 and 128, 1 and 2 threads), appends every JSON line to a results file
# together with a header line naming the command, the date and the load, and prints a summary.
#
# Environment:
#   MC_BIN_DIR          where mc_te_bench is (default build/bin)
#   MC_BENCH_RESULTS    results file to append to (default <build>/bench-results/te.jsonl)
#   MC_BENCH_DURATION   seconds per case (default 2)
#   MC_BENCH_BLOCKS     block sizes (default 4K,64K,1M,4M,32M,64M)
#   MC_BENCH_BATCHES    batch sizes (default 1,128)
#   MC_BENCH_THREADS    thread counts (default 1,2)
#   MC_BENCH_PROTOCOLS  protocols (default tcp,shm)
#   MC_BENCH_SOAK       seconds of soak after the matrix (default 0 = none; 600 for the memory-growth check)
#   MC_BENCH_EXTRA      more mc_te_bench flags
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/bench.sh"
mc_bench_setup mc_te_bench te.jsonl
py=/usr/bin/python3

args=(--role all --peers
      --protocol "${MC_BENCH_PROTOCOLS:-tcp,shm}"
      --op read,write
      --block_sizes "${MC_BENCH_BLOCKS:-4K,64K,1M,4M,32M,64M}"
      --batch_size "${MC_BENCH_BATCHES:-1,128}"
      --threads "${MC_BENCH_THREADS:-1,2}"
      --duration "${MC_BENCH_DURATION:-2}"
      --soak "${MC_BENCH_SOAK:-0}")
# shellcheck disable=SC2206
extra=(${MC_BENCH_EXTRA:-})

run_out="$(mktemp)"
trap 'rm -f "$run_out"' EXIT
load="$(cut -d' ' -f1-3 /proc/loadavg)"
start="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "bench.sh: $bench ${args[*]} ${extra[*]}" >&2
echo "bench.sh: started $start, load average $load, results -> $results" >&2
rc=0
"$bench" "${args[@]}" "${extra[@]}" | tee "$run_out" || rc=$?

$py - "$run_out" "$results" "$start" "$load" "$rc" "$bench ${args[*]} ${extra[*]}" <<'PY'
import json, sys
run_out, results, start, load, rc, cmd = sys.argv[1:]
lines = [l for l in open(run_out) if l.startswith("{")]
recs = [json.loads(l) for l in lines]
with open(results, "a") as f:
    f.write(json.dumps({"bench": "run", "command": cmd, "date": start,
                        "loadavg": load, "exit": int(rc)}) + "\n")
    for l in lines:
        f.write(l if l.endswith("\n") else l + "\n")

def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"

print(f"\nsummary ({start}, load {load}):", file=sys.stderr)
for r in recs:
    if r.get("bench") == "peer" and r.get("ok"):
        print(f"  peer {r['peer']:<14} {size(r['block']) if r['block'] else '':>8} "
              f"{r['gib_s']:8.2f} GiB/s", file=sys.stderr)
print(f"  {'proto':<5} {'op':<5} {'block':>8} {'batch':>5} {'thr':>3} {'GiB/s':>8} "
      f"{'req/s':>10} {'p50 us':>9} {'p99 us':>9} ok", file=sys.stderr)
bad = 0
for r in recs:
    if r.get("bench") != "te":
        continue
    ok = r.get("verified") and "error" not in r
    bad += not ok
    print(f"  {r['protocol']:<5} {r['op']:<5} {size(r['block']):>8} {r['batch']:>5} "
          f"{r['threads']:>3} {r['gib_s']:8.2f} {r['req_s']:10.0f} {r['p50_us']:9.1f} "
          f"{r['p99_us']:9.1f} {'yes' if ok else 'NO ' + r.get('error', 'unverified')}",
          file=sys.stderr)
for r in recs:
    if r.get("bench") == "te_ratio":
        print(f"  {r['name']:<42} {r['value']:7.3f} (>= {r['target']}) "
              f"{'PASS' if r['pass'] else 'MISS'}", file=sys.stderr)
    if r.get("bench") == "te_soak":
        print(f"  soak {r['seconds']:.0f} s: errors {r['errors']}, verify failures "
              f"{r['verify_failures']}, RSS initiator {r['initiator_rss_kb_start']} -> "
              f"{r['initiator_rss_kb_end']} KiB, target {r['target_rss_kb_start']} -> "
              f"{r['target_rss_kb_end']} KiB", file=sys.stderr)
print(f"bench.sh: {len(lines)} JSON lines appended to {results}; "
      f"{bad} case(s) failed", file=sys.stderr)
PY
exit "$rc"

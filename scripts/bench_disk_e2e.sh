#!/usr/bin/env bash
# Gets served from the disk tier through a real cluster next to fio, in the same run and the
# same directory (docs/benchmarks.md, "Disk tier"): mc_disk_e2e_bench (a master, a storage
# server whose objects are all disk-only after a restart, a reader: 4 MiB and 32 MiB gets at
# queue depth 1 and one batch get of 64 x 4 MiB), then fio --direct=1 --ioengine=io_uring
# reading the same block sizes at depth 1 and 64 on a file in the same directory. Appends every
# JSON line to a results file after a header line and prints "disk_e2e_ratio" lines
# (store GB/s / fio GB/s).
#
# Environment:
#   MC_BIN_DIR            where the programs are (default build/bin)
#   MC_BENCH_RESULTS      results file (default <build>/bench-results/disk_e2e.jsonl)
#   MC_BENCH_DISK_DIR     directory on the disk to measure (default $TMPDIR or /var/tmp)
#   MC_BENCH_DISK_COUNT   objects per size (default 8);  MC_BENCH_DISK_REPS  reads each (2)
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/bench.sh"
mc_bench_setup mc_disk_e2e_bench disk_e2e.jsonl
command -v fio >/dev/null || { echo "bench_disk_e2e.sh: fio not found" >&2; exit 1; }
parent="${MC_BENCH_DISK_DIR:-${TMPDIR:-/var/tmp}}"
dir="$(mktemp -d "$parent/mc_disk_e2e.XXXXXX")"
trap 'rm -rf "$dir"' EXIT
count="${MC_BENCH_DISK_COUNT:-8}" reps="${MC_BENCH_DISK_REPS:-2}"
args=(--dir="$dir" --sizes=4MiB,32MiB --count="$count" --reps="$reps" --batch=64)
out="$dir/out.jsonl"
printf '{"bench":"header","label":"disk_e2e","cmd":"mc_disk_e2e_bench %s; fio --direct=1 --ioengine=io_uring --rw=read --bs=4m,32m --iodepth=1,64","date":"%s","load":"%s","fio":"%s"}\n' \
    "${args[*]}" "$(date -u +%FT%TZ)" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(fio --version)" \
    | tee -a "$results"
MC_BIN_DIR="$bin" MC_LOG_LEVEL=warn "$bench" "${args[@]}" | grep '^{' >"$out"
fio_gbps() { # bs total depth -> GB/s (1e9 bytes/s) of a sequential O_DIRECT read
  fio --name=e2e --filename="$dir/fio.dat" --size="$2" --bs="$1" --rw=read --direct=1 \
      --ioengine=io_uring --iodepth="$3" --loops="$reps" --invalidate=1 --output-format=json \
      2>/dev/null | /usr/bin/python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"] / 1e9))'
}
f4=$(fio_gbps 4m $((count * 4))m 1)
f32=$(fio_gbps 32m $((count * 32))m 1)
f64=$(fio_gbps 4m 256m 64)
{
  cat "$out"
  echo "{\"bench\":\"disk_e2e_fio\",\"value\":4194304,\"depth\":1,\"gbps\":$f4}"
  echo "{\"bench\":\"disk_e2e_fio\",\"value\":33554432,\"depth\":1,\"gbps\":$f32}"
  echo "{\"bench\":\"disk_e2e_fio\",\"value\":4194304,\"depth\":64,\"gbps\":$f64}"
  /usr/bin/python3 - "$out" "$f4" "$f32" "$f64" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
f4, f32, f64 = map(float, sys.argv[2:5])
for r in rows:
    if r["bench"] == "disk_e2e_get":
        f = f4 if r["value"] == 4194304 else f32
        print(json.dumps({"bench": "disk_e2e_ratio", "case": "get", "value": r["value"],
                          "store_gbps": r["gbps"], "fio_gbps": f, "ratio": round(r["gbps"] / f, 3)}))
    elif r["bench"] == "disk_e2e_batch":
        print(json.dumps({"bench": "disk_e2e_ratio", "case": "batch", "value": r["value"], "n": r["n"],
                          "store_gbps": r["gbps"], "fio_gbps": f64, "ratio": round(r["gbps"] / f64, 3)}))
PY
} | tee -a "$results"
echo "results appended to $results"

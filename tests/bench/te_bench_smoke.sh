#!/usr/bin/env bash
# Smoke test of mc_te_bench with tiny sizes:
#  1. --role all over tcp and shm (shareable target memory): every expected case prints one JSON
#     line that parses, has the documented fields, moved bytes, and "verified": true.
#  2. separate processes: a target started here (malloc memory, so shm uses process_vm_*),
#     an initiator pointed at its segment, and a 2-second soak; the target is stopped by PID.
set -euo pipefail
bin="${MC_BIN_DIR:?MC_BIN_DIR not set}"
bench="$bin/mc_te_bench"
py=/usr/bin/python3
work="$(mktemp -d)"
target_pid=""
cleanup() {
    if [[ -n "$target_pid" ]]; then kill -KILL "$target_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

check() { # check FILE EXPECTED_TE_LINES [EXPECT_SOAK]
    "$py" - "$@" <<'PY'
import json, sys
path, expected = sys.argv[1], int(sys.argv[2])
want_soak = len(sys.argv) > 3
te, soak = [], []
for line in open(path):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)  # every line must parse
    if r["bench"] == "te":
        te.append(r)
    elif r["bench"] == "te_soak":
        soak.append(r)
fields = ["bench", "op", "block", "batch", "threads", "protocol", "gib_s", "req_s",
          "p50_us", "p99_us", "date", "host"]
errors = []
if len(te) != expected:
    errors.append(f"expected {expected} te lines, got {len(te)}")
for r in te:
    missing = [f for f in fields if f not in r]
    if missing:
        errors.append(f"missing fields {missing} in {r}")
    if r.get("verified") is not True or "error" in r:
        errors.append(f"not verified: {r}")
    if r.get("bytes") != r["batches"] * r["block"] * r["batch"] or r["bytes"] <= 0:
        errors.append(f"byte count wrong: {r}")
    if not (r["gib_s"] > 0 and r["req_s"] > 0 and 0 < r["p50_us"] <= r["p99_us"]):
        errors.append(f"implausible figures: {r}")
if want_soak:
    if len(soak) != 1:
        errors.append(f"expected one te_soak line, got {len(soak)}")
    else:
        s = soak[0]
        if s["errors"] or s["verify_failures"] or s["transfers"] <= 0 or s["verified_batches"] <= 0:
            errors.append(f"soak failed: {s}")
        if s["target_rss_kb_start"] <= 0 or s["initiator_rss_kb_end"] <= 0:
            errors.append(f"soak RSS missing: {s}")
if errors:
    print("\n".join(errors))
    sys.exit(1)
print(f"ok: {len(te)} te lines verified" + (", soak ok" if want_soak else ""))
PY
}

# 1. all-in-one: 2 protocols x 2 ops x 2 blocks x 2 batches x 2 thread counts = 32 cases.
timeout 90 "$bench" --role all --protocol tcp,shm --op read,write --block_sizes 4K,256K \
    --batch_size 1,8 --threads 1,2 --iterations 20 --buffer_size 8M >"$work/all.jsonl" \
    2>"$work/all.err" || { cat "$work/all.err"; exit 1; }
check "$work/all.jsonl" 32

# 2. separate target process with malloc memory; initiator by segment name; short soak.
# The output file exists before the poll below reads it (the background job's redirect may
# not have run yet, and a failing read would end this script under set -e).
: >"$work/target.out"
"$bench" --role target --buffer_size 8M --target_mem malloc >"$work/target.out" \
    2>"$work/target.err" &
target_pid=$!
segment=""
deadline=$((SECONDS + 20))
while [[ -z "$segment" && $SECONDS -lt $deadline ]]; do
    segment="$(awk '$1 == "SEGMENT" {print $2; exit}' "$work/target.out")"
    kill -0 "$target_pid" 2>/dev/null || { cat "$work/target.err"; exit 1; }
    [[ -n "$segment" ]] || sleep 0.05
done
[[ -n "$segment" ]] || { echo "target did not report its segment"; exit 1; }
timeout 60 "$bench" --role initiator --target "$segment" --target_pid "$target_pid" \
    --target_mem malloc --buffer_size 8M --protocol tcp,shm --op read,write --block_sizes 64K \
    --batch_size 4 --threads 1 --duration 0.2 --soak 2 --soak_threads 2 >"$work/init.jsonl" \
    2>"$work/init.err" || { cat "$work/init.err"; exit 1; }
check "$work/init.jsonl" 4 soak

# The target must shut down cleanly on SIGTERM.
kill -TERM "$target_pid"
rc=0
wait "$target_pid" || rc=$?
target_pid=""
[[ $rc -eq 0 ]] || { echo "target exited with $rc"; cat "$work/target.err"; exit 1; }
echo "te_bench_smoke: ok"

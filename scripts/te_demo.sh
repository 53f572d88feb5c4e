#!/usr/bin/env bash
# `make te-demo`: the Transfer Engine moving data between two processes on loopback.
# Starts a target process and an initiator process (build/bin/mc_te_demo), moves data both
# ways over tcp and shm, verifies it, prints a throughput table, and stops the target by PID.
# Exit status 0 only if every transfer verified and the target saw exactly the bytes written.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${MC_BIN_DIR:-$root/build/bin}"
demo="$bin/mc_te_demo"
size_mib="${MC_DEMO_SIZE_MIB:-64}"
[[ -x "$demo" ]] || { echo "te_demo.sh: $demo not built (run 'make build')" >&2; exit 1; }

work="$(mktemp -d)"
target_pid=""
cleanup() {
    if [[ -n "$target_pid" ]] && kill -0 "$target_pid" 2>/dev/null; then
        kill -TERM "$target_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$target_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$target_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

echo "== Mooncake-C Transfer Engine demo: two processes on 127.0.0.1, tcp and shm =="
: >"$work/target.out" # exists before the poll reads it (the job's redirect may come later)
"$demo" target "$size_mib" >"$work/target.out" 2>"$work/target.err" &
target_pid=$!

# Wait (with a deadline) for the target to publish its segment.
segment=""
for _ in $(seq 200); do
    segment="$(awk '$1 == "SEGMENT" {print $2; exit}' "$work/target.out")"
    [[ -n "$segment" ]] && break
    kill -0 "$target_pid" 2>/dev/null || break
    sleep 0.05
done
if [[ -z "$segment" ]]; then
    echo "te_demo.sh: the target did not start" >&2
    cat "$work/target.err" >&2
    exit 1
fi
echo "target: pid $target_pid, segment $segment, ${size_mib} MiB of shareable memory"

rc=0
timeout 50 "$demo" initiator "$segment" "$size_mib" >"$work/initiator.out" 2>"$work/initiator.err" || rc=$?
grep -v '^EXPECT_TARGET_HASH' "$work/initiator.out" || true
if [[ $rc -ne 0 ]]; then
    echo "te_demo.sh: initiator failed (exit $rc)" >&2
    cat "$work/initiator.err" >&2
fi

# Stop the target by PID; it prints the checksum of its buffer as it saw it.
kill -TERM "$target_pid"
trc=0
wait "$target_pid" || trc=$?
target_pid=""
expect="$(awk '$1 == "EXPECT_TARGET_HASH" {print $2}' "$work/initiator.out")"
got="$(awk '$1 == "TARGET_HASH" {print $2}' "$work/target.out")"
if [[ $trc -ne 0 ]]; then
    echo "te_demo.sh: target exited with $trc" >&2
    cat "$work/target.err" >&2
    rc=1
fi
if [[ -n "$expect" && "$expect" == "$got" ]]; then
    echo "target: its buffer checksum after shutdown matches what the initiator wrote ($got)"
else
    echo "te_demo.sh: target checksum '$got' != expected '$expect'" >&2
    rc=1
fi
[[ $rc -eq 0 ]] && echo "== demo OK: both processes shut down cleanly ==" || echo "== demo FAILED ==" >&2
exit $rc

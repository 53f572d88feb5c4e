#!/usr/bin/env bash
# transfer_engine_bench (upstream's flags) run directly, so that sanitizer builds check it too
# (tests/python/test_cli.py runs it through the installed console script):
#  1. a target on loopback reports its segment; an initiator writes with --verify and reads,
#     each for 1 s over tcp, and prints upstream's result line in the asked unit;
#  2. an initiator asking for more than the target registered fails with exit 1 and says why;
#  3. refused flags exit 2 with a message naming them;
#  4. the target stops cleanly on SIGTERM (exit 0).
set -euo pipefail
bench="${MC_BIN_DIR:?MC_BIN_DIR not set}/transfer_engine_bench"
work="$(mktemp -d)"
target_pid=""
cleanup() {
    if [[ -n "$target_pid" ]]; then kill -KILL "$target_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*; do echo "--- $f"; cat "$f"; done; exit 1; }

common=(--local_server_name=127.0.0.1 --protocol=tcp --threads=2 --batch_size=8
        --block_size=64KB)
: >"$work/target.out" # exists before the poll reads it (the job's redirect may come later)
"$bench" --mode=target "${common[@]}" --buffer_size=1MB >"$work/target.out" \
    2>"$work/target.err" &
target_pid=$!
segment=""
deadline=$((SECONDS + 20))
while [[ -z "$segment" && $SECONDS -lt $deadline ]]; do
    segment="$(sed -n 's/^transfer_engine_bench ready segment=\([^ ]*\) buffer_size=1048576$/\1/p' \
        "$work/target.out")"
    kill -0 "$target_pid" 2>/dev/null || fail "target exited"
    [[ -n "$segment" ]] || sleep 0.05
done
[[ -n "$segment" ]] || fail "target did not report its segment"

result='^Test completed: duration [0-9]+\.[0-9]{2}, batch count [1-9][0-9]*, throughput [0-9]+\.[0-9]{3} '
timeout 60 "$bench" --mode=initiator "${common[@]}" --segment_id="$segment" --buffer_size=1MB \
    --operation=write --duration=1 --report_unit=MiB --report_precision=3 --verify \
    >"$work/write.out" 2>"$work/write.err" || fail "write run failed"
grep -Eq "${result}MiB/s\$" "$work/write.out" || fail "no result line (write)"
grep -q '^Verify: 1048576 bytes written to and read back from .*: ok$' "$work/write.out" ||
    fail "no verify line"
timeout 60 "$bench" --mode=initiator "${common[@]}" --segment_id="$segment" --buffer_size=1MB \
    --operation=read --duration=1 --report_unit=Gb --report_precision=3 \
    >"$work/read.out" 2>"$work/read.err" || fail "read run failed"
grep -Eq "${result}Gb/s\$" "$work/read.out" || fail "no result line (read)"

# 2. four threads need 2 MiB of the target's 1 MiB
rc=0
timeout 60 "$bench" --mode=initiator --local_server_name=127.0.0.1 --segment_id="$segment" \
    --threads=4 --batch_size=8 --block_size=64KB --duration=1 >"$work/big.out" \
    2>"$work/big.err" || rc=$?
[[ $rc -eq 1 ]] || fail "too big a range: exit $rc, want 1"
grep -q "failed: OUT_OF_RANGE.*--buffer_size at least 2097152" "$work/big.err" ||
    fail "too big a range: no reason given"

# 3. refused flags
for args in "--protocol=rdma:rdma" "--backend=tent:tent" "--mode=client:--mode" \
            "--report_unit=TB:report_unit" "--batch_size=0:batch_size" \
            "--mode=initiator:--segment_id"; do
    flag="${args%%:*}" word="${args##*:}"
    rc=0
    "$bench" "$flag" >/dev/null 2>"$work/refused.err" || rc=$?
    [[ $rc -eq 2 ]] || fail "$flag: exit $rc, want 2"
    grep -q -- "$word" "$work/refused.err" || fail "$flag: message does not name $word"
done
rm -f "$work/refused.err"

# A metadata URI's password never shows in an error message (nothing listens on port 1).
rc=0
"$bench" --mode=target --metadata_server='redis://user:s3cr3t-pw@127.0.0.1:1' \
    >/dev/null 2>"$work/secret.err" || rc=$?
[[ $rc -ne 0 ]] || fail "target started without its metadata server"
grep -q 'redis://\*\*\*@127.0.0.1:1' "$work/secret.err" || fail "no redacted URI: $(cat "$work/secret.err")"
if grep -q 's3cr3t-pw' "$work/secret.err"; then fail "the password shows in stderr"; fi
rm -f "$work/secret.err"

# 4. clean stop
kill -TERM "$target_pid"
rc=0
wait "$target_pid" || rc=$?
target_pid=""
[[ $rc -eq 0 ]] || fail "target exited with $rc on SIGTERM"
echo "te_bench_upstream_flags: ok"

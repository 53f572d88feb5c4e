#!/usr/bin/env bash
# `make bench-auth`: what authentication costs. Runs the Transfer Engine, store and master
# benchmarks with authentication off and on, interleaved (off, on, off, on, ...) so that both
# see the same machine, and prints the on/off ratio of the medians for each figure:
#   te        mc_te_bench --role all --protocol tcp --op read: 4 KiB x 128 (req/s), 32 MiB x 1 (GiB/s)
#   store     mc_store_bench --peers --transport=tcp --cases=4k128,32m1: the paired ratios
#             (store vs the Redis / memcached peer measured around it), warm and first read
#   master    mc_master_bench --phase rpc: batch GetReplicaList and ExistKey keys/s
# "On" = every process proves a token from a fresh 0600 token file (MC_AUTH_TOKEN_FILE):
# the handshake at every connection setup and signed descriptors; nothing per request.
#
# Environment:
#   MC_BIN_DIR            where the programs are (default build/bin)
#   MC_BENCH_RESULTS      results file to append to (default <build>/bench-results/auth.jsonl)
#   MC_BENCH_AUTH_RUNS    off/on pairs (default 3)
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/bench.sh"
mc_bench_setup mc_te_bench auth.jsonl
runs="${MC_BENCH_AUTH_RUNS:-3}"
py=/usr/bin/python3

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
token="$work/token"
(umask 077 && head -c 32 /dev/urandom | base64 >"$token")

# one <label> <auth off|on> <program args...>: tags every JSON line with the label and auth mode
one() {
    local label="$1" mode="$2"
    shift 2
    local out="$work/out"
    printf '{"bench":"header","label":"%s","auth_mode":"%s","cmd":"%s","date":"%s","load":"%s"}\n' \
        "$label" "$mode" "$*" "$(date -u +%FT%TZ)" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$results"
    if [[ "$mode" == on ]]; then
        MC_AUTH_TOKEN_FILE="$token" "$@" >"$out" 2>"$work/err" || { cat "$work/err" >&2; return 1; }
    else
        env -u MC_AUTH_TOKEN_FILE "$@" >"$out" 2>"$work/err" || { cat "$work/err" >&2; return 1; }
    fi
    grep '^{' "$out" | sed "s/^{/{\"label\":\"$label\",\"auth_mode\":\"$mode\",/" >>"$results"
}

start_line=1
[[ -f "$results" ]] && start_line=$(($(wc -l <"$results") + 1))
for i in $(seq "$runs"); do
    for mode in off on; do
        echo "== round $i, authentication $mode"
        one te "$mode" "$bin/mc_te_bench" --role all --protocol tcp --op read --block_sizes 4K \
            --batch_size 128 --threads 1 --duration 2
        one te "$mode" "$bin/mc_te_bench" --role all --protocol tcp --op read --block_sizes 32M \
            --batch_size 1 --threads 1 --duration 2
        one store "$mode" "$bin/mc_store_bench" --peers --transport=tcp --cases=4k128,32m1 \
            --get_rounds=4
        one master "$mode" "$bin/mc_master_bench" --phase rpc --lookup-objects 200000 \
            --seconds 3 --batch 128 --window 8
    done
done

tail -n +"$start_line" "$results" | "$py" -c '
import json, statistics, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
fig = {}
def add(name, mode, v):
    fig.setdefault(name, {"off": [], "on": []})[mode].append(v)
for r in rows:
    m = r.get("auth_mode")
    if r.get("bench") == "te" and r.get("op") == "read":
        if r["block"] == 4096:
            add("te_read_4k_x128_req_s", m, r["req_s"])
        elif r["block"] == 32 << 20:
            add("te_read_32m_gib_s", m, r["gib_s"])
    elif r.get("bench") == "store_paired" and r.get("threads") == 1:
        case = "4k128" if r["value"] == 4096 else "32m1"
        add(f"store_{case}_warm_vs_peer", m, r["warm_ratio"])
        add(f"store_{case}_first_vs_peer", m, r["cold_ratio"])
    elif str(r.get("bench", "")).startswith("master_rpc_batch_") and "keys_per_s" in r:
        add(r["bench"] + "_keys_per_s", m, r["keys_per_s"])
for name, v in sorted(fig.items()):
    if not v["off"] or not v["on"]:
        continue
    off, on = statistics.median(v["off"]), statistics.median(v["on"])
    line = {"bench": "auth_overhead", "figure": name, "median_off": off, "median_on": on,
            "on_vs_off": round(on / off, 3) if off else None, "runs": len(v["on"])}
    print(json.dumps(line))
' | tee -a "$results"
echo "results appended to $results"

#!/usr/bin/env bash
# A real Prometheus (Debian's `prometheus`) scrapes mooncake_master's /metrics; after a
# workload puts objects, the scraped master_key_count must rise above zero.
# Everything runs on loopback with free ports and is stopped by PID.
set -euo pipefail
BIN=${MC_BIN_DIR:?}
TRACE=${MC_SOURCE_DIR:?}/../shared/traces/conversation_trace.jsonl
command -v prometheus >/dev/null || { echo "FAIL: prometheus not installed (scripts/install-deps.sh)"; exit 1; }
work=$(mktemp -d /tmp/mc_prom.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { # seconds command...
  local t=$1; shift
  for _ in $(seq 1 $((t * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}

rpc=$(free_port); metrics=$(free_port); prom=$(free_port)
"$BIN/mooncake_master" --port="$rpc" --metrics_port="$metrics" --wal_dir="$work/wal" \
  --log_level=warn >"$work/master.log" 2>&1 &
pids+=($!)
wait_for 10 curl -sf "http://127.0.0.1:$metrics/health" || { cat "$work/master.log"; echo "FAIL: master"; exit 1; }

cat >"$work/prometheus.yml" <<YML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: mooncake_master
    static_configs:
      - targets: ['127.0.0.1:$metrics']
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom" >"$work/prom.log" 2>&1 &
pids+=($!)

query() { # prints the value of master_key_count as scraped by Prometheus, or nothing
  curl -sf "http://127.0.0.1:$prom/api/v1/query?query=master_key_count" |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'
}
has_value() { [ -n "$(query)" ]; }
wait_for 60 has_value || { tail -20 "$work/prom.log"; echo "FAIL: prometheus never scraped the master"; exit 1; }
before=$(query)
echo "scraped master_key_count before workload: $before"

"$BIN/mooncake_client" --master_server_address="127.0.0.1:$rpc" --global_segment_size=64MB \
  --log_level=warn >"$work/server.log" 2>&1 &
pids+=($!)
wait_for 20 grep -q ready "$work/server.log" || { cat "$work/server.log"; echo "FAIL: storage server"; exit 1; }
"$BIN/mc_store_replay" --trace="$TRACE" --master_server_address="127.0.0.1:$rpc" \
  --requests=20 --block_bytes=16KiB --threads=1 >"$work/replay.log" 2>&1 || { cat "$work/replay.log"; exit 1; }

rose() { v=$(query); [ -n "$v" ] && /usr/bin/python3 -c "import sys; sys.exit(0 if float('$v') > float('$before') else 1)"; }
wait_for 30 rose || { echo "FAIL: master_key_count did not rise (still $(query))"; exit 1; }
echo "scraped master_key_count after workload: $(query)"
echo "1 passed, 0 failed"

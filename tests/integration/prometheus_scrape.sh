#!/usr/bin/env bash
# A real Prometheus (Debian's `prometheus`) scrapes mooncake_master's /metrics; after a
# workload puts objects, the scraped master_key_count must rise above zero, and Prometheus must
# hold series under upstream Mooncake's newer names: the value-size histogram and the
# per-segment capacity gauge (a label value, parsed by Prometheus itself).
# Everything runs on loopback with free ports and is stopped by PID.
set -euo pipefail
BIN=${MC_BIN_DIR:?}
TRACE=${MC_SOURCE_DIR:?}/data/traces/conversation_trace.jsonl
command -v prometheus >/dev/null || { echo "FAIL: prometheus not installed (scripts/install-deps.sh)"; exit 1; }
# shellcheck source=../../scripts/lib/cluster.sh
. "$MC_SOURCE_DIR/scripts/lib/cluster.sh"
mc_cluster_init mc_prom
work=$MC_WORK
rpc=$(mc_free_port); metrics=$(mc_free_port); prom=$(mc_free_port)
mc_start_master master "$rpc" --metrics_port="$metrics" || { echo "FAIL: master"; exit 1; }
mc_wait_cmd 10 curl -sf "http://127.0.0.1:$metrics/health" || { cat "$work/master.log"; echo "FAIL: master health"; exit 1; }

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
MC_PIDS+=($!)

query() { # prints the value of the PromQL expression $1 (default master_key_count), or nothing
  curl -sfG "http://127.0.0.1:$prom/api/v1/query" --data-urlencode "query=${1:-master_key_count}" |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'
}
has_value() { [ -n "$(query)" ]; }
mc_wait_cmd 60 has_value || { tail -20 "$work/prom.log"; echo "FAIL: prometheus never scraped the master"; exit 1; }
before=$(query)
echo "scraped master_key_count before workload: $before"

mc_start_server server "127.0.0.1:$rpc" --global_segment_size=64MB || { echo "FAIL: storage server"; exit 1; }
"$BIN/mc_store_replay" --trace="$TRACE" --master_server_address="127.0.0.1:$rpc" \
  --requests=20 --block_bytes=16KiB --threads=1 >"$work/replay.log" 2>&1 || { cat "$work/replay.log"; exit 1; }

rose() { v=$(query); [ -n "$v" ] && /usr/bin/python3 -c "import sys; sys.exit(0 if float('$v') > float('$before') else 1)"; }
mc_wait_cmd 30 rose || { echo "FAIL: master_key_count did not rise (still $(query))"; exit 1; }
echo "scraped master_key_count after workload: $(query)"

# upstream-named series: one histogram observation per committed put, and the segment's capacity
positive() { v=$(query "$1"); [ -n "$v" ] && /usr/bin/python3 -c "import sys; sys.exit(0 if float('$v') > 0 else 1)"; }
mc_wait_cmd 30 positive master_value_size_bytes_count ||
  { echo "FAIL: no master_value_size_bytes_count > 0 in Prometheus ($(query master_value_size_bytes_count))"; exit 1; }
echo "scraped master_value_size_bytes_count: $(query master_value_size_bytes_count)"
mc_wait_cmd 30 positive 'sum(segment_total_capacity_bytes{segment!=""})' ||
  { echo "FAIL: no segment_total_capacity_bytes{segment=...} series in Prometheus"; exit 1; }
echo "scraped segment_total_capacity_bytes: $(query 'sum(segment_total_capacity_bytes)') bytes over $(query 'count(segment_total_capacity_bytes)') segment(s)"
echo "1 passed, 0 failed"

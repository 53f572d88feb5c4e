# Shell helpers for scripts and tests that run a Mooncake-C cluster on loopback.
# Source it, then: mc_cluster_init (temp dir + cleanup trap), mc_start_master,
# mc_start_server, mc_stop_all. Daemons are stopped by PID, never by name.
# Needs: BIN (directory of the programs).

MC_PIDS=()
MC_WORK=""

mc_free_port() {
  /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/free_port.py"
}

# mc_wait_log FILE PATTERN SECONDS [PID]: poll FILE until PATTERN appears; fail early if PID died.
mc_wait_log() {
  local deadline=$((SECONDS + $3))
  while [ $SECONDS -lt $deadline ]; do
    grep -q "$2" "$1" 2>/dev/null && return 0
    if [ -n "${4:-}" ] && ! kill -0 "$4" 2>/dev/null; then
      echo "process $4 exited before '$2'; its log:" >&2; cat "$1" >&2; return 1
    fi
    sleep 0.05
  done
  echo "timed out waiting for '$2' in $1" >&2; cat "$1" >&2; return 1
}

# mc_wait_cmd SECONDS COMMAND...: retry COMMAND until it succeeds or SECONDS pass.
mc_wait_cmd() {
  local t=$1; shift
  for _ in $(seq 1 $((t * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}

mc_stop_all() {
  local p
  for p in "${MC_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${MC_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  MC_PIDS=()
}

# mc_cluster_init PREFIX: a temp work dir in MC_WORK, removed (after stopping every daemon
# started through these helpers) when the script exits.
mc_cluster_init() {
  MC_WORK=$(mktemp -d "/tmp/$1.XXXXXX")
  trap 'mc_stop_all; rm -rf "$MC_WORK"' EXIT
}

# mc_start_master NAME PORT [FLAGS...]: mooncake_master on PORT with its WAL in MC_WORK/NAME.wal,
# log in MC_WORK/NAME.log; waits until it listens.
mc_start_master() {
  local name=$1 port=$2; shift 2
  "$BIN/mooncake_master" --port="$port" --metrics_port=0 --wal_dir="$MC_WORK/$name.wal" \
    --log_level=warn "$@" >"$MC_WORK/$name.log" 2>&1 &
  MC_PIDS+=($!)
  mc_wait_log "$MC_WORK/$name.log" "listening" 10 $!
}

# mc_start_server NAME MASTER_ADDR [FLAGS...]: a mooncake_client storage server; waits until
# its segment is mounted.
mc_start_server() {
  local name=$1 master=$2; shift 2
  "$BIN/mooncake_client" --master_server_address="$master" --log_level=warn "$@" \
    >"$MC_WORK/$name.log" 2>&1 &
  MC_PIDS+=($!)
  mc_wait_log "$MC_WORK/$name.log" "mooncake_client ready" 20 $!
}

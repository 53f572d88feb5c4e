#!/usr/bin/env bash
# mooncake_master's write-ahead log directory:
#  - the default (--wal_dir=auto) is the user's state directory, nothing is written into the
#    working directory (here: $HOME/.local/state/mooncake/master for an unprivileged user);
#  - a second master on the same directory refuses to start (exit 1, a message naming the
#    directory), the first keeps serving;
#  - --wal_dir="" writes nothing and logs that metadata will not survive a restart.
# Masters are stopped by PID.
set -euo pipefail
BIN=${MC_BIN_DIR:?MC_BIN_DIR not set}
TMP=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
wait_line() { # file pattern
  for _ in $(seq 100); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  fail "no '$2' in $1: $(cat "$1")"
}
# Run as an unprivileged user when we are root (root's default is /var/lib/mooncake/master,
# which a test must not touch).
as_user=()
if [ "$(id -u)" -eq 0 ]; then
  command -v setpriv >/dev/null || fail "setpriv (util-linux) needed to test the default as a user"
  as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  chmod 755 "$TMP"
fi
mkdir -p "$TMP/home" "$TMP/cwd"
# A copy the unprivileged user can run wherever the build tree is (e.g. under /root).
cp "$BIN/mooncake_master" "$TMP/mooncake_master"
chmod 755 "$TMP/mooncake_master"
chmod 777 "$TMP/home" "$TMP/cwd"

# 1. default directory, nothing in the working directory
(cd "$TMP/cwd" && exec env HOME="$TMP/home" XDG_STATE_HOME= "${as_user[@]}" \
  "$TMP/mooncake_master" --port=0 --metrics_port=-1 >"$TMP/m1.out" 2>"$TMP/m1.err") &
pids+=($!)
wait_line "$TMP/m1.err" "wal_dir '$TMP/home/.local/state/mooncake/master'"
[ -f "$TMP/home/.local/state/mooncake/master/LOCK" ] || fail "no LOCK in the default wal_dir"
[ -z "$(ls -A "$TMP/cwd")" ] || fail "master wrote into its working directory: $(ls -A "$TMP/cwd")"

# 2. a second master on the same directory is refused, the first keeps running
rc=0
(cd "$TMP/cwd" && env HOME="$TMP/home" XDG_STATE_HOME= "${as_user[@]}" \
  "$TMP/mooncake_master" --port=0 --metrics_port=-1 >"$TMP/m2.out" 2>"$TMP/m2.err") || rc=$?
[ "$rc" -eq 1 ] || fail "second master on the same wal_dir exited $rc (want 1)"
grep -q "is in use by another master" "$TMP/m2.err" || fail "no clear message: $(cat "$TMP/m2.err")"
kill -0 "${pids[0]}" || fail "the first master died"

# 3. --wal_dir="" keeps nothing and says so
(cd "$TMP/cwd" && exec "$BIN/mooncake_master" --port=0 --metrics_port=-1 --wal_dir= \
  >"$TMP/m3.out" 2>"$TMP/m3.err") &
pids+=($!)
wait_line "$TMP/m3.err" "lost when this master restarts"
[ -z "$(ls -A "$TMP/cwd")" ] || fail "master with --wal_dir=\"\" wrote into its working directory"
echo "master wal_dir: ok"

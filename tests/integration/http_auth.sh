#!/usr/bin/env bash
# Signed HTTP (Mooncake challenge-response) on every HTTP surface, driven with plain curl
# (anonymous) and mooncake_auth_curl (signed):
#   - mooncake_http_metadata_server --auth_token_file: anonymous and wrong-token GET/PUT/DELETE
#     get 401 and change nothing; the right token works;
#   - mooncake_master --auth_token_file: admin queries and /metrics refuse anonymous callers
#     (every method) and answer mooncake_auth_curl; with --metrics_public /metrics and /health
#     are open while the queries stay closed;
#   - mooncake_client with MC_AUTH_TOKEN_FILE and --enable_http_server: the same.
# Loopback only, free ports, daemons stopped by PID.
set -euo pipefail
BIN=${MC_BIN_DIR:?}
# shellcheck source=../../scripts/lib/cluster.sh
. "$MC_SOURCE_DIR/scripts/lib/cluster.sh"
mc_cluster_init mc_http_auth
work=$MC_WORK
fail() { echo "FAIL: $*" >&2; exit 1; }
tok=$work/token; bad=$work/wrong
echo "http-auth-cluster-secret-0123" >"$tok"; echo "some-other-secret-0123456789" >"$bad"
chmod 600 "$tok" "$bad"
acurl() { "$BIN/mooncake_auth_curl" --auth_token_file="$tok" "$@"; }
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }  # anonymous request: HTTP status
want() { # want CODE DESCRIPTION CURL-ARGS...
  local w=$1 what=$2; shift 2
  local got; got=$(code "$@")
  [ "$got" = "$w" ] || fail "$what: HTTP $got, want $w"
}

# ---- HTTP metadata server
mport=$(mc_free_port)
"$BIN/mooncake_http_metadata_server" --host=127.0.0.1 --port="$mport" --auth_token_file="$tok" \
  --log_level=warn >"$work/meta.log" 2>&1 &
MC_PIDS+=($!)
mc_wait_cmd 10 curl -sf "http://127.0.0.1:$mport/health" || fail "metadata server did not start"
url="http://127.0.0.1:$mport/metadata?key=seg"
acurl -X PUT -d '{"real":1}' "$url" >/dev/null || fail "signed PUT"
want 401 "anonymous GET" "$url"
want 401 "anonymous PUT" -X PUT --data '{"forged":1}' "$url"
want 401 "anonymous DELETE" -X DELETE "$url"
curl -s -D "$work/hdr" -o /dev/null "$url" || true
grep -qi '^WWW-Authenticate: Mooncake nonce="' "$work/hdr" ||
  fail "401 without a Mooncake challenge"
rc=0; "$BIN/mooncake_auth_curl" --auth_token_file="$bad" -X PUT -d '{"forged":2}' "$url" \
  >/dev/null 2>"$work/bad.err" || rc=$?
[ "$rc" = 22 ] && grep -q "HTTP 401" "$work/bad.err" || fail "wrong token: exit $rc, $(cat "$work/bad.err")"
[ "$(acurl "$url")" = '{"real":1}' ] || fail "value changed by refused requests: $(acurl "$url")"
acurl -X DELETE "$url" >/dev/null || fail "signed DELETE"
rc=0; acurl "$url" >/dev/null 2>"$work/gone.err" || rc=$?
[ "$rc" = 22 ] && grep -q "HTTP 404" "$work/gone.err" || fail "deleted key: exit $rc"
echo "metadata server: ok"

# ---- master admin/metrics HTTP
rpc=$(mc_free_port); mhttp=$(mc_free_port)
mc_start_master master "$rpc" --metrics_port="$mhttp" --metrics_host=127.0.0.1 \
  --auth_token_file="$tok" || fail "master"
base="http://127.0.0.1:$mhttp"
for path in /get_all_keys "/query_key?key=k" /get_all_segments /metrics /metrics/summary /health; do
  want 401 "anonymous master GET $path" "$base$path"
done
want 401 "anonymous master DELETE" -X DELETE "$base/query_key?key=k"
want 401 "anonymous master POST" -X POST --data x "$base/get_all_keys"
acurl "$base/get_all_keys" >/dev/null || fail "signed /get_all_keys"
acurl "$base/metrics" >"$work/m.txt" && grep -q '^master_key_count ' "$work/m.txt" ||
  fail "signed /metrics"
rc=0; acurl "$base/query_key?key=absent" >/dev/null 2>"$work/q.err" || rc=$?
[ "$rc" = 22 ] && grep -q "HTTP 404" "$work/q.err" || fail "signed /query_key of an absent key: exit $rc"
rc=0; acurl -X DELETE "$base/query_key?key=k" >/dev/null 2>"$work/d.err" || rc=$?
[ "$rc" = 22 ] && grep -q "HTTP 405" "$work/d.err" || fail "signed DELETE: exit $rc (want 405)"
rc=0; "$BIN/mooncake_auth_curl" --auth_token_file="$bad" "$base/get_all_keys" >/dev/null 2>&1 || rc=$?
[ "$rc" = 22 ] || fail "wrong token accepted by the master (exit $rc)"
echo "master (closed): ok"
mc_stop_all

rpc=$(mc_free_port); mhttp=$(mc_free_port)
mc_start_master master2 "$rpc" --metrics_port="$mhttp" --metrics_host=127.0.0.1 \
  --auth_token_file="$tok" --metrics_public=true || fail "master --metrics_public"
base="http://127.0.0.1:$mhttp"
curl -sf "$base/metrics" >"$work/m2.txt" && grep -q '^master_key_count ' "$work/m2.txt" ||
  fail "--metrics_public: /metrics closed"
want 200 "--metrics_public: /health" "$base/health"
want 200 "--metrics_public: /metrics/summary" "$base/metrics/summary"
want 401 "--metrics_public: /get_all_keys" "$base/get_all_keys"
want 401 "--metrics_public: /query_key" "$base/query_key?key=k"
echo "master (--metrics_public): ok"

# ---- store client HTTP server
cport=$(mc_free_port)
MC_AUTH_TOKEN_FILE=$tok mc_start_server client "127.0.0.1:$rpc" --global_segment_size=16MB \
  --enable_http_server=true --http_port="$cport" || fail "storage server"
cbase="http://127.0.0.1:$cport"
want 401 "anonymous client /metrics" "$cbase/metrics"
want 401 "anonymous client /health" "$cbase/health"
acurl "$cbase/metrics" >/dev/null || fail "signed client /metrics"
acurl "$cbase/health" >"$work/h.txt" && grep -q healthy "$work/h.txt" ||
  fail "signed client /health: $(cat "$work/h.txt")"
echo "client HTTP: ok"
echo "1 passed, 0 failed"

#!/usr/bin/env bash
# Prefill/decode disaggregation with real compute (mc_engine_pd, src/engine/pd.h): for each
# request, a decode process waits for the hand-off, a prefill process prefills and stores the KV
# (complete blocks, the request-scoped tail block, the handoff record) through the store, the
# decode process fetches it and decodes DECODE tokens. The same requests run colocated (prefill
# and decode in one process, no store) for comparison; exits 1 unless every request's tokens and
# final-logits hash are the same in both modes.
#
# Hosts: as root with a working `ip netns`, the prefill and the decode process each run in their
# own network namespace (created here, named mcpd{p,d}<pid>), joined to this one by a veth pair
# (10.213.<pid mod 256>.0/30 and .4/30); the master and the storage server run here, the server's
# transfer address on the prefill link, reached by both namespaces. Otherwise every process
# runs on loopback. The first output line says which. Namespaces, links and processes are
# removed on exit, also on failure (trap).
#
# Usage: scripts/engine_pd.sh [BIN_DIR]   (default: $MC_BIN_DIR, else build/bin)
# Env:   PROMPTS ("1800 1536": one request per prompt length), DECODE (16), THREADS (2),
#        SEGMENT (512MB), ENGINE_FLAGS (extra mc_engine_pd flags, e.g. --tiny --block 16),
#        PD_NETNS (auto; 0 = loopback even as root), OUT_DIR (keep the JSON lines there)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-${MC_BIN_DIR:-$ROOT/build/bin}}
PROMPTS=${PROMPTS:-1800 1536}
DECODE=${DECODE:-16}
THREADS=${THREADS:-2}
SEGMENT=${SEGMENT:-512MB}
ENGINE_FLAGS=${ENGINE_FLAGS:-}
for t in mooncake_master mooncake_client mc_engine_pd; do
  [ -x "$BIN/$t" ] || { echo "engine_pd: $BIN/$t missing" >&2; exit 1; }
done
# shellcheck source=lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
mc_cluster_init mc_engine_pd
OUT=${OUT_DIR:-$MC_WORK/out}
mkdir -p "$OUT"

NSP=mcpdp$$ NSD=mcpdd$$ VP=mcpdP$$ VD=mcpdD$$
NETNS=0
cleanup() {
  mc_stop_all
  if [ "$NETNS" = 1 ]; then # a veth pair goes with either end; the namespaces after them
    ip link del "$VP" 2>/dev/null || true
    ip link del "$VD" 2>/dev/null || true
    ip netns del "$NSP" 2>/dev/null || true
    ip netns del "$NSD" 2>/dev/null || true
  fi
  rm -rf "$MC_WORK"
}
trap cleanup EXIT
if [ "${PD_NETNS:-auto}" != 0 ] && [ "$(id -u)" = 0 ] && ip netns add "$NSP" 2>/dev/null; then
  NETNS=1
  ip netns add "$NSD"
  setup_link() { # ns veth here-address ns-address (a /30)
    ip link add "$2" type veth peer name "${2}n"
    ip link set "${2}n" netns "$1"
    ip addr add "$3/30" dev "$2"
    ip link set "$2" up
    ip netns exec "$1" ip addr add "$4/30" dev "${2}n"
    ip netns exec "$1" ip link set "${2}n" up
    ip netns exec "$1" ip link set lo up
    ip netns exec "$1" ip route add default via "$3"
  }
  net=10.213.$(($$ % 256)) # per-run subnets, so two runs at once do not collide
  setup_link "$NSP" "$VP" "$net.1" "$net.2"
  setup_link "$NSD" "$VD" "$net.5" "$net.6"
  SERVER_HOST=$net.1
  P_RUN=(ip netns exec "$NSP") P_MASTER=$net.1 P_HOST=$net.2
  D_RUN=(ip netns exec "$NSD") D_MASTER=$net.5 D_HOST=$net.6
  echo "engine_pd: hosts: network namespaces $NSP (prefill, $P_HOST) and $NSD (decode, $D_HOST)"
else
  SERVER_HOST=127.0.0.1
  P_RUN=() P_MASTER=127.0.0.1 P_HOST=127.0.0.1
  D_RUN=() D_MASTER=127.0.0.1 D_HOST=127.0.0.1
  echo "engine_pd: hosts: loopback processes (no network namespaces here)"
fi

port=$(mc_free_port)
mc_start_master master "$port"
mc_start_server server "127.0.0.1:$port" --global_segment_size="$SEGMENT" \
  --local_hostname="$SERVER_HOST"
pd() { # out-name command... (ENGINE_FLAGS, --threads and --decode appended)
  local name=$1; shift
  # shellcheck disable=SC2086
  "$@" $ENGINE_FLAGS --threads "$THREADS" --decode "$DECODE" >"$OUT/$name.json" \
    2>"$OUT/$name.log"
}
req=0
for n in $PROMPTS; do
  req=$((req + 1))
  # shellcheck disable=SC2086
  pd "colocated.$req" "$BIN/mc_engine_pd" --role colocated --request "$req" --prompt "$n" ||
    { echo "engine_pd: colocated run of request $req failed:" >&2;
      cat "$OUT/colocated.$req.log" >&2; exit 1; }
  # the decode side starts first and waits for the hand-off
  # shellcheck disable=SC2086
  pd "decode.$req" "${D_RUN[@]}" "$BIN/mc_engine_pd" --role decode --request "$req" \
    --prompt "$n" --master "$D_MASTER:$port" --local_hostname "$D_HOST" &
  dpid=$!
  MC_PIDS+=("$dpid")
  # shellcheck disable=SC2086
  pd "prefill.$req" "${P_RUN[@]}" "$BIN/mc_engine_pd" --role prefill --request "$req" \
    --prompt "$n" --master "$P_MASTER:$port" --local_hostname "$P_HOST" ||
    { echo "engine_pd: prefill of request $req failed:" >&2; cat "$OUT/prefill.$req.log" >&2;
      exit 1; }
  wait "$dpid" || { echo "engine_pd: decode of request $req failed:" >&2;
                    cat "$OUT/decode.$req.log" >&2; exit 1; }
done
mc_stop_all

/usr/bin/python3 - "$OUT" "$req" <<'PY'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
ok = True
print(f"{'req':>3} {'prompt':>6} {'prefill_ms':>10} {'fetched':>7} {'recomputed':>10} "
      f"{'fetch_ms':>8} {'tokens':>6}  same")
for r in range(1, n + 1):
    c, p, d = (json.load(open(f"{out}/{k}.{r}.json")) for k in ("colocated", "prefill", "decode"))
    same = c["tokens"] == d["tokens"] and c["logits_hash"] == d["logits_hash"] \
        and c["first_token"] == p["first_token"]
    ok &= same
    print(f"{r:>3} {c['prompt_tokens']:>6} {p['prefill_ms']:>10.1f} {d['tokens_fetched']:>7} "
          f"{d['tokens_recomputed']:>10} {d['fetch_ms']:>8.2f} {len(d['tokens']):>6}  "
          f"{'yes' if same else 'NO'}")
print("tokens and final logits bit-identical, colocated vs disaggregated:", "yes" if ok else "NO")
sys.exit(0 if ok else 1)
PY

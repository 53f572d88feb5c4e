#!/usr/bin/env bash
# The cold-tier ablation through a real cluster: the conversation trace replayed by
# mc_store_replay against DRAM only and against DRAM + an SSD tier SSD_RATIO times larger (the
# report's §5.1 ratio, 4), next to mc_sim's prediction for the same pool and SSD sizes.
#   dram:     mooncake_master (eviction when a put does not fit, 1 ms leases, as
#             scripts/store_replay_policies.sh) and one storage server whose segment holds
#             CAPACITY blocks of BLOCK_BYTES;
#   dram_ssd: the same with --enable_offload=true at the master (eager offload: every block is
#             written to the disk after its put, so that it is there when the pool evicts it;
#             --offload_on_evict would hold each eviction pass for an offload round trip) and
#             the server a storage server of the tier (--enable_offload=true) whose disk holds
#             SSD_RATIO x CAPACITY
#             blocks (MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES = that many records of
#             BLOCK_BYTES + their 4 KiB header; watermarks 1.0 / 0.95, 16 MiB buckets evicted
#             FIFO, a victim's blocks read since written re-appended first, up to READMIT_PCT %
#             of its bytes (MC_DISK_READMIT_PCT; 0 drops whole buckets as written);
#             dram_ssd_lru: the same with the disk's LRU bucket eviction);
#   dram_ssd_evict, dram_ssd_evict_lru: the same disks, admission by eviction instead
#             (--offload_on_evict=true: a block goes to the disk when the pool evicts it, the
#             simulator's model; OFFLOAD_CAP victims held per eviction pass, see below);
#   dram_ssd_evict_noreadmit: dram_ssd_evict with MC_DISK_READMIT_PCT=0 (the disk drops its
#             oldest bucket as written, no second chance);
#   dram_ssd_evict_reused: dram_ssd_evict with --offload_admission=reused (only blocks read
#             from the pool since their put go to the disk);
#   dram_ssd_evict_promote: dram_ssd_evict_lru plus --promotion_on_hit (a block read from the
#             disk PROMOTE_THRESHOLD times regains a memory copy; up to 1024 promotions per
#             heartbeat);
#   mc_sim --experiment=run with --pool_blocks=CAPACITY and --ssd_blocks=0 / SSD_RATIO x CAPACITY
#             on the same requests.
# Per store run one JSON line "store_replay_ssd": the replay's own fields plus the config, the
# storage server's disk-tier counters (mooncake_ssd_read_bytes_total, _write_bytes_total (second-
# chance copies included), _reads_served_total (read requests, up to 64 blocks each),
# _readmitted_objects_total, _objects), the master's offload counters
# (master_offload_queued_total, _success_total, _skipped_total, master_promotion_success_total)
# and the bytes read per tier (SSD = bytes the disk engine read and verified, less the
# promotions' reads (one block each); blocks read again after a failed batch and blocks read
# past the first bad one of a prefix count too, so it can exceed the hits; DRAM = hit blocks x
# BLOCK_BYTES - SSD, at least 0: an estimate, low by those extra reads); per config one "sim_ssd" line (mc_sim's JSON). OUT=FILE appends
# them there too. Every process is stopped by PID (trap). The disk directory is on $SSD_DIR
# (default /var/tmp: a disk, not a tmpfs).
#
# Usage: scripts/store_replay_ssd.sh [BIN_DIR]   (default: $MC_BIN_DIR, else build/bin)
# Env:   TRACE, REQUESTS (default 12031 = the whole trace), BLOCK_BYTES (16384), CAPACITY (2000),
#        SSD_RATIO (4), SSD_DIR, PUT_RETRY_MS (10000), OFFLOAD_CAP (victims held for their
#        offload at once with --offload_on_evict: --offloading_queue_limit is set to twice it,
#        --offload_cap_ratio 0.5; default 200), OFFLOAD_FORCE_EVICT (--offload_force_evict,
#        default false: wait for the disk rather than evict a block without its copy),
#        PROMOTE_THRESHOLD (1), READMIT_PCT (the disk's second chance, default 50; 0 = off),
#        CONFIGS ("dram dram_ssd dram_ssd_lru dram_ssd_evict
#        dram_ssd_evict_lru dram_ssd_evict_noreadmit dram_ssd_evict_reused dram_ssd_evict_promote"), OUT
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-${MC_BIN_DIR:-$ROOT/build/bin}}
TRACE=${TRACE:-$ROOT/data/traces/conversation_trace.jsonl}
REQUESTS=${REQUESTS:-12031}
BLOCK_BYTES=${BLOCK_BYTES:-16384}
CAPACITY=${CAPACITY:-2000}
SSD_RATIO=${SSD_RATIO:-4}
SSD_DIR=${SSD_DIR:-/var/tmp}
OUT=${OUT:-}
CONFIGS=${CONFIGS:-dram dram_ssd dram_ssd_lru dram_ssd_evict dram_ssd_evict_lru dram_ssd_evict_noreadmit dram_ssd_evict_reused dram_ssd_evict_promote}
OFFLOAD_CAP=${OFFLOAD_CAP:-200}
OFFLOAD_FORCE_EVICT=${OFFLOAD_FORCE_EVICT:-false}
PROMOTE_THRESHOLD=${PROMOTE_THRESHOLD:-1}
READMIT_PCT=${READMIT_PCT:-50}
PUT_RETRY_MS=${PUT_RETRY_MS:-10000} # a put refused while eviction waits is retried this long
MASTER_FLAGS="--eviction_high_watermark_ratio=1 --eviction_ratio=0.002 --default_kv_lease_ttl=1"
for t in mooncake_master mooncake_client mc_store_replay mc_sim; do
  [ -x "$BIN/$t" ] || { echo "store_replay_ssd: $BIN/$t missing" >&2; exit 1; }
done
[ -r "$TRACE" ] || { echo "store_replay_ssd: trace $TRACE not readable" >&2; exit 1; }
# shellcheck source=lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
mc_cluster_init mc_replay_ssd
DISK=$(mktemp -d "$SSD_DIR/mc_replay_ssd.XXXXXX")
trap 'mc_stop_all; rm -rf "$MC_WORK" "$DISK"' EXIT
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
emit() { echo "$1"; [ -z "$OUT" ] || echo "$1" >>"$OUT"; }
seg=$((CAPACITY * BLOCK_BYTES))
ssd_blocks=$((SSD_RATIO * CAPACITY))
disk_bytes=$((ssd_blocks * (BLOCK_BYTES + 4096) + 1048576)) # + 1 MiB for the bucket headers
metric() { # metric TEXT NAME -> value (0 when absent)
  awk -v n="$2" '$1 == n {print $2; f=1} END {if (!f) print 0}' <<<"$1"
}

for cfg in $CONFIGS; do
  port=$(mc_free_port)
  mport=$(mc_free_port)
  mflags=$MASTER_FLAGS sflags="" ssd=0 policy=fifo readmit=0
  case $cfg in *lru | *promote) policy=lru ;; esac
  if [ "$cfg" != dram ]; then
    mflags="$mflags --enable_offload=true"
    sflags="--enable_offload=true --offload_path=$DISK/disk --enable_http_server=true --http_port=0"
    ssd=$ssd_blocks
    readmit=$READMIT_PCT
  fi
  case $cfg in dram_ssd_evict*)
    mflags="$mflags --offload_on_evict=true --offloading_queue_limit=$((2 * OFFLOAD_CAP)) --offload_cap_ratio=0.5 --offload_force_evict=$OFFLOAD_FORCE_EVICT" ;;
  esac
  [ "$cfg" = dram_ssd_evict_reused ] && mflags="$mflags --offload_admission=reused"
  [ "$cfg" = dram_ssd_evict_noreadmit ] && readmit=0
  [ "$cfg" = dram_ssd_evict_promote ] &&
    mflags="$mflags --promotion_on_hit=true --promotion_admission_threshold=$PROMOTE_THRESHOLD --promotion_max_per_heartbeat=1024"
  # shellcheck disable=SC2086
  mc_start_master "master_$cfg" "$port" $mflags --metrics_port="$mport"
  # shellcheck disable=SC2086
  MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES=$disk_bytes MC_OFFLOAD_HEARTBEAT_MS=10 \
  MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES=16MB MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY=$policy \
  MOONCAKE_OFFLOAD_DISK_EVICTION_HIGH_WATERMARK_RATIO=1 \
  MOONCAKE_OFFLOAD_DISK_EVICTION_LOW_WATERMARK_RATIO=0.95 MC_DISK_READMIT_PCT=$readmit \
    mc_start_server "server_$cfg" "127.0.0.1:$port" --global_segment_size="$seg" $sflags
  cmd="MC_STORE_LEASE_CACHE=0 mc_store_replay --trace=$(basename "$TRACE") --requests=$REQUESTS --block_bytes=$BLOCK_BYTES --threads=1 --put_retry_ms=$PUT_RETRY_MS --json (master: $mflags; one server, --global_segment_size=$seg${sflags:+ $sflags}, disk limit $disk_bytes B, disk eviction $policy, MC_DISK_READMIT_PCT=$readmit)"
  line=$(MC_STORE_LEASE_CACHE=0 "$BIN/mc_store_replay" --trace="$TRACE" \
    --master_server_address="127.0.0.1:$port" --requests="$REQUESTS" \
    --block_bytes="$BLOCK_BYTES" --threads=1 --put_retry_ms="$PUT_RETRY_MS" --json 2>"$MC_WORK/replay_$cfg.log" | grep '^{"bench":"store_replay"')
  rd=0 wr=0 served=0 readmitted=0 objs=0 mq=0 mok=0 mskip=0 mpromo=0
  if [ "$cfg" != dram ]; then
    mm=$(curl -sf "http://127.0.0.1:$mport/metrics" || true)
    mq=$(metric "$mm" master_offload_queued_total)
    mok=$(metric "$mm" master_offload_success_total)
    mskip=$(metric "$mm" master_offload_skipped_total)
    mpromo=$(metric "$mm" master_promotion_success_total)
    hp=$(sed -nE 's/.*http_port=([0-9]+).*/\1/p' "$MC_WORK/server_$cfg.log" | head -1)
    m=$(curl -sf "http://127.0.0.1:$hp/metrics" || true)
    rd=$(metric "$m" mooncake_ssd_read_bytes_total)
    wr=$(metric "$m" mooncake_ssd_write_bytes_total)
    served=$(metric "$m" mooncake_ssd_reads_served_total)
    readmitted=$(metric "$m" mooncake_ssd_readmitted_objects_total)
    objs=$(metric "$m" mooncake_ssd_objects)
  fi
  mc_stop_all
  rm -rf "$DISK/disk"
  tiers=$(/usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1]); bb = int(sys.argv[2]); rd = int(sys.argv[3])
hit = round(d["prefix_hit_ratio"] * d["blocks"]) * bb
print("\"dram_read_bytes\":%d,\"ssd_read_bytes\":%d" % (max(hit - rd, 0), rd))' "$line" "$BLOCK_BYTES" "$((rd - mpromo * BLOCK_BYTES))")
  emit "{\"bench\":\"store_replay_ssd\",\"date\":\"$date\",\"config\":\"$cfg\",\"pool_blocks\":$CAPACITY,\"ssd_blocks\":$ssd,\"segment_bytes\":$seg,\"command\":\"$cmd\",$tiers,\"ssd_write_bytes\":$wr,\"ssd_reads_served\":$served,\"ssd_readmitted\":$readmitted,\"readmit_pct\":$readmit,\"ssd_objects_at_end\":$objs,\"offload_queued\":$mq,\"offload_succeeded\":$mok,\"offload_skipped\":$mskip,\"promotions\":$mpromo,${line#\{\"bench\":\"store_replay\",}"
  case $cfg in dram | dram_ssd) ;; *) continue ;; esac # the simulator's SSD tier has one policy
  sim=$("$BIN/mc_sim" --experiment=run --trace="$TRACE" --max_requests="$REQUESTS" \
    --pool_blocks="$CAPACITY" --ssd_blocks="$ssd" | grep '^{' | head -1)
  emit "{\"bench\":\"sim_ssd\",\"date\":\"$date\",\"config\":\"$cfg\",\"command\":\"mc_sim --experiment=run --trace=$(basename "$TRACE") --max_requests=$REQUESTS --pool_blocks=$CAPACITY --ssd_blocks=$ssd\",${sim#\{}"
done

/* mooncake_master: the Store master daemon (control plane). Flags use upstream names and
 * defaults; see --help. SIGTERM/SIGINT stop it cleanly (WAL flushed).
 *
 * The write-ahead log directory: --wal_dir=auto (the default) is the user's state directory
 * (/var/lib/mooncake/master for root, else $XDG_STATE_HOME or ~/.local/state, + mooncake/master),
 * never the working directory; --wal_dir="" keeps metadata in memory only and says so in the
 * log. A master holds an exclusive lock on <wal_dir>/LOCK for its lifetime, so a second master
 * pointed at the same directory refuses to start instead of corrupting the log.
 *
 * Authentication: --auth_token_file (else MC_AUTH_TOKEN_FILE, read through tools/common/te_env)
 * names the cluster token file; without one the RPC port accepts everyone (a warning is
 * logged unless it is bound to loopback). The --rpc_* flags size the RPC port's budgets. */
#include "common/auth.h"
#include "common/grant.h"
#include "common/config.h"
#include "common/log.h"
#include "common/net.h"
#include "master/ha.h"
#include "master/service.h"
#include "master/tenant_store.h"
#include "te_env.h"
#ifdef MC_HAVE_META_SERVER
#include "te/metadata_server.h"
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAL_DIR_AUTO "auto"

static mc_master_service_t *g_svc;
static volatile sig_atomic_t g_stop; /* a standby waiting for leadership stops too */

/* mkdir -p for an absolute or relative path; 0 or -1 with errno. */
static int make_dirs(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(buf, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

/* --wal_dir=auto -> the user's state directory (see the file comment). */
static int resolve_wal_dir(const char *arg, char *out, size_t n)
{
    if (strcmp(arg, WAL_DIR_AUTO) != 0)
        return snprintf(out, n, "%s", arg) < (int)n ? 0 : -1;
    const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    int len;
    if (geteuid() == 0)
        len = snprintf(out, n, "/var/lib/mooncake/master");
    else if (xdg && xdg[0] == '/')
        len = snprintf(out, n, "%s/mooncake/master", xdg);
    else if (home && *home)
        len = snprintf(out, n, "%s/.local/state/mooncake/master", home);
    else {
        fprintf(stderr, "mooncake_master: --wal_dir=auto needs $HOME or $XDG_STATE_HOME; pass "
                        "--wal_dir=<dir> (or --wal_dir=\"\" to keep metadata in memory only)\n");
        return -1;
    }
    return len < (int)n ? 0 : -1;
}

/* Creates dir and takes an exclusive lock on dir/LOCK (held until exit: the fd is never
 * closed). Returns 0, or -1 after printing why (another master holds it, or I/O errors). */
static int lock_wal_dir(const char *dir)
{
    char path[4200];
    if (make_dirs(dir) != 0) {
        fprintf(stderr, "mooncake_master: cannot create --wal_dir %s: %s\n", dir, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof(path), "%s/LOCK", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "mooncake_master: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char holder[32] = "";
        ssize_t r = pread(fd, holder, sizeof(holder) - 1, 0);
        holder[r > 0 ? r : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        fprintf(stderr,
                "mooncake_master: --wal_dir %s is in use by another master (pid %s); give each "
                "master its own directory\n",
                dir, holder[0] ? holder : "unknown");
        close(fd);
        return -1;
    }
    char pid[32];
    int len = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len)
        fprintf(stderr, "mooncake_master: warning: cannot write the pid into %s\n", path);
    return 0;
}

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
    if (g_svc)
        mc_master_service_stop(g_svc);
}

/* Flag values, preset to their defaults by parse_flags. */
typedef struct flags {
    int64_t port, metrics_port, rpc_thread_num, max_threads, http_meta_port;
    int64_t lease_ttl, soft_pin_ttl, client_ttl, hold_s, discard_s, release_s, cron_ms, event_buffer;
    int64_t rpc_port, ha_ttl, ha_isr_ms, ha_append_ms;
    int64_t rpc_max_conns, rpc_max_inflight, rpc_idle_s, rpc_slow_s, rpc_blocked_s;
    int64_t rpc_busy_poll_us;
    uint64_t rpc_mem_budget, rpc_conn_out_cap, ha_snap_bytes;
    double eviction_ratio, high_wm;
    bool allow_soft, exist_extends, enable_meta, enable_ha, wal_fsync, metrics_public;
    bool multi_tenants, ha_log_put_starts;
    bool enable_offload, offload_on_evict; /* the local-disk tier (disk-tier.md, "Master") */
    bool promotion_on_hit, offload_force_evict;
    int64_t offload_queue_limit, promotion_threshold, promo_queue_limit, promo_per_beat;
    int64_t task_max_finished, task_max_pending, task_max_processing, task_pending_s,
        task_processing_s;
    /* upstream's flags kept for its command lines (validated, otherwise no effect here) */
    bool enable_oplog, disk_eviction;
    int64_t oplog_poll_ms, oplog_batch_max, oplog_retry_s, file_seg_size;
    uint64_t quota_bytes;
    const char *root_fs_dir;
    double offload_cap_ratio;
    const char *rpc_address, *metrics_host, *memory_allocator, *strategy, *wal_dir, *log_level,
        *config_path, *etcd_endpoints, *cluster_id, *auth_token_file, *tq_type, *tq_uri,
        *eviction_policy, *ha_type, *ha_conn, *offload_admission, *ha_commit;
    uint64_t snapshot_bytes;
} flags_t;

/* Parses the command line (and --config_path) into f: -1 to go on, else main's exit status. */
static int parse_flags(flags_t *f, int argc, char **argv)
{
    *f = (flags_t){.port = 50051, .metrics_port = 9003, .rpc_thread_num = 1,
                   .max_threads = 16, .http_meta_port = 8080, .lease_ttl = 10000, .soft_pin_ttl = 1800000,
                   .client_ttl = 10, .hold_s = 60, .discard_s = 30, .release_s = 600,
                   .task_max_finished = 10000, .task_max_pending = 10000,
                   .task_max_processing = 10000, .task_pending_s = 300, .task_processing_s = 300, .cron_ms = 10,
                   .event_buffer = 65536, .eviction_ratio = 0.05, .high_wm = 0.90,
                   .eviction_policy = "lru",
                   .offload_queue_limit = 50000, .offload_cap_ratio = 0.5,
                   .offload_admission = "all", .offload_force_evict = false,
                   .promotion_threshold = 2,
                   .promo_queue_limit = 50000, .promo_per_beat = 1,
                   .oplog_poll_ms = 1000, .oplog_batch_max = 1024, .oplog_retry_s = 180,
                   .root_fs_dir = "", .file_seg_size = INT64_MAX, .disk_eviction = true,
                   .allow_soft = true, .exist_extends = false, .enable_meta = false,
                   .enable_ha = false, .wal_fsync = false, .rpc_address = "0.0.0.0",
                   .metrics_host = "0.0.0.0",
                   .memory_allocator = "offset", .strategy = "random",
                   .wal_dir = WAL_DIR_AUTO, .log_level = "info", .config_path = "",
                   .etcd_endpoints = "", .cluster_id = "mooncake_cluster",
                   .snapshot_bytes = 64ull << 20, .auth_token_file = "",
                   .metrics_public = false, .multi_tenants = false, .tq_type = "",
                   .tq_uri = "", .rpc_port = 0, .ha_ttl = 5, .ha_type = "etcd",
                   .ha_conn = "", .ha_snap_bytes = 64ull << 20, .ha_commit = "etcd",
                   .ha_isr_ms = 1000,
                   .ha_append_ms = 100, .ha_log_put_starts = true,
                   .rpc_max_conns = MC_RPC_DEFAULT_MAX_CONNS,
                   .rpc_max_inflight = MC_RPC_DEFAULT_MAX_INFLIGHT,
                   .rpc_idle_s = MC_RPC_DEFAULT_IDLE_TIMEOUT_MS / 1000,
                   .rpc_slow_s = MC_RPC_DEFAULT_SLOW_TIMEOUT_MS / 1000,
                   .rpc_blocked_s = MC_RPC_DEFAULT_BLOCKED_TIMEOUT_MS / 1000,
                   .rpc_mem_budget = MC_RPC_DEFAULT_MEM_BUDGET,
                   .rpc_conn_out_cap = MC_RPC_DEFAULT_CONN_OUT_CAP};
    mc_option_t opts[] = {
        {"port", MC_OPT_INT, &f->port, NULL, "RPC port", 0, 65535},
        {"rpc_port", MC_OPT_INT, &f->rpc_port, NULL, "RPC port (upstream's HA name; 0 = --port)",
         0, 65535},
        {"rpc_address", MC_OPT_STRING, &f->rpc_address, NULL, "RPC bind address", 0, 0},
        {"auth_token_file", MC_OPT_STRING, &f->auth_token_file, NULL,
         "cluster token file (mode 0600; one secret per line, two lines = rotation): RPC "
         "clients must prove a token of it, and requests to the metrics/admin HTTP port and "
         "the HTTP metadata server must be signed (mooncake_auth_curl); \"\" = "
         "MC_AUTH_TOKEN_FILE, else no authentication (docs/security.md)", 0, 0},
        {"rpc_memory_budget", MC_OPT_SIZE, &f->rpc_mem_budget, NULL,
         "bytes of buffered requests + queued answers over all RPC connections; a frame that "
         "does not fit is refused (BUSY) and its connection closed", 0, 0},
        {"rpc_connection_output_cap", MC_OPT_SIZE, &f->rpc_conn_out_cap, NULL,
         "queued answer bytes past which a connection is not read until it drains", 0, 0},
        {"rpc_blocked_timeout_sec", MC_OPT_INT, &f->rpc_blocked_s, NULL,
         "a connection not read (answers not drained) this long is closed", 1, 86400},
        {"rpc_max_inflight", MC_OPT_INT, &f->rpc_max_inflight, NULL,
         "deferred requests (long polls) per connection; more are answered BUSY", 1, 1 << 20},
        {"rpc_idle_timeout_sec", MC_OPT_INT, &f->rpc_idle_s, NULL,
         "a connection with no request this long (and none pending) is closed", 1, 86400},
        {"rpc_slow_timeout_sec", MC_OPT_INT, &f->rpc_slow_s, NULL,
         "a connection with a request started but incomplete this long is closed", 1, 86400},
        {"rpc_busy_poll_us", MC_OPT_INT, &f->rpc_busy_poll_us, NULL,
         "after its last request the RPC loop polls without sleeping this long before it "
         "blocks: lower latency for calls that follow within it (no wake-up of the loop "
         "thread; ~20 us a call on VMs), at the cost of a busy core while they do (0 = off)",
         0, MC_RPC_BUSY_POLL_MAX_US},
        {"rpc_max_connections", MC_OPT_INT, &f->rpc_max_conns, NULL,
         "open RPC connections; at the cap the oldest unauthenticated one is closed", 1,
         1 << 20},
        {"rpc_thread_num", MC_OPT_INT, &f->rpc_thread_num, NULL,
         "accepted for compatibility; the object table is served by one loop thread", 0, 1024},
        {"max_threads", MC_OPT_INT, &f->max_threads, NULL,
         "upstream's RPC thread count (deprecated there for --rpc_thread_num); accepted for "
         "compatibility: the object table is served by one loop thread", 1, 1024},
        {"metrics_host", MC_OPT_STRING, &f->metrics_host, NULL,
         "IPv4 address the metrics/admin HTTP port binds (0.0.0.0 = all interfaces)", 0, 0},
        {"metrics_port", MC_OPT_INT, &f->metrics_port, NULL,
         "HTTP port for /metrics and the admin endpoints (/health /role /metrics/summary "
         "/query_key /batch_query_keys /get_all_keys /get_all_segments ...; -1 = off)", -1,
         65535},
        {"metrics_public", MC_OPT_BOOL, &f->metrics_public, NULL,
         "with --auth_token_file: still serve /metrics, /metrics/summary and /health unsigned "
         "(counts and states only; for Prometheus)", 0, 0},
        {"enable_http_metadata_server", MC_OPT_BOOL, &f->enable_meta, NULL,
         "also serve the HTTP metadata store (GET/PUT/DELETE /metadata?key=)", 0, 0},
        {"http_metadata_server_port", MC_OPT_INT, &f->http_meta_port, NULL,
         "port of the HTTP metadata server", 0, 65535},
        {"default_kv_lease_ttl", MC_OPT_INT, &f->lease_ttl, NULL, "read lease (ms)", 1, 86400000},
        {"default_kv_soft_pin_ttl", MC_OPT_INT, &f->soft_pin_ttl, NULL, "soft pin TTL (ms)", 1,
         86400000},
        {"allow_evict_soft_pinned_objects", MC_OPT_BOOL, &f->allow_soft, NULL,
         "evict soft-pinned objects in a second pass", 0, 0},
        {"eviction_ratio", MC_OPT_DOUBLE, &f->eviction_ratio, NULL,
         "fraction of capacity freed per eviction round", 0.0001, 1},
        {"eviction_high_watermark_ratio", MC_OPT_DOUBLE, &f->high_wm, NULL,
         "usage above which the cron evicts", 0.01, 1},
        {"eviction_policy", MC_OPT_STRING, &f->eviction_policy, NULL,
         "which committed objects eviction keeps: lru (least recently read or committed goes "
         "first) | adaptive (chooses online between LRU and segmented LRU with a ghost of "
         "recent victims, docs/internals/eviction.md)", 0, 0},
        {"enable_offload", MC_OPT_BOOL, &f->enable_offload, NULL,
         "serve the local-disk (SSD) tier: storage servers may mount their disks "
         "(MountLocalDiskSegment; refused UNABLE_OFFLOAD without it)", 0, 0},
        {"offload_on_evict", MC_OPT_BOOL, &f->offload_on_evict, NULL,
         "false: each committed put is queued for offload to the disk of its memory segment's "
         "owner; true: eviction queues its victims instead (kept in memory until written)", 0, 0},
        {"offloading_queue_limit", MC_OPT_INT, &f->offload_queue_limit, NULL,
         "offload tasks queued per storage server at most (more are not offloaded)", 1,
         100000000},
        {"offload_cap_ratio", MC_OPT_DOUBLE, &f->offload_cap_ratio, NULL,
         "with --offload_on_evict: victims one eviction pass may keep back for offload, as a "
         "fraction of --offloading_queue_limit (beyond: evicted from memory only)", 0, 1},
        {"offload_admission", MC_OPT_STRING, &f->offload_admission, NULL,
         "with --offload_on_evict, the victims written to the disk: all, or reused (only those "
         "read from memory at least once since their put)", 0, 0},
        {"promotion_on_hit", MC_OPT_BOOL, &f->promotion_on_hit, NULL,
         "a key read from a storage server's disk --promotion_admission_threshold times "
         "regains a memory copy (written by that server)", 0, 0},
        {"promotion_admission_threshold", MC_OPT_INT, &f->promotion_threshold, NULL,
         "disk hits (count-min sketch) that make a key's promotion", 1, 255},
        {"promotion_queue_limit", MC_OPT_INT, &f->promo_queue_limit, NULL,
         "promotions queued or in flight over all storage servers at most (a hit beyond it "
         "promotes nothing)", 1, UINT32_MAX},
        {"promotion_max_per_heartbeat", MC_OPT_INT, &f->promo_per_beat, NULL,
         "promotion tasks one offload heartbeat hands a storage server at most", 1, UINT32_MAX},
        {"offload_force_evict", MC_OPT_BOOL, &f->offload_force_evict, NULL,
         "with --offload_on_evict, a victim beyond the --offload_cap_ratio cap (or its owner's "
         "full queue): true = evicted from memory without a disk copy; false = the eviction "
         "pass waits for the queued offloads (puts needing the room answer "
         "NO_AVAILABLE_HANDLE meanwhile)", 0, 0},
        {"root_fs_dir", MC_OPT_STRING, &f->root_fs_dir, NULL,
         "upstream's shared-filesystem DISK tier: not supported, only \"\" is accepted (the "
         "SSD tier here is --enable_offload with storage servers' ssd_offload_path)", 0, 0},
        {"global_file_segment_size", MC_OPT_INT, &f->file_seg_size, NULL,
         "for --root_fs_dir: only the default is accepted", 0, 0},
        {"enable_disk_eviction", MC_OPT_BOOL, &f->disk_eviction, NULL,
         "for --root_fs_dir: only the default (true) is accepted", 0, 0},
        {"quota_bytes", MC_OPT_SIZE, &f->quota_bytes, NULL,
         "for --root_fs_dir: only the default (0) is accepted", 0, 0},
        {"client_ttl", MC_OPT_INT, &f->client_ttl, NULL,
         "seconds without a ping before a client's segments are held (see "
         "--segment_hold_sec) or unmounted", 1, 86400},
        {"segment_hold_sec", MC_OPT_INT, &f->hold_s, NULL,
         "seconds a silent client's segments are held, objects kept but unreadable, for the "
         "same process to re-mount them (a stopped or hung storage server); then dropped "
         "(0 = dropped at once)", 0, 86400},
        {"put_start_discard_timeout_sec", MC_OPT_INT, &f->discard_s, NULL,
         "an unfinished put may be pre-empted after this many seconds", 1, 86400},
        {"put_start_release_timeout_sec", MC_OPT_INT, &f->release_s, NULL,
         "space of an unfinished put is released after this many seconds", 1, 864000},
        {"max_total_finished_tasks", MC_OPT_INT, &f->task_max_finished, NULL,
         "finished replica copy/move tasks kept for QueryTask (the oldest forgotten)", 1,
         UINT32_MAX},
        {"max_total_pending_tasks", MC_OPT_INT, &f->task_max_pending, NULL,
         "replica tasks waiting for their client at most (CreateCopyTask/CreateMoveTask beyond "
         "answer TASK_PENDING_LIMIT_EXCEEDED)", 1, UINT32_MAX},
        {"max_total_processing_tasks", MC_OPT_INT, &f->task_max_processing, NULL,
         "replica tasks being run by their clients at most (FetchTasks hands out no more)", 1,
         UINT32_MAX},
        {"pending_task_timeout_sec", MC_OPT_INT, &f->task_pending_s, NULL,
         "a replica task its client has not fetched after this many seconds fails (0 = never)",
         0, 864000},
        {"processing_task_timeout_sec", MC_OPT_INT, &f->task_processing_s, NULL,
         "a replica task its client has not completed this many seconds after fetching it "
         "fails (0 = never)", 0, 864000},
        {"exist_key_extends_lease", MC_OPT_BOOL, &f->exist_extends, NULL,
         "ExistKey grants a read lease (upstream behaviour; false answers upstream #2187)", 0, 0},
        {"memory_allocator", MC_OPT_STRING, &f->memory_allocator, NULL, "offset (only)", 0, 0},
        {"allocation_strategy", MC_OPT_STRING, &f->strategy, NULL,
         "random | free_ratio_first (a preferred segment is always tried first)", 0, 0},
        {"wal_dir", MC_OPT_STRING, &f->wal_dir, NULL,
         "write-ahead log directory: auto = /var/lib/mooncake/master for root, else "
         "$XDG_STATE_HOME (~/.local/state)/mooncake/master; \"\" = metadata in memory only, "
         "lost on restart", 0, 0},
        {"wal_fsync", MC_OPT_BOOL, &f->wal_fsync, NULL,
         "fdatasync every group commit (default: write every commit, fdatasync within 1 s)", 0, 0},
        {"wal_snapshot_bytes", MC_OPT_SIZE, &f->snapshot_bytes, NULL,
         "log size that triggers a snapshot", 0, 0},
        {"cron_period_ms", MC_OPT_INT, &f->cron_ms, NULL, "housekeeping period (ms)", 1, 1000},
        {"event_buffer_size", MC_OPT_INT, &f->event_buffer, NULL,
         "object events (committed/evicted/removed/segment_lost) kept for subscribers such as "
         "mooncake_conductor (PollEvents); a subscriber further behind resyncs (0 = off)",
         0, 1 << 24},
        {"enable_ha", MC_OPT_BOOL, &f->enable_ha, NULL,
         "high availability: start as a standby that follows the replicated log in etcd and "
         "takes over when the leader's lease ends (docs/internals/ha.md); needs "
         "--ha_backend_connstring or --etcd_endpoints, a --wal_dir and a concrete "
         "--rpc_address (published to clients)", 0, 0},
        {"ha_backend_type", MC_OPT_STRING, &f->ha_type, NULL, "etcd (the only backend)", 0, 0},
        {"enable_oplog", MC_OPT_BOOL, &f->enable_oplog, NULL,
         "upstream's replicated metadata log for --enable_ha (needs it); accepted, no effect: "
         "with --enable_ha the log is always replicated (docs/internals/ha.md)", 0, 0},
        {"oplog_poll_interval_ms", MC_OPT_INT, &f->oplog_poll_ms, NULL,
         "with --enable_oplog: accepted, no effect (standbys watch the log)", 1, INT32_MAX},
        {"oplog_batch_max_entries", MC_OPT_INT, &f->oplog_batch_max, NULL,
         "with --enable_oplog: accepted, no effect", 1, UINT32_MAX},
        {"batch_oplog_retry_timeout_sec", MC_OPT_INT, &f->oplog_retry_s, NULL,
         "with --enable_oplog: accepted, no effect", 0, UINT32_MAX},
        {"ha_backend_connstring", MC_OPT_STRING, &f->ha_conn, NULL,
         "etcd endpoints h:p;h:p for --enable_ha (else --etcd_endpoints)", 0, 0},
        {"ha_lease_ttl_sec", MC_OPT_INT, &f->ha_ttl, NULL,
         "leader lease TTL: a standby takes over within about this long after the leader is "
         "lost, and a leader that cannot renew its lease for this long stops at once", 1, 60},
        {"ha_commit", MC_OPT_STRING, &f->ha_commit, NULL,
         "--enable_ha: when an acknowledging reply leaves: etcd (its changes are durable in "
         "etcd's log) | standbys (every standby of the in-sync set applied them, or, the set "
         "empty, they are durable in etcd; docs/internals/ha.md)", 0, 0},
        {"ha_isr_timeout_ms", MC_OPT_INT, &f->ha_isr_ms, NULL,
         "--ha_commit=standbys: a standby that has not caught up with the leader for this long "
         "leaves the in-sync set (must be below the lease TTL)", 1, 60000},
        {"ha_etcd_append_interval_ms", MC_OPT_INT, &f->ha_append_ms, NULL,
         "--ha_commit=standbys: while the in-sync set is not empty, the leader appends its log "
         "to etcd at most once per this many ms, each append taking everything queued "
         "meanwhile (0 = back to back)", 0, 1000},
        {"ha_log_put_starts", MC_OPT_BOOL, &f->ha_log_put_starts, NULL,
         "--ha_commit=standbys: log each create-once PutStart's allocation and answer it once "
         "the in-sync set applied it, so that a new leader keeps that space for its writer "
         "(false: faster puts, as in etcd mode; docs/internals/ha.md)", 0, 0},
        {"ha_snapshot_bytes", MC_OPT_SIZE, &f->ha_snap_bytes, NULL,
         "--enable_ha: the leader writes a snapshot of its state into etcd after this many "
         "bytes of replicated log, and then drops the log a new standby no longer needs "
         "(0 = never: the log grows without bound)", 0, 0},
        {"enable_multi_tenants", MC_OPT_BOOL, &f->multi_tenants, NULL,
         "strict multi-tenant mode: puts need a tenant with a quota (from the policy file of "
         "--tenant_quota_connector_uri, or PUT /api/v1/tenant_quotas) and must fit it after "
         "evicting that tenant's own objects", 0, 0},
        {"tenant_quota_connector_type", MC_OPT_STRING, &f->tq_type, NULL,
         "where tenant quotas are kept: file (the YAML policy at --tenant_quota_connector_uri, "
         "rewritten by the admin API) | etcd (the same YAML in the key "
         "mooncake-store/<cluster_id>/tenant_quota_policy, re-read when it changes) | \"\" (in "
         "memory, starting empty)", 0, 0},
        {"tenant_quota_connector_uri", MC_OPT_STRING, &f->tq_uri, NULL,
         "file: the policy file; etcd: the endpoints h:p;h:p (or etcd://h:p;h:p)", 0, 0},
        {"etcd_endpoints", MC_OPT_STRING, &f->etcd_endpoints, NULL,
         "etcd endpoints h:p;h:p for --enable_ha when --ha_backend_connstring is empty", 0, 0},
        {"cluster_id", MC_OPT_STRING, &f->cluster_id, NULL,
         "cluster id: the etcd keys of this cluster (HA) are under it", 0, 0},
        {"log_level", MC_OPT_STRING, &f->log_level, NULL, "debug | info | warn | error", 0, 0},
        {"config_path", MC_OPT_STRING, &f->config_path, NULL, "JSON file with the same names", 0,
         0},
    };
    mc_config_spec_t spec = {"mooncake_master",
                             "Mooncake-C Store master: key -> replica locations, space allocation "
                             "in client segments, leases, pins, eviction, client liveness, "
                             "restart recovery from a write-ahead log, Prometheus metrics.",
                             opts, sizeof(opts) / sizeof(opts[0])};
    return mc_config_main(&spec, argc, argv);
}

/* The WAL directory for --wal_dir=arg, resolved into out (n bytes) and locked: 0, or main's
 * exit status after a message. */
static int prepare_wal_dir(const char *arg, char *out, size_t n)
{
    if (resolve_wal_dir(arg, out, n) != 0) {
        fprintf(stderr, "mooncake_master: --wal_dir too long or unresolvable\n");
        return 2;
    }
    if (out[0] && lock_wal_dir(out) != 0)
        return 1;
    if (!out[0])
        MC_LOG_WARN("master: --wal_dir is empty: metadata is kept in memory only and is lost "
                    "when this master restarts");
    return 0;
}

/* The service options for f, with the WAL in wal_dir (resolved); 0, or 2 after a message for a
 * value the master cannot honour. */
static int service_opts(const flags_t *f, const char *wal_dir, mc_master_service_opts_t *so)
{
    if (f->enable_oplog && !f->enable_ha) { /* upstream: LOG(FATAL) */
        fprintf(stderr, "mooncake_master: enable_oplog requires enable_ha=true\n");
        return 2;
    }
    if (f->enable_oplog && strcmp(f->ha_type, "etcd") != 0) {
        fprintf(stderr, "mooncake_master: enable_oplog currently requires "
                        "ha_backend_type=etcd\n");
        return 2;
    }
    if (f->root_fs_dir[0] || f->file_seg_size != INT64_MAX || !f->disk_eviction ||
        f->quota_bytes != 0) {
        fprintf(stderr, "mooncake_master: --root_fs_dir (upstream's shared-filesystem DISK "
                        "tier, with --global_file_segment_size, --enable_disk_eviction, "
                        "--quota_bytes) is not supported; the disk tier here is the local-disk "
                        "one: --enable_offload on the master and ssd_offload_path "
                        "(--offload_path) on the storage servers\n");
        return 2;
    }
    if (strcmp(f->memory_allocator, "offset") != 0) {
        fprintf(stderr, "mooncake_master: --memory_allocator=%s not supported (offset only)\n",
                f->memory_allocator);
        return 2;
    }
    if (f->enable_ha && strcmp(f->ha_type, "etcd") != 0) {
        fprintf(stderr, "mooncake_master: --ha_backend_type=%s is not supported (etcd only)\n",
                f->ha_type);
        return 2;
    }
    if (f->enable_ha && !f->ha_conn[0] && !f->etcd_endpoints[0]) {
        fprintf(stderr, "mooncake_master: --enable_ha needs --ha_backend_connstring or "
                        "--etcd_endpoints (h:p;h:p)\n");
        return 2;
    }
    struct in_addr any;
    if (f->enable_ha && (!f->rpc_address[0] ||
                         (inet_pton(AF_INET, f->rpc_address, &any) == 1 && any.s_addr == 0))) {
        fprintf(stderr, "mooncake_master: --enable_ha publishes --rpc_address:--rpc_port to "
                        "clients: give a concrete address, not 0.0.0.0\n");
        return 2;
    }
    bool standbys = strcmp(f->ha_commit, "standbys") == 0;
    if (!standbys && strcmp(f->ha_commit, "etcd") != 0) {
        fprintf(stderr, "mooncake_master: --ha_commit=%s: etcd or standbys\n", f->ha_commit);
        return 2;
    }
    if (standbys && f->ha_isr_ms >= f->ha_ttl * 1000) {
        fprintf(stderr, "mooncake_master: --ha_isr_timeout_ms=%lld must be below the lease TTL "
                        "(%lld ms)\n", (long long)f->ha_isr_ms, (long long)f->ha_ttl * 1000);
        return 2;
    }
    if (f->enable_ha && f->rpc_port == 0 && f->port == 0) {
        fprintf(stderr, "mooncake_master: --enable_ha needs a fixed RPC port\n");
        return 2;
    }
    if (f->tq_type[0] && strcmp(f->tq_type, "file") != 0 && strcmp(f->tq_type, "etcd") != 0) {
        fprintf(stderr, "mooncake_master: unknown --tenant_quota_connector_type=%s (file or "
                        "etcd)\n", f->tq_type);
        return 2;
    }
    if ((f->tq_type[0] || f->tq_uri[0]) && !f->multi_tenants) {
        fprintf(stderr, "mooncake_master: --tenant_quota_connector_* need "
                        "--enable_multi_tenants=true\n");
        return 2;
    }
    if (!f->tq_type[0] != !f->tq_uri[0]) {
        fprintf(stderr, "mooncake_master: --tenant_quota_connector_type needs "
                        "--tenant_quota_connector_uri (file: PATH; etcd: h:p;h:p) and the other "
                        "way round\n");
        return 2;
    }
    *so = (mc_master_service_opts_t){0};
    mc_master_config_default(&so->cfg);
    if (!strcmp(f->strategy, "random") || !strcmp(f->strategy, "local_first"))
        so->cfg.strategy = MC_STRATEGY_RANDOM;
    else if (!strcmp(f->strategy, "free_ratio_first"))
        so->cfg.strategy = MC_STRATEGY_FREE_RATIO_FIRST;
    else {
        fprintf(stderr, "mooncake_master: unknown --allocation_strategy=%s\n", f->strategy);
        return 2;
    }
    so->rpc_address = f->rpc_address;
    so->port = (uint16_t)(f->rpc_port ? f->rpc_port : f->port);
    struct in_addr ip;
    if (inet_pton(AF_INET, f->metrics_host, &ip) != 1) { /* never fall back to all interfaces */
        fprintf(stderr, "mooncake_master: --metrics_host must be an IPv4 address, got '%s'\n",
                f->metrics_host);
        return 2;
    }
    so->metrics_address = f->metrics_host;
    so->metrics_port = (int)f->metrics_port;
    so->cron_period_ms = (uint32_t)f->cron_ms;
    so->rpc_busy_poll_us = (uint32_t)f->rpc_busy_poll_us;
    so->cfg.default_kv_lease_ttl_ms = (uint64_t)f->lease_ttl;
    so->cfg.default_kv_soft_pin_ttl_ms = (uint64_t)f->soft_pin_ttl;
    so->cfg.allow_evict_soft_pinned_objects = f->allow_soft;
    so->cfg.eviction_ratio = f->eviction_ratio;
    so->cfg.eviction_high_watermark_ratio = f->high_wm;
    if (mc_evict_policy_parse(f->eviction_policy, &so->cfg.eviction_policy) != MC_OK ||
        (so->cfg.eviction_policy != MC_EVICT_LRU && so->cfg.eviction_policy != MC_EVICT_ADAPTIVE)) {
        fprintf(stderr, "mooncake_master: --eviction_policy must be lru or adaptive, got '%s'\n",
                f->eviction_policy);
        return 2;
    }
    so->cfg.client_ttl_ms = (uint64_t)f->client_ttl * 1000;
    so->cfg.segment_hold_ms = (uint64_t)f->hold_s * 1000;
    so->cfg.put_start_discard_timeout_ms = (uint64_t)f->discard_s * 1000;
    so->cfg.put_start_release_timeout_ms = (uint64_t)f->release_s * 1000;
    so->cfg.max_total_finished_tasks = (uint32_t)f->task_max_finished;
    so->cfg.max_total_pending_tasks = (uint32_t)f->task_max_pending;
    so->cfg.max_total_processing_tasks = (uint32_t)f->task_max_processing;
    so->cfg.pending_task_timeout_ms = (uint64_t)f->task_pending_s * 1000;
    so->cfg.processing_task_timeout_ms = (uint64_t)f->task_processing_s * 1000;
    so->cfg.exist_key_extends_lease = f->exist_extends;
    so->cfg.wal_dir = wal_dir;
    so->cfg.wal_fsync = f->wal_fsync;
    so->cfg.wal_snapshot_bytes = f->snapshot_bytes;
    so->cfg.event_buffer_size = (uint32_t)f->event_buffer;
    so->cfg.multi_tenants = f->multi_tenants;
    so->cfg.enable_offload = f->enable_offload;
    so->cfg.offload_on_evict = f->offload_on_evict;
    so->cfg.offloading_queue_limit = (uint64_t)f->offload_queue_limit;
    so->cfg.offload_cap_ratio = f->offload_cap_ratio;
    so->cfg.offload_force_evict = f->offload_force_evict;
    if (strcmp(f->offload_admission, "all") == 0) {
        so->cfg.offload_admission = MC_MASTER_ADMIT_ALL;
    } else if (strcmp(f->offload_admission, "reused") == 0) {
        so->cfg.offload_admission = MC_MASTER_ADMIT_REUSED;
    } else {
        fprintf(stderr, "mooncake_master: --offload_admission must be all or reused, got '%s'\n",
                f->offload_admission);
        return 2;
    }
    so->cfg.promotion_on_hit = f->promotion_on_hit;
    so->cfg.promotion_admission_threshold = (uint32_t)f->promotion_threshold;
    so->cfg.promotion_queue_limit = (uint32_t)f->promo_queue_limit;
    so->cfg.promotion_max_per_heartbeat = (uint32_t)f->promo_per_beat;
    if (f->rpc_mem_budget == 0 || f->rpc_conn_out_cap == 0 || f->rpc_conn_out_cap > UINT32_MAX) {
        fprintf(stderr, "mooncake_master: --rpc_memory_budget and --rpc_connection_output_cap "
                        "must be > 0 (and the cap < 4 GiB)\n");
        return 2;
    }
    so->rpc_limits = (mc_rpc_limits_t){
        .mem_budget = f->rpc_mem_budget, .conn_out_cap = (uint32_t)f->rpc_conn_out_cap,
        .blocked_timeout_ms = (uint32_t)f->rpc_blocked_s * 1000,
        .max_inflight = (uint32_t)f->rpc_max_inflight,
        .idle_timeout_ms = (uint32_t)f->rpc_idle_s * 1000,
        .slow_timeout_ms = (uint32_t)f->rpc_slow_s * 1000,
        .max_conns = (uint32_t)f->rpc_max_conns};
    return 0;
}

/* The keyring named by --auth_token_file, else MC_AUTH_TOKEN_FILE (NULL: none); 0, or main's
 * exit status after a message. */
static int load_auth(const flags_t *f, mc_auth_t **auth_p)
{
    const char *path = f->auth_token_file;
    mc_te_config_t env = {0};
    char err[256];
    if (!path[0]) {
        if (mc_tool_te_config_from_env(&env, err, sizeof(err)) != MC_OK) {
            fprintf(stderr, "mooncake_master: %s\n", err);
            return 2;
        }
        path = env.auth_token_file ? env.auth_token_file : "";
    }
    mc_status_t st = mc_auth_load(path, auth_p);
    if (st != MC_OK) {
        fprintf(stderr, "mooncake_master: cannot load the token file '%s': %s\n", path,
                mc_status_str(st));
        return 2;
    }
    if (*auth_p)
        MC_LOG_INFO("master: RPC clients must authenticate (%u token(s) from %s)",
                    mc_auth_key_count(*auth_p), path);
    return 0;
}

int main(int argc, char **argv)
{
    flags_t f;
    int rc = parse_flags(&f, argc, argv);
    if (rc >= 0)
        return rc;
    const char *rpc_address = f.rpc_address;
    char wal_dir[4096] = "";
    mc_master_service_opts_t so;
    mc_auth_t *auth = NULL;
    rc = service_opts(&f, wal_dir, &so);
    if (rc == 0)
        rc = load_auth(&f, &auth);
    so.auth = auth;
    if (rc == 0)
        rc = prepare_wal_dir(f.wal_dir, wal_dir, sizeof(wal_dir));
    if (rc == 0 && f.enable_ha && !wal_dir[0]) {
        fprintf(stderr, "mooncake_master: --enable_ha needs a --wal_dir (the standby follows "
                        "the replicated log into it)\n");
        rc = 2;
    }
    if (rc) {
        mc_auth_free(auth);
        return rc;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    mc_tenant_store_t *tstore = NULL;
    if (f.tq_type[0] && mc_tenant_store_open(f.tq_type, f.tq_uri, f.cluster_id, &tstore) != MC_OK) {
        fprintf(stderr, "mooncake_master: bad --tenant_quota_connector_uri '%s'\n", f.tq_uri);
        mc_auth_free(auth);
        return 2;
    }
    so.tenant_store = tstore;

    /* leases the old leader granted end by then: only then is space it freed reused (a new
     * leader counts it from each free it applied, per freed range, docs/internals/ha.md) */
    if (f.enable_ha)
        so.cfg.recovered_reuse_delay_ms = so.cfg.default_kv_lease_ttl_ms;
    /* Data grants of the previous master (or leader) are not in the log: when tenant-bound
     * peers can get grants, recovered space waits out the longest one (a put's write grant,
     * plus the storage servers' clock margin) before it is reused (security.md, "Space
     * under grants"). */
    if (mc_auth_has_cluster_key(auth) && mc_auth_has_tenant_key(auth)) {
        uint64_t lease = so.cfg.default_kv_lease_ttl_ms, put = so.cfg.put_start_discard_timeout_ms;
        uint64_t floor = (lease > put ? lease : put) + 2ull * MC_GRANT_SKEW_MS;
        if (so.cfg.recovered_reuse_delay_ms < floor)
            so.cfg.recovered_reuse_delay_ms = floor;
        /* a write grant of the old leader may name any space free in the log: all of it waits */
        so.cfg.recovered_reuse_all = true;
    }

    mc_ha_t *ha = NULL;
    mc_ha_http_t *standby_http = NULL; /* the admin port while a standby (then drained) */
    /* HA: the RPC address, bound (not listening) from the start, so that a port another
     * process holds fails this start rather than the takeover, and none takes it meanwhile
     * (docs/internals/ha.md "Standby and takeover"). Ours until the service's RPC server takes
     * it (so.rpc_bound_fd: then -1); every path that does not get there closes it. */
    int rpc_fd = -1;
    if (f.enable_ha) {
        if (mc_net_reserve(rpc_address, so.port, &rpc_fd, NULL) != MC_OK) {
            fprintf(stderr, "mooncake_master: cannot reserve the RPC address %s:%u "
                            "(--rpc_address:--rpc_port) that this member serves once it "
                            "leads\n", rpc_address, so.port);
            mc_tenant_store_close(tstore);
            mc_auth_free(auth);
            return 1;
        }
        so.rpc_bound_fd = &rpc_fd;
        char advertise[300];
        snprintf(advertise, sizeof(advertise), "%s:%u", rpc_address, so.port);
        mc_ha_opts_t ho = {.endpoints = f.ha_conn[0] ? f.ha_conn : f.etcd_endpoints,
                           .cluster_id = f.cluster_id, .advertise = advertise,
                           .lease_ttl_s = (uint32_t)f.ha_ttl, .wal_dir = wal_dir,
                           .snapshot_bytes = f.ha_snap_bytes, .core_cfg = &so.cfg,
                           .commit_standbys = strcmp(f.ha_commit, "standbys") == 0,
                           .isr_timeout_ms = (uint32_t)f.ha_isr_ms,
                           .unlogged_put_starts = !f.ha_log_put_starts,
                           .etcd_append_interval_ms = (uint32_t)f.ha_append_ms, .auth = auth};
        mc_status_t hst = mc_ha_create(&ho, &ha);
        /* a standby keeps its admin port (/health /role /leader /metrics) */
        if (hst == MC_OK && so.metrics_port >= 0) {
            standby_http = mc_ha_http_start(ha, so.metrics_address, (uint16_t)so.metrics_port,
                                            auth, f.metrics_public);
            if (!standby_http)
                hst = MC_ERR_IO;
        }
        if (hst == MC_OK)
            hst = mc_ha_wait_leadership(ha, &g_stop, &so.core);
        if (hst != MC_OK) {
            mc_ha_http_stop(standby_http);
            if (hst != MC_ERR_CANCELED)
                fprintf(stderr, "mooncake_master: HA: %s\n", mc_status_str(hst));
            close(rpc_fd);
            mc_ha_destroy(ha);
            mc_tenant_store_close(tstore);
            mc_auth_free(auth);
            return hst == MC_ERR_CANCELED ? 0 : 1;
        }
        so.ha_before_reply = mc_ha_before_reply;
        so.ha_tick = mc_ha_tick;
        so.ha_leader_json = mc_ha_leader_json;
        so.ha_metrics = mc_ha_render_metrics;
        if (ho.commit_standbys)
            so.ha_fetch = mc_ha_fetch;
        so.cfg.ha_view_version = mc_ha_view(ha);
        so.ha_ctx = ha;
        /* the service's HTTP server takes the port over by its socket: the standby's answers
         * until then (docs/internals/ha.md "Admin pages and metrics") */
        so.metrics_take = mc_ha_http_take;
        so.metrics_handed = mc_ha_http_handed;
        so.metrics_handover_ctx = standby_http;
    }
    /* one keyring for every port (RPC, metrics/admin HTTP, metadata); lives until exit */
    so.metrics_public = f.metrics_public;
    mc_status_t st = mc_master_service_create(&so, &g_svc);
    if (st != MC_OK) {
        fprintf(stderr, "mooncake_master: cannot start: %s\n", mc_status_str(st));
        if (rpc_fd >= 0) /* not taken by the RPC server */
            close(rpc_fd);
        mc_ha_http_stop(standby_http);
        mc_ha_destroy(ha);
        mc_tenant_store_close(tstore);
        mc_auth_free(auth);
        return 1;
    }
    if (g_stop) /* a signal while becoming the leader */
        mc_master_service_stop(g_svc);
#ifdef MC_HAVE_META_SERVER
    mc_meta_server_t *meta = NULL;
    if (f.enable_meta) {
        char path[4096 + sizeof("/http_metadata.json")] = ""; /* wal_dir < 4096 */
        if (*wal_dir)
            snprintf(path, sizeof(path), "%s/http_metadata.json", wal_dir);
        mc_meta_server_opts_t mo = {.host = rpc_address, .port = (uint16_t)f.http_meta_port,
                                    .persist_path = path[0] ? path : NULL, .auth = auth};
        st = mc_meta_server_start_opts(&mo, &meta);
        if (st != MC_OK) {
            fprintf(stderr, "mooncake_master: cannot start the HTTP metadata server: %s\n",
                    mc_status_str(st));
            mc_master_service_destroy(g_svc);
            return 1;
        }
        MC_LOG_INFO("master: HTTP metadata server on port %u", mc_meta_server_port(meta));
    }
#else
    if (f.enable_meta) {
        fprintf(stderr, "mooncake_master: built without the HTTP metadata server\n");
        mc_master_service_destroy(g_svc);
        return 2;
    }
#endif
    /* Machine-readable line for scripts and tests. */
    printf("mooncake_master listening rpc_port=%u metrics_port=%u\n",
           mc_master_service_port(g_svc), mc_master_service_metrics_port(g_svc));
    fflush(stdout);
    if (f.max_threads != 16 || f.rpc_thread_num != 1)
        MC_LOG_INFO("master: --max_threads=%lld --rpc_thread_num=%lld accepted for compatibility; "
                    "requests are served by one loop thread",
                    (long long)f.max_threads, (long long)f.rpc_thread_num);
    MC_LOG_INFO("master: serving RPC on %s:%u, metrics on %u, wal_dir '%s'", rpc_address,
                mc_master_service_port(g_svc), mc_master_service_metrics_port(g_svc), wal_dir);
    mc_master_service_run(g_svc);
    MC_LOG_INFO("master: stopping");
#ifdef MC_HAVE_META_SERVER
    if (meta)
        mc_meta_server_stop(meta);
#endif
    mc_master_service_t *s = g_svc;
    g_svc = NULL;
    mc_ha_quiesce(ha); /* the appender's last release must not outlive the RPC server */
    mc_master_service_destroy(s);
    mc_ha_http_stop(standby_http); /* (joins its drain) */
    mc_ha_destroy(ha); /* after the last group commit: revoke the lease, a standby takes over */
    mc_tenant_store_close(tstore);
    mc_auth_free(auth);
    return 0;
}

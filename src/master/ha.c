/* Master HA on etcd: see ha.h and docs/internals/ha.md.
 *
 * etcd keys (<cid> = --cluster_id):
 *   mooncake-store/<cid>/master_view  "ip:port" of the leader, under its lease; view version =
 *                                      the key's create revision
 *   /oplog/<cid>/producer_view        the view allowed to append (decimal)
 *   /oplog/<cid>/durable_prefix       {"schema_version":1,"batch_id":N,"last_seq":S}
 *   /oplog/<cid>/batches/<%020 id>    one batch: WAL records framed as in the log file
 *   /oplog/<cid>/snapshot             {"schema_version":1,"batch_id":N,"last_seq":S,"chunks":K,
 *                                      "bytes":B}: the state after batch N is in
 *   /oplog/<cid>/snapshots/<%020 N>/<%06 i>  chunk i of its WAL-framed MOUNT/COMMIT records
 *   /oplog/<cid>/standbys/<ip:port>   a standby's last applied batch, under its own lease
 */
#include "master/ha.h"

#include "common/alloc.h"
#include "common/etcd.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/time.h"
#include "master/wal.h"
#include "rpc/frame.h"
#include "rpc/opcodes.h"
#include "rpc/rpc_client.h"

#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define HA_KEY_MAX 256
/* A batch's records (before base64): one record of MC_WAL_MAX_RECORD plus its framing fits,
 * and 4/3 of it plus the JSON stays under etcd's 1.5 MiB request limit. */
#define HA_BATCH_MAX ((size_t)MC_WAL_MAX_RECORD + 13)
#define HA_READ_LIMIT 4 /* batches per range while following: <= 4 x 1.4 MiB answered */
#define HA_CHUNK ((size_t)1 << 20) /* snapshot chunk: 4/3 of it + JSON < 1.5 MiB */
#define HA_TRIM_EVERY_MS 5000     /* the leader trims at least this often */
#define HA_APPEND_INFLIGHT 4      /* runs of groups appended at once (an appender thread each) */
/* --ha_commit=standbys */
#define HA_MAX_MEMBERS 16          /* standbys a leader tracks (fetching or in S); more: BUSY */
#define HA_FETCH_MAX ((size_t)1 << 20) /* records per fetch answer (at least one record) */
#define HA_FETCH_WAIT_MAX_MS 5000  /* the longest a fetch answer is held */
#define HA_KEEP_BYTES ((size_t)16 << 20) /* groups kept for fetches after they are safe */
#define HA_KEEP_MS 3000
#define HA_INC_MAX ((1ull << 53) - 1) /* incarnations stay exact JSON numbers */

/* One group commit handed from the loop thread to the appender: its WAL records (owned). */
typedef struct ha_group {
    uint64_t id;       /* the RPC server's ticket: 1, 2, ... in hand-over order */
    mc_buf_t recs;
    bool snap;         /* a snapshot was forked right after it: its last record ends a batch */
    struct ha_group *next;
} ha_group_t;

/* --ha_commit=standbys, leader: a group handed over, kept for the standbys' fetches (a copy of
 * its records, seq first_seq .. first_seq + n - 1). Under app_mu. */
typedef struct ha_kept {
    uint64_t id, first_seq, n, handed_ms;
    mc_buf_t recs;
    struct ha_kept *next, *prev; /* newer, older */
} ha_kept_t;

/* --ha_commit=standbys, leader: a standby that fetches (under app_mu). It counts for the
 * release rule while it is in S as committed in etcd (in_s) or may be (maybe: a txn that put
 * it there was sent and its outcome is not known yet). */
typedef struct ha_member {
    char addr[128];
    uint64_t inc;          /* its incarnation (new with each rebuilt table) */
    uint64_t acked_seq;    /* its last fetch position */
    uint64_t acked_group;  /* the last group whose records are all at or before it */
    uint64_t caught_ms;    /* the last time it had acknowledged every group handed over */
    uint64_t fetch_ms;     /* its last fetch */
    bool in_s, maybe;
    uint64_t s_inc;        /* the incarnation S names for it */
} ha_member_t;

/* A fetch answer held until a group after its position is handed over or its wait ends. */
typedef struct ha_waiter {
    uint64_t conn_id, req_id, after, deadline_ms;
    uint32_t cap;
    int member;
} ha_waiter_t;

/* One batch of a run: records [off, off + len) of the run, last_seq after it. */
typedef struct ha_batch {
    size_t off, len;
    uint64_t last_seq;
} ha_batch_t;

/* A run of consecutive groups that one appender thread appends as batches first_id ..
 * first_id + nb - 1 (ids and sequence numbers given when it is taken, in order). */
typedef struct ha_run {
    mc_buf_t recs;      /* the groups' records, concatenated */
    ha_batch_t *b;
    size_t nb;
    uint64_t first_id;
    uint64_t group;     /* the last group it carries */
    bool snap;          /* that group is followed by a snapshot */
    bool done;          /* every batch is committed in etcd */
    struct ha_run *next;
} ha_run_t;

struct mc_ha {
    mc_ha_opts_t o;
    mc_etcd_t *etcd;
    char view_key[HA_KEY_MAX], pv_key[HA_KEY_MAX], prefix_key[HA_KEY_MAX],
        batch_prefix[HA_KEY_MAX], snap_key[HA_KEY_MAX], snaps_prefix[HA_KEY_MAX],
        standbys_prefix[HA_KEY_MAX], standby_key[HA_KEY_MAX + 128], isr_key[HA_KEY_MAX];
    uint64_t ttl_ms, fence_ms, poll_ms;
    /* leader */
    uint64_t view;
    int64_t lease;
    atomic_uint_fast64_t last_ok_sent_ms; /* send time of the last answered keepalive */
    pthread_t ka_thread;
    bool ka_running;
    atomic_bool ka_stop;
    /* log position: last batch applied (standby) or durable with every earlier one (leader) */
    uint64_t batch_id, last_seq;
    /* standby: the table the log is applied to as it arrives (a core without a WAL, created
     * from core_cfg; handed to the caller once promoted) */
    mc_master_config_t core_cfg;
    mc_master_t *core;
    uint64_t applied;         /* records applied to core so far (snapshots included) */
    int64_t reg_lease;        /* standby registration lease (0 = none) */
    uint64_t reg_refresh_ms, reg_applied;
    uint64_t elected_ms;      /* when this process won the election */
    /* leader snapshots (o.snapshot_bytes > 0): forked child, then the snapshot thread
     * uploads the file and trims */
    uint64_t snap_bytes;      /* log bytes appended since the last snapshot started */
    pthread_t snap_thread;
    bool snap_running;
    pthread_mutex_t snap_mu;  /* the fields below */
    pid_t snap_pid;
    uint64_t snap_group;      /* the group after which the child's snapshot was forked */
    uint64_t snap_n, snap_seq; /* batch id and last_seq that group ended at (0 = not yet
                                  durable) */
    /* leader: the appender threads (pipelined group commit). The loop thread hands groups over
     * (q_*, under app_mu) and goes on serving; each appender thread takes the groups queued
     * (a run, batch ids given in order) and appends its batches, up to HA_APPEND_INFLIGHT
     * runs at once; a run is durable when it and every earlier one are committed (runs_*, in
     * order), then its replies are released (mc_rpc_server_release on srv). Under app_mu once
     * leading: batch_id / last_seq (the durable prefix), next_id / next_seq (given out). */
    pthread_t app_threads[HA_APPEND_INFLIGHT];
    int n_app;
    bool app_running;
    pthread_mutex_t app_mu;
    pthread_cond_t app_cv;
    ha_group_t *q_head, *q_tail;
    ha_run_t *runs_head, *runs_tail;
    uint64_t next_id, next_seq;
    uint64_t prefix_sent;     /* the highest batch id written to durable_prefix */
    bool app_stop;
    mc_rpc_server_t *srv;     /* set by the loop thread before its first hand-over */
    uint64_t next_group;      /* loop thread: the last group handed over */
    uint64_t space_group;     /* loop thread: the last one that freed or mounted space */
    uint64_t durable_g;       /* under app_mu: the last group durable in etcd */
    uint64_t released;        /* under app_mu: the last group released (release rule) */
    atomic_uint_fast64_t released_group; /* the same, for the loop thread */
    /* --ha_commit=standbys, leader (under app_mu): the groups kept for fetches, the last
     * record and group handed over, the standbys that fetch, the fetches held */
    ha_kept_t *kept_head, *kept_tail;
    size_t kept_bytes;
    uint64_t hand_seq, hand_group;
    ha_member_t members[HA_MAX_MEMBERS];
    int n_members;
    ha_waiter_t waiters[HA_MAX_MEMBERS];
    int n_waiters;
    pthread_t isr_thread;
    bool isr_running;
    int s_size;               /* members of S as committed */
    atomic_uint_fast64_t st_isr_removals, st_isr_txns;
    atomic_uint_fast64_t st_confirmed; /* standby: fetched records confirmed by the prefix */
    /* --ha_commit=standbys, standby: the fetch thread applies the leader's records beyond the
     * etcd log to the table; under core_mu: core, last_seq (the etcd log position), applied_seq
     * (the table's), extra (the records applied beyond last_seq, framed), inc, core_gen (a new
     * table), fetch_view (the view whose records it applied; 0 = none since the last rebuild) */
    pthread_mutex_t core_mu;
    uint64_t applied_seq, inc, core_gen, fetch_view;
    uint64_t won_gen;         /* the table's core_gen when S named it at the election (0 = S
                                 was empty) */
    mc_buf_t extra;
    atomic_bool rebuild;      /* the fetch thread saw another view: rebuild from etcd */
    pthread_t fetch_thread;
    bool fetch_running;
    atomic_bool fetch_stop;
    atomic_uint_fast64_t fetch_lag; /* the leader's last record - applied_seq, last answer */
    uint64_t test_fetch_delay_ms; /* MC_HA_TEST_FETCH_DELAY_MS: tests only, before each fetch */
    char s_json[1024];        /* S as last read (standby) or written (leader), for /leader */
    /* leader append counters for /metrics (any thread; relaxed): etcd txns committed (log
     * batches), runs and groups taken, records sent, and the summed time the appenders spent
     * in txns (its rate is the mean number of appends in flight) */
    atomic_uint_fast64_t st_txns, st_runs, st_groups, st_records, st_bytes, st_txn_us;
    uint64_t test_delay_ms;   /* MC_HA_TEST_APPEND_DELAY_MS: tests only, before each append */
    uint64_t append_start_ms; /* when the last append started (app_mu; standbys mode's pacing) */
    int pacing;               /* under app_mu: appenders in pace_append's timed wait (they take
                                 the queue when it ends: a hand-over need not wake one) */
    uint64_t test_stall_id;   /* MC_HA_TEST_STALL_BATCH: tests only, this batch is never sent */
    /* what /health, /leader and /metrics show (under mu; any thread) */
    pthread_mutex_t mu;
    bool leading;
    uint64_t seen_view;       /* the current leader's view as last read (0 = none) */
    char seen_addr[128];      /* its address */
    uint64_t durable_id;      /* durable_prefix batch id as last read */
    uint64_t behind_since_ms; /* first time applied < durable (0 = caught up) */
    uint64_t failovers;       /* new views seen after the first one (incl. our election) */
    uint64_t promo_records;   /* records applied between the election and serving */
    uint64_t promo_ms;        /* time from the election to the promoted table */
};

/* Records the leader view read from etcd (0 = none). */
static void note_view(mc_ha_t *ha, uint64_t view, const char *addr, size_t len)
{
    pthread_mutex_lock(&ha->mu);
    if (view && ha->seen_view && view != ha->seen_view)
        ha->failovers++;
    if (view)
        ha->seen_view = view;
    if (len >= sizeof(ha->seen_addr))
        len = sizeof(ha->seen_addr) - 1;
    memcpy(ha->seen_addr, addr ? addr : "", addr ? len : 0);
    ha->seen_addr[addr ? len : 0] = '\0';
    pthread_mutex_unlock(&ha->mu);
}

static void note_log(mc_ha_t *ha, uint64_t durable)
{
    pthread_mutex_lock(&ha->mu);
    ha->durable_id = durable;
    if (ha->batch_id >= durable)
        ha->behind_since_ms = 0;
    else if (!ha->behind_since_ms)
        ha->behind_since_ms = mc_now_ms();
    pthread_mutex_unlock(&ha->mu);
}

static bool cluster_id_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > MC_HA_CLUSTER_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

mc_status_t mc_ha_create(const mc_ha_opts_t *opts, mc_ha_t **ha_p)
{
    *ha_p = NULL;
    if (!cluster_id_ok(opts->cluster_id)) {
        MC_LOG_ERROR("ha: --cluster_id must be 1..%d of [A-Za-z0-9_.-]", MC_HA_CLUSTER_ID_MAX);
        return MC_ERR_INVALID_PARAMS;
    }
    if (opts->commit_standbys &&
        (opts->isr_timeout_ms < 1 || opts->isr_timeout_ms >= opts->lease_ttl_s * 1000u)) {
        MC_LOG_ERROR("ha: --ha_isr_timeout_ms must be 1..%u (below the lease TTL)",
                     opts->lease_ttl_s * 1000u - 1);
        return MC_ERR_INVALID_PARAMS;
    }
    if (opts->lease_ttl_s < 1 || opts->lease_ttl_s > 60 || !opts->wal_dir || !*opts->wal_dir ||
        !opts->advertise || !*opts->advertise || strlen(opts->advertise) > 120 ||
        !opts->core_cfg) {
        MC_LOG_ERROR("ha: needs a lease TTL of 1..60 s, a WAL directory, an RPC address and "
                     "the master configuration");
        return MC_ERR_INVALID_PARAMS;
    }
    mc_ha_t *ha = MC_NEW(mc_ha_t);
    if (!ha)
        return MC_ERR_NO_MEMORY;
    ha->o = *opts;
    ha->core_cfg = *opts->core_cfg;
    ha->core_cfg.wal_dir = NULL; /* the standby's table has no WAL until it is promoted */
    /* standbys mode logs each create-once PutStart's allocation (held like any acknowledging
     * reply, mc_ha_before_reply), so that a new leader keeps it for its writer */
    ha->core_cfg.ha_log_put_starts = opts->commit_standbys && !opts->unlogged_put_starts;
    ha->o.core_cfg = NULL;
    pthread_mutex_init(&ha->mu, NULL);
    pthread_mutex_init(&ha->snap_mu, NULL);
    pthread_mutex_init(&ha->app_mu, NULL);
    pthread_mutex_init(&ha->core_mu, NULL);
    pthread_condattr_t cva;
    pthread_condattr_init(&cva);
    pthread_condattr_setclock(&cva, CLOCK_MONOTONIC); /* timed waits on mc_now_ms's clock */
    pthread_cond_init(&ha->app_cv, &cva);
    pthread_condattr_destroy(&cva);
    const char *fdelay = getenv("MC_HA_TEST_FETCH_DELAY_MS"); /* tests only */
    if (opts->commit_standbys && fdelay && *fdelay) {
        ha->test_fetch_delay_ms = strtoull(fdelay, NULL, 10);
        MC_LOG_WARN("ha: MC_HA_TEST_FETCH_DELAY_MS=%" PRIu64 " (tests only): every fetch from "
                    "the leader is sent that much later and answered at once",
                    ha->test_fetch_delay_ms);
    }
    const char *delay = getenv("MC_HA_TEST_APPEND_DELAY_MS"); /* tests only */
    if (delay && *delay) {
        ha->test_delay_ms = strtoull(delay, NULL, 10);
        MC_LOG_WARN("ha: MC_HA_TEST_APPEND_DELAY_MS=%" PRIu64 " (tests only): every log "
                    "append is delayed", ha->test_delay_ms);
    }
    const char *stall = getenv("MC_HA_TEST_STALL_BATCH"); /* tests only */
    if (stall && *stall) {
        ha->test_stall_id = strtoull(stall, NULL, 10);
        MC_LOG_WARN("ha: MC_HA_TEST_STALL_BATCH=%" PRIu64 " (tests only): that batch of the "
                    "log is never appended", ha->test_stall_id);
    }
    ha->ttl_ms = (uint64_t)opts->lease_ttl_s * 1000;
    /* fence before etcd can have expired the lease: its countdown starts when it receives a
     * keepalive, after we sent it; keep a margin for clock rate differences */
    ha->fence_ms = ha->ttl_ms - (ha->ttl_ms / 10 < 500 ? ha->ttl_ms / 10 : 500);
    ha->poll_ms = ha->ttl_ms / 10 < 200 ? ha->ttl_ms / 10 : 200;
    const char *cid = opts->cluster_id;
    snprintf(ha->view_key, HA_KEY_MAX, "mooncake-store/%s/master_view", cid);
    snprintf(ha->pv_key, HA_KEY_MAX, "/oplog/%s/producer_view", cid);
    snprintf(ha->prefix_key, HA_KEY_MAX, "/oplog/%s/durable_prefix", cid);
    snprintf(ha->batch_prefix, HA_KEY_MAX, "/oplog/%s/batches/", cid);
    snprintf(ha->snap_key, HA_KEY_MAX, "/oplog/%s/snapshot", cid);
    snprintf(ha->snaps_prefix, HA_KEY_MAX, "/oplog/%s/snapshots/", cid);
    snprintf(ha->standbys_prefix, HA_KEY_MAX, "/oplog/%s/standbys/", cid);
    snprintf(ha->isr_key, HA_KEY_MAX, "/oplog/%s/in_sync", cid);
    snprintf(ha->standby_key, sizeof(ha->standby_key), "%s%s", ha->standbys_prefix,
             opts->advertise);
    /* one request may not outlast a third of the TTL (keepalives every TTL/3) */
    uint32_t tmo = (uint32_t)(ha->ttl_ms / 3 < 500 ? 500 : ha->ttl_ms / 3);
    mc_status_t st = mc_etcd_open(opts->endpoints, tmo, &ha->etcd);
    if (st != MC_OK) {
        mc_free(ha);
        return st;
    }
    *ha_p = ha;
    return MC_OK;
}

uint64_t mc_ha_view(const mc_ha_t *ha)
{
    return ha ? ha->view : 0;
}

static _Noreturn void fence_exit(const char *why)
{
    MC_LOG_ERROR("ha: fenced (%s): this master stops at once without answering; a supervisor "
                 "restarts it as a standby", why);
    _exit(MC_HA_EXIT_FENCED);
}

/* ------------------------------------------------------------------ log format */

/* out: HA_KEY_MAX + 32 bytes */
static void batch_key(const mc_ha_t *ha, uint64_t id, char *out)
{
    snprintf(out, HA_KEY_MAX + 32, "%s%020" PRIu64, ha->batch_prefix, id);
}

static int parse_prefix(const char *v, size_t len, uint64_t *id_p, uint64_t *seq_p)
{
    json_t *j = json_loadb(v, len, 0, NULL);
    json_t *id = json_object_get(j, "batch_id"), *seq = json_object_get(j, "last_seq");
    int ok = json_is_integer(id) && json_is_integer(seq) && json_integer_value(id) >= 0 &&
             json_integer_value(seq) >= 0;
    if (ok) {
        *id_p = (uint64_t)json_integer_value(id);
        *seq_p = (uint64_t)json_integer_value(seq);
    }
    json_decref(j);
    return ok ? 0 : -1;
}

/* durable_prefix now: 0 and the position (0/0 and NULL value when absent), -1 on error. */
static int read_prefix(mc_ha_t *ha, uint64_t *id_p, uint64_t *seq_p, char **val_p)
{
    size_t len;
    *id_p = *seq_p = 0;
    *val_p = NULL;
    mc_status_t st = mc_etcd_get(ha->etcd, ha->prefix_key, val_p, &len);
    if (st == MC_ERR_OBJECT_NOT_FOUND)
        return 0;
    if (st != MC_OK)
        return -1;
    if (parse_prefix(*val_p, len, id_p, seq_p) != 0) {
        MC_LOG_ERROR("ha: malformed %s", ha->prefix_key);
        mc_free(*val_p);
        *val_p = NULL;
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ standby: follow the log */

/* Deletes the local log and snapshots: in HA mode the replicated log is the truth, and a
 * former leader's local tail may hold records that were never acknowledged. A standby keeps
 * nothing on disk: its table is in memory, and a restarted member rebuilds from etcd. */
static mc_status_t clear_wal_dir(mc_ha_t *ha)
{
    const char *prefixes[3] = {"log.", "snap.", "hasnap."};
    for (int p = 0; p < 3; p++) {
        uint64_t *g;
        size_t n;
        if (mc_wal_list(ha->o.wal_dir, prefixes[p], &g, &n) != MC_OK)
            return MC_ERR_FILE_OPEN_FAIL;
        for (size_t i = 0; i < n; i++) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s%" PRIu64, ha->o.wal_dir, prefixes[p], g[i]);
            unlink(path);
            snprintf(path, sizeof(path), "%s/%s%" PRIu64 ".tmp", ha->o.wal_dir, prefixes[p],
                     g[i]);
            unlink(path);
        }
        mc_free(g);
    }
    return MC_OK;
}

/* An empty table at batch 0 (the log is applied to it from the start or from a snapshot). */
static mc_status_t core_reset(mc_ha_t *ha)
{
    mc_master_destroy(ha->core);
    ha->core = NULL;
    pthread_mutex_lock(&ha->mu);
    ha->batch_id = 0;
    pthread_mutex_unlock(&ha->mu);
    ha->last_seq = ha->applied_seq = 0;
    mc_buf_free(&ha->extra);
    ha->fetch_view = 0;
    ha->core_gen++;
    /* a new table: S may name this member only once the leader saw it caught up again */
    mc_auth_random((uint8_t *)&ha->inc, sizeof(ha->inc));
    ha->inc = ha->inc % HA_INC_MAX + 1;
    mc_status_t st = mc_master_create(&ha->core_cfg, &ha->core);
    if (st == MC_OK)
        st = mc_master_follow_begin(ha->core);
    return st;
}

/* Applies one batch (or a run of snapshot bytes) to the table: 0, *used_p bytes of whole
 * records applied (*n_p of them), or -1 (a corrupt record, or no memory; logged). */
static int apply(mc_ha_t *ha, const void *p, size_t len, size_t *used_p, uint64_t *n_p,
                 uint8_t *last_p)
{
    mc_status_t st = mc_master_follow_apply(ha->core, p, len, used_p, n_p, last_p);
    ha->applied += *n_p;
    if (st != MC_OK) {
        MC_LOG_ERROR("ha: replicated log: cannot apply a record: %s", mc_status_str(st));
        return -1;
    }
    return 0;
}

/* Bytes of the WAL record framed at p (u32 len | u8 type | payload | u64 XXH3); p must hold
 * at least its 4-byte length. */
static size_t rec_len(const uint8_t *p)
{
    uint32_t n = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    return 13 + (size_t)n;
}

/* Bytes of the first n whole records of p[0..len) (WAL framing: u32 len | u8 type | payload |
 * u64 XXH3), or SIZE_MAX when they are not all there. */
static size_t rec_span(const uint8_t *p, size_t len, uint64_t n)
{
    size_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (len - off < 13)
            return SIZE_MAX;
        size_t r = rec_len(p + off);
        if (r > len - off)
            return SIZE_MAX;
        off += r;
    }
    return off;
}

/* Under core_mu: one durable batch of the etcd log, next in order. Its records the fetch thread
 * applied already (the head of extra) must be the same bytes and are not applied again; the
 * rest are applied. *n_p: the batch's records. 0 ok, 1 they differ (this table applied another
 * leader's records: rebuild it from etcd), -1 malformed (logged by the caller). */
static int apply_batch(mc_ha_t *ha, const uint8_t *p, size_t len, uint64_t *n_p)
{
    size_t off = 0;
    uint64_t n = 0;
    while (off < len && mc_buf_unread(&ha->extra)) {
        size_t r = rec_span(p + off, len - off, 1);
        size_t e = rec_span(mc_buf_head(&ha->extra), mc_buf_unread(&ha->extra), 1);
        if (r == SIZE_MAX)
            return -1;
        if (r != e || memcmp(p + off, mc_buf_head(&ha->extra), r) != 0) {
            MC_LOG_WARN("ha: the etcd log differs from the records fetched from the leader "
                        "(another view wrote it); rebuilding the table from etcd");
            return 1;
        }
        mc_buf_consume(&ha->extra, r);
        off += r;
        n++;
    }
    if (off < len) {
        size_t used = 0;
        uint64_t k = 0;
        if (apply(ha, p + off, len - off, &used, &k, NULL) != 0 || used != len - off)
            return -1;
        n += k;
        ha->applied_seq += k;
    }
    *n_p = n;
    return 0;
}

/* Under core_mu: records first .. first + count - 1 fetched from the leader; those after
 * applied_seq are applied and kept in extra (until the etcd log has them). 0 ok, -1 a gap,
 * a malformed record or no memory: the table must be rebuilt. */
static int apply_fetched(mc_ha_t *ha, uint64_t first, const uint8_t *p, size_t len,
                         uint64_t count)
{
    if (first == 0 || first > ha->applied_seq + 1)
        return -1;
    uint64_t skip = ha->applied_seq + 1 - first;
    if (skip >= count)
        return 0;
    size_t off = rec_span(p, len, skip), used = 0;
    uint64_t k = 0;
    if (off == SIZE_MAX)
        return -1;
    int bad = apply(ha, p + off, len - off, &used, &k, NULL);
    ha->applied_seq += k;
    if (bad || used != len - off || k != count - skip ||
        mc_buf_append(&ha->extra, p + off, used) != MC_OK) {
        MC_LOG_ERROR("ha: a fetched answer could not be applied; rebuilding the table");
        return -1;
    }
    return 0;
}

typedef struct manifest {
    uint64_t n, seq, chunks, bytes; /* batch id, last_seq, chunk count, record bytes */
} manifest_t;

static int parse_manifest(const char *v, size_t len, manifest_t *m)
{
    json_t *j = json_loadb(v, len, 0, NULL);
    json_t *n = json_object_get(j, "batch_id"), *q = json_object_get(j, "last_seq"),
           *c = json_object_get(j, "chunks"), *b = json_object_get(j, "bytes");
    int ok = json_is_integer(n) && json_is_integer(q) && json_is_integer(c) &&
             json_integer_value(n) > 0 && json_integer_value(q) >= 0 &&
             json_integer_value(c) > 0 && json_integer_value(c) < (1 << 20);
    if (ok) {
        m->n = (uint64_t)json_integer_value(n);
        m->seq = (uint64_t)json_integer_value(q);
        m->chunks = (uint64_t)json_integer_value(c);
        m->bytes = json_is_integer(b) && json_integer_value(b) > 0
                       ? (uint64_t)json_integer_value(b)
                       : 0;
    }
    json_decref(j);
    return ok ? 0 : -1;
}

/* The manifest now: 1 present (*m), 0 absent, -1 error. */
static int read_manifest(mc_ha_t *ha, manifest_t *m)
{
    char *v;
    size_t len;
    mc_status_t st = mc_etcd_get(ha->etcd, ha->snap_key, &v, &len);
    if (st == MC_ERR_OBJECT_NOT_FOUND)
        return 0;
    if (st != MC_OK)
        return -1;
    int bad = parse_manifest(v, len, m);
    mc_free(v);
    if (bad)
        MC_LOG_ERROR("ha: malformed %s", ha->snap_key);
    return bad ? -1 : 1;
}

/* out: HA_KEY_MAX + 64 bytes */
static void chunk_key(const mc_ha_t *ha, uint64_t n, uint64_t i, char *out)
{
    snprintf(out, HA_KEY_MAX + 64, "%s%020" PRIu64 "/%06" PRIu64, ha->snaps_prefix, n, i);
}

/* A fresh table: empty, then the latest snapshot (if any) applied to it, so that following
 * goes on after its batch. 0 ok, -1 try again later (etcd unreachable, the snapshot was
 * replaced while we read it, or it is incomplete). Chunks split records anywhere: the bytes
 * of a record cut at a chunk's end wait in a buffer for the next chunk. */
static int bootstrap(mc_ha_t *ha)
{
    if (core_reset(ha) != MC_OK)
        return -1;
    manifest_t man;
    int have = read_manifest(ha, &man);
    if (have <= 0)
        return have; /* 0: no snapshot, the log is whole from batch 1 */
    uint64_t n = man.n, seq = man.seq, chunks = man.chunks;
    mc_buf_t carry = {0};
    uint8_t last = 0;
    int bad = 0;
    for (uint64_t i = 0; i < chunks && !bad; i++) {
        char key[HA_KEY_MAX + 64], *v;
        size_t len, used;
        uint64_t nrec;
        chunk_key(ha, n, i, key);
        if (mc_etcd_get(ha->etcd, key, &v, &len) != MC_OK) {
            bad = 1; /* replaced by a newer snapshot meanwhile: start over */
            break;
        }
        bad = mc_buf_append(&carry, v, len) != MC_OK;
        mc_free(v);
        if (!bad)
            bad = apply(ha, mc_buf_head(&carry), mc_buf_unread(&carry), &used, &nrec, &last);
        if (!bad)
            mc_buf_consume(&carry, used);
    }
    if (!bad && (mc_buf_unread(&carry) || last != MC_WAL_SNAP_END)) {
        MC_LOG_ERROR("ha: the snapshot at batch %" PRIu64 " is incomplete", n);
        bad = 1;
    }
    mc_buf_free(&carry);
    if (bad)
        return -1;
    pthread_mutex_lock(&ha->mu);
    ha->batch_id = n;
    pthread_mutex_unlock(&ha->mu);
    ha->last_seq = ha->applied_seq = seq;
    MC_LOG_INFO("ha: copied the snapshot at batch %" PRIu64 " (%" PRIu64 " chunks, %" PRIu64
                " objects)", n, chunks, mc_master_object_count(ha->core));
    return 0;
}

/* A standby tells the leader how far it has applied (the leader keeps the log from there):
 * /oplog/<cid>/standbys/<ip:port> under a lease of 3 x TTL, refreshed every TTL/3. */
static void register_standby(mc_ha_t *ha)
{
    uint64_t now = mc_now_ms();
    bool due = now - ha->reg_refresh_ms >= ha->ttl_ms / 3;
    if (ha->reg_lease && due &&
        mc_etcd_lease_keepalive(ha->etcd, ha->reg_lease, NULL) == MC_ERR_LEASE_EXPIRED)
        ha->reg_lease = 0;
    bool fresh = false;
    if (!ha->reg_lease) {
        if (mc_etcd_lease_grant(ha->etcd, (int64_t)ha->o.lease_ttl_s * 3, &ha->reg_lease) != MC_OK)
            return;
        fresh = true;
    }
    if (due)
        ha->reg_refresh_ms = now;
    if (!fresh && ha->reg_applied == ha->batch_id)
        return;
    char v[24];
    snprintf(v, sizeof(v), "%" PRIu64, ha->batch_id);
    if (mc_etcd_put(ha->etcd, ha->standby_key, v, strlen(v), ha->reg_lease, NULL) == MC_OK)
        ha->reg_applied = ha->batch_id;
}

/* --ha_commit=standbys: the records up to etcd's durable prefix that this standby already
 * fetched from the leader are confirmed by the prefix alone instead of read back from etcd
 * (which would move every byte of the log through etcd a second time). Only when the prefix
 * was read in the same etcd revision as producer_view naming the view it fetched from: then
 * every batch after ours up to the prefix was written by that leader, from the records it
 * handed to its fetchers, in the same order. Otherwise (another view produces, etcd did not
 * answer) follow reads and compares the batches as before. */
static void skip_fetched(mc_ha_t *ha)
{
    pthread_mutex_lock(&ha->core_mu);
    uint64_t view = ha->fetch_view;
    pthread_mutex_unlock(&ha->core_mu);
    if (!view)
        return;
    char vs[24];
    snprintf(vs, sizeof(vs), "%" PRIu64, view);
    mc_etcd_cmp_t same = {.key = ha->pv_key, .target = MC_ETCD_VALUE, .result = MC_ETCD_EQUAL,
                          .value = vs, .value_len = strlen(vs)};
    mc_etcd_op_t get = {.type = MC_ETCD_OP_RANGE, .key = ha->prefix_key};
    mc_etcd_txn_resp_t r = {0};
    int ok = 0;
    if (mc_etcd_txn(ha->etcd, &same, 1, &get, 1, NULL, 0, &ok, &r) != MC_OK)
        return;
    uint64_t id = 0, seq = 0;
    bool have = ok && r.n == 1 && r.ranges[0].n == 1 &&
                parse_prefix(r.ranges[0].kvs[0].value, r.ranges[0].kvs[0].value_len, &id,
                             &seq) == 0;
    mc_etcd_txn_resp_free(&r);
    if (!have)
        return;
    pthread_mutex_lock(&ha->core_mu);
    if (ha->fetch_view == view && id > ha->batch_id && seq > ha->last_seq &&
        seq <= ha->applied_seq) {
        /* extra holds records last_seq+1 .. applied_seq: drop those up to seq */
        size_t span = rec_span(mc_buf_head(&ha->extra), mc_buf_unread(&ha->extra),
                               seq - ha->last_seq);
        if (span != SIZE_MAX) {
            mc_buf_consume(&ha->extra, span);
            atomic_fetch_add_explicit(&ha->st_confirmed, seq - ha->last_seq,
                                      memory_order_relaxed);
            pthread_mutex_lock(&ha->mu);
            ha->batch_id = id;
            pthread_mutex_unlock(&ha->mu);
            ha->last_seq = seq;
        }
    }
    pthread_mutex_unlock(&ha->core_mu);
}

/* Applies the batches after ha->batch_id that are in etcd without a gap (each committed with
 * every earlier one: durable) to the table, in order; a batch after a missing one is an
 * append still in flight (or one a fenced leader never finished, which the next leader
 * deletes) and is not applied. 0 ok (or etcd unreachable: try later; *end_p when the next
 * batch is not there), 1 when the next batch is gone (trimmed: copy a snapshot again), -1
 * when the log cannot be followed (a malformed batch, no memory). */
static int follow(mc_ha_t *ha, bool *end_p)
{
    uint64_t id, seq;
    char *val;
    *end_p = false;
    if (read_prefix(ha, &id, &seq, &val) != 0)
        return 0;
    mc_free(val); /* a lower bound of the durable prefix (ha.md "Replicated log") */
    note_log(ha, id);
    if (ha->o.commit_standbys)
        skip_fetched(ha);
    for (;;) {
        char from[HA_KEY_MAX + 32];
        batch_key(ha, ha->batch_id + 1, from);
        char *end = mc_etcd_prefix_end(ha->batch_prefix);
        mc_etcd_range_t r;
        mc_status_t st = end ? mc_etcd_range(ha->etcd, from, end, HA_READ_LIMIT, &r)
                             : MC_ERR_NO_MEMORY;
        mc_free(end);
        if (st != MC_OK)
            return 0;
        size_t i = 0;
        int bad = 0;
        /* the table only while applying (the fetch thread applies too): never across an etcd
         * request, which would hold its acknowledgements back */
        pthread_mutex_lock(&ha->core_mu);
        for (; i < r.n; i++) {
            char want[HA_KEY_MAX + 32];
            batch_key(ha, ha->batch_id + 1, want);
            uint64_t n = 0;
            if (strcmp(r.kvs[i].key, want) != 0)
                break; /* a gap: an append in flight */
            int a = apply_batch(ha, (const uint8_t *)r.kvs[i].value, r.kvs[i].value_len, &n);
            if (a < 0)
                MC_LOG_ERROR("ha: replicated log: batch %s is malformed", want);
            if (a) {
                bad = a;
                break;
            }
            pthread_mutex_lock(&ha->mu);
            ha->batch_id++;
            pthread_mutex_unlock(&ha->mu);
            ha->last_seq += n;
        }
        pthread_mutex_unlock(&ha->core_mu);
        bool more = !bad && i == r.n && r.n == HA_READ_LIMIT;
        mc_etcd_range_free(&r);
        if (bad)
            return bad; /* 1: rebuild from the snapshot, as for a trimmed batch */
        if (i == 0 && id > ha->batch_id) { /* durable once, and gone */
            MC_LOG_WARN("ha: replicated log: batch %" PRIu64 " was trimmed; copying the "
                        "snapshot again", ha->batch_id + 1);
            return 1;
        }
        note_log(ha, id > ha->batch_id ? id : ha->batch_id);
        if (!more) {
            *end_p = true;
            return 0;
        }
    }
}

/* ------------------------------------------------------------------ election */

static void *keepalive_main(void *arg)
{
    mc_ha_t *ha = arg;
    uint64_t period = ha->ttl_ms / 3;
    while (!atomic_load(&ha->ka_stop)) {
        uint64_t t0 = mc_now_ms();
        mc_status_t st = mc_etcd_lease_keepalive(ha->etcd, ha->lease, NULL);
        if (st == MC_OK)
            atomic_store(&ha->last_ok_sent_ms, t0);
        else if (st == MC_ERR_LEASE_EXPIRED)
            fence_exit("etcd says the leader lease expired");
        else
            MC_LOG_WARN("ha: lease keepalive failed: %s", mc_status_name(st));
        if (mc_now_ms() - atomic_load(&ha->last_ok_sent_ms) >= ha->fence_ms)
            fence_exit("no keepalive answered within the lease TTL");
        uint64_t next = t0 + period;
        while (!atomic_load(&ha->ka_stop) && mc_now_ms() < next)
            mc_sleep_ms(20);
    }
    return NULL;
}

/* One attempt: 1 = leading now, 0 = someone else leads (or etcd unreachable). isr: with
 * --ha_commit=standbys, the compare that S is still as read when this member decided it may
 * campaign (NULL = none). */
static int try_acquire(mc_ha_t *ha, const mc_etcd_cmp_t *isr)
{
    uint64_t t0 = mc_now_ms();
    int64_t lease;
    if (mc_etcd_lease_grant(ha->etcd, ha->o.lease_ttl_s, &lease) != MC_OK)
        return 0;
    mc_etcd_cmp_t cmps[2] = {{.key = ha->view_key, .target = MC_ETCD_CREATE,
                              .result = MC_ETCD_EQUAL, .rev = 0}};
    if (isr)
        cmps[1] = *isr;
    mc_etcd_op_t put = {.type = MC_ETCD_OP_PUT, .key = ha->view_key, .value = ha->o.advertise,
                        .value_len = strlen(ha->o.advertise), .lease = lease};
    mc_etcd_op_t get = {.type = MC_ETCD_OP_RANGE, .key = ha->view_key};
    mc_etcd_txn_resp_t r;
    int ok = 0;
    mc_status_t st = mc_etcd_txn(ha->etcd, cmps, isr ? 2 : 1, &put, 1, &get, 1, &ok, &r);
    int64_t view = 0;
    if (st == MC_OK && ok) {
        view = r.revision;
    } else if (st == MC_OK && r.n == 1 && r.ranges[0].n == 1 &&
               r.ranges[0].kvs[0].lease == lease) {
        view = r.ranges[0].kvs[0].create_revision; /* our put was applied, its answer lost */
    }
    if (st == MC_OK)
        mc_etcd_txn_resp_free(&r);
    if (view <= 0) {
        (void)mc_etcd_lease_revoke(ha->etcd, lease);
        return 0;
    }
    ha->lease = lease;
    ha->view = (uint64_t)view;
    ha->elected_ms = t0;
    note_view(ha, ha->view, ha->o.advertise, strlen(ha->o.advertise));
    atomic_store(&ha->last_ok_sent_ms, t0);
    atomic_store(&ha->ka_stop, false);
    if (pthread_create(&ha->ka_thread, NULL, keepalive_main, ha) != 0)
        fence_exit("cannot start the keepalive thread");
    ha->ka_running = true;
    MC_LOG_INFO("ha: elected leader of cluster '%s' as %s, view %" PRIu64, ha->o.cluster_id,
                ha->o.advertise, ha->view);
    return 1;
}

/* Makes our view the only producer: a CAS that refuses to go back to a lower view. */
static mc_status_t claim_producer(mc_ha_t *ha)
{
    char mine[24];
    snprintf(mine, sizeof(mine), "%" PRIu64, ha->view);
    for (int attempt = 0; attempt < 20; attempt++) {
        mc_etcd_range_t r;
        if (mc_etcd_range(ha->etcd, ha->pv_key, NULL, 0, &r) != MC_OK) {
            mc_sleep_ms(ha->poll_ms);
            continue;
        }
        int64_t mod = 0;
        if (r.n == 1) {
            uint64_t cur = strtoull(r.kvs[0].value, NULL, 10);
            mod = r.kvs[0].mod_revision;
            if (cur >= ha->view) {
                mc_etcd_range_free(&r);
                if (cur == ha->view)
                    return MC_OK;
                MC_LOG_ERROR("ha: producer view %" PRIu64 " is newer than ours %" PRIu64, cur,
                             ha->view);
                return MC_ERR_INVALID_VERSION;
            }
        }
        mc_etcd_range_free(&r);
        mc_etcd_cmp_t same = {.key = ha->pv_key,
                              .target = mod ? MC_ETCD_MOD : MC_ETCD_CREATE,
                              .result = MC_ETCD_EQUAL, .rev = mod};
        mc_etcd_op_t put = {.type = MC_ETCD_OP_PUT, .key = ha->pv_key, .value = mine,
                            .value_len = strlen(mine)};
        int ok = 0;
        if (mc_etcd_txn(ha->etcd, &same, 1, &put, 1, NULL, 0, &ok, NULL) == MC_OK && ok)
            return MC_OK;
    }
    return MC_ERR_ETCD_OPERATION_ERROR;
}

static void *snap_main(void *arg);
static void *append_main(void *arg);
static void *isr_main(void *arg);
static void update_release(mc_ha_t *ha);
static void keep_group(mc_ha_t *ha, mc_rpc_server_t *srv, uint64_t id, const mc_buf_t *recs);
static void *fetch_main(void *arg);
static void fetch_stop(mc_ha_t *ha);
static bool may_campaign(mc_ha_t *ha, bool at_end, mc_etcd_cmp_t *cmp);
static void takeover_standbys(mc_ha_t *ha, uint64_t deadline);

/* durable_prefix's value for batch id with last_seq seq. */
static void prefix_value(uint64_t id, uint64_t seq, char *out, size_t len)
{
    snprintf(out, len, "{\"schema_version\":1,\"batch_id\":%" PRIu64 ",\"last_seq\":%" PRIu64 "}",
             id, seq);
}

/* New leader, once the producer view is ours and the log is applied to its durable end
 * (ha->batch_id): deletes every batch after it (appends of a fenced leader that committed
 * after one of its earlier appends did not: never acknowledged, never applied by anyone)
 * and sets durable_prefix to it, so that our batches continue the log without a gap.
 * 0 ok, -1 etcd did not answer (try again); fenced when our view no longer produces. */
static int drop_after_gap(mc_ha_t *ha)
{
    char view[24], from[HA_KEY_MAX + 32], val[128];
    snprintf(view, sizeof(view), "%" PRIu64, ha->view);
    batch_key(ha, ha->batch_id + 1, from);
    prefix_value(ha->batch_id, ha->last_seq, val, sizeof(val));
    char *end = mc_etcd_prefix_end(ha->batch_prefix);
    if (!end)
        return -1;
    mc_etcd_cmp_t mine = {.key = ha->pv_key, .target = MC_ETCD_VALUE, .result = MC_ETCD_EQUAL,
                          .value = view, .value_len = strlen(view)};
    mc_etcd_op_t ops[2] = {
        {.type = MC_ETCD_OP_DELETE, .key = from, .range_end = end},
        {.type = MC_ETCD_OP_PUT, .key = ha->prefix_key, .value = val, .value_len = strlen(val)}};
    int ok = 0;
    mc_status_t st = mc_etcd_txn(ha->etcd, &mine, 1, ops, 2, NULL, 0, &ok, NULL);
    mc_free(end);
    if (st != MC_OK)
        return -1;
    if (!ok)
        fence_exit("another view produces the replicated log");
    ha->prefix_sent = ha->batch_id;
    return 0;
}

/* One step of following: 0 (caught up as far as etcd answered; *end_p: to the end of the
 * durable log), -1 cannot follow. A trimmed batch makes the next step start over from the
 * snapshot. */
static int sync_step(mc_ha_t *ha, bool *booted, bool *end_p)
{
    *end_p = false;
    if (atomic_exchange(&ha->rebuild, false))
        *booted = false; /* the fetch thread saw another leader view */
    int r = 0;
    if (!*booted) { /* rare: a new table, under core_mu throughout */
        pthread_mutex_lock(&ha->core_mu);
        *booted = bootstrap(ha) == 0;
        pthread_mutex_unlock(&ha->core_mu);
    }
    if (*booted) {
        r = follow(ha, end_p); /* takes core_mu to apply */
        if (r == 1)
            *booted = false;
    }
    return r < 0 ? -1 : 0;
}

mc_status_t mc_ha_wait_leadership(mc_ha_t *ha, volatile sig_atomic_t *stop, mc_master_t **core_p)
{
    *core_p = NULL;
    mc_status_t st = clear_wal_dir(ha);
    if (st != MC_OK)
        return st;
    MC_LOG_INFO("ha: standby of cluster '%s' (etcd %s), applying the replicated log as it "
                "arrives", ha->o.cluster_id, ha->o.endpoints);
    bool booted = false;
    uint64_t mine_since = 0, mine_view = 0; /* the view names our own address since then */
    bool end;
    while (!*stop) {
        if (sync_step(ha, &booted, &end) != 0)
            return MC_ERR_INTERNAL;
        if (!booted) { /* compete only with a copy of the log */
            mc_sleep_ms(ha->poll_ms);
            continue;
        }
        if (ha->o.commit_standbys && !ha->fetch_running) {
            atomic_store(&ha->fetch_stop, false);
            if (pthread_create(&ha->fetch_thread, NULL, fetch_main, ha) != 0)
                return MC_ERR_INTERNAL;
            ha->fetch_running = true;
        }
        register_standby(ha);
        mc_etcd_range_t r;
        int64_t watch_from = 0; /* the revision after this read of the view */
        if (mc_etcd_range(ha->etcd, ha->view_key, NULL, 0, &r) == MC_OK) {
            watch_from = r.revision + 1;
            bool vacant = r.n == 0;
            if (!vacant)
                note_view(ha, (uint64_t)r.kvs[0].create_revision, r.kvs[0].value,
                          r.kvs[0].value_len);
            else
                note_view(ha, 0, NULL, 0);
            /* A leader with our address: our own previous life (its lease ends within a TTL)
             * or another master configured with the same address, which clients could not
             * tell from us. */
            bool mine = !vacant && strcmp(r.kvs[0].value, ha->o.advertise) == 0;
            uint64_t v = mine ? (uint64_t)r.kvs[0].create_revision : 0;
            mc_etcd_range_free(&r);
            if (!mine || v != mine_view) {
                mine_view = v;
                mine_since = mc_now_ms();
            } else if (mc_now_ms() - mine_since > 2 * ha->ttl_ms) {
                MC_LOG_ERROR("ha: another master leads cluster '%s' with our address %s: two "
                             "masters share --rpc_address:--rpc_port; stopping",
                             ha->o.cluster_id, ha->o.advertise);
                return MC_ERR_INVALID_PARAMS;
            }
            mc_etcd_cmp_t isr;
            if (ha->o.commit_standbys ? may_campaign(ha, end, &isr) && vacant &&
                                            try_acquire(ha, &isr)
                                      : vacant && try_acquire(ha, NULL))
                break;
        }
        /* until the next poll, or at once when the view key changes (the leader's lease
         * ended: compete now rather than at the next poll) */
        int64_t changed;
        mc_status_t wst = watch_from ? mc_etcd_watch(ha->etcd, ha->view_key, watch_from,
                                                     (uint32_t)ha->poll_ms, NULL, &changed)
                                     : MC_ERR_CONNECTION;
        if (wst != MC_OK && wst != MC_ERR_TIMEOUT)
            mc_sleep_ms(ha->poll_ms); /* no watch: poll */
    }
    fetch_stop(ha); /* leading: the table is this thread's alone from now on */
    if (ha->won_gen) /* S named this table: it leads as it is (a rebuild would lose what only
                        S held) */
        atomic_store(&ha->rebuild, false);
    if (*stop)
        return MC_ERR_CANCELED;
    if (ha->view > MC_RPC_VIEW_MAX) /* every answer carries the view in 48 bits (frame.h) */
        fence_exit("the view version does not fit the 48 bits of an answer's header");
    if (ha->reg_lease) /* a leader is no standby: the log need not be kept for it */
        (void)mc_etcd_lease_revoke(ha->etcd, ha->reg_lease);
    ha->reg_lease = 0;
    /* Leader: fence the old producer first, then read the log to its end (nothing can be
     * appended after the claim but by us). */
    st = claim_producer(ha);
    if (st != MC_OK)
        fence_exit("cannot claim the producer view");
    uint64_t deadline = mc_now_ms() + ha->fence_ms, applied0 = ha->applied;
    for (;;) {
        if (sync_step(ha, &booted, &end) != 0)
            return MC_ERR_INTERNAL;
        if (booted && end && drop_after_gap(ha) == 0)
            break;
        if (mc_now_ms() > deadline)
            fence_exit("cannot finish the replicated log within the lease TTL");
        mc_sleep_ms(50);
    }
    if (ha->o.commit_standbys)
        takeover_standbys(ha, deadline);
    /* the table becomes what a restart ends in, without replaying the history again */
    uint64_t t_promote = mc_now_ms();
    st = mc_master_follow_promote(ha->core, ha->o.wal_dir, ha->view);
    if (st != MC_OK) {
        MC_LOG_ERROR("ha: cannot promote the table: %s", mc_status_str(st));
        fence_exit("cannot promote the standby's table");
    }
    uint64_t tail = ha->applied - applied0, now = mc_now_ms(), took = now - ha->elected_ms;
    MC_LOG_INFO("ha: replicated log finished at batch %" PRIu64 " (%" PRIu64 " records, %" PRIu64
                " objects); promoted %" PRIu64 " ms after the election (the table in %" PRIu64
                " ms), %" PRIu64 " records of the tail applied meanwhile",
                ha->batch_id, ha->last_seq, mc_master_object_count(ha->core), took,
                now - t_promote, tail);
    *core_p = ha->core;
    ha->core = NULL;
    pthread_mutex_lock(&ha->mu);
    ha->promo_records = tail;
    ha->promo_ms = took;
    ha->leading = true;
    ha->durable_id = ha->batch_id;
    ha->behind_since_ms = 0;
    pthread_mutex_unlock(&ha->mu);
    if (pthread_create(&ha->snap_thread, NULL, snap_main, ha) != 0)
        fence_exit("cannot start the snapshot thread");
    ha->snap_running = true;
    ha->next_id = ha->batch_id;
    ha->next_seq = ha->last_seq;
    for (; ha->n_app < HA_APPEND_INFLIGHT; ha->n_app++)
        if (pthread_create(&ha->app_threads[ha->n_app], NULL, append_main, ha) != 0)
            fence_exit("cannot start the appender threads");
        else
            pthread_setname_np(ha->app_threads[ha->n_app], "mc-ha-append"); /* top -H, tests */
    ha->app_running = true;
    if (ha->o.commit_standbys) {
        ha->hand_seq = ha->last_seq;
        ha->hand_group = ha->next_group;
        if (pthread_create(&ha->isr_thread, NULL, isr_main, ha) != 0)
            fence_exit("cannot start the in-sync set thread");
        ha->isr_running = true;
    }
    return MC_OK;
}

/* ------------------------------------------------------------------ leader: append */

/* One batch of a run; returns once it is committed in etcd (or exits fenced). Only our view
 * may write batches (the compare on producer_view), so a try repeated after a lost answer
 * writes the same bytes again. durable_prefix gets the durable prefix as known now: this
 * batch when every earlier one is durable already, else the last one that is (a lower bound
 * of the real prefix; appends in flight commit in any order). */
static void append_batch(mc_ha_t *ha, const ha_run_t *run, size_t k)
{
    uint64_t id = run->first_id + k;
    char key[HA_KEY_MAX + 32], view[24], next[128];
    batch_key(ha, id, key);
    snprintf(view, sizeof(view), "%" PRIu64, ha->view);
    pthread_mutex_lock(&ha->app_mu);
    if (ha->batch_id + 1 == id)
        prefix_value(id, run->b[k].last_seq, next, sizeof(next));
    else
        prefix_value(ha->batch_id, ha->last_seq, next, sizeof(next));
    uint64_t sent = ha->batch_id + 1 == id ? id : ha->batch_id;
    pthread_mutex_unlock(&ha->app_mu);
    mc_etcd_cmp_t mine = {.key = ha->pv_key, .target = MC_ETCD_VALUE, .result = MC_ETCD_EQUAL,
                          .value = view, .value_len = strlen(view)};
    mc_etcd_op_t ops[2] = {
        {.type = MC_ETCD_OP_PUT, .key = key, .value = mc_buf_head(&run->recs) + run->b[k].off,
         .value_len = run->b[k].len},
        {.type = MC_ETCD_OP_PUT, .key = ha->prefix_key, .value = next,
         .value_len = strlen(next)}};
    uint64_t t0 = mc_now_ns() / 1000;
    for (;;) {
        int ok = 0;
        mc_status_t st = mc_etcd_txn(ha->etcd, &mine, 1, ops, 2, NULL, 0, &ok, NULL);
        if (st == MC_OK && !ok)
            fence_exit("the replicated log refused our batch (another view produces)");
        if (st == MC_OK)
            break;
        if (st == MC_ERR_TOO_LARGE || st == MC_ERR_INVALID_PARAMS || st == MC_ERR_NO_MEMORY)
            fence_exit("a batch could not be appended to the replicated log");
        if (mc_now_ms() - atomic_load(&ha->last_ok_sent_ms) >= ha->fence_ms)
            fence_exit("etcd unreachable past the lease TTL");
        mc_sleep_ms(20);
    }
    atomic_fetch_add_explicit(&ha->st_txn_us, mc_now_ns() / 1000 - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&ha->st_txns, 1, memory_order_relaxed);
    pthread_mutex_lock(&ha->app_mu);
    if (sent > ha->prefix_sent)
        ha->prefix_sent = sent;
    pthread_mutex_unlock(&ha->app_mu);
}

/* Under app_mu: takes every group queued (up to and including the first one a snapshot
 * follows, so that the snapshot's state ends a batch) as a run, split at record boundaries
 * into batches of at most HA_BATCH_MAX bytes, whose ids and sequence numbers follow the
 * previous run's; appended to the runs in flight. */
static ha_run_t *take_run(mc_ha_t *ha)
{
    ha_run_t *run = MC_NEW(ha_run_t);
    if (!run)
        fence_exit("no memory");
    ha_group_t *g = ha->q_head;
    uint64_t seq0 = ha->next_seq;
    for (;;) {
        atomic_fetch_add_explicit(&ha->st_groups, 1, memory_order_relaxed);
        if (mc_buf_append(&run->recs, mc_buf_head(&g->recs), mc_buf_unread(&g->recs)) != MC_OK)
            fence_exit("no memory");
        run->group = g->id;
        run->snap = g->snap;
        ha_group_t *n = g->next;
        mc_buf_free(&g->recs);
        mc_free(g);
        g = n;
        if (!g || run->snap)
            break;
    }
    ha->q_head = g;
    if (!g)
        ha->q_tail = NULL;
    const uint8_t *p = mc_buf_head(&run->recs);
    size_t len = mc_buf_unread(&run->recs), start = 0, off = 0, cap = 0;
    run->first_id = ha->next_id + 1;
    for (;;) {
        bool last = off >= len;
        size_t rec = 0;
        if (!last)
            rec = rec_len(p + off);
        if ((last && off > start) || (!last && off - start + rec > HA_BATCH_MAX && off > start)) {
            if (mc_array_reserve(&run->b, &cap, run->nb + 1, 4) != MC_OK)
                fence_exit("no memory");
            run->b[run->nb++] = (ha_batch_t){.off = start, .len = off - start,
                                             .last_seq = ha->next_seq};
            ha->next_id++;
            start = off;
        }
        if (last)
            break;
        off += rec;
        ha->next_seq++;
    }
    atomic_fetch_add_explicit(&ha->st_runs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&ha->st_records, ha->next_seq - seq0, memory_order_relaxed);
    atomic_fetch_add_explicit(&ha->st_bytes, len, memory_order_relaxed);
    if (ha->runs_tail)
        ha->runs_tail->next = run;
    else
        ha->runs_head = run;
    ha->runs_tail = run;
    return run;
}

/* Under app_mu: the runs done with every earlier one become the durable prefix; their
 * replies are released. */
static void complete_runs(mc_ha_t *ha)
{
    while (ha->runs_head && ha->runs_head->done) {
        ha_run_t *run = ha->runs_head;
        ha->runs_head = run->next;
        if (!ha->runs_head)
            ha->runs_tail = NULL;
        if (run->nb) {
            pthread_mutex_lock(&ha->mu);
            ha->batch_id = ha->durable_id = run->first_id + run->nb - 1;
            pthread_mutex_unlock(&ha->mu);
            ha->last_seq = run->b[run->nb - 1].last_seq;
        }
        if (run->snap) {
            pthread_mutex_lock(&ha->snap_mu);
            ha->snap_n = ha->batch_id;
            ha->snap_seq = ha->last_seq;
            pthread_mutex_unlock(&ha->snap_mu);
        }
        ha->durable_g = run->group;
        mc_buf_free(&run->recs);
        mc_free(run->b);
        mc_free(run);
    }
    if (ha->o.commit_standbys) /* an appender waiting for the run in flight may go on */
        pthread_cond_broadcast(&ha->app_cv);
    update_release(ha);
}

/* Under app_mu, an appender about to take a run: with S non-empty, waits until
 * etcd_append_interval_ms after the last append started (woken early by a change of S or a
 * stop). true when it waited, false when the append may start now. */
static bool pace_append(mc_ha_t *ha)
{
    if (!ha->o.commit_standbys || ha->s_size == 0 || ha->app_stop)
        return false;
    uint64_t due = ha->append_start_ms + ha->o.etcd_append_interval_ms, now = mc_now_ms();
    if (now >= due)
        return false;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (due - now) * 1000000ull;
    ts.tv_sec += (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    ha->pacing++;
    pthread_cond_timedwait(&ha->app_cv, &ha->app_mu, &ts);
    ha->pacing--;
    return true;
}

/* An appender thread: takes the groups queued as a run, appends its batches (while other
 * threads append the runs before and after it), then makes what is durable with every
 * earlier run durable. When nothing is left in flight and durable_prefix trails the durable
 * prefix (it was written while earlier appends were in flight), writes it once more. Exits
 * fenced when an append cannot be made; on stop it appends what was handed over first. */
static void *append_main(void *arg)
{
    mc_ha_t *ha = arg;
    pthread_mutex_lock(&ha->app_mu);
    for (;;) {
        /* with S non-empty the etcd log decides no release: one append at a time, each
         * taking every group queued meanwhile (fewer, larger etcd txns leave the CPU to the
         * leader and its standbys) */
        while ((!ha->q_head || (ha->o.commit_standbys && ha->s_size > 0 && ha->runs_head)) &&
               !ha->app_stop)
            pthread_cond_wait(&ha->app_cv, &ha->app_mu);
        if (!ha->q_head)
            break;
        if (pace_append(ha))
            continue; /* waited: S, the queue or stop may have changed */
        ha->append_start_ms = mc_now_ms();
        ha_run_t *run = take_run(ha);
        pthread_mutex_unlock(&ha->app_mu);
        if (ha->test_delay_ms)
            mc_sleep_ms(ha->test_delay_ms);
        while (ha->test_stall_id && run->first_id <= ha->test_stall_id &&
               ha->test_stall_id < run->first_id + run->nb) { /* tests only: until killed */
            pthread_mutex_lock(&ha->app_mu);
            bool stop = ha->app_stop;
            pthread_mutex_unlock(&ha->app_mu);
            if (stop)
                break;
            mc_sleep_ms(100);
        }
        for (size_t k = 0; k < run->nb; k++)
            append_batch(ha, run, k);
        pthread_mutex_lock(&ha->app_mu);
        run->done = true;
        complete_runs(ha);
        if (!ha->runs_head && !ha->q_head && ha->prefix_sent < ha->batch_id) {
            char view[24], val[128];
            snprintf(view, sizeof(view), "%" PRIu64, ha->view);
            prefix_value(ha->batch_id, ha->last_seq, val, sizeof(val));
            uint64_t id = ha->batch_id;
            ha->prefix_sent = id; /* one try: the next append writes it anyway */
            pthread_mutex_unlock(&ha->app_mu);
            mc_etcd_cmp_t mine = {.key = ha->pv_key, .target = MC_ETCD_VALUE,
                                  .result = MC_ETCD_EQUAL, .value = view,
                                  .value_len = strlen(view)};
            mc_etcd_op_t put = {.type = MC_ETCD_OP_PUT, .key = ha->prefix_key, .value = val,
                                .value_len = strlen(val)};
            int ok = 0;
            if (mc_etcd_txn(ha->etcd, &mine, 1, &put, 1, NULL, 0, &ok, NULL) == MC_OK && !ok)
                fence_exit("the replicated log refused our prefix (another view produces)");
            pthread_mutex_lock(&ha->app_mu);
        }
    }
    pthread_mutex_unlock(&ha->app_mu);
    return NULL;
}

/* ------------------------------------------------------------------ leader: snapshots, trim */

static void snap_path(const mc_ha_t *ha, uint64_t n, const char *suffix, char *out, size_t len)
{
    snprintf(out, len, "%s/hasnap.%" PRIu64 "%s", ha->o.wal_dir, n, suffix);
}

/* Loop thread, right after group g was handed over: the table now equals the replay of every
 * group up to g, so a fork()ed child writes it (copy-on-write) as hasnap.<g>; once the
 * appender made g durable (ending a batch N with it), the snapshot thread uploads it as the
 * state after batch N. false: no snapshot (fork failed). */
static bool start_snapshot(mc_ha_t *ha, mc_master_t *m, uint64_t g)
{
    char tmp[4200], final[4200];
    snap_path(ha, g, ".tmp", tmp, sizeof(tmp));
    snap_path(ha, g, "", final, sizeof(final));
    pid_t pid = mc_master_snapshot_fork(m, tmp, final); /* a child that takes no lock */
    if (pid < 0) {
        MC_LOG_ERROR("ha: fork for a snapshot: %s", strerror(errno));
        return false;
    }
    ha->snap_bytes = 0;
    pthread_mutex_lock(&ha->snap_mu);
    ha->snap_pid = pid;
    ha->snap_group = g;
    ha->snap_n = ha->snap_seq = 0;
    pthread_mutex_unlock(&ha->snap_mu);
    return true;
}

/* Uploads hasnap.<g> (the state after batch n) as chunks, then the manifest (only while our
 * view produces), then drops older snapshots. 0 ok. */
static int upload_snapshot(mc_ha_t *ha, uint64_t g, uint64_t n, uint64_t seq)
{
    char path[4200];
    snap_path(ha, g, "", path, sizeof(path));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char *buf = mc_malloc(HA_CHUNK);
    uint64_t chunks = 0, bytes = 0;
    int bad = !buf;
    while (!bad) {
        size_t got = 0;
        while (got < HA_CHUNK) {
            ssize_t r = read(fd, buf + got, HA_CHUNK - got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                bad = r < 0;
                break;
            }
            got += (size_t)r;
        }
        if (bad || got == 0)
            break;
        char key[HA_KEY_MAX + 64];
        chunk_key(ha, n, chunks, key);
        bad = mc_etcd_put(ha->etcd, key, buf, got, 0, NULL) != MC_OK;
        chunks++;
        bytes += got;
        if (got < HA_CHUNK)
            break;
    }
    close(fd);
    mc_free(buf);
    unlink(path);
    if (bad || chunks == 0)
        return -1;
    char view[24], man[200];
    snprintf(view, sizeof(view), "%" PRIu64, ha->view);
    snprintf(man, sizeof(man),
             "{\"schema_version\":1,\"batch_id\":%" PRIu64 ",\"last_seq\":%" PRIu64
             ",\"chunks\":%" PRIu64 ",\"bytes\":%" PRIu64 "}",
             n, seq, chunks, bytes);
    mc_etcd_cmp_t mine = {.key = ha->pv_key, .target = MC_ETCD_VALUE, .result = MC_ETCD_EQUAL,
                          .value = view, .value_len = strlen(view)};
    mc_etcd_op_t put = {.type = MC_ETCD_OP_PUT, .key = ha->snap_key, .value = man,
                        .value_len = strlen(man)};
    int ok = 0;
    if (mc_etcd_txn(ha->etcd, &mine, 1, &put, 1, NULL, 0, &ok, NULL) != MC_OK || !ok)
        return -1;
    char end[HA_KEY_MAX + 64];
    snprintf(end, sizeof(end), "%s%020" PRIu64, ha->snaps_prefix, n);
    (void)mc_etcd_delete(ha->etcd, ha->snaps_prefix, end, NULL); /* older snapshots */
    MC_LOG_INFO("ha: snapshot at batch %" PRIu64 " in etcd (%" PRIu64 " bytes, %" PRIu64
                " chunks)", n, bytes, chunks);
    return 0;
}

/* Deletes the batches that neither the snapshot nor any registered standby needs: those up
 * to min(snapshot batch, every standby's applied batch). */
static void trim(mc_ha_t *ha)
{
    manifest_t man;
    if (read_manifest(ha, &man) != 1)
        return; /* no snapshot: a fresh standby needs the whole log */
    uint64_t upto = man.n;
    char *end = mc_etcd_prefix_end(ha->standbys_prefix);
    mc_etcd_range_t r;
    mc_status_t st = end ? mc_etcd_range(ha->etcd, ha->standbys_prefix, end, 0, &r)
                         : MC_ERR_NO_MEMORY;
    mc_free(end);
    if (st != MC_OK)
        return;
    for (size_t i = 0; i < r.n; i++) {
        uint64_t a = strtoull(r.kvs[i].value, NULL, 10);
        if (a < upto)
            upto = a;
    }
    mc_etcd_range_free(&r);
    if (upto == 0)
        return;
    char to[HA_KEY_MAX + 32];
    batch_key(ha, upto + 1, to); /* [first, upto] */
    int64_t deleted = 0;
    if (mc_etcd_delete(ha->etcd, ha->batch_prefix, to, &deleted) == MC_OK && deleted > 0)
        MC_LOG_INFO("ha: trimmed %lld batches of the replicated log (kept from %" PRIu64 ")",
                    (long long)deleted, upto + 1);
}

static void *snap_main(void *arg)
{
    mc_ha_t *ha = arg;
    uint64_t last_trim = 0;
    bool reaped = false, child_ok = false; /* the current child exited (successfully) */
    while (!atomic_load(&ha->ka_stop)) {
        mc_sleep_ms(100);
        pthread_mutex_lock(&ha->snap_mu);
        pid_t pid = ha->snap_pid;
        uint64_t g = ha->snap_group, n = ha->snap_n, seq = ha->snap_seq;
        pthread_mutex_unlock(&ha->snap_mu);
        bool uploaded = false;
        if (pid > 0 && !reaped) {
            int ws;
            pid_t r = waitpid(pid, &ws, WNOHANG);
            if (r == pid || r < 0) {
                reaped = true;
                child_ok = r == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
            }
        }
        /* uploaded once the child wrote it and its group is durable (batch n known) */
        if (pid > 0 && reaped && (n || !child_ok)) {
            if (!child_ok || upload_snapshot(ha, g, n, seq) != 0)
                MC_LOG_ERROR("ha: snapshot at batch %" PRIu64 " failed; the log is kept", n);
            else
                uploaded = true;
            reaped = false;
            pthread_mutex_lock(&ha->snap_mu);
            ha->snap_pid = 0;
            pthread_mutex_unlock(&ha->snap_mu);
        }
        if (uploaded || mc_now_ms() - last_trim >= HA_TRIM_EVERY_MS) {
            trim(ha);
            last_trim = mc_now_ms();
        }
    }
    return NULL;
}

/* Loop thread, leader: the records the core logged since the last hand-over (RPC handlers'
 * or the cron's, already in the local WAL) become group next_group + 1, handed to the
 * appender; none: nothing happens. */
static void hand_over(mc_ha_t *ha, mc_master_t *m, mc_rpc_server_t *srv)
{
    bool lost, space;
    mc_buf_t *b = mc_master_ha_log(m, &lost, &space);
    if (lost)
        fence_exit("a log record could not be kept (no memory)");
    if (mc_buf_unread(b)) {
        ha_group_t *g = MC_NEW(ha_group_t);
        if (!g)
            fence_exit("no memory");
        g->id = ++ha->next_group;
        if (space)
            ha->space_group = g->id;
        g->recs = *b; /* the buffer moves to the group; the core starts a new one */
        *b = (mc_buf_t){0};
        if (ha->o.commit_standbys)
            keep_group(ha, srv, g->id, &g->recs);
        ha->snap_bytes += mc_buf_unread(&g->recs);
        if (ha->o.snapshot_bytes && ha->snap_bytes >= ha->o.snapshot_bytes) {
            pthread_mutex_lock(&ha->snap_mu);
            bool busy = ha->snap_pid != 0;
            pthread_mutex_unlock(&ha->snap_mu);
            if (!busy)
                g->snap = start_snapshot(ha, m, g->id);
        }
        pthread_mutex_lock(&ha->app_mu);
        ha->srv = srv;
        if (ha->q_tail)
            ha->q_tail->next = g;
        else
            ha->q_head = g;
        ha->q_tail = g;
        /* while S is non-empty and a run is in flight, no appender may take it, and while one
         * waits out the pace it takes the queue when its wait ends: no wake-up (one a group
         * would cost the loop a futex call and an appender a context switch, for nothing) */
        if (!(ha->o.commit_standbys && ha->s_size > 0 && (ha->runs_head || ha->pacing)))
            pthread_cond_signal(&ha->app_cv);
        pthread_mutex_unlock(&ha->app_mu);
    }
    /* which group the next records join, and which groups every later leader holds (settled
     * reads; the put pools in standbys mode with logged PutStarts) */
    mc_master_ha_groups(m, ha->next_group, &ha->released_group);
}

uint64_t mc_ha_before_reply(void *ctx, mc_master_t *m, mc_rpc_server_t *srv, uint64_t *light_p)
{
    mc_ha_t *ha = ctx;
    hand_over(ha, m, srv);
    /* last, right before replies may be written: no reply once the lease may be gone */
    if (mc_now_ms() - atomic_load(&ha->last_ok_sent_ms) >= ha->fence_ms)
        fence_exit("the lease TTL passed since the last answered keepalive");
    /* every reply of this iteration waits for the last group handed over: it may expose any
     * change made so far; a light one (a create-once PutStart that placed every key, which
     * acknowledges nothing, and whose allocation is not logged or lies in released put pool
     * blocks: mc_master_put_start_ex) only for the last group that freed or mounted space: its
     * allocation may lie in that space, which a new leader without that group would still
     * count as its old owner's (or not know) */
    uint64_t durable = atomic_load(&ha->released_group); /* the release rule's */
    uint64_t ticket = durable < ha->next_group ? ha->next_group : 0;
    *light_p = durable < ha->space_group ? ha->space_group : 0;
    return ticket;
}

void mc_ha_quiesce(mc_ha_t *ha)
{
    if (!ha || !ha->app_running)
        return;
    pthread_mutex_lock(&ha->app_mu);
    ha->app_stop = true;
    ha->srv = NULL; /* the loop has returned: nothing to release any more */
    pthread_cond_broadcast(&ha->app_cv);
    pthread_mutex_unlock(&ha->app_mu);
    for (int i = 0; i < ha->n_app; i++)
        pthread_join(ha->app_threads[i], NULL);
    ha->n_app = 0;
    ha->app_running = false;
}

void mc_ha_destroy(mc_ha_t *ha)
{
    if (!ha)
        return;
    mc_ha_quiesce(ha);
    fetch_stop(ha);
    atomic_store(&ha->ka_stop, true);
    if (ha->snap_running)
        pthread_join(ha->snap_thread, NULL);
    if (ha->isr_running)
        pthread_join(ha->isr_thread, NULL);
    while (ha->kept_head) {
        ha_kept_t *k = ha->kept_head;
        ha->kept_head = k->next;
        mc_buf_free(&k->recs);
        mc_free(k);
    }
    mc_buf_free(&ha->extra);
    if (ha->snap_pid > 0)
        waitpid(ha->snap_pid, NULL, 0);
    if (ha->reg_lease)
        (void)mc_etcd_lease_revoke(ha->etcd, ha->reg_lease);
    if (ha->ka_running) {
        pthread_join(ha->ka_thread, NULL);
        (void)mc_etcd_lease_revoke(ha->etcd, ha->lease);
        MC_LOG_INFO("ha: stepped down (lease revoked)");
    }
    mc_master_destroy(ha->core);
    mc_etcd_close(ha->etcd);
    pthread_mutex_destroy(&ha->mu);
    pthread_mutex_destroy(&ha->snap_mu);
    pthread_mutex_destroy(&ha->app_mu);
    pthread_mutex_destroy(&ha->core_mu);
    pthread_cond_destroy(&ha->app_cv);
    mc_free(ha);
}

/* ------------------------------------------------------------------ commit through standbys */

/* S as stored in /oplog/<cid>/in_sync: {"schema_version":1,"view":V,"members":["ip:port",...],
 * "incarnations":[N,...]} (one incarnation per member: the table the leader saw caught up). */
typedef struct isr_set {
    uint64_t view;
    int n;
    char addr[HA_MAX_MEMBERS][128];
    uint64_t inc[HA_MAX_MEMBERS];
} isr_set_t;

static int parse_isr(const char *v, size_t len, isr_set_t *s)
{
    memset(s, 0, sizeof(*s));
    json_t *j = json_loadb(v, len, 0, NULL);
    json_t *view = json_object_get(j, "view"), *m = json_object_get(j, "members"),
           *inc = json_object_get(j, "incarnations");
    int ok = json_is_integer(view) && json_integer_value(view) >= 0 && json_is_array(m) &&
             json_array_size(m) <= HA_MAX_MEMBERS &&
             (json_array_size(m) == 0 || (json_is_array(inc) &&
                                          json_array_size(inc) == json_array_size(m)));
    for (size_t i = 0; ok && i < json_array_size(m); i++) {
        json_t *a = json_array_get(m, i), *n = json_array_get(inc, i);
        ok = json_is_string(a) && strlen(json_string_value(a)) < sizeof(s->addr[0]) &&
             json_is_integer(n) && json_integer_value(n) > 0;
        if (ok) {
            snprintf(s->addr[i], sizeof(s->addr[i]), "%s", json_string_value(a));
            s->inc[i] = (uint64_t)json_integer_value(n);
            s->n++;
        }
    }
    if (ok)
        s->view = (uint64_t)json_integer_value(view);
    json_decref(j);
    return ok ? 0 : -1;
}

/* S's JSON for view `view` (members and their incarnations), NUL-terminated in out. */
static void isr_json(uint64_t view, const isr_set_t *s, char *out, size_t len)
{
    mc_buf_t b = {0}, c = {0};
    (void)mc_buf_printf(&b, "{\"schema_version\":1,\"view\":%" PRIu64 ",\"members\":[", view);
    (void)mc_buf_printf(&c, "],\"incarnations\":[");
    for (int i = 0; i < s->n; i++) {
        (void)mc_buf_printf(&b, "%s\"%s\"", i ? "," : "", s->addr[i]);
        (void)mc_buf_printf(&c, "%s%" PRIu64, i ? "," : "", s->inc[i]);
    }
    (void)mc_buf_printf(&c, "]}");
    snprintf(out, len, "%.*s%.*s", (int)mc_buf_unread(&b), (const char *)mc_buf_head(&b),
             (int)mc_buf_unread(&c), (const char *)mc_buf_head(&c));
    mc_buf_free(&b);
    mc_buf_free(&c);
}

/* Leader: Txn If(value(producer_view) == our view) Then Put(in_sync, S). 0 committed, -1 no
 * answer (the outcome is unknown); fenced when refused (another view produces). */
static int write_isr(mc_ha_t *ha, const isr_set_t *set)
{
    char view[24], val[1024];
    snprintf(view, sizeof(view), "%" PRIu64, ha->view);
    isr_json(ha->view, set, val, sizeof(val));
    mc_etcd_cmp_t mine = {.key = ha->pv_key, .target = MC_ETCD_VALUE, .result = MC_ETCD_EQUAL,
                          .value = view, .value_len = strlen(view)};
    mc_etcd_op_t put = {.type = MC_ETCD_OP_PUT, .key = ha->isr_key, .value = val,
                        .value_len = strlen(val)};
    int ok = 0;
    if (mc_etcd_txn(ha->etcd, &mine, 1, &put, 1, NULL, 0, &ok, NULL) != MC_OK)
        return -1;
    if (!ok)
        fence_exit("the in-sync set was refused (another view produces)");
    atomic_fetch_add_explicit(&ha->st_isr_txns, 1, memory_order_relaxed);
    pthread_mutex_lock(&ha->mu);
    snprintf(ha->s_json, sizeof(ha->s_json), "%s", val);
    pthread_mutex_unlock(&ha->mu);
    return 0;
}

/* Under app_mu: the release rule. A group is released when it is durable in etcd, or when
 * every member that S holds or may hold (a txn in flight) acknowledged it. */
static void update_release(mc_ha_t *ha)
{
    uint64_t p = ha->durable_g;
    if (ha->o.commit_standbys) {
        uint64_t m = UINT64_MAX;
        for (int i = 0; i < ha->n_members; i++)
            if ((ha->members[i].in_s || ha->members[i].maybe) && ha->members[i].acked_group < m)
                m = ha->members[i].acked_group;
        if (m != UINT64_MAX && m > p)
            p = m < ha->hand_group ? m : ha->hand_group;
    }
    if (p <= ha->released)
        return;
    ha->released = p;
    atomic_store(&ha->released_group, p);
    if (ha->srv) /* under app_mu: mc_ha_quiesce clears it before the server goes */
        mc_rpc_server_release(ha->srv, p);
}

/* Leader, the in-sync set thread: adds a fetching standby that has acknowledged every group
 * handed over, removes a member that has not for isr_timeout_ms (or whose table was rebuilt),
 * each change one txn; a member being added counts for the release rule from the moment it is
 * chosen, a removed one until the txn that removes it committed. */
static void *isr_main(void *arg)
{
    mc_ha_t *ha = arg;
    uint64_t period = ha->o.isr_timeout_ms / 4;
    period = period < 10 ? 10 : period > 100 ? 100 : period;
    while (!atomic_load(&ha->ka_stop)) {
        mc_sleep_ms(period);
        isr_set_t want = {0};
        bool change = false, want_in[HA_MAX_MEMBERS] = {0};
        pthread_mutex_lock(&ha->app_mu);
        uint64_t now = mc_now_ms();
        for (int i = 0; i < ha->n_members; i++) {
            ha_member_t *mb = &ha->members[i];
            bool cur = mb->in_s && mb->s_inc == mb->inc;
            bool behind = mb->acked_group < ha->hand_group;
            bool keep = cur && !(behind && now - mb->caught_ms >= ha->o.isr_timeout_ms);
            bool add = !cur && !behind && now - mb->fetch_ms < ha->o.isr_timeout_ms;
            want_in[i] = keep || add;
            /* a txn whose outcome is unknown (maybe) is settled by the next one */
            if (want_in[i] != mb->in_s || (want_in[i] && !cur) || mb->maybe)
                change = true;
        }
        if (change) {
            for (int i = 0; i < ha->n_members; i++) {
                if (!want_in[i])
                    continue;
                ha->members[i].maybe = true; /* counts from now on: it may be in S */
                snprintf(want.addr[want.n], sizeof(want.addr[0]), "%s", ha->members[i].addr);
                want.inc[want.n++] = ha->members[i].inc;
            }
            /* a member added counts now: what is released from here on waits for it */
            update_release(ha);
        }
        pthread_mutex_unlock(&ha->app_mu);
        if (!change || write_isr(ha, &want) != 0)
            continue; /* unknown outcome: everyone it may name keeps counting */
        pthread_mutex_lock(&ha->app_mu);
        int removed = 0;
        for (int i = 0; i < ha->n_members; i++) {
            ha_member_t *mb = &ha->members[i];
            bool in = false;
            for (int k = 0; k < want.n && !in; k++)
                in = strcmp(want.addr[k], mb->addr) == 0;
            removed += mb->in_s && !in;
            if (in && !mb->in_s)
                MC_LOG_INFO("ha: %s is in sync", mb->addr);
            else if (mb->in_s)
                MC_LOG_WARN("ha: %s left the in-sync set (behind for %" PRIu64 " ms)", mb->addr,
                            now - mb->caught_ms);
            mb->in_s = in;
            mb->maybe = false;
        }
        for (int k = 0; k < want.n; k++) /* the incarnations exactly as written */
            for (int i = 0; i < ha->n_members; i++)
                if (strcmp(want.addr[k], ha->members[i].addr) == 0)
                    ha->members[i].s_inc = want.inc[k];
        ha->s_size = want.n;
        pthread_cond_broadcast(&ha->app_cv); /* S empty: the appenders go 4 at a time again */
        atomic_fetch_add_explicit(&ha->st_isr_removals, (uint64_t)removed, memory_order_relaxed);
        update_release(ha); /* the removal committed: release without them */
        pthread_mutex_unlock(&ha->app_mu);
    }
    return NULL;
}

/* Under app_mu: the oldest kept group holding a record after `after`, NULL when none. Searched
 * from the newest: fetch positions are near the end, and the window holds seconds of groups. */
static ha_kept_t *kept_after(const mc_ha_t *ha, uint64_t after)
{
    ha_kept_t *g = ha->kept_tail;
    if (!g || g->first_seq + g->n - 1 <= after)
        return NULL;
    while (g->prev && g->prev->first_seq + g->prev->n - 1 > after)
        g = g->prev;
    return g;
}

/* Under app_mu: the records after `after` from the kept groups into out (at most cap bytes,
 * at least one record). MC_OK (count 0 when there is none yet) or MC_ERR_OUT_OF_RANGE (the
 * position is before the kept groups or after the last record handed over). */
static mc_status_t fetch_fill(mc_ha_t *ha, uint64_t after, size_t cap, mc_buf_t *out,
                              uint64_t *count_p)
{
    *count_p = 0;
    if (after > ha->hand_seq)
        return MC_ERR_OUT_OF_RANGE;
    if (after == ha->hand_seq)
        return MC_OK;
    ha_kept_t *g = kept_after(ha, after);
    if (!g || g->first_seq > after + 1)
        return MC_ERR_OUT_OF_RANGE;
    for (; g; g = g->next) {
        const uint8_t *p = mc_buf_head(&g->recs);
        size_t len = mc_buf_unread(&g->recs);
        size_t off = g->first_seq > after ? 0 : rec_span(p, len, after + 1 - g->first_seq);
        while (off < len) {
            size_t r = rec_len(p + off);
            if (*count_p && mc_buf_unread(out) + r > cap)
                return MC_OK;
            if (mc_buf_append(out, p + off, r) != MC_OK)
                return *count_p ? MC_OK : MC_ERR_NO_MEMORY;
            off += r;
            ++*count_p;
        }
    }
    return MC_OK;
}

/* Under app_mu: member `addr` fetched at `after` with incarnation inc: its acknowledgement. */
static ha_member_t *member_ack(mc_ha_t *ha, const char *addr, uint64_t inc, uint64_t after)
{
    ha_member_t *mb = NULL;
    uint64_t now = mc_now_ms();
    for (int i = 0; i < ha->n_members && !mb; i++)
        if (strcmp(ha->members[i].addr, addr) == 0)
            mb = &ha->members[i];
    for (int i = 0; !mb && i < ha->n_members; i++) { /* reuse one gone for long */
        ha_member_t *o = &ha->members[i];
        if (!o->in_s && !o->maybe && now - o->fetch_ms > 10ull * ha->o.isr_timeout_ms)
            mb = o;
    }
    if (!mb && ha->n_members < HA_MAX_MEMBERS)
        mb = &ha->members[ha->n_members++];
    if (!mb)
        return NULL;
    if (strcmp(mb->addr, addr) != 0) {
        *mb = (ha_member_t){0};
        snprintf(mb->addr, sizeof(mb->addr), "%s", addr);
    }
    mb->inc = inc;
    mb->fetch_ms = now;
    if (after > ha->hand_seq) /* records this leader never handed over: acknowledges nothing */
        after = 0;
    mb->acked_seq = after;
    uint64_t g = 0;
    if (mb->acked_seq == ha->hand_seq)
        g = ha->hand_group;
    else if (ha->kept_head && mb->acked_seq + 1 >= ha->kept_head->first_seq) {
        /* the newest kept group it holds whole */
        ha_kept_t *k = kept_after(ha, mb->acked_seq);
        ha_kept_t *whole = k ? k->prev : ha->kept_tail;
        g = whole ? whole->id : 0;
    }
    mb->acked_group = g;
    if (g >= ha->hand_group)
        mb->caught_ms = now;
    update_release(ha);
    return mb;
}

/* Loop thread, under app_mu: answers held fetch i with what there is now, and forgets it. */
static void waiter_answer(mc_ha_t *ha, mc_rpc_server_t *srv, int i)
{
    ha_waiter_t w = ha->waiters[i];
    ha->waiters[i] = ha->waiters[--ha->n_waiters];
    McRpc__HaFetchResponse r = MC_RPC__HA_FETCH_RESPONSE__INIT;
    mc_buf_t out = {0};
    uint64_t count = 0;
    mc_status_t st = fetch_fill(ha, w.after, w.cap, &out, &count);
    r.status = st;
    r.first_seq = w.after + 1;
    r.count = count;
    r.records.data = mc_buf_head(&out);
    r.records.len = mc_buf_unread(&out);
    r.last_seq = ha->hand_seq;
    (void)mc_rpc_server_reply_unheld(srv, w.conn_id, MC_OP_HA_FETCH, w.req_id, MC_OK,
                                     &r.base);
    mc_buf_free(&out);
}

static bool member_name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 120)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= 'A' && s[i] <= 'Z') || strchr(".:-_[]", s[i])))
            return false;
    return true;
}

mc_status_t mc_ha_fetch(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                        ProtobufCMessage **resp_p)
{
    mc_ha_t *ha = ctx;
    const McRpc__HaFetchRequest *q = (const McRpc__HaFetchRequest *)req;
    if (!ha || !ha->o.commit_standbys || !ha->app_running)
        return MC_ERR_NOT_SUPPORTED;
    if (call->peer && !call->peer->admin)
        return MC_ERR_AUTH; /* only members holding the cluster key */
    if (q->view != ha->view)
        return MC_ERR_INVALID_VERSION;
    if (!member_name_ok(q->member) || q->incarnation == 0 || q->incarnation > HA_INC_MAX)
        return MC_ERR_INVALID_PARAMS;
    call->unheld = true; /* it acknowledges records: holding it would wait for itself */
    size_t cap = q->max_bytes && q->max_bytes < HA_FETCH_MAX ? q->max_bytes : HA_FETCH_MAX;
    pthread_mutex_lock(&ha->app_mu);
    ha_member_t *mb = member_ack(ha, q->member, q->incarnation, q->after_seq);
    if (!mb) {
        pthread_mutex_unlock(&ha->app_mu);
        return MC_ERR_BUSY;
    }
    int idx = (int)(mb - ha->members);
    for (int i = 0; i < ha->n_waiters; i++) /* its earlier fetch: answered as it stands */
        if (ha->waiters[i].member == idx) {
            waiter_answer(ha, call->srv, i);
            break;
        }
    if (q->after_seq == ha->hand_seq && q->wait_ms) { /* nothing yet: held */
        uint32_t wait = q->wait_ms < HA_FETCH_WAIT_MAX_MS ? q->wait_ms : HA_FETCH_WAIT_MAX_MS;
        ha->waiters[ha->n_waiters++] = (ha_waiter_t){
            .conn_id = call->conn_id, .req_id = call->req_id, .after = q->after_seq,
            .deadline_ms = mc_now_ms() + wait, .cap = (uint32_t)cap, .member = idx};
        pthread_mutex_unlock(&ha->app_mu);
        return MC_RPC_DEFERRED;
    }
    McRpc__HaFetchResponse *r = mc_rpc_arena_calloc(call->arena, 1, sizeof(*r));
    if (!r) {
        pthread_mutex_unlock(&ha->app_mu);
        return MC_ERR_NO_MEMORY;
    }
    mc_rpc__ha_fetch_response__init(r);
    mc_buf_t out = {0};
    uint64_t count = 0;
    r->status = fetch_fill(ha, q->after_seq, cap, &out, &count);
    r->first_seq = q->after_seq + 1;
    r->count = count;
    r->last_seq = ha->hand_seq;
    pthread_mutex_unlock(&ha->app_mu);
    if (mc_buf_unread(&out)) {
        r->records.data = mc_rpc_arena_alloc(call->arena, mc_buf_unread(&out));
        if (!r->records.data) {
            mc_buf_free(&out);
            return MC_ERR_NO_MEMORY;
        }
        memcpy(r->records.data, mc_buf_head(&out), mc_buf_unread(&out));
        r->records.len = mc_buf_unread(&out);
    }
    mc_buf_free(&out);
    *resp_p = &r->base;
    return MC_OK;
}

void mc_ha_tick(void *ctx, mc_master_t *m, mc_rpc_server_t *srv)
{
    mc_ha_t *ha = ctx;
    if (!ha)
        return;
    hand_over(ha, m, srv);
    if (!ha->o.commit_standbys)
        return;
    pthread_mutex_lock(&ha->app_mu);
    uint64_t now = mc_now_ms();
    for (int i = ha->n_waiters; i-- > 0;)
        if (ha->waiters[i].deadline_ms <= now)
            waiter_answer(ha, srv, i);
    pthread_mutex_unlock(&ha->app_mu);
}

/* Loop thread, standbys mode: group g (its records) was handed over: kept for fetches, the
 * held fetches answered; groups no fetch needs any more (released, durable in etcd, and past
 * the keep window) dropped. */
static void keep_group(mc_ha_t *ha, mc_rpc_server_t *srv, uint64_t id, const mc_buf_t *recs)
{
    ha_kept_t *k = MC_NEW(ha_kept_t);
    if (!k || mc_buf_append(&k->recs, mc_buf_head(recs), mc_buf_unread(recs)) != MC_OK)
        fence_exit("no memory");
    uint64_t n = 0;
    const uint8_t *p = mc_buf_head(recs);
    for (size_t off = 0, len = mc_buf_unread(recs); off < len; n++)
        off += rec_len(p + off);
    uint64_t now = mc_now_ms();
    k->id = id;
    k->n = n;
    k->handed_ms = now;
    pthread_mutex_lock(&ha->app_mu);
    k->first_seq = ha->hand_seq + 1;
    for (int i = 0; i < ha->n_members; i++) /* caught up until now */
        if (ha->members[i].acked_group >= ha->hand_group)
            ha->members[i].caught_ms = now;
    ha->hand_seq += n;
    ha->hand_group = id;
    k->prev = ha->kept_tail;
    if (ha->kept_tail)
        ha->kept_tail->next = k;
    else
        ha->kept_head = k;
    ha->kept_tail = k;
    ha->kept_bytes += mc_buf_unread(&k->recs);
    for (int i = ha->n_waiters; i-- > 0;)
        waiter_answer(ha, srv, i);
    uint64_t safe = ha->released < ha->durable_g ? ha->released : ha->durable_g;
    while (ha->kept_head && ha->kept_head->id <= safe &&
           (ha->kept_bytes > HA_KEEP_BYTES || now - ha->kept_head->handed_ms > HA_KEEP_MS)) {
        ha_kept_t *d = ha->kept_head;
        ha->kept_head = d->next;
        if (ha->kept_head)
            ha->kept_head->prev = NULL;
        else
            ha->kept_tail = NULL;
        ha->kept_bytes -= mc_buf_unread(&d->recs);
        mc_buf_free(&d->recs);
        mc_free(d);
    }
    pthread_mutex_unlock(&ha->app_mu);
}

/* Standby: an answer received (its records acknowledged by the fetch sent after it) and not
 * applied yet, with the table and the view it was asked for. */
typedef struct fetched {
    ProtobufCMessage *resp;
    uint64_t gen, view;
} fetched_t;

/* The last record of f when it still belongs to the table of generation gen, else 0. */
static uint64_t fetched_last(const fetched_t *f, uint64_t gen)
{
    const McRpc__HaFetchResponse *r = (const McRpc__HaFetchResponse *)f->resp;
    return r && f->gen == gen ? r->first_seq + r->count - 1 : 0;
}

/* Applies f to the table (unless the table or the view changed since it was asked for) and
 * frees it; a failure makes the main thread rebuild the table (a new incarnation). */
static void fetched_apply(mc_ha_t *ha, fetched_t *f)
{
    const McRpc__HaFetchResponse *r = (const McRpc__HaFetchResponse *)f->resp;
    if (!r)
        return;
    pthread_mutex_lock(&ha->core_mu);
    if (f->gen == ha->core_gen && ha->fetch_view == f->view &&
        apply_fetched(ha, r->first_seq, r->records.data, r->records.len, r->count) != 0)
        atomic_store(&ha->rebuild, true);
    uint64_t lag = r->last_seq > ha->applied_seq ? r->last_seq - ha->applied_seq : 0;
    pthread_mutex_unlock(&ha->core_mu);
    atomic_store(&ha->fetch_lag, lag);
    mc_rpc_response_free(f->resp);
    f->resp = NULL;
}

/* Standby: the fetch thread. Follows the leader named in etcd over its RPC port (the auth
 * handshake first), asks for the records after the table's last one and asks again as soon
 * as an answer is in: each fetch acknowledges everything before it, and the answer before it
 * is applied while it is out (they stay in extra until the etcd log has them); the records
 * acknowledged are in this process's memory, and applied before the table can lead
 * (fetch_stop). An answer that cannot be applied makes the main thread rebuild the table
 * under a new incarnation, which S does not name. A new leader view after records of another
 * one were applied: the main thread rebuilds the table from etcd first. */
static void *fetch_main(void *arg)
{
    mc_ha_t *ha = arg;
    mc_rpc_client_t *cli = NULL;
    char addr[128] = "";
    /* an answer holds at most HA_FETCH_MAX bytes of records */
    mc_rpc_client_opts_t co = {.connect_timeout_ms = 1000, .auth = ha->o.auth,
                               .max_body = (uint32_t)(2 * HA_FETCH_MAX)};
    fetched_t pend = {0};
    while (!atomic_load(&ha->fetch_stop)) {
        pthread_mutex_lock(&ha->mu);
        uint64_t view = ha->seen_view;
        char a[128];
        snprintf(a, sizeof(a), "%s", ha->seen_addr);
        pthread_mutex_unlock(&ha->mu);
        if (!view || !a[0] || strcmp(a, ha->o.advertise) == 0 || atomic_load(&ha->rebuild)) {
            fetched_apply(ha, &pend);
            mc_sleep_ms(ha->poll_ms);
            continue;
        }
        if (!cli || strcmp(a, addr) != 0) {
            fetched_apply(ha, &pend);
            mc_rpc_client_destroy(cli);
            cli = NULL;
            snprintf(addr, sizeof(addr), "%s", a);
            if (mc_rpc_client_create(addr, &co, &cli) != MC_OK) {
                mc_sleep_ms(ha->poll_ms);
                continue;
            }
        }
        McRpc__HaFetchRequest q = MC_RPC__HA_FETCH_REQUEST__INIT;
        pthread_mutex_lock(&ha->core_mu);
        bool ready = ha->core != NULL;
        if (ready && ha->fetch_view != view) {
            if (ha->fetch_view) /* records of another view: rebuild first */
                atomic_store(&ha->rebuild, true);
            else
                ha->fetch_view = view;
        }
        ready = ready && ha->fetch_view == view;
        uint64_t gen = ha->core_gen, last = fetched_last(&pend, gen);
        q.after_seq = last > ha->applied_seq ? last : ha->applied_seq;
        q.incarnation = ha->inc;
        pthread_mutex_unlock(&ha->core_mu);
        if (!ready) {
            fetched_apply(ha, &pend);
            mc_sleep_ms(ha->poll_ms);
            continue;
        }
        if (ha->test_fetch_delay_ms)
            mc_sleep_ms(ha->test_fetch_delay_ms);
        q.view = view;
        q.member = (char *)ha->o.advertise;
        q.max_bytes = (uint32_t)HA_FETCH_MAX;
        q.wait_ms = ha->test_fetch_delay_ms ? 0 : 1000; /* tests: records only every delay */
        mc_rpc_pending_t call = {.opcode = MC_OP_HA_FETCH, .req = &q.base};
        mc_rpc_inflight_t f;
        mc_status_t st = mc_rpc_client_call_send(cli, &call, 1, 3000, false, &f);
        fetched_apply(ha, &pend); /* while the fetch that acknowledges it is out */
        if (st == MC_OK)
            st = mc_rpc_client_call_recv(&f);
        if (st == MC_OK)
            st = call.status;
        const McRpc__HaFetchResponse *r = (const McRpc__HaFetchResponse *)call.resp;
        if (st == MC_OK && call.view != view) { /* not the leader we asked for */
            mc_rpc_client_disconnect(cli);
            st = MC_ERR_INVALID_VERSION;
        }
        if (st == MC_OK && r->status == MC_ERR_OUT_OF_RANGE && q.after_seq > r->last_seq) {
            MC_LOG_WARN("ha: this table holds records the leader never handed over; "
                        "rebuilding it from etcd");
            atomic_store(&ha->rebuild, true);
        }
        bool keep = st == MC_OK && r->status == MC_OK && r->count;
        bool wait = st != MC_OK || r->status != MC_OK; /* OUT_OF_RANGE: etcd's log first */
        if (keep)
            pend = (fetched_t){.resp = call.resp, .gen = gen, .view = view};
        else
            mc_rpc_response_free(call.resp);
        if (wait)
            mc_sleep_ms(ha->poll_ms);
    }
    fetched_apply(ha, &pend); /* acknowledged: in the table before it may lead */
    mc_rpc_client_destroy(cli);
    return NULL;
}

static void fetch_stop(mc_ha_t *ha)
{
    if (!ha->fetch_running)
        return;
    atomic_store(&ha->fetch_stop, true);
    pthread_join(ha->fetch_thread, NULL);
    ha->fetch_running = false;
}

/* Standby, standbys mode, the view key vacant: may this member campaign? Yes when S (read at
 * revision R) names it with the incarnation of its table and the view whose records it
 * applied, or when S is empty and it applied the etcd log to its end. *cmp: the election
 * txn's compare that S is still at R. */
static bool may_campaign(mc_ha_t *ha, bool at_end, mc_etcd_cmp_t *cmp)
{
    mc_etcd_range_t r;
    if (mc_etcd_range(ha->etcd, ha->isr_key, NULL, 0, &r) != MC_OK)
        return false;
    isr_set_t set = {0};
    int64_t mod = r.n ? r.kvs[0].mod_revision : 0;
    bool bad = r.n && parse_isr(r.kvs[0].value, r.kvs[0].value_len, &set) != 0;
    pthread_mutex_lock(&ha->mu);
    snprintf(ha->s_json, sizeof(ha->s_json), "%.*s", r.n ? (int)r.kvs[0].value_len : 0,
             r.n ? r.kvs[0].value : "");
    pthread_mutex_unlock(&ha->mu);
    mc_etcd_range_free(&r);
    if (bad) {
        MC_LOG_ERROR("ha: malformed %s: not campaigning", ha->isr_key);
        return false;
    }
    *cmp = (mc_etcd_cmp_t){.key = ha->isr_key, .target = mod ? MC_ETCD_MOD : MC_ETCD_CREATE,
                           .result = MC_ETCD_EQUAL, .rev = mod};
    bool ok = false;
    pthread_mutex_lock(&ha->core_mu);
    if (set.n == 0)
        ok = at_end;
    else
        for (int i = 0; i < set.n && !ok; i++)
            ok = strcmp(set.addr[i], ha->o.advertise) == 0 && set.inc[i] == ha->inc &&
                 set.view == ha->fetch_view && ha->fetch_view;
    ha->won_gen = set.n ? ha->core_gen : 0; /* this table must lead, not a rebuilt one */
    pthread_mutex_unlock(&ha->core_mu);
    return ok;
}

/* New leader, standbys mode, the etcd log applied to its durable end: appends the records it
 * fetched beyond it (they may have been acknowledged through S) as its first batches, then
 * writes S = {} for its view, before serving. Fenced when either cannot be done in time. */
static void takeover_standbys(mc_ha_t *ha, uint64_t deadline)
{
    if (ha->won_gen && ha->won_gen != ha->core_gen) /* S named the table it dropped */
        fence_exit("the table S names was rebuilt during the takeover");
    if (mc_buf_unread(&ha->extra)) {
        uint64_t n_extra = ha->applied_seq - ha->last_seq;
        ha_group_t *g = MC_NEW(ha_group_t);
        if (!g)
            fence_exit("no memory");
        g->id = ++ha->next_group;
        g->recs = ha->extra; /* moves */
        ha->extra = (mc_buf_t){0};
        pthread_mutex_lock(&ha->app_mu);
        ha->next_id = ha->batch_id;
        ha->next_seq = ha->last_seq;
        ha->q_head = ha->q_tail = g;
        ha_run_t *run = take_run(ha);
        pthread_mutex_unlock(&ha->app_mu);
        for (size_t k = 0; k < run->nb; k++)
            append_batch(ha, run, k);
        pthread_mutex_lock(&ha->app_mu);
        run->done = true;
        complete_runs(ha);
        pthread_mutex_unlock(&ha->app_mu);
        MC_LOG_INFO("ha: appended the %" PRIu64 " records fetched beyond the etcd log (to "
                    "batch %" PRIu64 ")", n_extra, ha->batch_id);
    }
    ha->applied_seq = ha->last_seq;
    isr_set_t none = {0};
    while (write_isr(ha, &none) != 0) {
        if (mc_now_ms() > deadline)
            fence_exit("cannot reset the in-sync set within the lease TTL");
        mc_sleep_ms(20);
    }
}

/* ------------------------------------------------------------------ admin pages */

char *mc_ha_leader_json(void *ctx)
{
    mc_ha_t *ha = ctx;
    char buf[1600], isr[1100] = "";
    pthread_mutex_lock(&ha->mu);
    if (ha->o.commit_standbys) /* S as this member last wrote (leader) or read (standby) */
        snprintf(isr, sizeof(isr), ",\"in_sync\":%s", ha->s_json[0] ? ha->s_json : "null");
    if (ha->seen_addr[0])
        snprintf(buf, sizeof(buf),
                 "{\"present\":true,\"address\":\"%s\",\"view_version\":%" PRIu64
                 ",\"self\":%s%s}",
                 ha->seen_addr, ha->seen_view, ha->leading ? "true" : "false", isr);
    else
        snprintf(buf, sizeof(buf), "{\"present\":false%s}", isr);
    pthread_mutex_unlock(&ha->mu);
    return mc_strdup(buf);
}

static void prom_counter(mc_prom_t *b, const char *name, const char *help,
                         atomic_uint_fast64_t *v)
{
    mc_prom_help_type(b, name, "counter", help);
    MC_PROM_PRINTF(b, "%s %" PRIu64 "\n", name, (uint64_t)atomic_load(v));
}

void mc_ha_render_metrics(void *ctx, mc_prom_t *b)
{
    mc_ha_t *ha = ctx;
    pthread_mutex_lock(&ha->mu);
    uint64_t lag = ha->durable_id > ha->batch_id ? ha->durable_id - ha->batch_id : 0;
    double lag_s = ha->behind_since_ms ? (double)(mc_now_ms() - ha->behind_since_ms) / 1000.0
                                       : 0.0;
    mc_prom_help_type(b, "master_ha_role", "gauge", "1 = leader, 0 = standby");
    MC_PROM_PRINTF(b, "master_ha_role %d\n", ha->leading ? 1 : 0);
    mc_prom_help_type(b, "master_view_version", "gauge",
                      "View version of the current leader (create revision of its etcd key)");
    MC_PROM_PRINTF(b, "master_view_version %" PRIu64 "\n", ha->seen_view);
    mc_prom_help_type(b, "master_ha_log_lag_batches", "gauge",
                      "Replicated log batches durable in etcd but not applied here");
    MC_PROM_PRINTF(b, "master_ha_log_lag_batches %" PRIu64 "\n", lag);
    mc_prom_help_type(b, "master_ha_log_lag_seconds", "gauge",
                      "How long this standby has been behind the durable log (0 = caught up)");
    MC_PROM_PRINTF(b, "master_ha_log_lag_seconds %.3f\n", lag_s);
    mc_prom_help_type(b, "master_ha_failovers_total", "counter",
                      "New leader views seen by this process after the first one");
    MC_PROM_PRINTF(b, "master_ha_failovers_total %" PRIu64 "\n", ha->failovers);
    mc_prom_help_type(b, "master_ha_promotion_records", "gauge",
                      "Log records this leader applied between winning the election and "
                      "serving (the tail; 0 = it had applied everything as a standby)");
    MC_PROM_PRINTF(b, "master_ha_promotion_records %" PRIu64 "\n", ha->promo_records);
    mc_prom_help_type(b, "master_ha_promotion_seconds", "gauge",
                      "Time from winning the election to the promoted table");
    MC_PROM_PRINTF(b, "master_ha_promotion_seconds %.3f\n", (double)ha->promo_ms / 1000.0);
    prom_counter(b, "master_ha_append_txns_total",
                 "etcd txns this leader committed (one per log batch)", &ha->st_txns);
    prom_counter(b, "master_ha_append_runs_total", "Runs of group commits an appender took",
                 &ha->st_runs);
    prom_counter(b, "master_ha_append_groups_total",
                 "Group commits handed to the appender threads", &ha->st_groups);
    prom_counter(b, "master_ha_append_records_total", "Log records sent to etcd",
                 &ha->st_records);
    prom_counter(b, "master_ha_append_bytes_total",
                 "Bytes of log records sent to etcd (framed, before base64)", &ha->st_bytes);
    mc_prom_help_type(b, "master_ha_append_txn_seconds_total", "counter",
                      "Time the appender threads spent in etcd txns, summed (its rate is the "
                      "mean number of appends in flight)");
    MC_PROM_PRINTF(b, "master_ha_append_txn_seconds_total %.6f\n",
                   (double)atomic_load(&ha->st_txn_us) / 1e6);
    bool leading = ha->leading;
    pthread_mutex_unlock(&ha->mu);
    if (ha->o.commit_standbys) {
        pthread_mutex_lock(&ha->app_mu);
        int members = ha->s_size;
        uint64_t lag = 0;
        for (int i = 0; i < ha->n_members; i++)
            if (ha->members[i].in_s && ha->hand_seq - ha->members[i].acked_seq > lag)
                lag = ha->hand_seq - ha->members[i].acked_seq;
        pthread_mutex_unlock(&ha->app_mu);
        if (!leading)
            lag = atomic_load(&ha->fetch_lag);
        mc_prom_help_type(b, "master_ha_in_sync_members", "gauge",
                          "Members of the in-sync set S this leader committed (0 on a standby)");
        MC_PROM_PRINTF(b, "master_ha_in_sync_members %d\n", members);
        prom_counter(b, "master_ha_isr_removals_total",
                     "Members this leader removed from S (behind for --ha_isr_timeout_ms)",
                     &ha->st_isr_removals);
        prom_counter(b, "master_ha_isr_txns_total", "Writes of S this leader committed",
                     &ha->st_isr_txns);
        prom_counter(b, "master_ha_log_confirmed_records_total",
                     "Standby: records fetched from the leader that etcd's durable prefix "
                     "confirmed without reading the log back",
                     &ha->st_confirmed);
        mc_prom_help_type(b, "master_ha_fetch_lag_records", "gauge",
                          "Leader: records the slowest member of S has not acknowledged; "
                          "standby: records it had not applied at its last fetch answer");
        MC_PROM_PRINTF(b, "master_ha_fetch_lag_records %" PRIu64 "\n", lag);
    }
}

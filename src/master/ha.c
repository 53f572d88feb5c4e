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

/* One group commit handed from the loop thread to the appender: its WAL records (owned). */
typedef struct ha_group {
    uint64_t id;       /* the RPC server's ticket: 1, 2, ... in hand-over order */
    mc_buf_t recs;
    bool snap;         /* a snapshot was forked right after it: its last record ends a batch */
    struct ha_group *next;
} ha_group_t;

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
        standbys_prefix[HA_KEY_MAX], standby_key[HA_KEY_MAX + 128];
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
    atomic_uint_fast64_t durable_group; /* the last group whose records are durable */
    /* leader append counters for /metrics (any thread; relaxed): etcd txns committed (log
     * batches), runs and groups taken, records sent, and the summed time the appenders spent
     * in txns (its rate is the mean number of appends in flight) */
    atomic_uint_fast64_t st_txns, st_runs, st_groups, st_records, st_txn_us;
    uint64_t test_delay_ms;   /* MC_HA_TEST_APPEND_DELAY_MS: tests only, before each append */
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
    ha->o.core_cfg = NULL;
    pthread_mutex_init(&ha->mu, NULL);
    pthread_mutex_init(&ha->snap_mu, NULL);
    pthread_mutex_init(&ha->app_mu, NULL);
    pthread_cond_init(&ha->app_cv, NULL);
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
    ha->last_seq = 0;
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
    ha->last_seq = seq;
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
        for (; i < r.n; i++) {
            char want[HA_KEY_MAX + 32];
            batch_key(ha, ha->batch_id + 1, want);
            uint64_t n = 0;
            size_t used = 0;
            if (strcmp(r.kvs[i].key, want) != 0)
                break; /* a gap: an append in flight */
            if (apply(ha, r.kvs[i].value, r.kvs[i].value_len, &used, &n, NULL) != 0 ||
                used != r.kvs[i].value_len) {
                MC_LOG_ERROR("ha: replicated log: batch %s is malformed", want);
                bad = -1;
                break;
            }
            pthread_mutex_lock(&ha->mu);
            ha->batch_id++;
            pthread_mutex_unlock(&ha->mu);
            ha->last_seq += n;
        }
        bool more = !bad && i == r.n && r.n == HA_READ_LIMIT;
        mc_etcd_range_free(&r);
        if (bad)
            return bad;
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

/* One attempt: 1 = leading now, 0 = someone else leads (or etcd unreachable). */
static int try_acquire(mc_ha_t *ha)
{
    uint64_t t0 = mc_now_ms();
    int64_t lease;
    if (mc_etcd_lease_grant(ha->etcd, ha->o.lease_ttl_s, &lease) != MC_OK)
        return 0;
    mc_etcd_cmp_t absent = {.key = ha->view_key, .target = MC_ETCD_CREATE,
                            .result = MC_ETCD_EQUAL, .rev = 0};
    mc_etcd_op_t put = {.type = MC_ETCD_OP_PUT, .key = ha->view_key, .value = ha->o.advertise,
                        .value_len = strlen(ha->o.advertise), .lease = lease};
    mc_etcd_op_t get = {.type = MC_ETCD_OP_RANGE, .key = ha->view_key};
    mc_etcd_txn_resp_t r;
    int ok = 0;
    mc_status_t st = mc_etcd_txn(ha->etcd, &absent, 1, &put, 1, &get, 1, &ok, &r);
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
    if (!*booted) {
        *booted = bootstrap(ha) == 0;
        if (!*booted)
            return 0;
    }
    int r = follow(ha, end_p);
    if (r == 1)
        *booted = false;
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
            if (vacant && try_acquire(ha))
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
    ha->app_running = true;
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
        if (!last) {
            uint32_t plen = (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 |
                            (uint32_t)p[off + 2] << 16 | (uint32_t)p[off + 3] << 24;
            rec = 13 + (size_t)plen;
        }
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
    uint64_t released = 0;
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
        released = run->group;
        atomic_store(&ha->durable_group, released);
        mc_buf_free(&run->recs);
        mc_free(run->b);
        mc_free(run);
    }
    if (released && ha->srv) /* under app_mu: mc_ha_quiesce clears it before the server goes */
        mc_rpc_server_release(ha->srv, released);
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
        while (!ha->q_head && !ha->app_stop)
            pthread_cond_wait(&ha->app_cv, &ha->app_mu);
        if (!ha->q_head)
            break;
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
    pid_t pid = fork();
    if (pid < 0) {
        MC_LOG_ERROR("ha: fork for a snapshot: %s", strerror(errno));
        return false;
    }
    if (pid == 0) {
        close_range(3, ~0U, 0); /* no socket of the parent outlives it in the child */
        _exit(mc_master_snapshot_write(m, tmp, final));
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

uint64_t mc_ha_before_reply(void *ctx, mc_master_t *m, mc_rpc_server_t *srv, uint64_t *light_p)
{
    mc_ha_t *ha = ctx;
    bool lost, space;
    mc_buf_t *b = mc_master_ha_log(m, &lost, &space);
    if (lost)
        fence_exit("a log record could not be kept (no memory)");
    if (mc_buf_unread(b)) {
        /* this iteration's records become group next_group + 1, handed to the appender */
        ha_group_t *g = MC_NEW(ha_group_t);
        if (!g)
            fence_exit("no memory");
        g->id = ++ha->next_group;
        if (space)
            ha->space_group = g->id;
        g->recs = *b; /* the buffer moves to the group; the core starts a new one */
        *b = (mc_buf_t){0};
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
        pthread_cond_signal(&ha->app_cv);
        pthread_mutex_unlock(&ha->app_mu);
    }
    /* last, right before replies may be written: no reply once the lease may be gone */
    if (mc_now_ms() - atomic_load(&ha->last_ok_sent_ms) >= ha->fence_ms)
        fence_exit("the lease TTL passed since the last answered keepalive");
    /* every reply of this iteration waits for the last group handed over: it may expose any
     * change made so far; a light one (a create-once PutStart that placed every key, which
     * acknowledges nothing) only for the last group that freed or mounted space: its
     * allocation may lie in that space, which a new leader without that group would still
     * count as its old owner's (or not know) */
    uint64_t durable = atomic_load(&ha->durable_group);
    *light_p = durable < ha->space_group ? ha->space_group : 0;
    return durable < ha->next_group ? ha->next_group : 0;
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
    atomic_store(&ha->ka_stop, true);
    if (ha->snap_running)
        pthread_join(ha->snap_thread, NULL);
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
    pthread_cond_destroy(&ha->app_cv);
    mc_free(ha);
}

/* ------------------------------------------------------------------ admin pages */

char *mc_ha_leader_json(void *ctx)
{
    mc_ha_t *ha = ctx;
    char buf[400];
    pthread_mutex_lock(&ha->mu);
    if (ha->seen_addr[0])
        snprintf(buf, sizeof(buf),
                 "{\"present\":true,\"address\":\"%s\",\"view_version\":%" PRIu64
                 ",\"self\":%s}",
                 ha->seen_addr, ha->seen_view, ha->leading ? "true" : "false");
    else
        snprintf(buf, sizeof(buf), "{\"present\":false}");
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
    mc_prom_help_type(b, "master_ha_append_txn_seconds_total", "counter",
                      "Time the appender threads spent in etcd txns, summed (its rate is the "
                      "mean number of appends in flight)");
    MC_PROM_PRINTF(b, "master_ha_append_txn_seconds_total %.6f\n",
                   (double)atomic_load(&ha->st_txn_us) / 1e6);
    pthread_mutex_unlock(&ha->mu);
}

/* The store client's metrics (store_metrics.h): upstream's latency buckets and RPC names, the
 * Prometheus text and upstream's summary text, and the public readers (mc_store_metrics*).
 * Names, types, labels and buckets are upstream Mooncake's (mooncake-store/include/
 * client_metric.h); what each series counts here: docs/internals/store-client.md, "Metrics",
 * and docs/operations.md. Readers take relaxed loads of counters that writers only add to, so
 * no lock is needed anywhere. */
#include "client/store_int.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/prom.h"

#include <stdio.h>
#include <string.h>

const uint64_t store_lat_le_us[STORE_LAT_BUCKETS] = {
    50,     75,      125,     150,     200,      250,      300,  400,  500,  750,
    1000,   1500,    2000,    3000,    5000,     7000,     15000, 20000,
    50000,  100000,  200000,  500000,  1000000,  2000000,  5000000, 10000000, 20000000,
};

store_metrics_t *store_metrics_new(void)
{
    store_metrics_t *m = MC_NEW(store_metrics_t);
    if (m)
        m->start_ns = mc_now_ns();
    return m;
}

/* Upstream's rpc_name values (its RpcNameTraits); ours where upstream has no such RPC. */
const char *store_metrics_rpc_name(uint16_t opcode)
{
    switch (opcode) {
    case MC_OP_PING: return "Ping";
    case MC_OP_SERVICE_READY: return "ServiceReady";
    case MC_OP_MOUNT_SEGMENT: return "MountSegment";
    case MC_OP_REMOUNT_SEGMENT: return "ReMountSegment";
    case MC_OP_UNMOUNT_SEGMENT: return "UnmountSegment";
    case MC_OP_GRACEFUL_UNMOUNT_SEGMENT: return "GracefulUnmountSegment";
    case MC_OP_QUERY_SEGMENT_STATUS: return "QuerySegmentStatus";
    case MC_OP_PUT_START: return "PutStart";
    case MC_OP_PUT_END: return "PutEnd";
    case MC_OP_PUT_REVOKE: return "PutRevoke";
    case MC_OP_BATCH_PUT_START: return "BatchPutStart";
    case MC_OP_BATCH_PUT_END: return "BatchPutEnd";
    case MC_OP_BATCH_PUT_REVOKE: return "BatchPutRevoke";
    case MC_OP_UPSERT_START: return "UpsertStart";
    case MC_OP_UPSERT_END: return "UpsertEnd";
    case MC_OP_UPSERT_REVOKE: return "UpsertRevoke";
    case MC_OP_BATCH_UPSERT_START: return "BatchUpsertStart";
    case MC_OP_BATCH_UPSERT_END: return "BatchUpsertEnd";
    case MC_OP_BATCH_UPSERT_REVOKE: return "BatchUpsertRevoke";
    case MC_OP_GET_REPLICA_LIST: return "GetReplicaList";
    case MC_OP_BATCH_GET_REPLICA_LIST: return "BatchGetReplicaList";
    case MC_OP_EXIST_KEY: return "ExistKey";
    case MC_OP_BATCH_EXIST_KEY: return "BatchExistKey";
    case MC_OP_GET_SIZE: return "GetSize";
    case MC_OP_REMOVE: return "Remove";
    case MC_OP_BATCH_REMOVE: return "BatchRemove";
    case MC_OP_REMOVE_BY_REGEX: return "RemoveByRegex";
    case MC_OP_REMOVE_ALL: return "RemoveAll";
    case MC_OP_POLL_EVENTS: return "PollEvents";
    case MC_OP_LIST_OBJECTS: return "ListObjects";
    case MC_OP_RELEASE_RETIRED: return "ReleaseRetired";
    case MC_OP_CREATE_COPY_TASK: return "CreateCopyTask";
    case MC_OP_CREATE_MOVE_TASK: return "CreateMoveTask";
    case MC_OP_QUERY_TASK: return "QueryTask";
    case MC_OP_FETCH_TASKS: return "FetchTasks";
    case MC_OP_MARK_TASK_TO_COMPLETE: return "MarkTaskToComplete";
    case MC_OP_COPY_START: return "CopyStart";
    case MC_OP_COPY_END: return "CopyEnd";
    case MC_OP_COPY_REVOKE: return "CopyRevoke";
    case MC_OP_MOVE_START: return "MoveStart";
    case MC_OP_MOVE_END: return "MoveEnd";
    case MC_OP_MOVE_REVOKE: return "MoveRevoke";
    default: return NULL;
    }
}

static uint64_t ld(const _Atomic uint64_t *c) { return atomic_load_explicit(c, memory_order_relaxed); }

/* A histogram read once: buckets (not cumulative), count, sum. */
typedef struct hist_snap {
    uint64_t b[STORE_LAT_BUCKETS + 1];
    uint64_t count, sum;
} hist_snap_t;

static void hist_read(const store_hist_t *h, hist_snap_t *o)
{
    o->count = 0;
    for (size_t i = 0; i <= STORE_LAT_BUCKETS; i++)
        o->count += o->b[i] = ld(&h->bucket[i]);
    o->sum = ld(&h->sum_us);
}

/* The page being rendered; the first failed append sticks in st. */
static const struct {
    const char *name, *help;
} op_hist[STORE_OP_N] = {
    [STORE_OP_GET] = {"mooncake_transfer_get_latency", "Get transfer latency (us)"},
    [STORE_OP_PUT] = {"mooncake_transfer_put_latency", "Put transfer latency (us)"},
    [STORE_OP_BATCH_GET] = {"mooncake_transfer_batch_get_latency",
                            "Batch Get transfer latency (us)"},
    [STORE_OP_BATCH_PUT] = {"mooncake_transfer_batch_put_latency",
                            "Batch Put transfer latency (us)"},
};

mc_status_t store_metrics_render(const store_metrics_t *m, const mc_te_conn_stats_t *te,
                                 uint64_t stale_views, char **text_p)
{
    *text_p = NULL;
    mc_prom_t p = {0};
    mc_prom_help_type(&p, "mooncake_transfer_read_bytes", "counter", "Total bytes read");
    MC_PROM_PRINTF(&p, "mooncake_transfer_read_bytes %llu\n",
                   (unsigned long long)ld(&m->read_bytes));
    mc_prom_help_type(&p, "mooncake_transfer_write_bytes", "counter", "Total bytes written");
    MC_PROM_PRINTF(&p, "mooncake_transfer_write_bytes %llu\n",
                   (unsigned long long)ld(&m->write_bytes));
    static const int order[] = {STORE_OP_BATCH_PUT, STORE_OP_BATCH_GET, STORE_OP_GET,
                                STORE_OP_PUT}; /* upstream's order */
    for (size_t i = 0; i < MC_ARRAY_LEN(order); i++) {
        hist_snap_t h;
        hist_read(&m->op[order[i]], &h);
        mc_prom_help_type(&p, op_hist[order[i]].name, "histogram", op_hist[order[i]].help);
        mc_prom_histogram(&p, op_hist[order[i]].name, "", store_lat_le_us, h.b, STORE_LAT_BUCKETS,
                          h.sum, h.count);
    }
    /* Labelled families: a series per RPC that was called (upstream's dynamic labels). */
    mc_prom_help_type(&p, "mooncake_client_rpc_count", "counter",
                      "Total number of RPC calls made by the client");
    for (uint16_t op = 0; op < MC_OP_MAX; op++) {
        uint64_t c = ld(&m->rpc_count[op]);
        const char *name = store_metrics_rpc_name(op);
        if (c && name)
            MC_PROM_PRINTF(&p, "mooncake_client_rpc_count{rpc_name=\"%s\"} %llu\n", name,
                           (unsigned long long)c);
    }
    mc_prom_help_type(&p, "mooncake_client_rpc_latency", "histogram",
                      "Latency of RPC calls made by the client (in us)");
    for (uint16_t op = 0; op < MC_OP_MAX; op++) {
        const char *name = store_metrics_rpc_name(op);
        hist_snap_t h;
        hist_read(&m->rpc_lat[op], &h);
        if (!name || !h.count)
            continue;
        char label[64];
        snprintf(label, sizeof(label), "rpc_name=\"%s\",", name);
        mc_prom_histogram(&p, "mooncake_client_rpc_latency", label, store_lat_le_us, h.b,
                          STORE_LAT_BUCKETS, h.sum, h.count);
    }
    /* fencing by view (docs/internals/ha.md, "Clients"); ours */
    mc_prom_help_type(&p, "mooncake_client_stale_view_answers", "counter",
                      "Master answers dropped because their HA view was older than one seen");
    MC_PROM_PRINTF(&p, "mooncake_client_stale_view_answers %llu\n",
                   (unsigned long long)stale_views);
    /* the data port's refusals of tenant-bound peers (docs/security.md, "Data ports and
     * tenants"); ours, upstream has no such series */
    if (te) {
        mc_prom_help_type(&p, "mooncake_transfer_denied_requests", "counter",
                          "Data-port requests of tenant-bound peers refused (PERMISSION_DENIED)");
        MC_PROM_PRINTF(&p, "mooncake_transfer_denied_requests %llu\n",
                       (unsigned long long)te->denied);
        mc_prom_help_type(&p, "mooncake_transfer_grants_refused", "counter",
                          "Data grants presented by peers and dropped (forged, expired, other "
                          "segment or tenant)");
        MC_PROM_PRINTF(&p, "mooncake_transfer_grants_refused %llu\n",
                       (unsigned long long)te->grants_refused);
        mc_prom_help_type(&p, "mooncake_transfer_grants_shared", "counter",
                          "Data grants presented again on another connection of the same "
                          "tenant: verified, their ranges not kept twice");
        MC_PROM_PRINTF(&p, "mooncake_transfer_grants_shared %llu\n",
                       (unsigned long long)te->grants_shared);
    }
    mc_prom_auth_counters(&p); /* this process's handshakes: what authentication costs it */
    if (p.st == MC_OK && !(*text_p = mc_buf_take_str(&p.b)))
        p.st = MC_ERR_NO_MEMORY;
    mc_buf_free(&p.b);
    return p.st;
}

/* ---------------------------------------------------------------- summary (upstream's text) */

/* upstream's format_latency_summary: count, the bucket holding the 95th percentile, the
 * highest bucket with data ("No data" when empty); nothing for a bound past the last one. */
static void latency_summary(mc_prom_t *p, const store_hist_t *hist)
{
    hist_snap_t h;
    hist_read(hist, &h);
    if (!h.count) {
        MC_PROM_PRINTF(p, "No data");
        return;
    }
    MC_PROM_PRINTF(p, "count=%llu", (unsigned long long)h.count);
    /* rounded up, so at least one observation (upstream rounds down: 0 of 1, the first bucket) */
    uint64_t target = (h.count * 95 + 99) / 100, cum = 0;
    for (size_t i = 0; i < STORE_LAT_BUCKETS; i++) {
        cum += h.b[i];
        if (cum >= target) {
            MC_PROM_PRINTF(p, ", p95<%llu\xce\xbcs", (unsigned long long)store_lat_le_us[i]);
            break;
        }
    }
    for (size_t i = STORE_LAT_BUCKETS; i > 0; i--) {
        if (h.b[i - 1]) {
            MC_PROM_PRINTF(p, ", max<%llu\xce\xbcs", (unsigned long long)store_lat_le_us[i - 1]);
            break;
        }
    }
}

mc_status_t store_metrics_summary(const store_metrics_t *m, char **text_p)
{
    *text_p = NULL;
    mc_prom_t p = {0};
    double secs = (double)(mc_now_ns() - m->start_ns) / 1e9;
    if (secs < 1e-9)
        secs = 1e-9;
    uint64_t rd = ld(&m->read_bytes), wr = ld(&m->write_bytes);
    MC_PROM_PRINTF(&p, "Client Metrics Summary\n=== Transfer Metrics Summary ===\nTotal Read: ");
    mc_prom_bytes(&p, rd);
    MC_PROM_PRINTF(&p, "\nTotal Write: ");
    mc_prom_bytes(&p, wr);
    MC_PROM_PRINTF(&p, "\nAverage Read Throughput: ");
    mc_prom_human_bytes(&p, (double)rd / secs, "B/s");
    MC_PROM_PRINTF(&p, "\nAverage Write Throughput: ");
    mc_prom_human_bytes(&p, (double)wr / secs, "B/s");
    MC_PROM_PRINTF(&p, "\n\n=== Latency Summary (microseconds) ===\n");
    static const struct { const char *label; int op; } lat[] = {
        {"Get", STORE_OP_GET}, {"Put", STORE_OP_PUT}, {"Batch Get", STORE_OP_BATCH_GET},
        {"Batch Put", STORE_OP_BATCH_PUT}};
    for (size_t i = 0; i < MC_ARRAY_LEN(lat); i++) {
        MC_PROM_PRINTF(&p, "%s: ", lat[i].label);
        latency_summary(&p, &m->op[lat[i].op]);
        MC_PROM_PRINTF(&p, "\n");
    }
    MC_PROM_PRINTF(&p, "\n=== RPC Metrics Summary ===\n");
    bool any = false;
    for (uint16_t op = 0; op < MC_OP_MAX; op++) {
        const char *name = store_metrics_rpc_name(op);
        if (!name || !ld(&m->rpc_count[op]))
            continue;
        any = true;
        MC_PROM_PRINTF(&p, "%s: ", name);
        latency_summary(&p, &m->rpc_lat[op]);
        MC_PROM_PRINTF(&p, "\n");
    }
    if (!any)
        MC_PROM_PRINTF(&p, "No RPC calls recorded\n");
    if (p.st == MC_OK && !(*text_p = mc_buf_take_str(&p.b)))
        p.st = MC_ERR_NO_MEMORY;
    mc_buf_free(&p.b);
    return p.st;
}

/* ---------------------------------------------------------------- public readers */

mc_status_t mc_store_metrics_text(mc_store_t *s, char **text_p)
{
    if (!text_p)
        return MC_ERR_INVALID_PARAMS;
    *text_p = NULL;
    if (!s)
        return MC_ERR_INVALID_PARAMS;
    if (!s->metrics)
        return MC_ERR_NOT_SUPPORTED;
    mc_te_conn_stats_t te;
    if (s->te)
        mc_te_conn_stats(s->te, &te);
    mc_status_t st = store_metrics_render(s->metrics, s->te ? &te : NULL,
                                          atomic_load(&s->master.view_refused), text_p);
    if (st == MC_OK)
        st = store_disk_metrics_append(s, text_p); /* a storage server's SSD tier */
    if (st != MC_OK) {
        mc_free(*text_p);
        *text_p = NULL;
    }
    return st;
}

mc_status_t mc_store_metrics_summary(mc_store_t *s, char **text_p)
{
    if (!text_p)
        return MC_ERR_INVALID_PARAMS;
    *text_p = NULL;
    if (!s)
        return MC_ERR_INVALID_PARAMS;
    if (!s->metrics)
        return MC_ERR_NOT_SUPPORTED;
    return store_metrics_summary(s->metrics, text_p);
}

static void snap_op(const store_hist_t *h, mc_store_op_metrics_t *o)
{
    hist_snap_t hs;
    hist_read(h, &hs);
    o->count = hs.count;
    o->sum_us = hs.sum;
}

mc_status_t mc_store_metrics(mc_store_t *s, mc_store_metrics_t *out)
{
    if (!out)
        return MC_ERR_INVALID_PARAMS;
    *out = (mc_store_metrics_t){0};
    if (!s)
        return MC_ERR_INVALID_PARAMS;
    const store_metrics_t *m = s->metrics;
    if (!m)
        return MC_ERR_NOT_SUPPORTED;
    out->read_bytes = ld(&m->read_bytes);
    out->write_bytes = ld(&m->write_bytes);
    snap_op(&m->op[STORE_OP_GET], &out->get);
    snap_op(&m->op[STORE_OP_PUT], &out->put);
    snap_op(&m->op[STORE_OP_BATCH_GET], &out->batch_get);
    snap_op(&m->op[STORE_OP_BATCH_PUT], &out->batch_put);
    for (uint16_t op = 0; op < MC_OP_MAX; op++) {
        out->rpc_count += ld(&m->rpc_count[op]);
        hist_snap_t hs;
        hist_read(&m->rpc_lat[op], &hs);
        out->rpc_answered += hs.count;
    }
    return MC_OK;
}

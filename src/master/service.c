/* The mooncake_master service (contract in service.h): the master core served by an RPC server
 * loop, plus an HTTP server (libmicrohttpd, its own threads) for /metrics and upstream's admin
 * endpoints (/metrics/summary, /health, /role, /ha_status, /leader, /query_key,
 * /batch_query_keys, /get_all_keys, /get_all_segments, /get_segments_detail, /query_segment)
 * and the operator console (/console..., master/console.h).
 * The loop thread owns the core: RPC handlers and the cron run there, and the WAL is synced
 * before each round of replies. HTTP threads never touch the core: /metrics and the summary
 * render the snapshot the cron publishes plus relaxed atomic counters, and queries are posted
 * to the loop and waited for (5 s at most; a stuck loop answers 503). With a keyring
 * (opts.auth) every HTTP request must be signed (common/http_auth.h), except the metrics
 * pages and /health with opts.metrics_public. Endpoints, bodies and caps:
 * docs/internals/master.md, "HTTP"; metric names: docs/operations.md. */
#include "master/service.h"
#include "master/console.h"
#include "master/tenant_store.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/http_auth_mhd.h"
#include "common/prom.h"
#include "common/log.h"
#include "common/time.h"
#include "rpc/frame.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Caps of the admin endpoints (each refused or bounded input answers 400 or is documented). */
#define HTTP_KEY_MAX MC_RPC_MAX_KEY          /* bytes per key (as over RPC) */
#define HTTP_BATCH_MAX 1024u                  /* keys per /batch_query_keys */
#define HTTP_ALL_KEYS_MAX_BYTES (16u << 20)   /* /get_all_keys body; past it: truncated */
#define HTTP_QUERY_WAIT_MS 5000
/* Connections of the HTTP port: at most HTTP_CONNS at once, HTTP_CONNS_PER_IP from one
 * address (a flood from one host cannot lock the others out), closed after HTTP_IDLE_S idle
 * seconds; epoll, so idle connections cost no time. */
#define HTTP_CONNS 256u
#define HTTP_CONNS_PER_IP 32u
#define HTTP_IDLE_S 10u

struct mc_master_service {
    mc_master_service_opts_t o;
    mc_master_t *m;
    mc_rpc_server_t *srv;
    mc_rpc_handler_fn table[MC_OP_MAX];
    struct MHD_Daemon *httpd;
    uint16_t metrics_port;
    mc_http_auth_server_t *http_auth; /* checks HTTP requests (open without a keyring) */
    mc_console_t *console;            /* the console's browser sessions (master/console.h) */
    atomic_bool serving;              /* the loop runs (service_ready in /health) */
    bool batch_op[MC_OP_MAX];         /* opcodes named batch_*: item counters too */
    _Atomic uint64_t req[MC_OP_MAX], fail[MC_OP_MAX];
    _Atomic uint64_t items[MC_OP_MAX], failed_items[MC_OP_MAX], partial[MC_OP_MAX];
    /* /metrics/summary rates: the counters at the previous summary (under summary_mu) */
    pthread_mutex_t summary_mu;
    uint64_t sum_prev_ms;
    uint64_t sum_req[MC_OP_MAX], sum_fail[MC_OP_MAX], sum_items[MC_OP_MAX],
        sum_failed_items[MC_OP_MAX], sum_partial[MC_OP_MAX], sum_alloc_fail, sum_partial_alloc;
};

/* ---------------------------------------------------------------- RPC side (loop thread) */

static int32_t resp_status(const ProtobufCMessage *resp)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field(resp->descriptor, 1);
    if (!f || f->type != PROTOBUF_C_TYPE_SINT32)
        return 0;
    return *(const int32_t *)((const char *)resp + f->offset);
}

/* Is a per-item (or single-key) status a failure? Existence checks answering "not found" are
 * answers, not failures. */
static bool item_failed(uint16_t op, int32_t st)
{
    return st != MC_OK &&
           !(st == MC_ERR_OBJECT_NOT_FOUND &&
             (op == MC_OP_EXIST_KEY || op == MC_OP_BATCH_EXIST_KEY));
}

static size_t repeated_count(const ProtobufCMessage *msg, const ProtobufCFieldDescriptor *f)
{
    return *(const size_t *)((const char *)msg + f->quantifier_offset);
}

/* A batch request's items (its `keys`) and how many of them failed: all of them when the whole
 * request failed, else the failed per-item statuses (`statuses` when it has entries, else
 * `results[i].status`). */
static void batch_items(uint16_t op, const ProtobufCMessage *req, const ProtobufCMessage *resp,
                        int32_t body, size_t *items_p, size_t *failed_p)
{
    *items_p = *failed_p = 0;
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(req->descriptor, "keys");
    if (!f || f->label != PROTOBUF_C_LABEL_REPEATED)
        return;
    size_t n = repeated_count(req, f);
    *items_p = n;
    if (body != MC_OK || !resp) {
        *failed_p = n;
        return;
    }
    size_t failed = 0;
    const ProtobufCFieldDescriptor *fs =
        protobuf_c_message_descriptor_get_field_by_name(resp->descriptor, "statuses");
    /* a BatchReplicaListResponse has both: `statuses` in its compact form, else `results` */
    if (fs && fs->type == PROTOBUF_C_TYPE_SINT32 && repeated_count(resp, fs)) {
        const int32_t *st = *(int32_t *const *)((const char *)resp + fs->offset);
        size_t k = repeated_count(resp, fs);
        for (size_t i = 0; i < k; i++)
            failed += item_failed(op, st[i]);
    } else if ((f = protobuf_c_message_descriptor_get_field_by_name(resp->descriptor,
                                                                     "results")) &&
               f->type == PROTOBUF_C_TYPE_MESSAGE) {
        ProtobufCMessage *const *r = *(ProtobufCMessage *const *const *)((const char *)resp +
                                                                         f->offset);
        size_t k = repeated_count(resp, f);
        for (size_t i = 0; i < k; i++)
            failed += item_failed(op, resp_status(r[i]));
    }
    *failed_p = failed < n ? failed : n;
}

static void count(_Atomic uint64_t *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static uint64_t load(_Atomic uint64_t *c) { return atomic_load_explicit(c, memory_order_relaxed); }

static mc_status_t svc_dispatch(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                ProtobufCMessage **resp_p)
{
    mc_master_service_t *s = ctx;
    uint16_t op = call->opcode;
    mc_status_t st = op == MC_OP_HA_FETCH ? s->o.ha_fetch(s->o.ha_ctx, call, req, resp_p)
                                          : s->table[op](s->m, call, req, resp_p);
    count(&s->req[op], 1);
    if (st == MC_RPC_DEFERRED) /* a parked long poll; answered (successfully) later */
        return st;
    int32_t body = st == MC_OK && *resp_p ? resp_status(*resp_p) : st;
    bool failed = item_failed(op, body);
    if (s->batch_op[op]) {
        /* upstream: a batch fails when every item failed, succeeds partially when some did */
        size_t n, nf;
        batch_items(op, req, st == MC_OK ? *resp_p : NULL, body, &n, &nf);
        count(&s->items[op], n);
        count(&s->failed_items[op], nf);
        if (!failed && n && nf == n)
            failed = true;
        else if (!failed && nf)
            count(&s->partial[op], 1);
    }
    if (failed)
        count(&s->fail[op], 1);
    return st;
}

static void svc_on_request(void *ctx, uint16_t opcode, int failed)
{
    mc_master_service_t *s = ctx;
    if (opcode < MC_OP_MAX && failed) {
        count(&s->req[opcode], 1);
        count(&s->fail[opcode], 1);
    }
}

static void tenant_policy_replace(mc_master_t *m, const mc_tenant_policy_t *pol,
                                  const char *where);

static void svc_cron(void *ctx)
{
    mc_master_service_t *s = ctx;
    mc_master_t *m = s->m;
    mc_tenant_policy_t pol;
    if (s->o.tenant_store && mc_tenant_store_take_change(s->o.tenant_store, &pol)) {
        tenant_policy_replace(m, &pol, mc_tenant_store_where(s->o.tenant_store));
        mc_tenant_policy_free(&pol);
    }
    mc_master_cron(m);
    mc_master_wal_sync(m); /* evictions / unmounts done by the cron (no-op when clean) */
    if (s->o.ha_tick)
        s->o.ha_tick(s->o.ha_ctx, m, s->srv);
}
/* The local log first (fsync), then the replicated one: a change is in the local WAL before
 * its records are handed to etcd's log, and its reply waits for both. */
static uint64_t svc_before_reply(void *ctx, uint64_t *light_p)
{
    mc_master_service_t *s = ctx;
    mc_master_wal_sync(s->m);
    if (s->o.ha_before_reply) /* the replicated log and the fencing check (master/ha.h) */
        return s->o.ha_before_reply(s->o.ha_ctx, s->m, s->srv, light_p);
    return 0;
}

/* ---------------------------------------------------------------- loop queries (HTTP -> loop) */

typedef enum qkind {
    Q_KEY,              /* /query_key */
    Q_BATCH,            /* /batch_query_keys */
    Q_ALL_KEYS,         /* /get_all_keys */
    Q_SEGMENTS,         /* /get_all_segments */
    Q_SEGMENTS_DETAIL,  /* /get_segments_detail */
    Q_SEGMENT,          /* /query_segment */
    Q_TENANTS,          /* GET /api/v1/tenant_quotas: all, or ?tenant_id= */
    Q_TENANT_PUT,       /* PUT /api/v1/tenant_quotas?tenant_id= */
    Q_TENANT_DELETE,    /* DELETE /api/v1/tenant_quotas?tenant_id= */
    Q_EVENTS,           /* /console/events?from= */
} qkind_t;

typedef struct query {
    mc_master_service_t *s;
    qkind_t kind;
    char *arg;           /* key, segment name or the batch's key list (owned; split in place) */
    const char **keys;   /* Q_BATCH: n keys pointing into arg */
    size_t *klens, n;
    mc_tenant_scope_t scope; /* Q_KEY, Q_BATCH, Q_ALL_KEYS: ?tenant_id= (default "default") */
    char tenant[MC_TENANT_MAX + 1]; /* Q_TENANT*: ?tenant_id= ("" = all, for Q_TENANTS) */
    uint64_t quota;                 /* Q_TENANT_PUT: requested_quota_bytes */
    uint64_t from;                  /* Q_EVENTS: the first seq wanted */
    /* results */
    char *result;
    mc_status_t st;
    size_t listed;
    bool truncated;
    int done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} query_t;

static void query_free(query_t *q)
{
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    mc_free(q->arg);
    mc_free(q->keys);
    mc_free(q->klens);
    mc_free(q);
}

/* The tenants of the policy now, written to the policy store (when there is one). */
static mc_status_t tenant_policy_write(mc_master_service_t *s)
{
    if (!s->o.tenant_store)
        return MC_OK;
    mc_master_tenant_info_t *list = NULL;
    size_t n = 0;
    mc_status_t st = mc_master_tenant_list(s->m, &list, &n);
    if (st == MC_OK)
        st = mc_tenant_store_save(s->o.tenant_store, list, n);
    mc_free(list);
    return st;
}

/* /api/v1/tenant_quotas on the loop: the answer (JSON), or NULL with *st_p. A change that the
 * policy file cannot record is undone (FILE_WRITE_FAIL). */
static char *tenant_quota_on_loop(mc_master_service_t *s, query_t *q, mc_status_t *st_p)
{
    mc_master_t *m = s->m;
    if (!s->o.cfg.multi_tenants) {
        *st_p = MC_ERR_UNAVAILABLE_IN_CURRENT_MODE;
        return NULL;
    }
    mc_master_tenant_info_t before = {0}, t = {0};
    bool had = mc_master_tenant_get(m, q->tenant, &before) == MC_OK && before.quota;
    mc_status_t st = MC_OK;
    if (q->kind == Q_TENANTS && !q->tenant[0]) {
        mc_master_tenant_info_t *list = NULL;
        size_t n = 0;
        if ((*st_p = mc_master_tenant_list(m, &list, &n)) != MC_OK)
            return NULL;
        char *r = mc_master_tenants_json(list, n, false);
        mc_free(list);
        return r;
    }
    if (q->kind == Q_TENANT_PUT)
        st = mc_master_tenant_set_quota(m, q->tenant, q->quota);
    else if (q->kind == Q_TENANT_DELETE)
        st = mc_master_tenant_clear_quota(m, q->tenant);
    if (st == MC_OK && q->kind != Q_TENANTS && (st = tenant_policy_write(s)) != MC_OK) {
        if (had)
            mc_master_tenant_set_quota(m, q->tenant, before.quota);
        else
            mc_master_tenant_clear_quota(m, q->tenant);
    }
    if (st == MC_OK && mc_master_tenant_get(m, q->tenant, &t) != MC_OK) {
        /* nothing left of it (a deleted policy of an empty tenant): its closed snapshot */
        snprintf(t.name, sizeof(t.name), "%s", mc_tenant_or_default(q->tenant));
        if (q->kind == Q_TENANTS)
            st = MC_ERR_TENANT_NOT_REGISTERED;
    }
    *st_p = st;
    return st == MC_OK ? mc_master_tenants_json(&t, 1, true) : NULL;
}

static void query_on_loop(void *arg)
{
    query_t *q = arg;
    mc_master_t *m = q->s->m;
    mc_status_t st = MC_OK;
    size_t listed = 0;
    bool truncated = false;
    char *r = NULL;
    switch (q->kind) {
    case Q_KEY: r = mc_master_query_key_json(m, &q->scope, q->arg, strlen(q->arg), &st); break;
    case Q_BATCH: r = mc_master_batch_query_keys_json(m, &q->scope, q->keys, q->klens, q->n); break;
    case Q_ALL_KEYS:
        r = mc_master_key_list(m, &q->scope, HTTP_ALL_KEYS_MAX_BYTES, &listed, &truncated);
        break;
    case Q_SEGMENTS: r = mc_master_segment_names(m); break;
    case Q_SEGMENTS_DETAIL: r = mc_master_segments_detail_json(m); break;
    case Q_SEGMENT: r = mc_master_query_segment_text(m, q->arg, &st); break;
    case Q_TENANTS:
    case Q_TENANT_PUT:
    case Q_TENANT_DELETE: r = tenant_quota_on_loop(q->s, q, &st); break;
    case Q_EVENTS: r = mc_console_events_json(m, q->from); break;
    }
    if (!r && st == MC_OK)
        st = MC_ERR_NO_MEMORY;
    pthread_mutex_lock(&q->mu);
    q->result = r;
    q->st = st;
    q->listed = listed;
    q->truncated = truncated;
    q->done = 1;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

/* Runs q on the loop thread and waits (bounded) for it. Returns false when it did not finish
 * in time: then the loop still owns q, which is leaked rather than freed under it (only when
 * the loop is stopped or wedged); else q holds the result and the caller frees q. */
static bool run_query(mc_master_service_t *s, query_t *q)
{
    q->s = s;
    if (mc_rpc_server_post(s->srv, query_on_loop, q) != MC_OK) {
        q->st = MC_ERR_NO_MEMORY;
        return true;
    }
    uint64_t deadline = mc_now_ms() + HTTP_QUERY_WAIT_MS;
    pthread_mutex_lock(&q->mu);
    while (!q->done && mc_now_ms() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&q->cv, &q->mu, &ts);
    }
    int done = q->done;
    pthread_mutex_unlock(&q->mu);
    return done;
}

/* Length of the valid UTF-8 sequence at p (n bytes left), or 0 if it is not one: strict (no
 * overlongs, surrogates or code points above U+10FFFF). */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if ((c & 0xe0) == 0xc0) {
        len = 2;
        cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3;
        cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t k = 1; k < len; k++) {
        if ((p[k] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[k] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* Keys are JSON object names in /batch_query_keys' answer: they must be UTF-8. */
static bool utf8_valid(const unsigned char *p, size_t n)
{
    for (size_t i = 0, k; i < n; i += k)
        if ((k = utf8_seq(p + i, n - i)) == 0)
            return false;
    return true;
}

/* ---------------------------------------------------------------- metrics page */

static void metric(mc_prom_t *b, const char *name, const char *type, const char *help, double v)
{
    mc_prom_help_type(b, name, type, help);
    MC_PROM_PRINTF(b, "%s %.17g\n", name, v);
}

static void metric_u(mc_prom_t *b, const char *name, const char *type, const char *help, uint64_t v)
{
    mc_prom_help_type(b, name, type, help);
    MC_PROM_PRINTF(b, "%s %llu\n", name, (unsigned long long)v);
}

/* A label value as the Prometheus text format wants it: \ " and newline escaped, and valid
 * UTF-8 (Prometheus refuses a scrape with an invalid label value; segment names come from
 * clients): a byte that does not start a valid sequence becomes U+FFFD. */
static void label_value(mc_prom_t *b, const char *v)
{
    const unsigned char *p = (const unsigned char *)v;
    size_t n = strlen(v);
    for (size_t i = 0, k; i < n && b->st == MC_OK; i += k) {
        const char *esc = p[i] == '\\' ? "\\\\" : p[i] == '"' ? "\\\"" : NULL;
        if (p[i] == '\n')
            esc = "\\n";
        k = utf8_seq(p + i, n - i);
        if (esc)
            b->st = mc_buf_append(&b->b, esc, 2);
        else if (k)
            b->st = mc_buf_append(&b->b, p + i, k);
        else
            b->st = mc_buf_append(&b->b, "\xef\xbf\xbd", 3);
        k = k ? k : 1;
    }
}

static void segment_gauges(mc_prom_t *b, const mc_master_segment_metrics_t *segs, size_t n,
                           bool capacity)
{
    const char *name = capacity ? "segment_total_capacity_bytes" : "segment_allocated_bytes";
    mc_prom_help_type(b, name, "gauge",
              capacity ? "Capacity of the mounted segment" : "Bytes allocated in the segment");
    for (size_t i = 0; i < n; i++) {
        MC_PROM_PRINTF(b, "%s{segment=\"", name);
        label_value(b, segs[i].name);
        MC_PROM_PRINTF(b, "\"} %llu\n",
                       (unsigned long long)(capacity ? segs[i].capacity_bytes
                                                     : segs[i].allocated_bytes));
    }
}

/* Per-tenant quota numbers (strict multi-tenant mode; nothing otherwise), upstream's names
 * where upstream has them. */
static void tenant_metrics(mc_prom_t *b, mc_master_t *m)
{
    mc_master_tenant_info_t *t = NULL;
    size_t n = 0;
    if (mc_master_tenant_metrics_snapshot(m, &t, &n) != MC_OK) {
        b->st = MC_ERR_NO_MEMORY;
        return;
    }
    if (!n)
        return;
    static const struct { const char *name, *type, *help; } g[] = {
        {"mooncake_tenant_quota_requested_bytes", "gauge", "Tenant quota (0 = no policy)"},
        {"mooncake_tenant_quota_charged_bytes", "gauge",
         "Bytes of memory replicas charged to the tenant, puts in flight included"},
        {"mooncake_tenant_objects", "gauge", "Objects of the tenant, puts in flight included"},
        {"mooncake_tenant_quota_reject_total", "counter",
         "Puts refused with TENANT_QUOTA_EXCEEDED"},
    };
    for (size_t k = 0; k < sizeof(g) / sizeof(g[0]); k++) {
        mc_prom_help_type(b, g[k].name, g[k].type, g[k].help);
        for (size_t i = 0; i < n; i++) {
            uint64_t v = k == 0 ? t[i].quota : k == 1 ? t[i].used : k == 2 ? t[i].objects
                                                                           : t[i].rejects;
            MC_PROM_PRINTF(b, "%s{tenant_id=\"", g[k].name);
            label_value(b, t[i].name);
            MC_PROM_PRINTF(b, "\"%s} %llu\n", k == 3 ? ",reason=\"quota_exceeded\"" : "",
                           (unsigned long long)v);
        }
    }
    mc_free(t);
}

static void value_size_histogram(mc_prom_t *b, const mc_master_metrics_t *m)
{
    const char *name = "master_value_size_bytes";
    mc_prom_help_type(b, name, "histogram", "Value sizes of committed puts");
    mc_prom_histogram(b, name, "", mc_master_value_size_le, m->value_size_bucket,
                      MC_MASTER_VALUE_SIZE_BUCKETS, m->value_size_sum, m->value_size_count);
}

/* The RPC port's connection budgets and authentication (rpc_server.h). */
static void rpc_server_metrics(mc_prom_t *b, const mc_rpc_server_t *srv)
{
    mc_rpc_server_stats_t r;
    mc_rpc_server_stats(srv, &r);
    metric_u(b, "mc_rpc_connections", "gauge", "Open RPC connections", r.conns);
    metric_u(b, "mc_rpc_buffered_bytes", "gauge",
             "Bytes of buffered requests and queued answers (counted against the budget)",
             r.buffered_bytes);
    metric_u(b, "mc_rpc_backpressure_total", "counter",
             "Times a connection stopped being read (answers piling up or over budget)",
             r.backpressure);
    metric_u(b, "mc_rpc_busy_total", "counter",
             "Requests answered BUSY (too many deferred requests on the connection)", r.busy);
    metric_u(b, "mc_rpc_closed_idle_total", "counter", "Connections closed idle", r.closed_idle);
    metric_u(b, "mc_rpc_closed_slow_total", "counter",
             "Connections closed with a frame incomplete past the slow-sender timeout",
             r.closed_slow);
    metric_u(b, "mc_rpc_closed_blocked_total", "counter",
             "Connections closed for not reading their answers", r.closed_blocked);
    metric_u(b, "mc_rpc_closed_budget_total", "counter",
             "Connections closed for a frame over the remaining memory budget", r.closed_budget);
    metric_u(b, "mc_rpc_closed_unauthenticated_total", "counter",
             "Connections closed before a valid handshake (timeout or connection limit)",
             r.closed_unauth);
    metric_u(b, "mc_rpc_auth_failures_total", "counter", "Handshakes refused", r.auth_failed);
    metric_u(b, "mc_rpc_refused_connections_total", "counter",
             "Connections refused at the connection limit", r.refused);
    mc_prom_auth_counters(b); /* the process's handshakes (every port, both directions) */
}

static char *render_metrics(mc_master_service_t *s)
{
    mc_master_metrics_t m;
    mc_master_metrics_snapshot(s->m, &m);
    mc_master_segment_metrics_t *segs = NULL;
    size_t n_segs = 0;
    mc_prom_t b = {0};
    b.st = mc_master_segment_metrics_snapshot(s->m, &segs, &n_segs);
    /* capacity */
    metric_u(&b, "master_allocated_bytes", "gauge", "Bytes allocated in mounted segments",
             m.allocated_bytes);
    metric_u(&b, "master_total_capacity_bytes", "gauge", "Capacity of mounted segments",
             m.total_capacity_bytes);
    segment_gauges(&b, segs, n_segs, false);
    segment_gauges(&b, segs, n_segs, true);
    mc_free(segs);
    tenant_metrics(&b, s->m);
    /* objects */
    metric_u(&b, "master_key_count", "gauge", "Committed objects", m.key_count);
    metric_u(&b, "master_soft_pin_key_count", "gauge", "Committed objects put with a soft pin",
             m.soft_pin_key_count);
    metric_u(&b, "master_hard_pin_key_count", "gauge", "Committed objects put with a hard pin",
             m.hard_pin_key_count);
    metric_u(&b, "master_leased_key_count", "gauge",
             "Committed objects under a read lease (to the second, rounded up)",
             m.leased_key_count);
    value_size_histogram(&b, &m);
    metric_u(&b, "master_active_clients", "gauge", "Clients seen within client_ttl",
             m.active_clients);
    metric_u(&b, "master_writing_key_count", "gauge", "Objects being written", m.writing_count);
    metric_u(&b, "master_mounted_segments", "gauge", "Mounted segments", m.mounted_segments);
    metric_u(&b, "master_recovering_segments", "gauge",
             "Segments waiting for re-mount after restart", m.recovering_segments);
    metric(&b, "master_fragmentation_ratio", "gauge", "1 - largest free block / free bytes",
           m.fragmentation);
    if (s->o.ha_metrics)
        s->o.ha_metrics(s->o.ha_ctx, &b);
    /* local-disk tier (upstream's file-size names where they exist) */
    metric_u(&b, "master_allocated_file_size_bytes", "gauge",
             "Bytes of LOCAL_DISK replicas on storage servers' disks", m.disk_bytes);
    metric_u(&b, "master_total_file_capacity_bytes", "gauge",
             "Disk capacity the storage servers reported (ReportSsdCapacity)",
             m.disk_capacity_bytes);
    metric_u(&b, "master_local_disk_key_count", "gauge", "Objects with a LOCAL_DISK replica",
             m.disk_objects);
    metric_u(&b, "master_local_disk_clients", "gauge", "Clients with a mounted local disk",
             m.disk_clients);
    metric_u(&b, "master_offload_queue_depth", "gauge",
             "Offload and disk-removal tasks queued for storage servers", m.offload_queue_depth);
    metric_u(&b, "master_offload_queued_total", "counter", "Offloads queued", m.offload_queued);
    metric_u(&b, "master_offload_success_total", "counter",
             "LOCAL_DISK replicas confirmed (NotifyOffloadSuccess, re-registrations included)",
             m.offload_succeeded);
    metric_u(&b, "master_offload_dropped_total", "counter",
             "Offload tasks dropped because the memory replica was gone when handed out",
             m.offload_dropped);
    metric_u(&b, "master_offload_skipped_total", "counter",
             "Victims evicted from memory without a disk copy because the per-pass offload cap "
             "or the owner's offload queue was full (--offload_on_evict)",
             m.offload_skipped);
    metric_u(&b, "master_disk_reconcile_dropped_total", "counter",
             "LOCAL_DISK replicas dropped at the end of their owner's re-registration (its disk "
             "no longer held them)",
             m.disk_reconciled);
    metric_u(&b, "master_disk_replica_evictions_total", "counter",
             "LOCAL_DISK replicas the storage servers evicted (EvictDiskReplica)", m.disk_evicted);
    metric_u(&b, "master_replica_tasks_pending", "gauge",
             "Replica copy/move tasks waiting for their client", m.tasks_pending);
    metric_u(&b, "master_replica_tasks_processing", "gauge",
             "Replica copy/move tasks their clients are running", m.tasks_processing);
    metric_u(&b, "master_replica_tasks_succeeded_total", "counter",
             "Replica copy/move tasks marked SUCCESS", m.tasks_succeeded);
    metric_u(&b, "master_replica_tasks_failed_total", "counter",
             "Replica copy/move tasks that FAILED (their client's report or a timeout)",
             m.tasks_failed);
    metric_u(&b, "master_promotion_in_flight", "gauge",
             "Promotions queued for or handed to storage servers", m.promotion_in_flight);
    metric_u(&b, "master_promotion_queued_total", "counter", "Promotions queued (promotion_on_hit)",
             m.promotions_queued);
    metric_u(&b, "master_promotion_success_total", "counter",
             "Memory copies of disk objects committed by promotions", m.promotions);
    /* eviction */
    metric_u(&b, "master_successful_evictions_total", "counter",
             "Eviction rounds that freed space", m.successful_evictions);
    metric_u(&b, "master_attempted_evictions_total", "counter",
             "Eviction rounds (successful or not)", m.successful_evictions + m.failed_evictions);
    metric_u(&b, "master_attempted_evictions_failed_total", "counter",
             "Eviction rounds that found nothing evictable", m.failed_evictions);
    metric_u(&b, "master_evicted_key_count", "counter", "Objects evicted", m.evicted_objects);
    metric_u(&b, "master_evicted_size_bytes", "counter", "Bytes evicted", m.evicted_bytes);
    /* puts */
    metric_u(&b, "master_put_start_alloc_failures_total", "counter",
             "PutStarts that found no space (NO_AVAILABLE_HANDLE)", m.put_start_alloc_failures);
    metric_u(&b, "master_put_start_partial_allocations_total", "counter",
             "PutStarts placed with fewer replicas than requested (not enough segments)",
             m.put_start_partial_allocations);
    metric_u(&b, "master_put_start_discard_cnt", "counter", "Stuck puts pre-empted",
             m.put_start_discards);
    metric_u(&b, "master_put_start_release_cnt", "counter", "Stuck put spaces released",
             m.put_start_releases);
    metric_u(&b, "master_put_pool_hits_total", "counter",
             "Replicas placed in put pool blocks (HA leader, --ha_commit=standbys)",
             m.put_pool_hits);
    metric_u(&b, "master_put_pool_bytes", "gauge",
             "Bytes held in put pools (allocated, counted in master_allocated_bytes)",
             m.put_pool_bytes);
    /* durability, events */
    metric_u(&b, "master_wal_records_total", "counter", "WAL records appended", m.wal_records);
    metric_u(&b, "master_wal_syncs_total", "counter", "WAL group commits", m.wal_syncs);
    metric_u(&b, "master_wal_snapshots_total", "counter", "WAL snapshots written", m.snapshots);
    metric_u(&b, "master_object_events_total", "counter",
             "Object events appended to the event log (= last event seq)", m.events);
    rpc_server_metrics(&b, s->srv);
    /* per RPC */
    for (uint16_t op = 0; op < MC_OP_MAX; op++) {
        const mc_rpc_op_info_t *info = mc_rpc_op_info(op);
        if (!info)
            continue;
        char name[128];
        snprintf(name, sizeof(name), "master_%s_requests_total", info->name);
        metric_u(&b, name, "counter", "Requests received", load(&s->req[op]));
        snprintf(name, sizeof(name), "master_%s_failures_total", info->name);
        metric_u(&b, name, "counter",
                 s->batch_op[op] ? "Requests that failed as a whole or for every item"
                                 : "Requests answered with an error",
                 load(&s->fail[op]));
        if (!s->batch_op[op])
            continue;
        snprintf(name, sizeof(name), "master_%s_partial_successes_total", info->name);
        metric_u(&b, name, "counter", "Requests in which some but not all items failed",
                 load(&s->partial[op]));
        snprintf(name, sizeof(name), "master_%s_items_total", info->name);
        metric_u(&b, name, "counter", "Items (keys) in the requests", load(&s->items[op]));
        snprintf(name, sizeof(name), "master_%s_failed_items_total", info->name);
        metric_u(&b, name, "counter", "Items (keys) that failed", load(&s->failed_items[op]));
    }
    if (b.st != MC_OK) { /* no partial page: the handler answers 500 */
        mc_buf_free(&b.b);
        return NULL;
    }
    return mc_buf_take_str(&b.b);
}

/* Upstream's /metrics/summary, one line: role, state, service_ready, master={...}, ha={}.
 * Request figures are per-second rates since the previous summary (0.00 on the first one);
 * tiers and subsystems we do not have (SSD/NVMe-oF, promotion, HA) are left out. */
static char *render_summary(mc_master_service_t *s)
{
    static const struct { const char *label; uint16_t op; } single[] = {
        {"PutStart", MC_OP_PUT_START}, {"PutEnd", MC_OP_PUT_END},
        {"PutRevoke", MC_OP_PUT_REVOKE}, {"Get", MC_OP_GET_REPLICA_LIST},
        {"Exist", MC_OP_EXIST_KEY}, {"Del", MC_OP_REMOVE}, {"DelAll", MC_OP_REMOVE_ALL},
        {"Ping", MC_OP_PING},
    };
    static const struct { const char *label; uint16_t op; } batch[] = {
        {"PutStart", MC_OP_BATCH_PUT_START}, {"PutEnd", MC_OP_BATCH_PUT_END},
        {"PutRevoke", MC_OP_BATCH_PUT_REVOKE}, {"Get", MC_OP_BATCH_GET_REPLICA_LIST},
        {"ExistKey", MC_OP_BATCH_EXIST_KEY},
    };
    mc_master_metrics_t m;
    mc_master_metrics_snapshot(s->m, &m);
    bool ready = atomic_load(&s->serving);
    mc_prom_t b = {0};
    MC_PROM_PRINTF(&b, "role=%s, state=%s, service_ready=%s, master={Mem Storage: ",
                   ready ? "leader" : "standby", ready ? "serving" : "starting",
                   ready ? "true" : "false");
    mc_prom_bytes(&b, m.allocated_bytes);
    MC_PROM_PRINTF(&b, " / ");
    mc_prom_bytes(&b, m.total_capacity_bytes);
    if (m.total_capacity_bytes)
        MC_PROM_PRINTF(&b, " (%.1f%%)",
                       (double)m.allocated_bytes / (double)m.total_capacity_bytes * 100.0);
    MC_PROM_PRINTF(&b, " | Keys: %llu (soft-pinned: %llu) | Clients: %llu",
                   (unsigned long long)m.key_count, (unsigned long long)m.soft_pin_key_count,
                   (unsigned long long)m.active_clients);

    pthread_mutex_lock(&s->summary_mu);
    uint64_t now = mc_now_ms();
    double secs = s->sum_prev_ms ? (double)(now - s->sum_prev_ms) / 1000.0 : 0;
#define RATE(cur, prev) (secs > 0 && (cur) > (prev) ? (double)((cur) - (prev)) / secs : 0.0)
    MC_PROM_PRINTF(&b, " | Requests (Success/Total per sec): ");
    for (size_t i = 0; i < sizeof(single) / sizeof(single[0]); i++) {
        uint16_t op = single[i].op;
        uint64_t r = load(&s->req[op]), f = load(&s->fail[op]);
        MC_PROM_PRINTF(&b, "%s%s=%.2f/%.2f", i ? ", " : "", single[i].label,
                       RATE(r - f, s->sum_req[op] - s->sum_fail[op]), RATE(r, s->sum_req[op]));
    }
    MC_PROM_PRINTF(&b, " | Batch Requests (per sec, Req=Success/PartialSuccess/Total, "
                       "Item=Success/Total): ");
    for (size_t i = 0; i < sizeof(batch) / sizeof(batch[0]); i++) {
        uint16_t op = batch[i].op;
        uint64_t r = load(&s->req[op]), f = load(&s->fail[op]), p = load(&s->partial[op]);
        uint64_t it = load(&s->items[op]), fi = load(&s->failed_items[op]);
        MC_PROM_PRINTF(&b, "%s%s:(Req=%.2f/%.2f/%.2f, Item=%.2f/%.2f)", i ? ", " : "",
                       batch[i].label,
                       RATE(r - f - p, s->sum_req[op] - s->sum_fail[op] - s->sum_partial[op]),
                       RATE(p, s->sum_partial[op]), RATE(r, s->sum_req[op]),
                       RATE(it - fi, s->sum_items[op] - s->sum_failed_items[op]),
                       RATE(it, s->sum_items[op]));
    }
#undef RATE
    MC_PROM_PRINTF(&b,
                   " | Eviction: Success/Attempts=%llu/%llu, AllocFail=%llu, PartialAlloc=%llu, "
                   "keys=%llu, size=",
                   (unsigned long long)m.successful_evictions,
                   (unsigned long long)(m.successful_evictions + m.failed_evictions),
                   (unsigned long long)(m.put_start_alloc_failures - s->sum_alloc_fail),
                   (unsigned long long)(m.put_start_partial_allocations - s->sum_partial_alloc),
                   (unsigned long long)m.evicted_objects);
    mc_prom_bytes(&b, m.evicted_bytes);
    MC_PROM_PRINTF(&b, " | Discard: Released/Total=%llu/%llu}, ha={}",
                   (unsigned long long)m.put_start_releases,
                   (unsigned long long)m.put_start_discards);
    s->sum_prev_ms = now;
    for (int op = 0; op < MC_OP_MAX; op++) {
        s->sum_req[op] = load(&s->req[op]);
        s->sum_fail[op] = load(&s->fail[op]);
        s->sum_partial[op] = load(&s->partial[op]);
        s->sum_items[op] = load(&s->items[op]);
        s->sum_failed_items[op] = load(&s->failed_items[op]);
    }
    s->sum_alloc_fail = m.put_start_alloc_failures;
    s->sum_partial_alloc = m.put_start_partial_allocations;
    pthread_mutex_unlock(&s->summary_mu);
    if (b.st != MC_OK) {
        mc_buf_free(&b.b);
        return NULL;
    }
    return mc_buf_take_str(&b.b);
}

/* ---------------------------------------------------------------- HTTP handler (MHD threads) */

static const char *const JSON = "application/json; charset=utf-8";
static const char *const TEXT = "text/plain; charset=utf-8";

static enum MHD_Result reply_h(struct MHD_Connection *c, unsigned code, const char *type,
                               char *body, int owned, const char *hname, const char *hval)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        if (owned)
            mc_free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    if (hname)
        MHD_add_response_header(r, hname, hval);
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *type, char *body,
                             int owned)
{
    return reply_h(c, code, type, body, owned, NULL, NULL);
}

/* Upstream's simple error body {"success":false,"error":"..."}; msg is a constant. */
static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned code, const char *msg)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "{\"success\":false,\"error\":\"%s\"}", msg);
    char *body = mc_strdup(buf);
    return body ? reply(c, code, JSON, body, 1) : MHD_NO;
}

/* Upstream's error body for a failed lookup: {"success":false,"error_code":N,"error_message":..} */
static enum MHD_Result reply_status(struct MHD_Connection *c, unsigned code, mc_status_t st)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "{\"success\":false,\"error_code\":%d,\"error_message\":\"%s\"}",
             (int)st, mc_status_name(st));
    char *body = mc_strdup(buf);
    return body ? reply(c, code, JSON, body, 1) : MHD_NO;
}

/* Splits q->arg (the keys=k1,k2,... value) in place into q->keys/klens. NULL, or the 400
 * message. */
static const char *split_keys(query_t *q)
{
    size_t n = 1;
    for (const char *p = q->arg; *p; p++)
        n += *p == ',';
    if (n > HTTP_BATCH_MAX)
        return "too many keys (at most 1024 per request)";
    q->keys = mc_calloc(n, sizeof(*q->keys));
    q->klens = mc_calloc(n, sizeof(*q->klens));
    if (!q->keys || !q->klens)
        return "no memory";
    char *k = q->arg;
    for (size_t i = 0; i < n; i++) {
        char *comma = strchr(k, ',');
        if (comma)
            *comma = '\0';
        size_t len = strlen(k);
        if (len == 0)
            return "empty key in keys= (use ?keys=key1,key2,...)";
        if (len > HTTP_KEY_MAX)
            return "key longer than 4096 bytes";
        if (!utf8_valid((const unsigned char *)k, len))
            return "key is not valid UTF-8";
        q->keys[i] = k;
        q->klens[i] = len;
        k = comma ? comma + 1 : k + len;
    }
    q->n = n;
    return NULL;
}

/* PUT /api/v1/tenant_quotas' body, {"requested_quota_bytes":N} (N 1..2^63-1, no other
 * field): NULL, or the 400 message. */
static const char *quota_body(const char *body, size_t len, uint64_t *quota_p)
{
    json_error_t e;
    json_t *j = len ? json_loadb(body, len, 0, &e) : NULL;
    json_t *v = json_is_object(j) ? json_object_get(j, "requested_quota_bytes") : NULL;
    const char *bad = NULL;
    if (!v || json_object_size(j) != 1)
        bad = "body must be {\"requested_quota_bytes\":N}";
    else if (!json_is_integer(v) || json_integer_value(v) < 1)
        bad = "requested_quota_bytes must be an integer from 1 to 2^63-1";
    else
        *quota_p = (uint64_t)json_integer_value(v);
    json_decref(j);
    return bad;
}

/* The ?tenant_id= of a tenant quota request into q->tenant (required unless GET): NULL, or the
 * 400 message. */
static const char *tenant_param(struct MHD_Connection *c, query_t *q)
{
    const char *t = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "tenant_id");
    if (!t || !*t)
        return q->kind == Q_TENANTS ? NULL : "No tenant_id provided. Use ?tenant_id=<tenant>";
    if (mc_tenant_invalid(t))
        return "invalid tenant_id (1..64 bytes, not starting with '_', no control characters)";
    snprintf(q->tenant, sizeof(q->tenant), "%s", t);
    return NULL;
}

/* body: the request body (PUT), len bytes. */
static enum MHD_Result http_query(mc_master_service_t *s, struct MHD_Connection *c, qkind_t kind,
                                  const char *body, size_t body_len)
{
    if (!atomic_load(&s->serving))
        return reply_error(c, 503, "service plane is not active");
    query_t *q = MC_NEW(query_t);
    if (!q)
        return reply(c, 500, TEXT, "no memory\n", 0);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    q->kind = kind;
    const char *bad = NULL;
    if (kind == Q_KEY || kind == Q_BATCH || kind == Q_ALL_KEYS) {
        /* the tenant whose keys are asked about (common/tenant.h); absent or "" = "default" */
        const char *t = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "tenant_id");
        if (mc_tenant_invalid(t))
            bad = "invalid tenant_id (1..64 bytes, not starting with '_', no control "
                  "characters)";
        else
            mc_tenant_scope_init(&q->scope, t);
    }
    if (kind == Q_TENANTS || kind == Q_TENANT_PUT || kind == Q_TENANT_DELETE)
        bad = tenant_param(c, q);
    if (!bad && kind == Q_TENANT_PUT)
        bad = quota_body(body, body_len, &q->quota);
    if (!bad && kind == Q_EVENTS) {
        const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "from");
        char *end = NULL;
        q->from = v && *v ? strtoull(v, &end, 10) : 0;
        if (v && *v && (*end || v[0] == '-'))
            bad = "invalid from (a decimal event sequence number)";
    }
    if (!bad && (kind == Q_KEY || kind == Q_SEGMENT || kind == Q_BATCH)) {
        const char *pname = kind == Q_KEY ? "key" : kind == Q_SEGMENT ? "segment" : "keys";
        const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, pname);
        size_t len = v ? strlen(v) : 0;
        if (len == 0)
            bad = kind == Q_KEY       ? "No key provided. Use ?key=<key>"
                  : kind == Q_SEGMENT ? "No segment provided. Use ?segment=<name>"
                                      : "No keys provided. Use ?keys=key1,key2,...";
        else if (kind == Q_KEY && len > HTTP_KEY_MAX)
            bad = "key longer than 4096 bytes";
        else if (kind == Q_SEGMENT && len >= MC_MASTER_NAME_MAX)
            bad = "segment name longer than 255 bytes";
        else if (!(q->arg = mc_strdup(v)))
            bad = "no memory";
        else if (kind == Q_BATCH)
            bad = split_keys(q);
    }
    if (bad) {
        query_free(q);
        return reply_error(c, strcmp(bad, "no memory") ? 400 : 500, bad);
    }
    if (!run_query(s, q)) /* q is the loop's now */
        return reply_error(c, 503, "master loop busy");
    char *r = q->result;
    mc_status_t st = q->st;
    size_t listed = q->listed;
    bool truncated = q->truncated;
    query_free(q);
    if (!r) {
        unsigned code = st == MC_ERR_OBJECT_NOT_FOUND || st == MC_ERR_REPLICA_IS_NOT_READY ||
                                st == MC_ERR_SEGMENT_NOT_FOUND || st == MC_ERR_TENANT_NOT_REGISTERED
                            ? 404
                        : st == MC_ERR_INVALID_KEY || st == MC_ERR_INVALID_PARAMS ||
                                st == MC_ERR_TOO_LARGE
                            ? 400
                        : st == MC_ERR_UNAVAILABLE_IN_CURRENT_MODE || st == MC_ERR_TENANT_NOT_EMPTY
                            ? 409
                            : 500;
        return reply_status(c, code, st);
    }
    switch (kind) {
    case Q_KEY:
    case Q_BATCH:
    case Q_TENANTS:
    case Q_TENANT_PUT:
    case Q_TENANT_DELETE:
    case Q_EVENTS:
    case Q_SEGMENTS_DETAIL: return reply(c, 200, JSON, r, 1);
    case Q_ALL_KEYS:
        if (truncated) {
            char n[32];
            snprintf(n, sizeof(n), "%zu", listed);
            MC_LOG_WARN("master: /get_all_keys truncated at %zu keys (16 MiB)", listed);
            return reply_h(c, 200, TEXT, r, 1, "X-Mooncake-Truncated-After", n);
        }
        return reply(c, 200, TEXT, r, 1);
    default: return reply(c, 200, TEXT, r, 1);
    }
}

static enum MHD_Result http_health(mc_master_service_t *s, struct MHD_Connection *c)
{
    bool ready = atomic_load(&s->serving);
    char buf[160];
    snprintf(buf, sizeof(buf),
             "{\"status\":\"ok\",\"role\":\"%s\",\"ha_state\":\"%s\",\"service_ready\":%s}",
             ready ? "leader" : "standby", ready ? "serving" : "starting",
             ready ? "true" : "false");
    char *body = mc_strdup(buf);
    return body ? reply(c, 200, JSON, body, 1) : MHD_NO;
}

#define HTTP_BODY_MAX 4096u /* request bodies (PUT /api/v1/tenant_quotas): larger ones get 413 */

/* One request's state, the request's *con_cls (freed in http_completed). */
typedef struct http_req {
    char *target;              /* as received, for the signature check; NULL over the cap */
    bool started;              /* the handler saw the headers */
    bool too_large;            /* the body ran over HTTP_BODY_MAX */
    size_t body_len;
    char body[HTTP_BODY_MAX];
} http_req_t;

/* libmicrohttpd calls this before the handler; the return value becomes *con_cls. NULL when
 * out of memory (the handler then answers 500). */
static void *http_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)cls;
    (void)c;
    http_req_t *rq = MC_NEW(http_req_t);
    if (rq && strlen(uri) <= MC_HTTP_AUTH_TARGET_MAX && !(rq->target = mc_strdup(uri))) {
        mc_free(rq);
        return NULL;
    }
    return rq;
}

static void http_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                           enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    http_req_t *rq = *con_cls;
    if (rq)
        mc_free(rq->target);
    mc_free(rq);
    *con_cls = NULL;
}

/* Does this request need credentials? All do when the service has a keyring, except the
 * metrics pages and /health with metrics_public, and /console/login (its one-time code is
 * the credential). */
static bool http_needs_auth(const mc_master_service_t *s, const char *url)
{
    if (!mc_http_auth_server_enabled(s->http_auth) || !strcmp(url, "/console/login"))
        return false;
    return !(s->o.metrics_public &&
             (!strcmp(url, "/metrics") || !strcmp(url, "/metrics/summary") ||
              !strcmp(url, "/health")));
}

/* Checks the credentials of a request, signed over its body (body_len bytes; none but PUT's).
 * true = go on; false = the refusal (401 with a challenge, 403, or 503) is queued in *ret. */
static bool http_authorized(mc_master_service_t *s, struct MHD_Connection *c, const char *method,
                            const char *target, const char *body, size_t body_len,
                            enum MHD_Result *ret)
{
    uint8_t bh[MC_HTTP_AUTH_BODY_HASH_SIZE];
    mc_http_auth_body_hash(body, body_len, bh);
    mc_auth_peer_t peer = {0}; /* stays "no tenant" when the port is open */
    if (!mc_mhd_authorized(s->http_auth, c, method, target, bh, true, ret, NULL, &peer))
        return false;
    if (peer.tenant[0]) {
        /* the admin port sees every tenant (?tenant_id=, segments): cluster tokens only */
        *ret = reply_error(c, 403, "a tenant token may not use the admin port (cluster token "
                                   "needed)");
        return false;
    }
    return true;
}

/* The console's pages (GET, authorized already): events here, the rest in console.c. */
static enum MHD_Result http_console(mc_master_service_t *s, struct MHD_Connection *c,
                                    const char *url)
{
    if (!strcmp(url, "/console/events"))
        return http_query(s, c, Q_EVENTS, NULL, 0);
    return mc_console_http(s->console, c, url, mc_http_auth_server_enabled(s->http_auth));
}

static enum MHD_Result http_handler(void *cls, struct MHD_Connection *c, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_size, void **con_cls)
{
    (void)version;
    mc_master_service_t *s = cls;
    http_req_t *rq = *con_cls;
    if (!rq)
        return reply(c, 500, TEXT, "no memory\n", 0);
    enum MHD_Result ret;
    bool tq = strcmp(url, "/api/v1/tenant_quotas") == 0;
    if (!strcmp(method, "PUT")) { /* the body comes in pieces after the headers */
        if (!rq->started) {
            rq->started = true;
            /* unsigned: refused (401) before its body is read */
            if (http_needs_auth(s, url) &&
                !MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization") &&
                !http_authorized(s, c, method, rq->target, NULL, 0, &ret))
                return ret;
            return MHD_YES;
        }
        if (*upload_size) {
            size_t n = *upload_size;
            if (rq->body_len + n > sizeof(rq->body))
                rq->too_large = true;
            else
                memcpy(rq->body + rq->body_len, upload_data, n);
            rq->body_len += rq->too_large ? 0 : n;
            *upload_size = 0;
            return MHD_YES;
        }
        if (rq->too_large)
            return reply_error(c, 413, "body over 4096 bytes");
    }
    /* a console session (cookie) may read (GET), not mint further login links */
    bool by_cookie = !strcmp(method, "GET") && strcmp(url, "/console/login_link") != 0 &&
                     mc_console_session_ok(s->console, c);
    if (http_needs_auth(s, url) && !by_cookie &&
        !http_authorized(s, c, method, rq->target, rq->body, rq->body_len, &ret))
        return ret;
    if (tq && (!strcmp(method, "GET") || !strcmp(method, "PUT") || !strcmp(method, "DELETE")))
        return http_query(s, c, method[0] == 'G' ? Q_TENANTS : method[0] == 'P' ? Q_TENANT_PUT
                                                                                : Q_TENANT_DELETE,
                          rq->body, rq->body_len);
    if (strcmp(method, "GET") != 0)
        return reply_error(c, 405, tq ? "method not allowed (GET, PUT, DELETE)"
                                      : "method not allowed (GET only)");
    if (!strncmp(url, "/console", 8))
        return http_console(s, c, url);
    if (strcmp(url, "/metrics") == 0) {
        char *t = render_metrics(s);
        return t ? reply(c, 200, "text/plain; version=0.0.4", t, 1)
                 : reply(c, 500, TEXT, "no memory\n", 0);
    }
    if (strcmp(url, "/metrics/summary") == 0) {
        char *t = render_summary(s);
        return t ? reply(c, 200, "text/plain; version=0.0.4", t, 1)
                 : reply(c, 500, TEXT, "no memory\n", 0);
    }
    bool ready = atomic_load(&s->serving);
    if (strcmp(url, "/health") == 0)
        return http_health(s, c);
    if (strcmp(url, "/role") == 0)
        return reply(c, 200, TEXT, ready ? "leader" : "standby", 0);
    if (strcmp(url, "/ha_status") == 0)
        return reply(c, 200, TEXT, ready ? "serving" : "starting", 0);
    if (strcmp(url, "/leader") == 0 && s->o.ha_leader_json) {
        char *j = s->o.ha_leader_json(s->o.ha_ctx);
        return j ? reply(c, 200, JSON, j, 1) : reply(c, 500, TEXT, "no memory\n", 0);
    }
    if (strcmp(url, "/leader") == 0) /* no HA: there is no elected leader to name */
        return reply(c, 200, JSON, "{\"present\":false}", 0);
    static const struct { const char *path; qkind_t kind; } queries[] = {
        {"/query_key", Q_KEY},
        {"/batch_query_keys", Q_BATCH},
        {"/get_all_keys", Q_ALL_KEYS},
        {"/get_all_segments", Q_SEGMENTS},
        {"/get_segments_detail", Q_SEGMENTS_DETAIL},
        {"/query_segment", Q_SEGMENT},
    };
    for (size_t i = 0; i < sizeof(queries) / sizeof(queries[0]); i++)
        if (strcmp(url, queries[i].path) == 0)
            return http_query(s, c, queries[i].kind, NULL, 0);
    return reply_error(c, 404, "no such endpoint");
}

/* ---------------------------------------------------------------- lifecycle */

/* The admin HTTP server, accepting on the listening socket fd (>= 0: the daemon owns it once
 * started), else bound to port (on *sin's address, NULL = every interface). */
static struct MHD_Daemon *http_daemon(mc_master_service_t *s, uint16_t port, int fd,
                                      const struct sockaddr_in *sin)
{
    struct MHD_OptionItem where[2] = {{MHD_OPTION_END, 0, NULL}, {MHD_OPTION_END, 0, NULL}};
    if (fd >= 0)
        where[0] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, fd, NULL};
    else if (sin)
        where[0] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, (void *)sin};
    return MHD_start_daemon(
        MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, fd >= 0 ? 0 : port,
        NULL, NULL, http_handler, s, MHD_OPTION_CONNECTION_LIMIT, HTTP_CONNS,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, HTTP_CONNS_PER_IP, MHD_OPTION_CONNECTION_TIMEOUT,
        HTTP_IDLE_S, MHD_OPTION_URI_LOG_CALLBACK, http_uri, NULL, MHD_OPTION_NOTIFY_COMPLETED,
        http_completed, NULL, MHD_OPTION_ARRAY, where, MHD_OPTION_END);
}

/* The admin HTTP server on the listening socket lent by metrics_take (never closed here): on
 * a duplicate, which the daemon owns once started. libmicrohttpd closes the socket it was
 * given on some failures of its start and not on others, so after a failure the duplicate is
 * closed here if it is still open (still the lent socket: the lent fd keeps that socket, so
 * no other file can have its identity). NULL when it cannot. */
static struct MHD_Daemon *http_on_socket(mc_master_service_t *s, int lent)
{
    struct stat st, now;
    int fd = fstat(lent, &st) == 0 ? fcntl(lent, F_DUPFD_CLOEXEC, 0) : -1;
    if (fd < 0)
        return NULL;
    struct MHD_Daemon *d = http_daemon(s, 0, fd, NULL);
    if (!d && fstat(fd, &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino)
        close(fd);
    return d;
}

/* Loads the stored tenant quota policy into the master (before the loop runs). */
static mc_status_t tenant_policy_apply(mc_master_t *m, mc_tenant_store_t *store)
{
    mc_tenant_policy_t pol;
    char err[320] = "";
    const char *where = mc_tenant_store_where(store);
    mc_status_t st = mc_tenant_store_load(store, &pol, err, sizeof(err));
    for (size_t i = 0; st == MC_OK && i < pol.n; i++)
        st = mc_master_tenant_set_quota(m, pol.t[i].name, pol.t[i].quota);
    if (st != MC_OK)
        MC_LOG_ERROR("master: tenant quota policy %s: %s", where, err[0] ? err : mc_status_str(st));
    else
        MC_LOG_INFO("master: tenant quota policy %s: %zu tenants", where, pol.n);
    mc_tenant_policy_free(&pol);
    return st;
}

/* A policy another writer stored (loop thread): its quotas are set, and tenants it no longer
 * lists lose theirs (a tenant still holding objects keeps its quota: logged). */
static void tenant_policy_replace(mc_master_t *m, const mc_tenant_policy_t *pol,
                                  const char *where)
{
    mc_master_tenant_info_t *list = NULL;
    size_t n = 0;
    if (mc_master_tenant_list(m, &list, &n) == MC_OK) {
        for (size_t i = 0; i < n; i++) {
            bool kept = false;
            for (size_t j = 0; j < pol->n && !kept; j++)
                kept = !strcmp(list[i].name, pol->t[j].name);
            mc_status_t st = kept || !list[i].quota ? MC_OK
                                                    : mc_master_tenant_clear_quota(m, list[i].name);
            if (st != MC_OK)
                MC_LOG_WARN("master: tenant '%s' left the policy but keeps its quota: %s",
                            list[i].name, mc_status_str(st));
        }
        mc_free(list);
    }
    for (size_t j = 0; j < pol->n; j++)
        if (mc_master_tenant_set_quota(m, pol->t[j].name, pol->t[j].quota) != MC_OK)
            MC_LOG_WARN("master: tenant '%s': quota from %s refused", pol->t[j].name, where);
    MC_LOG_INFO("master: tenant quota policy changed in %s: %zu tenants", where, pol->n);
}

mc_status_t mc_master_service_create(const mc_master_service_opts_t *opts,
                                     mc_master_service_t **svc_p)
{
    *svc_p = NULL;
    mc_master_service_t *s = MC_NEW(mc_master_service_t);
    if (!s) {
        mc_master_destroy(opts->core);
        return MC_ERR_NO_MEMORY;
    }
    s->o = *opts;
    s->o.core = NULL;
    s->o.rpc_bound_fd = NULL; /* read once, below */
    mc_status_t st = MC_OK;
    if (opts->core)
        s->m = opts->core;
    else
        st = mc_master_create(&opts->cfg, &s->m);
    if (st == MC_OK && opts->ha_before_reply)
        mc_master_ha_log_enable(s->m);
    if (st != MC_OK) {
        mc_free(s);
        return st;
    }
    if (opts->cfg.multi_tenants && opts->tenant_store &&
        (st = tenant_policy_apply(s->m, opts->tenant_store)) != MC_OK) {
        mc_master_destroy(s->m);
        mc_free(s);
        return st;
    }
    pthread_mutex_init(&s->summary_mu, NULL);
    for (uint16_t op = 0; op < MC_OP_MAX; op++) {
        const mc_rpc_op_info_t *info = mc_rpc_op_info(op);
        s->batch_op[op] = info && strncmp(info->name, "batch_", 6) == 0;
    }
    mc_master_rpc_handlers(s->table);
    mc_rpc_server_opts_t so = {0};
    so.host = opts->rpc_address ? opts->rpc_address : "0.0.0.0";
    so.port = opts->port;
    so.bound_fd = opts->rpc_bound_fd;
    so.ctx = s;
    for (int i = 0; i < MC_OP_MAX; i++)
        so.handlers[i] = s->table[i] ? svc_dispatch : NULL;
    if (opts->ha_fetch)
        so.handlers[MC_OP_HA_FETCH] = svc_dispatch;
    so.cron_period_ms = opts->cron_period_ms ? opts->cron_period_ms : 10;
    so.busy_poll_us = opts->rpc_busy_poll_us;
    so.cron = svc_cron;
    so.before_reply = svc_before_reply;
    so.on_request = svc_on_request;
    so.auth = opts->auth;
    so.limits = opts->rpc_limits;
    so.view = opts->cfg.ha_view_version; /* every answer carries it (ha.md, "Fencing") */
    mc_auth_warn_if_open("master RPC", so.host, opts->auth);
    st = mc_rpc_server_create(&so, &s->srv);
    if (st != MC_OK) {
        mc_master_destroy(s->m);
        pthread_mutex_destroy(&s->summary_mu);
        mc_free(s);
        return st;
    }
    if (opts->metrics_port >= 0) {
        if (mc_http_auth_server_create(opts->auth, &s->http_auth) != MC_OK ||
            !(s->console = mc_console_create())) {
            mc_http_auth_server_free(s->http_auth);
            mc_rpc_server_destroy(s->srv);
            mc_master_destroy(s->m);
            pthread_mutex_destroy(&s->summary_mu);
            mc_free(s);
            return MC_ERR_NO_MEMORY;
        }
        struct sockaddr_in sin;
        memset(&sin, 0, sizeof(sin));
        sin.sin_family = AF_INET;
        sin.sin_port = htons((uint16_t)opts->metrics_port);
        bool bind_addr = opts->metrics_address && opts->metrics_address[0] &&
                         inet_pton(AF_INET, opts->metrics_address, &sin.sin_addr) == 1;
        if (opts->metrics_address && opts->metrics_address[0] && !bind_addr)
            MC_LOG_WARN("master: metrics address '%s' is not IPv4; binding all interfaces",
                        opts->metrics_address);
        /* HA promotion: the standby's server lends the port's socket (service.h) */
        int lent = opts->metrics_take ? opts->metrics_take(opts->metrics_handover_ctx) : -1;
        if (lent >= 0) {
            s->httpd = http_on_socket(s, lent);
            if (!s->httpd)
                MC_LOG_WARN("master: cannot serve the admin port's socket handed over by the "
                            "standby's HTTP server; the standby's server stops and port %d is "
                            "bound again (a request in between is refused)",
                            opts->metrics_port);
            opts->metrics_handed(opts->metrics_handover_ctx, s->httpd != NULL);
        }
        if (!s->httpd)
            s->httpd = http_daemon(s, (uint16_t)opts->metrics_port, -1,
                                   bind_addr ? &sin : NULL);
        if (!s->httpd) {
            MC_LOG_ERROR("master: cannot start the metrics HTTP server on port %d",
                         opts->metrics_port);
            mc_http_auth_server_free(s->http_auth);
            mc_console_free(s->console);
            mc_rpc_server_destroy(s->srv);
            mc_master_destroy(s->m);
            pthread_mutex_destroy(&s->summary_mu);
            mc_free(s);
            return MC_ERR_IO;
        }
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->httpd, MHD_DAEMON_INFO_BIND_PORT);
        s->metrics_port = di ? di->port : (uint16_t)opts->metrics_port;
        mc_auth_warn_if_open("master admin/metrics HTTP",
                             bind_addr ? opts->metrics_address : "0.0.0.0", opts->auth);
        if (opts->auth)
            MC_LOG_INFO("master: HTTP requests must be signed%s",
                        opts->metrics_public ? " (except /metrics, /metrics/summary, /health)"
                                             : "");
    }
    mc_master_cron(s->m); /* publish a first metrics snapshot */
    *svc_p = s;
    return MC_OK;
}

mc_status_t mc_master_service_run(mc_master_service_t *s)
{
    atomic_store(&s->serving, true);
    mc_status_t st = mc_rpc_server_run(s->srv);
    atomic_store(&s->serving, false);
    return st;
}

void mc_master_service_stop(mc_master_service_t *s) { mc_rpc_server_stop(s->srv); }

void mc_master_service_destroy(mc_master_service_t *s)
{
    if (!s)
        return;
    if (s->httpd)
        MHD_stop_daemon(s->httpd);
    mc_http_auth_server_free(s->http_auth);
    mc_console_free(s->console);
    mc_rpc_server_destroy(s->srv);
    mc_master_destroy(s->m);
    pthread_mutex_destroy(&s->summary_mu);
    mc_free(s);
}

uint16_t mc_master_service_port(const mc_master_service_t *s) { return mc_rpc_server_port(s->srv); }
uint16_t mc_master_service_metrics_port(const mc_master_service_t *s) { return s->metrics_port; }
void mc_master_service_rpc_stats(const mc_master_service_t *s, mc_rpc_server_stats_t *out)
{
    mc_rpc_server_stats(s->srv, out);
}

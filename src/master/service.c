/* The mooncake_master service (contract in service.h): the master core served by an RPC server
 * loop, plus an HTTP server (libmicrohttpd, its own threads) for /metrics, /health, /role,
 * /query_key and /get_all_segments. The loop thread owns the core: RPC handlers and the cron
 * run there, and the WAL is synced before each round of replies. HTTP threads never touch the
 * core: /metrics renders the snapshot the cron publishes, and queries are posted to the loop
 * and waited for (5 s at most; a stuck loop answers 503). */
#include "master/service.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/time.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

struct mc_master_service {
    mc_master_service_opts_t o;
    mc_master_t *m;
    mc_rpc_server_t *srv;
    mc_rpc_handler_fn table[MC_OP_MAX];
    struct MHD_Daemon *httpd;
    uint16_t metrics_port;
    _Atomic uint64_t req[MC_OP_MAX], fail[MC_OP_MAX];
};

/* ---------------------------------------------------------------- RPC side (loop thread) */

static int32_t resp_status(const ProtobufCMessage *resp)
{
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(resp->descriptor, 1);
    if (!f || f->type != PROTOBUF_C_TYPE_SINT32)
        return 0;
    return *(const int32_t *)((const char *)resp + f->offset);
}

static mc_status_t svc_dispatch(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                ProtobufCMessage **resp_p)
{
    mc_master_service_t *s = ctx;
    mc_status_t st = s->table[call->opcode](s->m, call, req, resp_p);
    atomic_fetch_add_explicit(&s->req[call->opcode], 1, memory_order_relaxed);
    if (st == MC_RPC_DEFERRED) /* a parked long poll; answered (successfully) later */
        return st;
    int32_t body = st == MC_OK && *resp_p ? resp_status(*resp_p) : st;
    /* Existence checks answering "not found" are answers, not failures. */
    bool failed = body != MC_OK && !(body == MC_ERR_OBJECT_NOT_FOUND &&
                                     (call->opcode == MC_OP_EXIST_KEY));
    if (failed)
        atomic_fetch_add_explicit(&s->fail[call->opcode], 1, memory_order_relaxed);
    return st;
}

static void svc_on_request(void *ctx, uint16_t opcode, int failed)
{
    mc_master_service_t *s = ctx;
    if (opcode < MC_OP_MAX && failed) {
        atomic_fetch_add_explicit(&s->req[opcode], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->fail[opcode], 1, memory_order_relaxed);
    }
}

static void svc_cron(void *ctx)
{
    mc_master_t *m = ((mc_master_service_t *)ctx)->m;
    mc_master_cron(m);
    mc_master_wal_sync(m); /* evictions / unmounts done by the cron (no-op when clean) */
}
static void svc_before_reply(void *ctx) { mc_master_wal_sync(((mc_master_service_t *)ctx)->m); }

/* ---------------------------------------------------------------- HTTP side (MHD threads) */

typedef struct query {
    mc_master_service_t *s;
    const char *key; /* NULL = segments */
    char *result;
    int done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} query_t;

static void query_on_loop(void *arg)
{
    query_t *q = arg;
    char *r = q->key ? mc_master_query_key_json(q->s->m, q->key, strlen(q->key))
                     : mc_master_segments_json(q->s->m);
    pthread_mutex_lock(&q->mu);
    q->result = r;
    q->done = 1;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

/* Runs a read-only query on the loop thread and waits (bounded) for it. */
static char *run_query(mc_master_service_t *s, const char *key, int *timed_out_p)
{
    query_t *q = MC_NEW(query_t);
    *timed_out_p = 0;
    if (!q)
        return NULL;
    q->s = s;
    q->key = key ? mc_strdup(key) : NULL;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    if (mc_rpc_server_post(s->srv, query_on_loop, q) != MC_OK) {
        mc_free((void *)q->key);
        mc_free(q);
        return NULL;
    }
    uint64_t deadline = mc_now_ms() + 5000;
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
    char *r = q->result;
    pthread_mutex_unlock(&q->mu);
    if (!done) {
        /* The loop still owns q; it will be leaked rather than freed under it. Only happens
         * when the loop is stopped or wedged. */
        *timed_out_p = 1;
        return NULL;
    }
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    mc_free((void *)q->key);
    mc_free(q);
    return r;
}

/* The metrics page being rendered; the first failed append sticks in st. */
typedef struct page {
    mc_buf_t b;
    mc_status_t st;
} page_t;

static void metric(page_t *b, const char *name, const char *type, const char *help, double v)
{
    if (b->st == MC_OK)
        b->st = mc_buf_printf(&b->b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name,
                              type, name, v);
}

static char *render_metrics(mc_master_service_t *s)
{
    mc_master_metrics_t m;
    mc_master_metrics_snapshot(s->m, &m);
    page_t b = {0};
    metric(&b, "master_allocated_bytes", "gauge", "Bytes allocated in mounted segments",
           (double)m.allocated_bytes);
    metric(&b, "master_total_capacity_bytes", "gauge", "Capacity of mounted segments",
           (double)m.total_capacity_bytes);
    metric(&b, "master_key_count", "gauge", "Committed objects", (double)m.key_count);
    metric(&b, "master_writing_key_count", "gauge", "Objects being written",
           (double)m.writing_count);
    metric(&b, "master_active_clients", "gauge", "Clients seen within client_ttl",
           (double)m.active_clients);
    metric(&b, "master_mounted_segments", "gauge", "Mounted segments", (double)m.mounted_segments);
    metric(&b, "master_recovering_segments", "gauge", "Segments waiting for re-mount after restart",
           (double)m.recovering_segments);
    metric(&b, "master_fragmentation_ratio", "gauge", "1 - largest free block / free bytes",
           m.fragmentation);
    metric(&b, "master_successful_evictions_total", "counter", "Eviction rounds that freed space",
           (double)m.successful_evictions);
    metric(&b, "master_attempted_evictions_failed_total", "counter",
           "Eviction rounds that found nothing evictable", (double)m.failed_evictions);
    metric(&b, "master_evicted_key_count", "counter", "Objects evicted",
           (double)m.evicted_objects);
    metric(&b, "master_evicted_size_bytes", "counter", "Bytes evicted", (double)m.evicted_bytes);
    metric(&b, "master_put_start_discard_cnt", "counter", "Stuck puts pre-empted",
           (double)m.put_start_discards);
    metric(&b, "master_put_start_release_cnt", "counter", "Stuck put spaces released",
           (double)m.put_start_releases);
    metric(&b, "master_wal_records_total", "counter", "WAL records appended",
           (double)m.wal_records);
    metric(&b, "master_wal_syncs_total", "counter", "WAL group commits", (double)m.wal_syncs);
    metric(&b, "master_wal_snapshots_total", "counter", "WAL snapshots written",
           (double)m.snapshots);
    metric(&b, "master_object_events_total", "counter",
           "Object events appended to the event log (= last event seq)", (double)m.events);
    for (uint16_t op = 0; op < MC_OP_MAX; op++) {
        const mc_rpc_op_info_t *info = mc_rpc_op_info(op);
        if (!info)
            continue;
        char name[128];
        snprintf(name, sizeof(name), "master_%s_requests_total", info->name);
        metric(&b, name, "counter", "Requests received",
               (double)atomic_load_explicit(&s->req[op], memory_order_relaxed));
        snprintf(name, sizeof(name), "master_%s_failures_total", info->name);
        metric(&b, name, "counter", "Requests answered with an error",
               (double)atomic_load_explicit(&s->fail[op], memory_order_relaxed));
    }
    if (b.st != MC_OK) { /* no partial page: the handler answers 500 */
        mc_buf_free(&b.b);
        return NULL;
    }
    return mc_buf_take_str(&b.b);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *type, char *body,
                             int owned)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        if (owned)
            mc_free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result http_handler(void *cls, struct MHD_Connection *c, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_size, void **con_cls)
{
    (void)version;
    (void)upload_data;
    (void)upload_size;
    (void)con_cls;
    mc_master_service_t *s = cls;
    if (strcmp(method, "GET") != 0)
        return reply(c, 405, "text/plain", "method not allowed\n", 0);
    if (strcmp(url, "/metrics") == 0) {
        char *t = render_metrics(s);
        return t ? reply(c, 200, "text/plain; version=0.0.4", t, 1)
                 : reply(c, 500, "text/plain", "no memory\n", 0);
    }
    if (strcmp(url, "/health") == 0)
        return reply(c, 200, "text/plain", "OK\n", 0);
    if (strcmp(url, "/role") == 0)
        return reply(c, 200, "text/plain", "master\n", 0);
    if (strcmp(url, "/query_key") == 0 || strcmp(url, "/get_all_segments") == 0) {
        const char *key = NULL;
        if (url[1] == 'q') {
            key = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "key");
            if (!key || !key[0] || strlen(key) > 4096)
                return reply(c, 400, "text/plain", "need ?key=<1..4096 bytes>\n", 0);
        }
        int to = 0;
        char *j = run_query(s, key, &to);
        if (to)
            return reply(c, 503, "text/plain", "master loop busy\n", 0);
        if (!j)
            return reply(c, 404, "application/json", "{\"error\":\"OBJECT_NOT_FOUND\"}\n", 0);
        return reply(c, 200, "application/json", j, 1);
    }
    return reply(c, 404, "text/plain", "not found\n", 0);
}

/* ---------------------------------------------------------------- lifecycle */

mc_status_t mc_master_service_create(const mc_master_service_opts_t *opts,
                                     mc_master_service_t **svc_p)
{
    *svc_p = NULL;
    mc_master_service_t *s = MC_NEW(mc_master_service_t);
    if (!s)
        return MC_ERR_NO_MEMORY;
    s->o = *opts;
    mc_status_t st = mc_master_create(&opts->cfg, &s->m);
    if (st != MC_OK) {
        mc_free(s);
        return st;
    }
    mc_master_rpc_handlers(s->table);
    mc_rpc_server_opts_t so = {0};
    so.host = opts->rpc_address ? opts->rpc_address : "0.0.0.0";
    so.port = opts->port;
    so.ctx = s;
    for (int i = 0; i < MC_OP_MAX; i++)
        so.handlers[i] = s->table[i] ? svc_dispatch : NULL;
    so.cron_period_ms = opts->cron_period_ms ? opts->cron_period_ms : 10;
    so.cron = svc_cron;
    so.before_reply = svc_before_reply;
    so.on_request = svc_on_request;
    st = mc_rpc_server_create(&so, &s->srv);
    if (st != MC_OK) {
        mc_master_destroy(s->m);
        mc_free(s);
        return st;
    }
    if (opts->metrics_port >= 0) {
        struct sockaddr_in sin;
        memset(&sin, 0, sizeof(sin));
        sin.sin_family = AF_INET;
        sin.sin_port = htons((uint16_t)opts->metrics_port);
        bool bind_addr = opts->metrics_address && opts->metrics_address[0] &&
                         inet_pton(AF_INET, opts->metrics_address, &sin.sin_addr) == 1;
        if (opts->metrics_address && opts->metrics_address[0] && !bind_addr)
            MC_LOG_WARN("master: metrics address '%s' is not IPv4; binding all interfaces",
                        opts->metrics_address);
        s->httpd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
                                    (uint16_t)opts->metrics_port, NULL, NULL, http_handler, s,
                                    MHD_OPTION_CONNECTION_LIMIT, (unsigned)256,
                                    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                                    bind_addr ? MHD_OPTION_SOCK_ADDR : MHD_OPTION_END,
                                    (const struct sockaddr *)&sin, MHD_OPTION_END);
        if (!s->httpd) {
            MC_LOG_ERROR("master: cannot start the metrics HTTP server on port %d",
                         opts->metrics_port);
            mc_rpc_server_destroy(s->srv);
            mc_master_destroy(s->m);
            mc_free(s);
            return MC_ERR_IO;
        }
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->httpd, MHD_DAEMON_INFO_BIND_PORT);
        s->metrics_port = di ? di->port : (uint16_t)opts->metrics_port;
    }
    mc_master_cron(s->m); /* publish a first metrics snapshot */
    *svc_p = s;
    return MC_OK;
}

mc_status_t mc_master_service_run(mc_master_service_t *s) { return mc_rpc_server_run(s->srv); }

void mc_master_service_stop(mc_master_service_t *s) { mc_rpc_server_stop(s->srv); }

void mc_master_service_destroy(mc_master_service_t *s)
{
    if (!s)
        return;
    if (s->httpd)
        MHD_stop_daemon(s->httpd);
    mc_rpc_server_destroy(s->srv);
    mc_master_destroy(s->m);
    mc_free(s);
}

uint16_t mc_master_service_port(const mc_master_service_t *s) { return mc_rpc_server_port(s->srv); }
uint16_t mc_master_service_metrics_port(const mc_master_service_t *s) { return s->metrics_port; }

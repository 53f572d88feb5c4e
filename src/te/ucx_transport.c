/* ucx transport: UCP RMA (put/get) to peers that publish UCX information (optional; built only
 * when libucx-dev is found, MC_HAVE_UCX). Selected only with protocol "ucx" (never by "auto").
 * Full design: docs/internals/transfer-engine.md, section "ucx".
 *
 * Owner side. Every registered buffer is ucp_mem_map'ed (on_register) and its packed remote key
 * is published, hex-encoded, with the packed worker address in transport_info:
 *   {"ucx_worker":"<hex>","ucx_rkeys":[[addr,"<hex>"],...]}
 * (merged by the engine with the shm fields). on_unregister_done (called by the engine after
 * the table's in-flight count of the buffer drained) ucp_mem_unmap's it.
 *
 * Initiator side. Per peer one "conn" built from one descriptor snapshot: an endpoint
 * (refcounted `ucx_epw_t`, created from the peer's worker address) and one lazily unpacked rkey
 * per peer buffer. A new descriptor, a failed endpoint or a timed-out operation make the next
 * submit build a new conn (and a new endpoint when the old one failed); the old conn is freed
 * when its last operation ended.
 *
 * Every slice is one operation (`ucx_op_t`): the initiator checks [remote, remote+len) against
 * the descriptor (OUT_OF_RANGE otherwise, after one descriptor refresh), takes an in-flight
 * reference on the registered LOCAL buffer that contains [local, local+len) (INVALID_PARAMS if
 * there is none: UCX needs registered local memory) and issues ucp_get_nbx (READ) or
 * ucp_put_nbx followed by ucp_ep_flush_nbx (WRITE). UCP completes a put request when the source
 * may be reused, not when the data is at the target; the flush completes only after every
 * earlier operation on the endpoint completed remotely, so a WRITE is reported COMPLETED only
 * when its bytes are in the target's memory. A get request completes when the data is local.
 *
 * Threads and locks. One UCP worker per engine (thread mode SERIALIZED) guarded by ctx->mu;
 * every UCP call, every op/conn/endpoint field and peer->tp_state[MC_TE_TP_UCX] are touched only
 * under ctx->mu. Submitting threads issue operations themselves; one progress thread runs
 * ucp_worker_progress, sleeps on the worker's event fd (ucp_worker_arm, 5 ms tick) and sweeps
 * deadlines. UCP calls completion callbacks only from ucp_worker_progress (and from a forced
 * endpoint close), i.e. under ctx->mu. Lock order: ctx->mu -> batch mu (mc_te_slice_done) ->
 * peer mu (invalidate). Descriptor fetches never happen under ctx->mu.
 *
 * Deadlines. An op whose slice passed its deadline is reported TIMEOUT at once and detached
 * (op->slice = NULL), and its endpoint is force-closed so that UCX ends the outstanding
 * requests. The op itself (with its local-buffer reference and its conn reference, which keeps
 * the rkeys alive) lives until UCX reported completion of every request it issued, so a late
 * completion only ever touches the op, never the engine's freed slice, and the local buffer
 * cannot be unregistered (nor unmapped) while UCX may still write into it.
 */
#include "te/transport.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/time.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

#define UCX_MAX_SLICE (64ull << 20)
#define UCX_TICK_MS 5
#define UCX_MAX_HEX (1u << 20) /* cap on one hex field from a peer */

typedef struct ucx_reg {
    uint64_t addr, len;
    ucp_mem_h memh;
    char *rkey_hex;
} ucx_reg_t;

typedef struct ucx_epw {
    ucp_ep_h ep;      /* NULL once closed */
    uint32_t refs;    /* conns using it */
    bool failed;      /* error callback or forced close: build a new one */
} ucx_epw_t;

typedef struct ucx_rbuf {
    uint64_t addr, len;
    const char *rkey_hex; /* borrowed from info (owned by the conn) */
    ucp_rkey_h rkey;      /* NULL until first use */
} ucx_rbuf_t;

typedef struct ucx_conn {
    mc_te_peer_t *peer;   /* borrowed: peers live until engine destroy (after ucx_fini) */
    mc_te_rdesc_t *desc;  /* referenced */
    ucx_epw_t *epw;       /* referenced */
    json_t *info;         /* parsed transport_info (owns the hex strings) */
    ucx_rbuf_t *bufs;     /* parallel to desc->d.buffers */
    uint32_t refs;        /* ops + 1 while current for its peer */
    bool dead;            /* the owner process is gone (same host only) */
    uint64_t dead_check_ns;
} ucx_conn_t;

typedef struct ucx_ctx ucx_ctx_t;

typedef struct ucx_op {
    ucx_ctx_t *c;
    mc_te_slice_t *slice; /* NULL once reported (timeout, fini) */
    ucx_conn_t *conn;
    mc_te_lbuf_t *lbuf;   /* in-flight reference on the local buffer; NULL once abandoned */
    bool abandoned;       /* owner died with requests outstanding that UCX cannot end */
    uint64_t deadline_ns;
    uint32_t pending;     /* outstanding UCP requests + 1 while being issued */
    ucs_status_t st;      /* first error */
    struct ucx_op *prev, *next;
} ucx_op_t;

struct ucx_ctx {
    mc_te_t *te;
    ucp_context_h ucp;
    ucp_worker_h worker;
    int efd;
    pthread_mutex_t mu;
    pthread_t thr;
    bool thr_started;
    _Atomic int stop;
    bool err_mode_peer;   /* UCP_ERR_HANDLING_MODE_PEER accepted by the transports */
    char *addr_hex;       /* our packed worker address */
    ucx_reg_t *regs;      /* sorted by addr */
    size_t n_regs, cap_regs;
    ucx_op_t *ops;        /* ops not yet ended by UCX */
    size_t n_ops;
    void **closing;       /* endpoint close requests still in progress */
    size_t n_closing, cap_closing;
    uint64_t next_sweep_ns;
    bool destroying;      /* ucx_fini is destroying the worker */
};

/* ====================================== helpers ======================================== */

static char *hex_encode(const void *p, size_t n)
{
    static const char d[] = "0123456789abcdef";
    char *s = mc_malloc(2 * n + 1);
    if (!s)
        return NULL;
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        s[2 * i] = d[b[i] >> 4];
        s[2 * i + 1] = d[b[i] & 15];
    }
    s[2 * n] = '\0';
    return s;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Decode hex text (untrusted: length and digits checked). Heap result, caller frees. */
static uint8_t *hex_decode(const char *s, size_t *n_p)
{
    size_t l = strnlen(s, UCX_MAX_HEX + 1);
    if (l == 0 || l > UCX_MAX_HEX || l % 2)
        return NULL;
    uint8_t *b = mc_malloc(l / 2);
    if (!b)
        return NULL;
    for (size_t i = 0; i < l / 2; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            mc_free(b);
            return NULL;
        }
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    *n_p = l / 2;
    return b;
}

static mc_status_t map_ucs(ucs_status_t s)
{
    switch (s) {
    case UCS_OK:
        return MC_OK;
    case UCS_ERR_NO_MEMORY:
        return MC_ERR_NO_MEMORY;
    case UCS_ERR_CANCELED:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
        return MC_ERR_CONNECTION;
    case UCS_ERR_TIMED_OUT:
        return MC_ERR_TIMEOUT;
    default:
        return MC_ERR_TRANSFER_FAIL;
    }
}

/* Index of the registration containing [a, a+len), or -1 (under mu). */
static ptrdiff_t reg_find(ucx_ctx_t *c, uint64_t a, uint64_t len)
{
    size_t lo = 0, hi = c->n_regs;
    while (lo < hi) { /* first reg with addr > a */
        size_t mid = (lo + hi) / 2;
        if (c->regs[mid].addr <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return -1;
    ucx_reg_t *r = &c->regs[lo - 1];
    uint64_t off = a - r->addr;
    return off < r->len && len <= r->len - off ? (ptrdiff_t)(lo - 1) : -1;
}

/* ================================ endpoints and conns ================================== */

static void closing_add(ucx_ctx_t *c, void *req)
{
    if (mc_array_reserve(&c->closing, &c->cap_closing, c->n_closing + 1, 8) != MC_OK) {
        ucp_request_free(req); /* cannot track it: let UCX free it when it completes */
        return;
    }
    c->closing[c->n_closing++] = req;
}

/* Close the endpoint now (forced: outstanding requests end with an error). Under mu. */
static void epw_kill(ucx_ctx_t *c, ucx_epw_t *e)
{
    e->failed = true;
    if (!e->ep)
        return;
    ucp_ep_h ep = e->ep;
    e->ep = NULL;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *r = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(r))
        closing_add(c, r);
}

static void epw_put(ucx_ctx_t *c, ucx_epw_t *e)
{
    if (--e->refs > 0)
        return;
    if (e->ep) {
        /* graceful: every operation on it has ended already (conns hold it) */
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = e->failed ? UCP_EP_CLOSE_FLAG_FORCE : 0};
        void *r = ucp_ep_close_nbx(e->ep, &p);
        if (UCS_PTR_IS_PTR(r))
            closing_add(c, r);
    }
    mc_free(e);
}

static void ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    ucx_epw_t *e = arg;
    (void)ep;
    MC_LOG_WARN("ucx: endpoint failed: %s", ucs_status_string(status));
    e->failed = true; /* the next submit builds a new endpoint; UCX ends its requests */
}

static void conn_put(ucx_ctx_t *c, ucx_conn_t *k)
{
    if (--k->refs > 0)
        return;
    for (size_t i = 0; k->bufs && i < k->desc->d.n_buffers; i++)
        if (k->bufs[i].rkey)
            ucp_rkey_destroy(k->bufs[i].rkey);
    mc_free(k->bufs);
    json_decref(k->info);
    if (k->epw)
        epw_put(c, k->epw);
    mc_te_rdesc_put(k->desc);
    mc_free(k);
}

/* Parse the peer's UCX fields. Returns the parsed object (caller decrefs) or NULL. */
static json_t *info_parse(const char *ti, const char **worker_p, json_t **rkeys_p)
{
    if (!ti)
        return NULL;
    json_error_t err;
    json_t *o = json_loads(ti, 0, &err);
    json_t *w = o ? json_object_get(o, "ucx_worker") : NULL;
    json_t *rk = o ? json_object_get(o, "ucx_rkeys") : NULL;
    if (!json_is_string(w) || !json_is_array(rk) ||
        json_array_size(rk) > MC_SEGMENT_MAX_BUFFERS) {
        json_decref(o);
        return NULL;
    }
    *worker_p = json_string_value(w);
    *rkeys_p = rk;
    return o;
}

/* Build a conn for descriptor r, reusing endpoint `old` unless it failed (under mu). */
static mc_status_t conn_build(ucx_ctx_t *c, mc_te_peer_t *peer, mc_te_rdesc_t *r, ucx_epw_t *old,
                              ucx_conn_t **k_p)
{
    const char *whex;
    json_t *rkeys;
    json_t *info = info_parse(r->d.transport_info, &whex, &rkeys);
    if (!info)
        return MC_ERR_PROTOCOL;
    ucx_conn_t *k = mc_calloc(1, sizeof(*k));
    if (k)
        k->bufs = mc_calloc(r->d.n_buffers ? r->d.n_buffers : 1, sizeof(*k->bufs));
    if (!k || !k->bufs) {
        if (k)
            mc_free(k);
        json_decref(info);
        return MC_ERR_NO_MEMORY;
    }
    k->info = info;
    k->refs = 1;
    k->peer = peer;
    atomic_fetch_add(&r->refs, 1);
    k->desc = r;
    for (size_t i = 0; i < r->d.n_buffers; i++) {
        ucx_rbuf_t *b = &k->bufs[i];
        b->addr = r->d.buffers[i].addr;
        b->len = r->d.buffers[i].length;
        size_t j;
        json_t *e;
        json_array_foreach(rkeys, j, e) {
            json_t *ja = json_array_get(e, 0), *jh = json_array_get(e, 1);
            if (json_is_integer(ja) && json_is_string(jh) &&
                (uint64_t)json_integer_value(ja) == b->addr) {
                b->rkey_hex = json_string_value(jh);
                break;
            }
        }
    }
    if (old && !old->failed && old->ep) {
        old->refs++;
        k->epw = old;
        *k_p = k;
        return MC_OK;
    }
    size_t alen;
    uint8_t *addr = hex_decode(whex, &alen);
    ucx_epw_t *e = mc_calloc(1, sizeof(*e));
    mc_status_t st = MC_OK;
    if (!addr || !e) {
        st = addr ? MC_ERR_NO_MEMORY : MC_ERR_PROTOCOL;
    } else {
        ucp_ep_params_t ep = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                          UCP_EP_PARAM_FIELD_ERR_HANDLER,
            .address = (const ucp_address_t *)addr,
            .err_mode = c->err_mode_peer ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE,
            .err_handler = {.cb = ep_err_cb, .arg = e},
        };
        ucs_status_t us = ucp_ep_create(c->worker, &ep, &e->ep);
        if (us != UCS_OK && c->err_mode_peer) {
            MC_LOG_WARN("ucx: endpoint with peer-failure handling refused (%s); peer death is "
                        "then seen only through deadlines", ucs_status_string(us));
            c->err_mode_peer = false;
            ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
            us = ucp_ep_create(c->worker, &ep, &e->ep);
        }
        if (us != UCS_OK) {
            MC_LOG_ERROR("ucx: cannot reach %s (pid %d): %s. UCX needs a transport for this peer "
                         "(shared memory on this host, RDMA across hosts; UCX over tcp is not "
                         "used); use protocol auto/tcp instead",
                         r->d.name, (int)r->d.pid, ucs_status_string(us));
            st = MC_ERR_CONNECTION;
            e->ep = NULL;
        }
    }
    mc_free(addr);
    if (st != MC_OK) {
        mc_free(e);
        conn_put(c, k);
        return st;
    }
    e->refs = 1;
    k->epw = e;
    *k_p = k;
    return MC_OK;
}

/* ===================================== operations ===================================== */

static void op_put(ucx_op_t *op)
{
    if (--op->pending > 0)
        return;
    ucx_ctx_t *c = op->c;
    if (op->st != UCS_OK && op->st != UCS_ERR_CANCELED) {
        /* a failed RMA operation: the peer may have died or re-registered. Use a fresh
         * endpoint and descriptor next time (like a lost tcp connection). */
        op->conn->epw->failed = true;
        mc_te_peer_invalidate(op->conn->peer, op->conn->desc);
    }
    if (op->slice) {
        mc_status_t st = map_ucs(op->st);
        mc_te_slice_done(op->slice, st, st == MC_OK ? op->slice->len : 0);
    }
    if (op->prev)
        op->prev->next = op->next;
    else
        c->ops = op->next;
    if (op->next)
        op->next->prev = op->prev;
    c->n_ops--;
    if (op->lbuf)
        mc_te_table_release(&c->te->table, op->lbuf);
    conn_put(c, op->conn);
    mc_free(op);
}

static void op_cb(void *request, ucs_status_t status, void *user_data)
{
    ucx_op_t *op = user_data;
    if (op->c->destroying) { /* purged by ucp_worker_destroy: the op is freed after it */
        ucp_request_free(request);
        return;
    }
    if (status != UCS_OK && op->st == UCS_OK)
        op->st = status;
    ucp_request_free(request);
    op_put(op);
}

/* Account for the return value of an nbx call. */
static void op_track(ucx_op_t *op, ucs_status_ptr_t r)
{
    if (UCS_PTR_IS_PTR(r))
        op->pending++;
    else if (UCS_PTR_STATUS(r) != UCS_OK && op->st == UCS_OK)
        op->st = UCS_PTR_STATUS(r);
}

/* Whether the owner process of k's descriptor is gone (same host only; checked at most once
 * per tick). Under mu. */
static bool owner_dead(ucx_ctx_t *c, ucx_conn_t *k, uint64_t now)
{
    if (k->dead)
        return true;
    if (k->desc->d.pid <= 0 || strcmp(k->desc->d.host_id, c->te->host_id) != 0 ||
        now - k->dead_check_ns < UCX_TICK_MS * 1000000ull)
        return false;
    k->dead_check_ns = now;
    k->dead = kill((pid_t)k->desc->d.pid, 0) != 0 && errno == ESRCH;
    return k->dead;
}

/* Deadlines and dead owners. Under mu, right after the worker was progressed empty.
 * - An op past its deadline, or whose (same-host) owner exited, is reported TIMEOUT /
 *   CONNECTION at once and detached from its slice. With peer-failure handling (RDMA) its
 *   endpoint is force-closed, which makes UCX end every outstanding request (CANCELED). UCX
 *   1.13's shared-memory transports have no peer-failure handling, and a forced close is then
 *   undefined on the remote side: the endpoint is only marked failed (the next submit makes a
 *   new one) and the op waits for UCX to end its requests normally (a stopped owner resumes).
 * - A detached op whose owner process no longer exists can never be ended by UCX: it is
 *   abandoned (its local-buffer reference released, so unregister works; the op record stays
 *   until engine destroy). Safe because nothing can arrive from a dead process once the worker
 *   was progressed empty, and a put to it cannot get FIFO space to copy from our buffer. */
static void sweep(ucx_ctx_t *c, uint64_t now)
{
again:
    for (ucx_op_t *op = c->ops; op; op = op->next) {
        if (op->abandoned)
            continue;
        ucx_conn_t *k = op->conn;
        bool dead = owner_dead(c, k, now);
        if (op->slice && (dead || now >= op->deadline_ns)) {
            mc_te_slice_t *s = op->slice;
            op->slice = NULL;
            MC_LOG_WARN("ucx: operation on %s %s", k->desc->d.name,
                        dead ? "failed: its owner process exited" : "passed its deadline");
            mc_te_slice_done(s, dead ? MC_ERR_CONNECTION : MC_ERR_TIMEOUT, 0);
            ucx_epw_t *e = k->epw;
            e->failed = true;
            if (c->err_mode_peer) {
                e->refs++; /* a forced close may end (and free) ops, conns and this endpoint */
                epw_kill(c, e);
                epw_put(c, e);
                goto again;
            }
        }
        if (!op->slice && dead) {
            op->abandoned = true;
            if (op->lbuf)
                mc_te_table_release(&c->te->table, op->lbuf);
            op->lbuf = NULL;
            mc_te_peer_invalidate(k->peer, k->desc);
        }
    }
}

static void reap_closing(ucx_ctx_t *c)
{
    for (size_t i = 0; i < c->n_closing;) {
        if (ucp_request_check_status(c->closing[i]) != UCS_INPROGRESS) {
            ucp_request_free(c->closing[i]);
            c->closing[i] = c->closing[--c->n_closing];
        } else {
            i++;
        }
    }
}

static void *progress_main(void *arg)
{
    ucx_ctx_t *c = arg;
    while (!atomic_load(&c->stop)) {
        pthread_mutex_lock(&c->mu);
        while (ucp_worker_progress(c->worker))
            ;
        uint64_t now = mc_now_ns();
        if (now >= c->next_sweep_ns) {
            sweep(c, now);
            reap_closing(c);
            c->next_sweep_ns = now + UCX_TICK_MS * 1000000ull;
        }
        ucs_status_t as = ucp_worker_arm(c->worker);
        pthread_mutex_unlock(&c->mu);
        if (as == UCS_ERR_BUSY)
            continue;
        struct pollfd p = {.fd = c->efd, .events = POLLIN};
        poll(&p, 1, UCX_TICK_MS);
    }
    return NULL;
}

/* ===================================== lifecycle ====================================== */

static void ucx_fini(void *vctx);

static mc_status_t ucx_init(mc_te_t *te, const mc_te_transport_t *fallback,
                            void **ctx_p)
{
    ucx_ctx_t *c = mc_calloc(1, sizeof(*c));
    if (!c)
        return MC_ERR_NO_MEMORY;
    c->te = te;
    c->efd = -1;
    c->err_mode_peer = true;
    pthread_mutex_init(&c->mu, NULL);
    ucp_config_t *cfg = NULL;
    ucs_status_t us = ucp_config_read(NULL, NULL, &cfg);
    if (us != UCS_OK) {
        MC_LOG_ERROR("ucx: config: %s", ucs_status_string(us));
        mc_free(c);
        return MC_ERR_NOT_SUPPORTED;
    }
    /* UCX RMA over its tcp transport is emulated and unusably slow (27 MiB/s here): unless the
     * user chose UCX_TLS, exclude it, so that no peer is ever reached over UCX tcp silently.
     * UCX_TLS is libucx's own variable (ucp_config_read above applies it); we only look at it
     * to decide whether to add our exclusion and to warn, so it is no knob of this library
     * and has no field in mc_te_config_t. */
    const char *tls = getenv("UCX_TLS");
    if (!tls || !*tls) {
        us = ucp_config_modify(cfg, "TLS", "^tcp");
        if (us != UCS_OK)
            MC_LOG_WARN("ucx: cannot exclude the tcp transport: %s", ucs_status_string(us));
    } else if (strstr(tls, "tcp") || strstr(tls, "all")) {
        MC_LOG_WARN("ucx: UCX_TLS=%s may carry RMA over UCX tcp, which is very slow; prefer "
                    "protocol tcp for peers without shared memory or RDMA", tls);
    }
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
                      .features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP,
                      .mt_workers_shared = 0};
    us = ucp_init(&p, cfg, &c->ucp);
    ucp_config_release(cfg);
    if (us != UCS_OK) {
        MC_LOG_ERROR("ucx: ucp_init: %s", ucs_status_string(us));
        c->ucp = NULL;
        ucx_fini(c);
        return MC_ERR_NOT_SUPPORTED;
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    us = ucp_worker_create(c->ucp, &wp, &c->worker);
    if (us != UCS_OK) {
        MC_LOG_ERROR("ucx: worker: %s", ucs_status_string(us));
        c->worker = NULL;
        ucx_fini(c);
        return MC_ERR_NOT_SUPPORTED;
    }
    ucp_address_t *addr;
    size_t alen;
    us = ucp_worker_get_address(c->worker, &addr, &alen);
    if (us == UCS_OK) {
        c->addr_hex = hex_encode(addr, alen);
        ucp_worker_release_address(c->worker, addr);
    }
    if (us == UCS_OK)
        us = ucp_worker_get_efd(c->worker, &c->efd);
    if (us != UCS_OK || !c->addr_hex) {
        MC_LOG_ERROR("ucx: worker address/event fd: %s", ucs_status_string(us));
        ucx_fini(c);
        return MC_ERR_NOT_SUPPORTED;
    }
    if (pthread_create(&c->thr, NULL, progress_main, c) != 0) {
        ucx_fini(c);
        return MC_ERR_NO_MEMORY;
    }
    c->thr_started = true;
    MC_LOG_INFO("ucx: worker ready (address %zu bytes, UCX_TLS=%s)", alen,
                tls && *tls ? tls : "^tcp");
    *ctx_p = c;
    return MC_OK;
}

/* Stop the progress thread, end every outstanding slice (FAILED), drop every peer's conn and
 * wait (bounded) for UCX to end the requests, then release UCX. */
static void ucx_fini(void *vctx)
{
    ucx_ctx_t *c = vctx;
    if (!c)
        return;
    if (c->thr_started) {
        atomic_store(&c->stop, 1);
        ucp_worker_signal(c->worker);
        pthread_join(c->thr, NULL);
    }
    pthread_mutex_lock(&c->mu);
    for (ucx_op_t *op = c->ops; op; op = op->next) {
        if (op->slice) {
            mc_te_slice_t *s = op->slice;
            op->slice = NULL;
            mc_te_slice_done(s, MC_ERR_CONNECTION, 0);
        }
    }
    mc_te_t *te = c->te;
    for (size_t i = 0; i < te->n_peers; i++) {
        ucx_conn_t *k = te->peers[i]->tp_state[MC_TE_TP_UCX];
        te->peers[i]->tp_state[MC_TE_TP_UCX] = NULL;
        if (k) {
            ucx_epw_t *e = k->epw;
            e->refs++;
            if (c->err_mode_peer)
                epw_kill(c, e);
            conn_put(c, k);
            epw_put(c, e);
        }
    }
    /* remaining ops hold conns whose endpoints may still be open: close them too (forced
     * only where UCX supports it, see sweep) */
    for (ucx_op_t *op = c->ops; op; op = op->next)
        if (c->err_mode_peer && op->conn->epw->ep)
            epw_kill(c, op->conn->epw);
    uint64_t deadline = mc_now_ns() + 1000000000ull;
    while (c->worker && mc_now_ns() < deadline) {
        bool live = false;
        for (ucx_op_t *op = c->ops; op && !live; op = op->next)
            live = !op->abandoned && !owner_dead(c, op->conn, mc_now_ns());
        if (!live && c->n_closing == 0)
            break;
        ucp_worker_progress(c->worker);
        reap_closing(c);
    }
    /* whatever is left belongs to dead or unresponsive peers: drop our records; destroying
     * the worker releases UCX's side */
    if (c->ops)
        MC_LOG_WARN("ucx: %zu operations still outstanding at shutdown (peers dead or hung)",
                    c->n_ops);
    for (ucx_op_t *op = c->ops; op; op = op->next) {
        if (op->lbuf)
            mc_te_table_release(&te->table, op->lbuf);
        op->lbuf = NULL;
        conn_put(c, op->conn); /* rkeys, endpoint close (before the worker goes) */
        op->conn = NULL;
    }
    /* ucp_worker_destroy purges the requests and calls op_cb for them: it must only free
     * the request then (c->destroying); the op records are freed after it */
    c->destroying = true;
    for (size_t i = 0; i < c->n_closing; i++)
        ucp_request_free(c->closing[i]);
    c->n_closing = 0;
    for (size_t i = 0; i < c->n_regs; i++) {
        ucp_mem_unmap(c->ucp, c->regs[i].memh);
        mc_free(c->regs[i].rkey_hex);
    }
    mc_free(c->regs);
    mc_free(c->closing);
    pthread_mutex_unlock(&c->mu);
    if (c->worker)
        ucp_worker_destroy(c->worker);
    while (c->ops) {
        ucx_op_t *op = c->ops;
        c->ops = op->next;
        mc_free(op);
    }
    if (c->ucp)
        ucp_cleanup(c->ucp);
    mc_free(c->addr_hex);
    pthread_mutex_destroy(&c->mu);
    mc_free(c);
}

static uint64_t ucx_max_slice(void *vctx)
{
    (void)vctx;
    return UCX_MAX_SLICE;
}

static bool ucx_can_reach(void *vctx, const mc_segment_desc_t *d)
{
    (void)vctx;
    const char *w;
    json_t *rk;
    json_t *o = info_parse(d->transport_info, &w, &rk);
    json_decref(o);
    return o != NULL;
}

/* ===================================== registration =================================== */

static mc_status_t ucx_on_register(void *vctx, mc_te_lbuf_t *b)
{
    ucx_ctx_t *c = vctx;
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = (void *)(uintptr_t)b->addr,
        .length = b->len,
    };
    ucx_reg_t r = {.addr = b->addr, .len = b->len};
    pthread_mutex_lock(&c->mu);
    mc_status_t st = MC_OK;
    ucs_status_t us = ucp_mem_map(c->ucp, &mp, &r.memh);
    if (us != UCS_OK) {
        MC_LOG_ERROR("ucx: ucp_mem_map(0x%llx, %llu): %s", (unsigned long long)b->addr,
                     (unsigned long long)b->len, ucs_status_string(us));
        st = MC_ERR_TRANSFER_FAIL;
    } else {
        void *kb;
        size_t kl;
        us = ucp_rkey_pack(c->ucp, r.memh, &kb, &kl);
        if (us == UCS_OK) {
            r.rkey_hex = hex_encode(kb, kl);
            ucp_rkey_buffer_release(kb);
        }
        if (!r.rkey_hex || c->n_regs == MC_SEGMENT_MAX_BUFFERS) {
            st = us != UCS_OK ? MC_ERR_TRANSFER_FAIL : MC_ERR_NO_MEMORY;
        } else if (mc_array_reserve(&c->regs, &c->cap_regs, c->n_regs + 1, 16) != MC_OK) {
            st = MC_ERR_NO_MEMORY;
        }
        if (st == MC_OK) {
            size_t pos = 0;
            while (pos < c->n_regs && c->regs[pos].addr < r.addr)
                pos++;
            memmove(&c->regs[pos + 1], &c->regs[pos], (c->n_regs - pos) * sizeof(*c->regs));
            c->regs[pos] = r;
            c->n_regs++;
        } else {
            mc_free(r.rkey_hex);
            ucp_mem_unmap(c->ucp, r.memh);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* The engine calls this only after the table's in-flight count for b reached 0: no local
 * operation uses the buffer any more. (Remote peers holding the rkey: see the docs.) */
static void ucx_on_unregister_done(void *vctx, mc_te_lbuf_t *b)
{
    ucx_ctx_t *c = vctx;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n_regs; i++) {
        if (c->regs[i].addr == b->addr) {
            ucp_mem_unmap(c->ucp, c->regs[i].memh);
            mc_free(c->regs[i].rkey_hex);
            memmove(&c->regs[i], &c->regs[i + 1], (c->n_regs - i - 1) * sizeof(*c->regs));
            c->n_regs--;
            break;
        }
    }
    pthread_mutex_unlock(&c->mu);
}

static char *ucx_transport_info(void *vctx)
{
    ucx_ctx_t *c = vctx;
    json_t *o = json_object();
    json_t *a = json_array();
    pthread_mutex_lock(&c->mu);
    json_object_set_new(o, "ucx_worker", json_string(c->addr_hex));
    for (size_t i = 0; i < c->n_regs; i++) {
        json_t *e = json_array();
        json_array_append_new(e, json_integer((json_int_t)c->regs[i].addr));
        json_array_append_new(e, json_string(c->regs[i].rkey_hex));
        json_array_append_new(a, e);
    }
    pthread_mutex_unlock(&c->mu);
    json_object_set_new(o, "ucx_rkeys", a);
    /* jansson allocates with malloc; mc_free (free) releases it like our own strings */
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* ======================================= submit ======================================= */

/* Current conn for peer, rebuilt when the descriptor changed or the endpoint failed. Under mu. */
static mc_status_t conn_current(ucx_ctx_t *c, mc_te_peer_t *peer, mc_te_rdesc_t *r,
                                ucx_conn_t **k_p)
{
    ucx_conn_t *k = peer->tp_state[MC_TE_TP_UCX];
    if (k && k->desc == r && !k->epw->failed) {
        *k_p = k;
        return MC_OK;
    }
    ucx_conn_t *nk;
    ucx_epw_t *old = k && k->desc->d.pid == r->d.pid ? k->epw : NULL;
    mc_status_t st = conn_build(c, peer, r, old, &nk);
    if (st != MC_OK)
        return st;
    if (k)
        conn_put(c, k);
    peer->tp_state[MC_TE_TP_UCX] = nk;
    *k_p = nk;
    return MC_OK;
}

static void ucx_submit(void *vctx, mc_te_peer_t *peer, mc_te_rdesc_t *desc,
                       mc_te_slice_t **slices, size_t n)
{
    ucx_ctx_t *c = vctx;
    mc_te_t *te = c->te;
    /* Initiator-side range check against the descriptor (RMA: the target CPU checks nothing).
     * A miss may be a buffer registered after our snapshot: refresh the descriptor once, out of
     * ctx->mu (it may block on the network). */
    mc_te_rdesc_t *r = desc;
    atomic_fetch_add(&r->refs, 1);
    for (size_t i = 0; i < n; i++) {
        if (mc_segment_desc_find(&r->d, slices[i]->remote, slices[i]->len) >= 0)
            continue;
        mc_te_peer_invalidate(peer, r);
        mc_te_rdesc_t *nr;
        int tp;
        if (mc_te_peer_get_desc(peer, &nr, &tp) == MC_OK) {
            mc_te_rdesc_put(r);
            r = nr;
        }
        break;
    }
    pthread_mutex_lock(&c->mu);
    ucx_conn_t *k = NULL;
    mc_status_t cst = ucx_can_reach(c, &r->d) ? conn_current(c, peer, r, &k) : MC_ERR_PROTOCOL;
    if (cst != MC_OK)
        MC_LOG_WARN("ucx: no connection to %s: %s", peer->name, mc_status_name(cst));
    bool issued = false;
    for (size_t i = 0; i < n; i++) {
        mc_te_slice_t *s = slices[i];
        if (cst != MC_OK) {
            mc_te_slice_done(s, cst == MC_ERR_PROTOCOL ? MC_ERR_TRANSFER_FAIL : cst, 0);
            continue;
        }
        ptrdiff_t bi = mc_segment_desc_find(&k->desc->d, s->remote, s->len);
        if (bi < 0) {
            mc_te_slice_done(s, MC_ERR_OUT_OF_RANGE, 0);
            continue;
        }
        ucx_rbuf_t *rb = &k->bufs[bi];
        if (!rb->rkey) {
            size_t kl;
            uint8_t *kb = rb->rkey_hex ? hex_decode(rb->rkey_hex, &kl) : NULL;
            ucs_status_t us = kb && k->epw->ep ? ucp_ep_rkey_unpack(k->epw->ep, kb, &rb->rkey)
                                               : UCS_ERR_INVALID_PARAM;
            mc_free(kb);
            if (us != UCS_OK) {
                rb->rkey = NULL;
                MC_LOG_WARN("ucx: no usable rkey for buffer 0x%llx of %s: %s",
                            (unsigned long long)rb->addr, peer->name, ucs_status_string(us));
                mc_te_slice_done(s, MC_ERR_TRANSFER_FAIL, 0);
                continue;
            }
        }
        mc_te_lbuf_t *lb;
        if (mc_te_table_acquire(&te->table, (uint64_t)(uintptr_t)s->local, s->len, &lb) != MC_OK) {
            MC_LOG_DEBUG("ucx: local %p+%llu is not inside a registered buffer", (void *)s->local,
                         (unsigned long long)s->len);
            mc_te_slice_done(s, MC_ERR_INVALID_PARAMS, 0);
            continue;
        }
        ucx_op_t *op = mc_calloc(1, sizeof(*op));
        if (!op) {
            mc_te_table_release(&te->table, lb);
            mc_te_slice_done(s, MC_ERR_NO_MEMORY, 0);
            continue;
        }
        op->c = c;
        op->slice = s;
        op->conn = k;
        k->refs++;
        op->lbuf = lb;
        op->deadline_ns = s->req->deadline_ns;
        op->pending = 1;
        op->next = c->ops;
        if (c->ops)
            c->ops->prev = op;
        c->ops = op;
        c->n_ops++;
        ptrdiff_t li = reg_find(c, (uint64_t)(uintptr_t)s->local, s->len);
        ucp_request_param_t p = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            .cb.send = op_cb,
            .user_data = op,
        };
        if (li >= 0) {
            p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
            p.memh = c->regs[li].memh;
        }
        ucp_ep_h ep = k->epw->ep;
        if (!ep) {
            op->st = UCS_ERR_CONNECTION_RESET;
        } else if (s->opcode == MC_TE_READ) {
            op_track(op, ucp_get_nbx(ep, s->local, s->len, s->remote, rb->rkey, &p));
        } else {
            op_track(op, ucp_put_nbx(ep, s->local, s->len, s->remote, rb->rkey, &p));
            /* remote completion of the put (see the file comment) */
            if (op->st == UCS_OK) {
                ucp_request_param_t fp = {
                    .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                    .cb.send = op_cb,
                    .user_data = op,
                };
                op_track(op, ucp_ep_flush_nbx(ep, &fp));
            }
        }
        issued = true;
        op_put(op); /* ends now if UCX completed everything immediately */
    }
    pthread_mutex_unlock(&c->mu);
    if (issued)
        ucp_worker_signal(c->worker); /* the progress thread drives the requests */
    mc_te_rdesc_put(r);
}

static void ucx_peer_free(void *vctx, mc_te_peer_t *peer)
{
    ucx_ctx_t *c = vctx;
    pthread_mutex_lock(&c->mu);
    ucx_conn_t *k = peer->tp_state[MC_TE_TP_UCX];
    peer->tp_state[MC_TE_TP_UCX] = NULL;
    if (k)
        conn_put(c, k);
    pthread_mutex_unlock(&c->mu);
}

const mc_te_transport_ops_t mc_te_ucx_ops = {
    .name = "ucx",
    .init = ucx_init,
    .fini = ucx_fini,
    .max_slice = ucx_max_slice,
    .can_reach = ucx_can_reach,
    .submit = ucx_submit,
    .on_register = ucx_on_register,
    .on_unregister_done = ucx_on_unregister_done,
    .transport_info = ucx_transport_info,
    .peer_free = ucx_peer_free,
};

/* Transfer engine core: local segment table, descriptor publishing, segment cache, batches.
 * Design: transport.h, docs/internals/transfer-engine.md.
 *
 * Locks (outer to inner): te->reg_mu -> table.lock -> te->desc_mu; batch mu -> te->mu (submit
 * looks up segment handles); te->mu (peers, batches, shareables) is otherwise a leaf and is
 * never held while calling into a transport.
 * peer->mu is held while fetching a descriptor (bounded by the transfer timeout).
 */
#include "te/transport.h"
#include "te/te_auth.h"
#include "te/te_hashed.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/grant.h"
#include "common/log.h"
#include "common/payload.h"
#include "common/time.h"

#include <jansson.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PORT_MIN 12300
#define PORT_MAX 14300

/* The transports by MC_TE_TP_*; the engine reaches them only through these tables.
 * ucx hook-up: g_tp[MC_TE_TP_UCX] is NULL when UCX is not built (MC_HAVE_UCX). */
#ifdef MC_HAVE_UCX
#define UCX_OPS (&mc_te_ucx_ops)
#else
#define UCX_OPS NULL
#endif
static const mc_te_transport_ops_t *const g_tp[MC_TE_TP_COUNT] = {&mc_te_tcp_ops, &mc_te_shm_ops,
                                                                  UCX_OPS};

/* Transport k if it was started, else NULL. */
static mc_te_transport_t *tp_started(mc_te_t *te, int k)
{
    return te->tp[k].ops ? &te->tp[k] : NULL;
}

static void *tp_ctx(mc_te_t *te, int k)
{
    return te->tp[k].ctx;
}

/* ucx hook-up: the descriptor has one transport_info object; shm and ucx use disjoint keys
 * ("shm_*"/"slots" and "ucx_*"), merged here. Frees a and b; returns heap JSON or NULL. */
static char *merge_info(char *a, char *b)
{
    if (!a || !b)
        return a ? a : b;
    json_t *ja = json_loads(a, 0, NULL), *jb = json_loads(b, 0, NULL);
    char *out = NULL;
    if (json_is_object(ja) && json_is_object(jb) && json_object_update(ja, jb) == 0)
        /* jansson allocates with malloc; mc_free (free) releases it like our own strings */
        out = json_dumps(ja, JSON_COMPACT);
    json_decref(ja);
    json_decref(jb);
    mc_free(a);
    mc_free(b);
    return out;
}

/* =================================== descriptor ======================================= */

/* The keyring descriptors are signed and checked with: the engine's, when it holds a cluster
 * token (auth.h: only cluster keys sign or verify descriptors, so a tenant token cannot vouch
 * for a segment and redirect other tenants' puts). An engine holding only tenant tokens
 * publishes its descriptor unsigned and reads descriptors unchecked: it cannot verify a
 * cluster signature, and needs to: every data connection it opens ends the mutual handshake
 * only with a server that holds the reader's own secret, so a forged address cannot take its
 * bytes (docs/security.md). NULL = neither sign nor check. */
static const mc_auth_t *desc_ring(const mc_te_t *te)
{
    return mc_auth_has_cluster_key(te->auth) ? te->auth : NULL;
}

mc_status_t mc_te_desc_json_copy(mc_te_t *te, char **json_p, size_t *len_p)
{
    pthread_mutex_lock(&te->desc_mu);
    char *j = te->desc_json ? mc_strndup(te->desc_json, te->desc_json_len) : NULL;
    size_t len = te->desc_json_len;
    pthread_mutex_unlock(&te->desc_mu);
    if (!j)
        return te->desc_json ? MC_ERR_NO_MEMORY : MC_ERR_SEGMENT_NOT_FOUND;
    *json_p = j;
    *len_p = len;
    return MC_OK;
}

/* Rebuild and publish our descriptor. Under te->reg_mu. */
static mc_status_t te_publish(mc_te_t *te)
{
    mc_segment_desc_t d;
    memset(&d, 0, sizeof(d));
    snprintf(d.name, sizeof(d.name), "%s", te->local_name);
    snprintf(d.protocol, sizeof(d.protocol), "tcp");
    snprintf(d.host_id, sizeof(d.host_id), "%s", te->host_id);
    d.pid = (int32_t)te->pid;
    d.tcp_data_port = te->port;
    d.timestamp = mc_wall_ms();
    pthread_rwlock_rdlock(&te->table.lock);
    d.buffers = mc_calloc(te->table.n ? te->table.n : 1, sizeof(*d.buffers));
    if (!d.buffers) {
        pthread_rwlock_unlock(&te->table.lock);
        return MC_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < te->table.n; i++) {
        const mc_te_lbuf_t *b = te->table.bufs[i];
        mc_buffer_desc_t *o = &d.buffers[d.n_buffers++];
        snprintf(o->location, sizeof(o->location), "%s", b->location);
        o->addr = b->addr;
        o->length = b->len;
        o->shm_fd = b->shm_fd;
        o->shm_offset = b->shm_offset;
    }
    pthread_rwlock_unlock(&te->table.lock);
    /* ucx hook-up: shm's slots and ucx's worker address and packed rkeys, merged */
    for (int k = 0; k < MC_TE_TP_COUNT; k++) {
        mc_te_transport_t *t = tp_started(te, k);
        if (t && t->ops->transport_info)
            d.transport_info = merge_info(d.transport_info, t->ops->transport_info(t->ctx));
    }
    char *json = NULL;
    mc_status_t st = mc_segment_desc_to_json(&d, &json);
    mc_segment_desc_free(&d);
    if (st != MC_OK) {
        MC_LOG_ERROR("te: cannot serialize our descriptor: %s", mc_status_name(st));
        return st;
    }
    size_t len = strlen(json);
    if (desc_ring(te)) { /* the signed form (segment_desc.h): cluster readers verify it */
        char *sealed = NULL;
        st = mc_segment_desc_seal(te->auth, json, len, &sealed, &len);
        mc_free(json);
        if (st != MC_OK) {
            MC_LOG_ERROR("te: cannot sign our descriptor: %s", mc_status_name(st));
            return st;
        }
        json = sealed;
    }
    pthread_mutex_lock(&te->desc_mu);
    mc_free(te->desc_json);
    te->desc_json = json;
    te->desc_json_len = len;
    pthread_mutex_unlock(&te->desc_mu);
    if (te->meta && !mc_meta_is_p2p(te->meta)) {
        char key[MC_TE_NAME_MAX + 32];
        snprintf(key, sizeof(key), "%s%s", MC_META_SEGMENT_PREFIX, te->local_name);
        st = mc_meta_put(te->meta, key, json);
        if (st != MC_OK)
            MC_LOG_ERROR("te: publishing %s failed: %s", key, mc_status_name(st));
    }
    return st;
}

/* ===================================== peers ========================================== */

void mc_te_rdesc_put(mc_te_rdesc_t *r)
{
    if (r && atomic_fetch_sub(&r->refs, 1) == 1) {
        mc_segment_desc_free(&r->d);
        mc_free(r);
    }
}

static int choose_transport(mc_te_t *te, const mc_segment_desc_t *d)
{
    /* A tenant-bound engine never maps a peer's memory or asks for CMA copies: both reach the
     * whole segment, and the owner refuses CMA to it anyway (docs/security.md). */
    if (te->force_tcp || te->tenant_bound)
        return MC_TE_TP_TCP;
    /* ucx hook-up: ucx is started only with protocol "ucx" ("auto" never picks ucx) */
    mc_te_transport_t *ucx = tp_started(te, MC_TE_TP_UCX), *shm = tp_started(te, MC_TE_TP_SHM);
    if (ucx && ucx->ops->can_reach(ucx->ctx, d))
        return MC_TE_TP_UCX;
    if (!shm || strcmp(te->protocol, "tcp") == 0)
        return MC_TE_TP_TCP;
    if (strcmp(d->host_id, te->host_id) != 0 || d->pid <= 0)
        return MC_TE_TP_TCP;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d", (int)d->pid);
    if (access(path, F_OK) != 0)
        return MC_TE_TP_TCP;
    if (!shm->ops->can_reach(shm->ctx, d))
        return MC_TE_TP_TCP;
    return MC_TE_TP_SHM;
}

static mc_status_t fetch_desc(mc_te_peer_t *p, mc_te_rdesc_t **r_p)
{
    mc_te_t *te = p->te;
    char *json = NULL;
    size_t len = 0;
    mc_status_t st;
    if (mc_meta_is_p2p(te->meta)) {
        /* from the peer itself, through the first transport that can ask it (tcp) */
        st = MC_ERR_NOT_SUPPORTED;
        for (int k = 0; k < MC_TE_TP_COUNT; k++) {
            mc_te_transport_t *t = tp_started(te, k);
            if (t && t->ops->fetch_desc) {
                st = t->ops->fetch_desc(t->ctx, p, &json, &len);
                break;
            }
        }
    } else {
        char key[MC_TE_NAME_MAX + 32];
        snprintf(key, sizeof(key), "%s%s", MC_META_SEGMENT_PREFIX, p->name);
        st = mc_meta_get(te->meta, key, &json);
        if (st == MC_OK)
            len = strlen(json);
    }
    if (st != MC_OK) {
        MC_LOG_DEBUG("te: descriptor of %s unavailable: %s", p->name, mc_status_name(st));
        return st == MC_ERR_OBJECT_NOT_FOUND || st == MC_ERR_CONNECTION ? MC_ERR_SEGMENT_NOT_FOUND
                                                                         : st;
    }
    mc_te_rdesc_t *r = mc_calloc(1, sizeof(*r));
    if (!r) {
        mc_free(json);
        return MC_ERR_NO_MEMORY;
    }
    /* With a keyring only a descriptor signed by the cluster is used, whichever backend (or
     * the peer itself) delivered it, and it must name the segment asked for (a signed
     * descriptor copied under another segment's key is refused too). */
    const char *inner = NULL;
    size_t inner_len = 0;
    int sealed = 0;
    st = mc_segment_desc_unseal(desc_ring(te), json, len, &inner, &inner_len, &sealed);
    if (st == MC_OK)
        st = mc_segment_desc_from_json(inner, inner_len, &r->d);
    mc_free(json);
    if (st == MC_OK && sealed && desc_ring(te) && strcmp(r->d.name, p->name) != 0) {
        MC_LOG_WARN("te: signed descriptor fetched for segment %s names %s", p->name, r->d.name);
        mc_segment_desc_free(&r->d);
        st = MC_ERR_AUTH;
    }
    if (st != MC_OK) {
        if (st == MC_ERR_AUTH)
            MC_LOG_WARN("te: descriptor of segment %s refused: unsigned or not signed with our "
                        "cluster token (%s)", p->name, mc_status_name(st));
        else
            MC_LOG_WARN("te: descriptor of %s is malformed: %s", p->name, mc_status_name(st));
        mc_free(r);
        return st;
    }
    atomic_store(&r->refs, 1);
    *r_p = r;
    return MC_OK;
}

mc_status_t mc_te_peer_get_desc(mc_te_peer_t *p, mc_te_rdesc_t **r_p, int *tp_p)
{
    pthread_mutex_lock(&p->mu);
    mc_status_t st = MC_OK;
    if (!p->desc && p->fail_ns && mc_now_ns() - p->fail_ns < 100000000ull) {
        st = p->fail_st; /* negative cache: no fetch storm against a dead peer */
    } else if (!p->desc) {
        mc_te_rdesc_t *r;
        st = fetch_desc(p, &r);
        p->fail_ns = st == MC_OK ? 0 : mc_now_ns();
        p->fail_st = st;
        if (st == MC_OK) {
            p->desc = r;
            p->tp = choose_transport(p->te, &r->d);
            MC_LOG_DEBUG("te: segment %s (pid %d) via %s", p->name, (int)r->d.pid,
                         g_tp[p->tp]->name);
        }
    }
    if (st == MC_OK) {
        atomic_fetch_add(&p->desc->refs, 1);
        *r_p = p->desc;
        *tp_p = p->tp;
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

void mc_te_peer_invalidate(mc_te_peer_t *p, mc_te_rdesc_t *r)
{
    pthread_mutex_lock(&p->mu);
    if (p->desc && (!r || p->desc == r)) {
        mc_te_rdesc_put(p->desc);
        p->desc = NULL;
    }
    pthread_mutex_unlock(&p->mu);
}

mc_te_peer_t *mc_te_peer_by_handle(mc_te_t *te, mc_te_segment_t seg)
{
    mc_te_peer_t *p = NULL;
    pthread_mutex_lock(&te->mu);
    if (seg >= 1 && seg <= te->n_peers)
        p = te->peers[seg - 1];
    pthread_mutex_unlock(&te->mu);
    return p;
}

/* ===================================== engine ========================================= */

static void format_name(char *out, size_t cap, const char *host, uint16_t port)
{
    /* the host was length-checked against MC_TE_NAME_MAX - 8 at create */
    int k = strchr(host, ':') ? snprintf(out, cap, "[%s]:%u", host, port)
                              : snprintf(out, cap, "%s:%u", host, port);
    if (k < 0 || (size_t)k >= cap)
        out[0] = '\0';
}

static mc_status_t te_listen(mc_te_t *te, const char *name)
{
    const char *colon = strrchr(name, ':');
    uint16_t port = 0;
    if (name[0] == '[') {
        const char *rb = strchr(name, ']');
        if (!rb || rb == name + 1 || (size_t)(rb - name - 1) >= sizeof(te->host))
            return MC_ERR_INVALID_PARAMS;
        memcpy(te->host, name + 1, (size_t)(rb - name - 1));
        te->host[rb - name - 1] = '\0';
        colon = rb[1] == ':' ? rb + 1 : NULL;
        if (rb[1] && !colon)
            return MC_ERR_INVALID_PARAMS;
    } else {
        size_t hl = colon ? (size_t)(colon - name) : strlen(name);
        if (hl == 0 || hl >= sizeof(te->host))
            return MC_ERR_INVALID_PARAMS;
        memcpy(te->host, name, hl);
        te->host[hl] = '\0';
    }
    if (colon) {
        char *end;
        errno = 0;
        long v = strtol(colon + 1, &end, 10);
        if (errno || end == colon + 1 || *end || v < 0 || v > 65535)
            return MC_ERR_INVALID_PARAMS;
        port = (uint16_t)v;
    }
    if (port != 0)
        return mc_net_listen(te->host, port, 1, &te->listen_fd, &te->port);
    /* pick a free port in [PORT_MIN, PORT_MAX], starting at a pseudo-random offset */
    uint32_t span = PORT_MAX - PORT_MIN + 1;
    uint32_t start = (uint32_t)(mc_now_ns() ^ ((uint64_t)getpid() * 2654435761u)) % span;
    for (uint32_t i = 0; i < span; i++) {
        uint16_t p = (uint16_t)(PORT_MIN + (start + i) % span);
        if (mc_net_listen(te->host, p, 1, &te->listen_fd, &te->port) == MC_OK)
            return MC_OK;
    }
    MC_LOG_ERROR("te: no free port in %d-%d on %s", PORT_MIN, PORT_MAX, te->host);
    return MC_ERR_IO;
}

/* Start transport k (fallback: transport.h, "Fallback"). */
static mc_status_t tp_start(mc_te_t *te, int k, const mc_te_transport_t *fallback)
{
    void *ctx = NULL;
    mc_status_t st = g_tp[k]->init(te, fallback, &ctx);
    if (st == MC_OK) {
        te->tp[k].ctx = ctx;
        te->tp[k].ops = g_tp[k];
    }
    return st;
}

static void tp_stop(mc_te_t *te, int k)
{
    mc_te_transport_t *t = tp_started(te, k);
    if (!t)
        return;
    t->ops->fini(t->ctx);
    t->ops = NULL;
    t->ctx = NULL;
}

/* Whether config field `field` = v lies in [lo, hi]; logs the field when it does not. */
static bool cfg_field_ok(const char *field, int64_t v, int64_t lo, int64_t hi)
{
    if (v >= lo && v <= hi)
        return true;
    MC_LOG_ERROR("te: config field %s = %lld is out of range (0 = default, or %lld..%lld)",
                 field, (long long)v, (long long)lo, (long long)hi);
    return false;
}

/* The tuning fields of cfg (te.h states each range). Zero is always valid. Fields whose
 * larger values are clamped (tcp_connections, worker_threads) and transfer_timeout_ms take
 * any value. */
static mc_status_t config_check(const mc_te_config_t *cfg)
{
    bool ok = true;
    ok &= cfg->slice_size == 0 || cfg_field_ok("slice_size", cfg->slice_size, MC_TE_MIN_SLICE,
                                                MC_TE_FRAME_MAX_PAYLOAD);
    ok &= cfg_field_ok("force_tcp", cfg->force_tcp, 0, 1);
    ok &= cfg_field_ok("hugepages", cfg->hugepages, -1, 1);
    if (cfg->hugepage_size && cfg->hugepage_size != MC_PAGES_HUGE_2MB &&
        cfg->hugepage_size != MC_PAGES_HUGE_1GB) {
        MC_LOG_ERROR("te: config field hugepage_size = %llu is not 0, 2097152 (2 MiB) or "
                     "1073741824 (1 GiB)", (unsigned long long)cfg->hugepage_size);
        ok = false;
    }
    ok &= cfg->tcp_stripe == 0 || cfg_field_ok("tcp_stripe", cfg->tcp_stripe, 1, MC_TE_MAX_STRIPE);
    ok &= cfg->tcp_socket_buf == 0 || cfg_field_ok("tcp_socket_buf", cfg->tcp_socket_buf,
                                                    MC_TE_MIN_SOCKET_BUF, MC_TE_MAX_SOCKET_BUF);
    ok &= cfg_field_ok("busy_poll_us", cfg->busy_poll_us, -1, MC_TE_MAX_BUSY_POLL_US);
    ok &= cfg->metadata_timeout_ms == 0 ||
          cfg_field_ok("metadata_timeout_ms", cfg->metadata_timeout_ms, MC_META_MIN_TIMEOUT_MS,
                       MC_META_MAX_TIMEOUT_MS);
    ok &= cfg_field_ok("redis_db_index", cfg->redis_db_index, 0, MC_META_REDIS_DB_MAX);
    ok &= cfg->tcp_idle_timeout_s == 0 ||
          cfg_field_ok("tcp_idle_timeout_s", cfg->tcp_idle_timeout_s, 1, MC_TE_MAX_IDLE_S);
    ok &= cfg->tcp_max_server_conns == 0 ||
          cfg_field_ok("tcp_max_server_conns", cfg->tcp_max_server_conns, MC_TE_MIN_SRV_CONNS,
                       MC_TE_MAX_SRV_CONNS);
    return ok ? MC_OK : MC_ERR_INVALID_PARAMS;
}

/* te's settings from the (checked) tuning fields of cfg: zero = the default. */
static void config_apply(mc_te_t *te, const mc_te_config_t *cfg)
{
    te->timeout_ms = cfg->transfer_timeout_ms ? cfg->transfer_timeout_ms
                                              : MC_TE_DEFAULT_TIMEOUT_MS;
    te->tcp_conns = cfg->tcp_connections ? cfg->tcp_connections : MC_TE_DEFAULT_CONNS;
    if (te->tcp_conns > MC_TE_MAX_CONNS)
        te->tcp_conns = MC_TE_MAX_CONNS;
    te->workers = cfg->worker_threads ? cfg->worker_threads : MC_TE_DEFAULT_WORKERS;
    if (te->workers > MC_TE_MAX_WORKERS)
        te->workers = MC_TE_MAX_WORKERS;
    te->slice_size = cfg->slice_size ? cfg->slice_size : MC_TE_DEFAULT_SLICE;
    te->force_tcp = cfg->force_tcp == 1 || strcmp(te->protocol, "tcp") == 0;
    te->hugepages_off = cfg->hugepages == -1;
    te->hugepage_size = (size_t)cfg->hugepage_size;
    te->tcp_stripe = cfg->tcp_stripe;
    te->tcp_socket_buf = cfg->tcp_socket_buf;
    te->idle_timeout_ns = (uint64_t)(cfg->tcp_idle_timeout_s ? cfg->tcp_idle_timeout_s
                                                             : MC_TE_DEFAULT_IDLE_S) *
                          1000000000ull;
    te->max_srv_conns = cfg->tcp_max_server_conns ? cfg->tcp_max_server_conns
                                                  : MC_TE_DEFAULT_SRV_CONNS;
    int32_t us = cfg->busy_poll_us ? cfg->busy_poll_us : MC_TE_DEFAULT_BUSY_POLL_US;
    te->busy_poll_ns = us > 0 ? (uint64_t)us * 1000 : 0;
    if (cfg->busy_poll_us) /* set explicitly: RPC waits of this process follow it too */
        mc_net_set_busy_poll_us(us > 0 ? (uint32_t)us : 0);
}

mc_status_t mc_te_create(const mc_te_config_t *cfg, mc_te_t **te_p)
{
    if (!cfg || !te_p || !cfg->metadata_uri)
        return MC_ERR_INVALID_PARAMS;
    const char *proto = cfg->protocol && *cfg->protocol ? cfg->protocol : "auto";
#ifdef MC_HAVE_UCX
    bool ucx_built = true;
#else
    bool ucx_built = false;
#endif
    if ((strcmp(proto, "ucx") == 0 && !ucx_built) || strcmp(proto, "rdma") == 0) {
        MC_LOG_ERROR("te: protocol %s is not built in", proto);
        return MC_ERR_NOT_SUPPORTED;
    }
    if (strcmp(proto, "auto") && strcmp(proto, "tcp") && strcmp(proto, "shm") &&
        strcmp(proto, "ucx")) {
        MC_LOG_ERROR("te: unknown protocol '%s'", proto);
        return MC_ERR_INVALID_PARAMS;
    }
    if (strcmp(proto, "ucx") == 0 && cfg->auth_token_file && *cfg->auth_token_file) {
        /* every port of an authenticated engine proves the token; UCX's cannot */
        MC_LOG_ERROR("te: protocol ucx cannot be authenticated (UCX's own connections and "
                     "one-sided RMA bypass the cluster token): use tcp/shm with a token file, or "
                     "ucx without one on a trusted network");
        return MC_ERR_NOT_SUPPORTED;
    }
    const char *name = cfg->local_server_name && *cfg->local_server_name
                           ? cfg->local_server_name : "127.0.0.1";
    if (strlen(name) >= MC_TE_NAME_MAX - 8)
        return MC_ERR_INVALID_PARAMS;
    if (config_check(cfg) != MC_OK)
        return MC_ERR_INVALID_PARAMS;
    mc_te_t *te = MC_NEW(mc_te_t);
    if (!te)
        return MC_ERR_NO_MEMORY;
    te->listen_fd = -1;
    snprintf(te->protocol, sizeof(te->protocol), "%s", proto);
    config_apply(te, cfg);
    mc_net_host_id(te->host_id, sizeof(te->host_id));
    te->pid = getpid();
    pthread_mutex_init(&te->mu, NULL);
    pthread_mutex_init(&te->desc_mu, NULL);
    pthread_mutex_init(&te->reg_mu, NULL);
    pthread_mutex_init(&te->notify_mu, NULL);
    mc_te_table_init(&te->table);

    mc_status_t st = mc_auth_load(cfg->auth_token_file, &te->auth);
    if (st != MC_OK) {
        MC_LOG_ERROR("te: auth_token_file %s unusable (%s): not starting", cfg->auth_token_file,
                     mc_status_name(st));
        goto fail;
    }
    te->tenant_bound = te->auth && mc_auth_client_tenant(te->auth)[0] != '\0';
    mc_meta_opts_t mopts = {.timeout_ms = cfg->metadata_timeout_ms,
                            .redis_username = cfg->redis_username,
                            .redis_password = cfg->redis_password,
                            .redis_db_index = cfg->redis_db_index,
                            .auth = te->auth}; /* borrowed: lives as long as the engine */
    st = mc_meta_open_opts(cfg->metadata_uri, &mopts, &te->meta);
    if (st != MC_OK) {
        char shown[256];
        MC_LOG_ERROR("te: metadata '%s': %s",
                     mc_meta_uri_for_log(cfg->metadata_uri, shown, sizeof(shown)),
                     mc_status_name(st));
        goto fail;
    }
    st = te_listen(te, name);
    if (st != MC_OK) {
        MC_LOG_ERROR("te: cannot listen for %s: %s", name, mc_status_name(st));
        goto fail;
    }
    format_name(te->local_name, sizeof(te->local_name), te->host, te->port);
    mc_auth_warn_if_open("transfer engine data port", te->host, te->auth);
    st = tp_start(te, MC_TE_TP_TCP, NULL);
    if (st != MC_OK)
        goto fail;
    /* requests shm cannot serve go to tcp (transport.h, "Fallback") */
    if (tp_start(te, MC_TE_TP_SHM, &te->tp[MC_TE_TP_TCP]) != MC_OK)
        MC_LOG_WARN("te: shared-memory transport unavailable; using tcp only");
    if (strcmp(te->protocol, "ucx") == 0 && g_tp[MC_TE_TP_UCX]) { /* ucx hook-up */
        st = tp_start(te, MC_TE_TP_UCX, NULL);
        if (st != MC_OK) {
            MC_LOG_ERROR("te: protocol ucx requested but UCX cannot start: %s",
                         mc_status_name(st));
            goto fail;
        }
    }
    pthread_mutex_lock(&te->reg_mu);
    st = te_publish(te);
    pthread_mutex_unlock(&te->reg_mu);
    if (st != MC_OK)
        goto fail;
    MC_LOG_INFO("te: %s serving (protocol %s%s, timeout %u ms, %u connections/peer, %u loops, "
                "%s)", te->local_name, te->protocol, te->force_tcp ? ", tcp to every peer" : "",
                te->timeout_ms, te->tcp_conns, te->workers,
                te->auth ? (te->tenant_bound ? "token required; ours is a tenant token: tcp "
                                               "to every peer, grants presented"
                                             : "cluster token required")
                         : "no authentication");
    *te_p = te;
    return MC_OK;
fail:
    mc_te_destroy(te);
    return st;
}

void mc_te_destroy(mc_te_t *te)
{
    if (!te)
        return;
    atomic_store(&te->stopping, 1);
    if (te->meta && !mc_meta_is_p2p(te->meta) && te->port) {
        char key[MC_TE_NAME_MAX + 32];
        snprintf(key, sizeof(key), "%s%s", MC_META_SEGMENT_PREFIX, te->local_name);
        mc_meta_del(te->meta, key);
    }
    /* tcp's loops stop first (ending its slices), its per-peer state is freed with the peers
     * below (tcp's peer_free does not use the stopped context); ucx ends its slices and drops
     * its per-peer state itself; shm, which runs no threads and hands its leftovers to tcp,
     * stops last. */
    mc_te_transport_t *tcp = tp_started(te, MC_TE_TP_TCP);
    if (tcp)
        tcp->ops->fini(tcp->ctx);
    tp_stop(te, MC_TE_TP_UCX); /* ucx hook-up */
    for (size_t i = 0; i < te->n_peers; i++) {
        mc_te_peer_t *p = te->peers[i];
        for (int k = 0; k < MC_TE_TP_COUNT; k++)
            if (tp_started(te, k) && te->tp[k].ops->peer_free)
                te->tp[k].ops->peer_free(tp_ctx(te, k), p);
        mc_te_rdesc_put(p->desc);
        for (int k = 0; k < MC_TE_PEER_GRANTS; k++)
            mc_free(p->grants[k].blob);
        pthread_mutex_destroy(&p->grant_mu);
        pthread_mutex_destroy(&p->mu);
        mc_free(p);
    }
    te->tp[MC_TE_TP_TCP].ops = NULL; /* stopped above */
    te->tp[MC_TE_TP_TCP].ctx = NULL;
    tp_stop(te, MC_TE_TP_SHM);
    mc_free(te->peers);
    for (size_t i = 0; i < te->n_batch_slots; i++) {
        mc_te_batch_impl_t *b = te->batches[i];
        if (!b)
            continue;
        for (size_t k = 0; k < b->n; k++)
            if (b->reqs[k].slices != &b->reqs[k].inline_slice)
                mc_free(b->reqs[k].slices);
        mc_free(b->reqs);
        pthread_mutex_destroy(&b->mu);
        pthread_cond_destroy(&b->cv);
        mc_free(b);
    }
    mc_free(te->batches);
    mc_free(te->batch_gen);
    while (te->shareables) {
        mc_te_shareable_t *s = te->shareables;
        te->shareables = s->next;
        munmap(s->addr, s->len);
        close(s->fd);
        mc_free(s);
    }
    if (te->listen_fd >= 0)
        close(te->listen_fd);
    mc_te_table_fini(&te->table);
    if (te->meta)
        mc_meta_close(te->meta);
    mc_free(te->desc_json);
    mc_auth_free(te->auth);
    mc_te_notify_fini(te);
    pthread_mutex_destroy(&te->notify_mu);
    pthread_mutex_destroy(&te->mu);
    pthread_mutex_destroy(&te->desc_mu);
    pthread_mutex_destroy(&te->reg_mu);
    mc_free(te);
}

const char *mc_te_metadata_uri_for_log(const char *uri, char *buf, size_t len)
{
    return mc_meta_uri_for_log(uri, buf, len);
}

void mc_te_conn_stats(mc_te_t *te, mc_te_conn_stats_t *stats_p)
{
    *stats_p = (mc_te_conn_stats_t){
        .open = atomic_load(&te->conn_open),
        .closed_unauth = atomic_load(&te->conn_closed_unauth),
        .closed_idle = atomic_load(&te->conn_closed_idle),
        .closed_slow = atomic_load(&te->conn_closed_slow),
        .displaced = atomic_load(&te->conn_displaced),
        .refused_full = atomic_load(&te->conn_refused_full),
        .denied = atomic_load(&te->conn_denied),
        .grants_refused = atomic_load(&te->conn_grants_refused),
        .grants_shared = atomic_load(&te->conn_grants_shared),
    };
}

const mc_auth_t *mc_te_keyring(const mc_te_t *te)
{
    return te ? te->auth : NULL;
}

bool mc_te_tenant_bound(const mc_te_t *te) { return te && te->tenant_bound; }

mc_status_t mc_te_grant_present(mc_te_t *te, mc_te_segment_t seg, const void *grant, size_t len)
{
    if (!te || !te->tenant_bound)
        return MC_OK;
    mc_te_peer_t *p = mc_te_peer_by_handle(te, seg);
    mc_grant_view_t g;
    if (!p || mc_grant_parse(grant, len, &g) != MC_OK || g.size != len)
        return MC_ERR_INVALID_PARAMS;
    if (p->is_local)
        return MC_OK;
    uint8_t *copy = mc_malloc(len);
    if (!copy)
        return MC_ERR_NO_MEMORY;
    memcpy(copy, grant, len);
    pthread_mutex_lock(&p->grant_mu);
    mc_te_peer_grant_t *e = &p->grants[p->grant_seq % MC_TE_PEER_GRANTS];
    mc_free(e->blob);
    *e = (mc_te_peer_grant_t){.blob = copy, .len = (uint32_t)len, .expiry_ms = g.expiry_ms};
    p->grant_seq++;
    pthread_mutex_unlock(&p->grant_mu);
    return MC_OK;
}

uint8_t *mc_te_peer_grant_frame(mc_te_peer_t *p, uint64_t *seq_io, uint32_t *len_p)
{
    uint8_t *out = NULL;
    pthread_mutex_lock(&p->grant_mu);
    uint64_t end = p->grant_seq, first = *seq_io;
    if (first == end) { /* nothing new: the common case between lookups */
        pthread_mutex_unlock(&p->grant_mu);
        return NULL;
    }
    if (end > MC_TE_PEER_GRANTS && first < end - MC_TE_PEER_GRANTS)
        first = end - MC_TE_PEER_GRANTS;
    *seq_io = end;
    /* sizes: unexpired grants packed oldest first into frames of at most MC_TE_FRAME_MAX_GRANT
     * body bytes (a grant is never split: each is at most MC_GRANT_MAX_SIZE) */
    uint64_t now = mc_wall_ms(), total = 0, body = 0;
    for (uint64_t q = first; q < end; q++) {
        const mc_te_peer_grant_t *e = &p->grants[q % MC_TE_PEER_GRANTS];
        if (e->expiry_ms <= now)
            continue;
        if (body && body + e->len > MC_TE_FRAME_MAX_GRANT) {
            total += MC_TE_FRAME_HDR_SIZE + body;
            body = 0;
        }
        body += e->len;
    }
    if (body)
        total += MC_TE_FRAME_HDR_SIZE + body;
    if (total && (out = mc_malloc(total))) {
        uint8_t *hdr = NULL, *o = out;
        body = 0;
        for (uint64_t q = first; q <= end; q++) {
            const mc_te_peer_grant_t *e = q < end ? &p->grants[q % MC_TE_PEER_GRANTS] : NULL;
            if (e && e->expiry_ms <= now)
                continue;
            if (hdr && (!e || body + e->len > MC_TE_FRAME_MAX_GRANT)) { /* close the frame */
                mc_te_frame_t h = {.magic = MC_TE_FRAME_MAGIC, .version = MC_TE_FRAME_VERSION,
                                   .opcode = MC_TE_OP_GRANT, .length = body};
                mc_te_frame_encode(&h, hdr);
                hdr = NULL;
                body = 0;
            }
            if (!e)
                break;
            if (!hdr) {
                hdr = o;
                o += MC_TE_FRAME_HDR_SIZE;
            }
            memcpy(o, e->blob, e->len);
            o += e->len;
            body += e->len;
        }
        *len_p = (uint32_t)total;
    }
    pthread_mutex_unlock(&p->grant_mu);
    return out;
}

const char *mc_te_local_name(const mc_te_t *te)
{
    return te ? te->local_name : "";
}

uint16_t mc_te_rpc_port(const mc_te_t *te)
{
    return te ? te->port : 0;
}

/* ================================ shareable memory ==================================== */

#define SHAREABLE_NAME "mc-te-shareable" /* the memfds' name, in /proc/<pid>/maps */

void *mc_te_alloc_shareable(mc_te_t *te, size_t len)
{
    if (!te || len == 0)
        return NULL;
    size_t alen = 0, page;
    int fd = -1;
    void *p;
    if (te->hugepage_size) {
        page = te->hugepage_size; /* required: fails (logged) rather than use other pages */
        p = mc_pages_shared_alloc(SHAREABLE_NAME, len, te->hugepage_size, 0, &alen, &fd);
        if (!p)
            return NULL;
    } else {
        /* Huge pages when the host has them reserved (vm.nr_hugepages) and the buffer is at
         * least one: on our VMs a 4 KiB-page mapping's first touch costs ~5 us a page and
         * 32 MiB reads through it ran 1.0-12 GiB/s, on huge pages 10-14 GiB/s
         * (docs/benchmarks.md). Config hugepages = -1 turns them off. */
        bool try_huge = len >= MC_TE_HUGE_PAGE && !te->hugepages_off;
        p = try_huge ? mc_pages_shared_alloc(SHAREABLE_NAME, len, MC_TE_HUGE_PAGE, 1, &alen, &fd)
                     : NULL;
        bool huge = p != NULL;
        if (huge)
            MC_LOG_INFO("te: %zu bytes of shareable memory on 2 MiB huge pages", alen);
        else if (!(p = mc_pages_shared_alloc(SHAREABLE_NAME, len, 0, 0, &alen, &fd)))
            return NULL;
        else if (try_huge)
            MC_LOG_INFO("te: %zu bytes of shareable memory on 4 KiB pages (too few free huge "
                        "pages: vm.nr_hugepages)", alen);
        page = huge ? MC_TE_HUGE_PAGE : (size_t)sysconf(_SC_PAGESIZE);
    }
    mc_te_shareable_t *s = MC_NEW(mc_te_shareable_t);
    if (!s) {
        munmap(p, alen);
        close(fd);
        return NULL;
    }
    s->addr = p;
    s->len = alen;
    s->page = page;
    s->fd = fd;
    pthread_mutex_lock(&te->mu);
    s->next = te->shareables;
    te->shareables = s;
    pthread_mutex_unlock(&te->mu);
    return p;
}

uint64_t mc_te_shareable_page_size(mc_te_t *te, const void *addr)
{
    if (!te || !addr)
        return 0;
    uint64_t page = 0;
    pthread_mutex_lock(&te->mu);
    for (mc_te_shareable_t *s = te->shareables; s && !page; s = s->next)
        if ((const char *)addr >= (const char *)s->addr &&
            (const char *)addr < (const char *)s->addr + s->len)
            page = s->page;
    pthread_mutex_unlock(&te->mu);
    return page;
}

void mc_te_free_shareable(mc_te_t *te, void *addr)
{
    if (!te || !addr)
        return;
    pthread_mutex_lock(&te->mu);
    mc_te_shareable_t **pp = &te->shareables, *s = NULL;
    for (; *pp; pp = &(*pp)->next) {
        if ((*pp)->addr == addr) {
            s = *pp;
            *pp = s->next;
            break;
        }
    }
    pthread_mutex_unlock(&te->mu);
    if (!s) {
        MC_LOG_WARN("te: free_shareable(%p): not a shareable allocation", addr);
        return;
    }
    /* Registrations inside it must not outlive it. */
    for (;;) {
        uint64_t found = 0;
        pthread_rwlock_rdlock(&te->table.lock);
        for (size_t i = 0; i < te->table.n && !found; i++) {
            mc_te_lbuf_t *b = te->table.bufs[i];
            if (b->addr >= (uint64_t)(uintptr_t)s->addr &&
                b->addr < (uint64_t)(uintptr_t)s->addr + s->len)
                found = b->addr;
        }
        pthread_rwlock_unlock(&te->table.lock);
        if (!found)
            break;
        MC_LOG_WARN("te: free_shareable: buffer 0x%llx still registered; unregistering",
                    (unsigned long long)found);
        if (mc_te_unregister(te, (void *)(uintptr_t)found) != MC_OK) {
            MC_LOG_ERROR("te: free_shareable: cannot unregister 0x%llx; leaking the mapping",
                         (unsigned long long)found);
            mc_free(s); /* keep memory mapped: peers may still use it */
            return;
        }
    }
    munmap(s->addr, s->len);
    close(s->fd);
    mc_free(s);
}

/* =================================== registration ===================================== */

mc_status_t mc_te_register(mc_te_t *te, void *addr, size_t len, const char *location)
{
    if (!te || !addr || len == 0 || (uint64_t)(uintptr_t)addr + len < (uint64_t)(uintptr_t)addr)
        return MC_ERR_INVALID_PARAMS;
    if (location && strlen(location) >= MC_TE_LOCATION_MAX)
        return MC_ERR_INVALID_PARAMS;
    mc_te_lbuf_t *b = MC_NEW(mc_te_lbuf_t);
    if (!b)
        return MC_ERR_NO_MEMORY;
    b->addr = (uint64_t)(uintptr_t)addr;
    b->len = len;
    snprintf(b->location, sizeof(b->location), "%s", location ? location : "cpu:0");
    b->shm_fd = -1;
    b->slot = -1;
    pthread_mutex_lock(&te->mu);
    for (mc_te_shareable_t *s = te->shareables; s; s = s->next) {
        uint64_t sa = (uint64_t)(uintptr_t)s->addr;
        if (b->addr >= sa && b->addr - sa < s->len && len <= s->len - (b->addr - sa)) {
            b->shm_fd = s->fd;
            b->shm_offset = b->addr - sa;
        }
    }
    pthread_mutex_unlock(&te->mu);
    pthread_mutex_lock(&te->reg_mu);
    mc_status_t st = MC_OK;
    mc_te_transport_t *ucx = tp_started(te, MC_TE_TP_UCX), *shm = tp_started(te, MC_TE_TP_SHM);
    /* ucx hook-up: map (and pack the rkey) before the buffer becomes visible */
    if (ucx && (st = ucx->ops->on_register(ucx->ctx, b)) != MC_OK) {
        pthread_mutex_unlock(&te->reg_mu);
        MC_LOG_WARN("te: register %p+%zu: UCX cannot map it: %s", addr, len, mc_status_name(st));
        mc_free(b);
        return st;
    }
    st = mc_te_table_insert(&te->table, b);
    if (st != MC_OK) {
        if (ucx)
            ucx->ops->on_unregister_done(ucx->ctx, b);
        pthread_mutex_unlock(&te->reg_mu);
        MC_LOG_WARN("te: register %p+%zu refused: %s", addr, len, mc_status_name(st));
        mc_free(b);
        return st;
    }
    if (shm && shm->ops->on_register(shm->ctx, b) != MC_OK)
        b->slot = -1; /* peers then use the owner-side copy path for it */
    st = te_publish(te);
    pthread_mutex_unlock(&te->reg_mu);
    return st;
}

mc_status_t mc_te_unregister(mc_te_t *te, void *addr)
{
    if (!te || !addr)
        return MC_ERR_INVALID_PARAMS;
    mc_te_lbuf_t *b;
    mc_status_t st = mc_te_table_begin_remove(&te->table, (uint64_t)(uintptr_t)addr, &b);
    if (st != MC_OK)
        return st;
    uint64_t deadline = mc_now_ns() + (uint64_t)te->timeout_ms * 1000000ull;
    mc_te_transport_t *ucx = tp_started(te, MC_TE_TP_UCX), *shm = tp_started(te, MC_TE_TP_SHM);
    bool shm_hooked = shm && b->slot >= 0;
    if (shm_hooked)
        st = shm->ops->on_unregister(shm->ctx, b, deadline);
    if (st == MC_OK)
        st = mc_te_table_wait_drain(&te->table, b, deadline);
    pthread_mutex_lock(&te->reg_mu);
    if (st != MC_OK) {
        if (shm_hooked)
            shm->ops->on_unregister_abort(shm->ctx, b);
        mc_te_table_finish_remove(&te->table, b, false);
        pthread_mutex_unlock(&te->reg_mu);
        MC_LOG_WARN("te: unregister %p: transfers did not drain in %u ms", addr, te->timeout_ms);
        return MC_ERR_BUSY;
    }
    if (shm_hooked)
        shm->ops->on_unregister_done(shm->ctx, b);
    if (ucx) /* ucx hook-up: ucp_mem_unmap, after the in-flight count drained above */
        ucx->ops->on_unregister_done(ucx->ctx, b);
    mc_te_table_finish_remove(&te->table, b, true);
    st = te_publish(te);
    pthread_mutex_unlock(&te->reg_mu);
    return st;
}

mc_status_t mc_te_set_serve_until(mc_te_t *te, void *addr, uint64_t until_ns)
{
    if (!te || !addr)
        return MC_ERR_INVALID_PARAMS;
    mc_te_lbuf_t *b;
    pthread_mutex_lock(&te->reg_mu); /* orders with the shm slot's (re)assignment */
    mc_status_t st = mc_te_table_acquire(&te->table, (uint64_t)(uintptr_t)addr, 1, &b);
    if (st == MC_OK && b->addr != (uint64_t)(uintptr_t)addr) {
        mc_te_table_release(&te->table, b);
        st = MC_ERR_OUT_OF_RANGE;
    }
    if (st == MC_OK) {
        atomic_store(&b->serve_until_ns, until_ns);
        for (int k = 0; k < MC_TE_TP_COUNT; k++) {
            mc_te_transport_t *t = tp_started(te, k);
            if (t && t->ops->on_serve_until)
                t->ops->on_serve_until(t->ctx, b);
        }
        mc_te_table_release(&te->table, b);
    }
    pthread_mutex_unlock(&te->reg_mu);
    return st == MC_OK ? MC_OK : MC_ERR_OBJECT_NOT_FOUND;
}

/* ===================================== segments ======================================= */

mc_status_t mc_te_segment_open(mc_te_t *te, const char *name, mc_te_segment_t *seg_p)
{
    if (!te || !name || !seg_p || !*name || strlen(name) >= MC_TE_NAME_MAX)
        return MC_ERR_INVALID_PARAMS;
    mc_te_peer_t *p = NULL;
    pthread_mutex_lock(&te->mu);
    for (size_t i = 0; i < te->n_peers; i++) {
        if (strcmp(te->peers[i]->name, name) == 0) {
            p = te->peers[i];
            break;
        }
    }
    if (!p) {
        bool local = strcmp(name, te->local_name) == 0;
        char host[MC_HOST_MAX];
        uint16_t port = 0;
        if (!local && mc_net_split_hostport(name, host, &port) != MC_OK) {
            pthread_mutex_unlock(&te->mu);
            MC_LOG_WARN("te: segment name '%s' is not host:port", name);
            return MC_ERR_INVALID_PARAMS;
        }
        if (mc_array_reserve(&te->peers, &te->cap_peers, te->n_peers + 1, 8) != MC_OK) {
            pthread_mutex_unlock(&te->mu);
            return MC_ERR_NO_MEMORY;
        }
        p = MC_NEW(mc_te_peer_t);
        if (!p) {
            pthread_mutex_unlock(&te->mu);
            return MC_ERR_NO_MEMORY;
        }
        p->te = te;
        p->idx = (uint32_t)te->n_peers;
        snprintf(p->name, sizeof(p->name), "%s", name);
        if (!local)
            snprintf(p->host, sizeof(p->host), "%s", host);
        p->port = port;
        p->is_local = local;
        pthread_mutex_init(&p->mu, NULL);
        pthread_mutex_init(&p->grant_mu, NULL);
        te->peers[te->n_peers++] = p;
    }
    pthread_mutex_unlock(&te->mu);
    if (!p->is_local) {
        mc_te_rdesc_t *r;
        int tp;
        mc_status_t st = mc_te_peer_get_desc(p, &r, &tp);
        if (st != MC_OK)
            return st;
        mc_te_rdesc_put(r);
    }
    *seg_p = p->idx + 1;
    return MC_OK;
}

mc_status_t mc_te_segment_close(mc_te_t *te, mc_te_segment_t seg)
{
    mc_te_peer_t *p = te ? mc_te_peer_by_handle(te, seg) : NULL;
    if (!p)
        return MC_ERR_INVALID_PARAMS;
    mc_te_peer_invalidate(p, NULL);
    pthread_mutex_lock(&p->mu);
    p->fail_ns = 0;
    pthread_mutex_unlock(&p->mu);
    return MC_OK;
}

mc_status_t mc_te_segment_first_buffer(mc_te_t *te, mc_te_segment_t seg, uint64_t *addr_p)
{
    mc_te_peer_t *p = te ? mc_te_peer_by_handle(te, seg) : NULL;
    if (!p || !addr_p)
        return MC_ERR_INVALID_PARAMS;
    mc_status_t st = MC_ERR_OBJECT_NOT_FOUND;
    if (p->is_local) {
        pthread_rwlock_rdlock(&te->table.lock);
        if (te->table.n > 0) {
            *addr_p = te->table.bufs[0]->addr;
            st = MC_OK;
        }
        pthread_rwlock_unlock(&te->table.lock);
        return st;
    }
    /* always fresh: callers use this right after the peer registered */
    mc_te_peer_invalidate(p, NULL);
    mc_te_rdesc_t *r;
    int tp;
    st = mc_te_peer_get_desc(p, &r, &tp);
    if (st != MC_OK)
        return st;
    if (r->d.n_buffers > 0)
        *addr_p = r->d.buffers[0].addr;
    else
        st = MC_ERR_OBJECT_NOT_FOUND;
    mc_te_rdesc_put(r);
    return st;
}

/* ===================================== batches ======================================== */

/* The final state, the outstanding count and the wake-up change together under b->mu, so
 * whoever frees the batch (after seeing outstanding == 0 under b->mu) cannot free it while a
 * finalizer still touches it, and a caller that saw every state final and then frees the batch
 * finds outstanding == 0. */
static void req_finalize(mc_te_req_t *r)
{
    int e = atomic_load(&r->error);
    int state = e == MC_OK ? MC_TE_COMPLETED : e == MC_ERR_TIMEOUT ? MC_TE_TIMEOUT : MC_TE_FAILED;
    mc_te_batch_impl_t *b = r->batch;
    pthread_mutex_lock(&b->mu);
    atomic_store(&r->state, state);
    bool last = atomic_fetch_sub(&b->outstanding, 1) == 1;
    if (atomic_load(&b->waiters) > 0 && (last || (size_t)(r - b->reqs) < b->wait_upto))
        pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

void mc_te_slice_done(mc_te_slice_t *s, mc_status_t st, uint64_t bytes)
{
    mc_te_req_t *r = s->req;
    if (st != MC_OK) {
        int z = MC_OK;
        atomic_compare_exchange_strong(&r->error, &z, (int)st);
    }
    if (bytes)
        atomic_fetch_add(&r->transferred, bytes);
    if (atomic_fetch_sub(&r->remaining, 1) == 1)
        req_finalize(r);
}

static mc_te_batch_impl_t *batch_new(mc_te_t *te, size_t cap)
{
    mc_te_batch_impl_t *b = MC_NEW(mc_te_batch_impl_t);
    if (!b)
        return NULL;
    b->reqs = mc_calloc(cap, sizeof(*b->reqs));
    if (!b->reqs) {
        mc_free(b);
        return NULL;
    }
    b->te = te;
    b->cap = cap;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    return b;
}

static void batch_delete(mc_te_batch_impl_t *b)
{
    /* wait out a finalizer still inside its critical section */
    pthread_mutex_lock(&b->mu);
    pthread_mutex_unlock(&b->mu);
    for (size_t k = 0; k < b->n; k++)
        if (b->reqs[k].slices != &b->reqs[k].inline_slice)
            mc_free(b->reqs[k].slices);
    mc_free(b->reqs);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    mc_free(b);
}

static mc_te_batch_impl_t *batch_lookup(mc_te_t *te, mc_te_batch_t h)
{
    uint64_t slot = (h & 0xffffffffu);
    uint32_t gen = (uint32_t)(h >> 32);
    mc_te_batch_impl_t *b = NULL;
    pthread_mutex_lock(&te->mu);
    if (slot >= 1 && slot <= te->n_batch_slots && te->batch_gen[slot - 1] == gen)
        b = te->batches[slot - 1];
    pthread_mutex_unlock(&te->mu);
    return b;
}

/* Remove b from the slot table if handle h still names it. */
static bool batch_take(mc_te_t *te, mc_te_batch_t h, mc_te_batch_impl_t *b)
{
    uint64_t slot = (h & 0xffffffffu);
    bool ok = false;
    pthread_mutex_lock(&te->mu);
    if (slot >= 1 && slot <= te->n_batch_slots && te->batches[slot - 1] == b &&
        te->batch_gen[slot - 1] == (uint32_t)(h >> 32)) {
        te->batches[slot - 1] = NULL;
        te->batch_gen[slot - 1]++;
        ok = true;
    }
    pthread_mutex_unlock(&te->mu);
    return ok;
}

mc_status_t mc_te_batch_alloc(mc_te_t *te, size_t max_requests, mc_te_batch_t *batch_p)
{
    if (!te || !batch_p || max_requests == 0)
        return MC_ERR_INVALID_PARAMS;
    if (max_requests > MC_TE_MAX_BATCH)
        return MC_ERR_TOO_LARGE;
    mc_te_batch_impl_t *b = batch_new(te, max_requests);
    if (!b)
        return MC_ERR_NO_MEMORY;
    pthread_mutex_lock(&te->mu);
    size_t slot = te->n_batch_slots;
    for (size_t i = 0; i < te->n_batch_slots; i++) {
        if (!te->batches[i]) {
            slot = i;
            break;
        }
    }
    if (slot == te->n_batch_slots) {
        /* both slot arrays grow alike; n_batch_slots counts the slots both have */
        size_t need = te->n_batch_slots + 1;
        if (mc_array_reserve(&te->batches, &te->cap_batches, need, 16) != MC_OK ||
            mc_array_reserve(&te->batch_gen, &te->cap_batch_gen, need, 16) != MC_OK) {
            pthread_mutex_unlock(&te->mu);
            batch_delete(b);
            return MC_ERR_NO_MEMORY;
        }
        size_t ncap = te->cap_batches < te->cap_batch_gen ? te->cap_batches : te->cap_batch_gen;
        for (size_t i = te->n_batch_slots; i < ncap; i++) {
            te->batches[i] = NULL;
            te->batch_gen[i] = 1;
        }
        te->n_batch_slots = ncap;
    }
    te->batches[slot] = b;
    *batch_p = ((uint64_t)te->batch_gen[slot] << 32) | (uint64_t)(slot + 1);
    pthread_mutex_unlock(&te->mu);
    return MC_OK;
}

/* A slice's dispatch group: its peer and transport. */
static uint64_t slice_group(const mc_te_slice_t *s)
{
    return ((uint64_t)s->req->peer->idx << 2) | (uint64_t)s->req->tp; /* tp < 4 */
}

static int cmp_slice_peer(const void *a, const void *b)
{
    const mc_te_slice_t *x = *(mc_te_slice_t *const *)a, *y = *(mc_te_slice_t *const *)b;
    uint64_t kx = slice_group(x), ky = slice_group(y);
    if (kx != ky)
        return kx < ky ? -1 : 1;
    return x < y ? -1 : x > y; /* keep submission order (slices/requests are contiguous) */
}

void mc_te_copy_hashed(mc_te_read_hash_t *h, void *dst, const void *src, size_t n,
                       const void *next)
{
    if (!h->cont) {
        h->hash = mc_payload_copy_hash(dst, src, n, next);
        h->hashed = true;
        return;
    }
    /* continuing the caller's stream: piece by piece, each hashed right after its copy while
     * it is still in the first caches (no second pass over the range from memory) */
    for (size_t off = 0; off < n; off += MC_TE_HASH_PIECE) {
        size_t k = n - off < MC_TE_HASH_PIECE ? n - off : MC_TE_HASH_PIECE;
        mc_payload_copy((uint8_t *)dst + off, (const uint8_t *)src + off, k);
        mc_hash_stream_update(h->cont, (uint8_t *)dst + off, k);
    }
    h->hashed = true;
}

/* Local segment: copy in the calling thread under the table's in-flight reference. */
static void local_copy(mc_te_t *te, mc_te_req_t *r, const mc_te_request_t *u)
{
    mc_te_lbuf_t *b;
    mc_status_t st = mc_te_table_acquire_served(&te->table, u->target_addr, u->length, &b);
    if (st == MC_OK) {
        void *remote = (void *)(uintptr_t)u->target_addr;
        mc_te_read_hash_t *h = r->inline_slice.hash_out;
        bool apart = (uint8_t *)u->local + u->length <= (uint8_t *)remote ||
                     (uint8_t *)remote + u->length <= (uint8_t *)u->local;
        if (u->opcode == MC_TE_READ && h && apart) {
            mc_te_copy_hashed(h, u->local, remote, u->length, NULL);
        } else if (u->opcode == MC_TE_READ)
            memmove(u->local, remote, u->length);
        else
            memmove(remote, u->local, u->length);
        mc_te_table_release(&te->table, b);
    }
    mc_te_slice_done(&r->inline_slice, st, st == MC_OK ? u->length : 0);
}

/* Submit, phase 1: validate the whole call; nothing is started before this is through. */
static mc_status_t submit_validate(mc_te_t *te, const mc_te_request_t *reqs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const mc_te_request_t *u = &reqs[i];
        if (u->opcode != MC_TE_READ && u->opcode != MC_TE_WRITE)
            return MC_ERR_INVALID_PARAMS;
        if (u->length > 0 && !u->local)
            return MC_ERR_INVALID_PARAMS;
        if ((uint64_t)(uintptr_t)u->local + u->length < (uint64_t)(uintptr_t)u->local)
            return MC_ERR_INVALID_PARAMS;
        if (!mc_te_peer_by_handle(te, u->target))
            return MC_ERR_INVALID_PARAMS;
    }
    return MC_OK;
}

/* Submit, phase 2: warm the descriptor cache before taking b->mu, so that network fetches do
 * not happen under the batch lock (completions on the event loops take it). */
static void submit_warm_descs(mc_te_t *te, const mc_te_request_t *reqs, size_t n)
{
    mc_te_peer_t *last = NULL;
    for (size_t i = 0; i < n; i++) {
        mc_te_peer_t *p = mc_te_peer_by_handle(te, reqs[i].target);
        if (p != last && !p->is_local && reqs[i].length > 0) {
            mc_te_rdesc_t *r;
            int tp;
            if (mc_te_peer_get_desc(p, &r, &tp) == MC_OK)
                mc_te_rdesc_put(r);
        }
        last = p;
    }
}

/* Submit, phase 3 for one request: resolve its peer and transport and cut it into slices
 * (*slices_p += their number). A failure of the request itself (range overflow, descriptor
 * unavailable) is kept in r->error and ends it at dispatch; only MC_ERR_NO_MEMORY fails the
 * submit (the caller then undoes r too). prev: the request built just before in this submit,
 * or NULL: one to the same peer lends its descriptor (one more reference), so a batch to one
 * peer takes the peer's lock once, not once per request. */
static mc_status_t req_build(mc_te_t *te, mc_te_req_t *r, const mc_te_request_t *u,
                             const mc_te_req_t *prev, mc_te_batch_impl_t *b, uint64_t deadline,
                             size_t *slices_p, mc_te_read_hash_t *hash)
{
    memset(r, 0, sizeof(*r));
    r->batch = b;
    r->deadline_ns = deadline;
    r->peer = mc_te_peer_by_handle(te, u->target);
    r->slices = &r->inline_slice;
    r->tp = -1;
    mc_status_t pre = MC_OK; /* request-level failure, decided before dispatch */
    if (u->length == 0) {
        r->n_slices = 0;
    } else if (u->target_addr + u->length < u->target_addr) {
        pre = MC_ERR_OUT_OF_RANGE;
    } else if (!r->peer->is_local && prev && prev->peer == r->peer && prev->desc) {
        atomic_fetch_add(&prev->desc->refs, 1);
        r->desc = prev->desc;
        r->tp = prev->tp;
    } else if (!r->peer->is_local) {
        mc_status_t ds = mc_te_peer_get_desc(r->peer, &r->desc, &r->tp);
        if (ds != MC_OK)
            pre = ds == MC_ERR_TIMEOUT ? MC_ERR_TIMEOUT : MC_ERR_TRANSFER_FAIL;
    }
    if (pre != MC_OK) {
        atomic_store(&r->error, (int)pre);
        r->n_slices = 0;
    } else if (u->length > 0 && r->tp >= 0) {
        uint64_t ms = g_tp[r->tp]->max_slice(tp_ctx(te, r->tp));
        uint64_t ns = (u->length + ms - 1) / ms;
        if (ns > 1) {
            r->slices = mc_calloc((size_t)ns, sizeof(*r->slices));
            if (!r->slices) {
                r->slices = &r->inline_slice;
                return MC_ERR_NO_MEMORY;
            }
        }
        r->n_slices = (uint32_t)ns;
        for (uint64_t k = 0; k < ns; k++) {
            mc_te_slice_t *s = &r->slices[k];
            uint64_t off = k * ms;
            s->req = r;
            s->opcode = u->opcode;
            s->local = (uint8_t *)u->local + off;
            s->remote = u->target_addr + off;
            s->len = u->length - off < ms ? u->length - off : ms;
        }
        if (hash && u->opcode == MC_TE_READ) {
            r->hash_out = hash;
            if (ns == 1)
                r->slices[0].hash_out = hash;
        }
        *slices_p += ns;
    } else if (u->length > 0) { /* local segment */
        r->n_slices = 1;
        r->inline_slice.req = r;
        r->inline_slice.hash_out = hash;
    }
    return MC_OK;
}

/* Undo phase 3 for requests [base, base + count) of b (under b->mu). */
static void submit_undo(mc_te_batch_impl_t *b, size_t base, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        mc_te_req_t *r = &b->reqs[base + i];
        if (r->slices != &r->inline_slice)
            mc_free(r->slices);
        mc_te_rdesc_put(r->desc);
        memset(r, 0, sizeof(*r));
    }
}

/* Submit, phase 4 (under b->mu): the requests become part of b; from here on every one ends
 * through its status and the submit returns MC_OK. */
static void submit_commit(mc_te_batch_impl_t *b, size_t base, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        mc_te_req_t *r = &b->reqs[base + i];
        atomic_store(&r->remaining, r->n_slices ? r->n_slices : 1);
        atomic_store(&r->state, MC_TE_PENDING);
    }
    b->n = base + n;
    atomic_fetch_add(&b->outstanding, n);
}

/* Submit, phase 5: end the requests that failed before dispatch, copy those on the local
 * segment, and hand the remote slices to their transports, grouped by peer and transport
 * (list: room for every remote slice). Then drop the descriptors borrowed for dispatch. */
static void submit_dispatch(mc_te_t *te, mc_te_batch_impl_t *b, size_t base,
                            const mc_te_request_t *reqs, size_t n, mc_te_slice_t **list)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        mc_te_req_t *r = &b->reqs[base + i];
        if (r->n_slices == 0) { /* zero length or failed before dispatch */
            r->inline_slice.req = r;
            mc_te_slice_done(&r->inline_slice, (mc_status_t)atomic_load(&r->error), 0);
        } else if (r->peer->is_local) {
            local_copy(te, r, &reqs[i]);
        } else {
            for (uint32_t s = 0; s < r->n_slices; s++)
                list[k++] = &r->slices[s];
        }
    }
    bool grouped = true; /* in group order already (a batch to one peer): nothing to sort */
    for (size_t i = 1; i < k && grouped; i++)
        grouped = slice_group(list[i - 1]) <= slice_group(list[i]);
    if (!grouped)
        qsort(list, k, sizeof(*list), cmp_slice_peer);
    for (size_t i = 0; i < k;) {
        size_t j = i + 1;
        while (j < k && list[j]->req->peer == list[i]->req->peer &&
               list[j]->req->tp == list[i]->req->tp)
            j++;
        mc_te_req_t *r0 = list[i]->req;
        g_tp[r0->tp]->submit(tp_ctx(te, r0->tp), r0->peer, r0->desc, &list[i], j - i);
        i = j;
    }
    for (size_t i = 0; i < n; i++) {
        mc_te_req_t *r = &b->reqs[base + i];
        mc_te_rdesc_put(r->desc);
        r->desc = NULL;
    }
}

/* The phases above, in order: a failed submit leaves nothing behind (transport.h). hashes:
 * NULL, or one per request (mc_te_transfer_start_hashed). */
static mc_status_t batch_submit(mc_te_t *te, mc_te_batch_impl_t *b, const mc_te_request_t *reqs,
                                size_t n, mc_te_read_hash_t *hashes)
{
    mc_status_t st = submit_validate(te, reqs, n);
    if (st != MC_OK)
        return st;
    submit_warm_descs(te, reqs, n);
    pthread_mutex_lock(&b->mu);
    if (n > b->cap - b->n) {
        pthread_mutex_unlock(&b->mu);
        return MC_ERR_TOO_LARGE;
    }
    size_t base = b->n;
    uint64_t deadline = mc_now_ns() + (uint64_t)te->timeout_ms * 1000000ull;
    size_t total_slices = 0, built = 0;
    for (; built < n && st == MC_OK; built++)
        st = req_build(te, &b->reqs[base + built], &reqs[built],
                       built ? &b->reqs[base + built - 1] : NULL, b, deadline, &total_slices,
                       hashes ? &hashes[built] : NULL);
    mc_te_slice_t **list = NULL;
    if (st == MC_OK && total_slices > 0) {
        list = mc_calloc(total_slices, sizeof(*list));
        if (!list)
            st = MC_ERR_NO_MEMORY;
    }
    if (st != MC_OK) {
        submit_undo(b, base, built); /* built counts the request that failed, too */
        pthread_mutex_unlock(&b->mu);
        return st;
    }
    submit_commit(b, base, n);
    pthread_mutex_unlock(&b->mu);
    submit_dispatch(te, b, base, reqs, n, list);
    mc_free(list);
    return MC_OK;
}

mc_status_t mc_te_batch_submit(mc_te_t *te, mc_te_batch_t batch,
                               const mc_te_request_t *reqs, size_t n)
{
    if (!te || (!reqs && n))
        return MC_ERR_INVALID_PARAMS;
    mc_te_batch_impl_t *b = batch_lookup(te, batch);
    if (!b)
        return MC_ERR_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    if (atomic_load(&te->stopping))
        return MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
    return batch_submit(te, b, reqs, n, NULL);
}

static void fill_status(const mc_te_req_t *r, mc_te_xfer_status_t *out)
{
    int state = atomic_load(&r->state);
    out->state = (mc_te_state_t)state;
    out->transferred = (size_t)atomic_load(&r->transferred);
    out->error = state >= MC_TE_CANCELED ? (mc_status_t)atomic_load(&r->error) : MC_OK;
    if (state == MC_TE_TIMEOUT && out->error == MC_OK)
        out->error = MC_ERR_TIMEOUT;
}

mc_status_t mc_te_batch_status(mc_te_t *te, mc_te_batch_t batch, size_t index,
                               mc_te_xfer_status_t *status_p)
{
    if (!te || !status_p)
        return MC_ERR_INVALID_PARAMS;
    mc_te_batch_impl_t *b = batch_lookup(te, batch);
    if (!b)
        return MC_ERR_INVALID_PARAMS;
    pthread_mutex_lock(&b->mu);
    size_t n = b->n;
    pthread_mutex_unlock(&b->mu);
    if (index >= n)
        return MC_ERR_INVALID_PARAMS;
    fill_status(&b->reqs[index], status_p);
    return MC_OK;
}

static bool is_final(int state)
{
    return state != MC_TE_WAITING && state != MC_TE_PENDING;
}

mc_status_t mc_te_batch_status_all(mc_te_t *te, mc_te_batch_t batch,
                                   mc_te_xfer_status_t *status_p, size_t n)
{
    if (!te || (!status_p && n))
        return MC_ERR_INVALID_PARAMS;
    mc_te_batch_impl_t *b = batch_lookup(te, batch);
    if (!b)
        return MC_ERR_INVALID_PARAMS;
    pthread_mutex_lock(&b->mu);
    size_t have = b->n;
    pthread_mutex_unlock(&b->mu);
    if (n > have)
        return MC_ERR_INVALID_PARAMS;
    bool all = true;
    for (size_t i = 0; i < n; i++) {
        fill_status(&b->reqs[i], &status_p[i]);
        all = all && is_final(status_p[i].state);
    }
    return all ? MC_OK : MC_ERR_BUSY;
}

mc_status_t mc_te_batch_free(mc_te_t *te, mc_te_batch_t batch)
{
    if (!te)
        return MC_ERR_INVALID_PARAMS;
    mc_te_batch_impl_t *b = batch_lookup(te, batch);
    if (!b)
        return MC_ERR_INVALID_PARAMS;
    /* b->mu: finalizers change state and outstanding together under it (lock order:
     * b->mu is never held while taking te->mu here) */
    pthread_mutex_lock(&b->mu);
    bool busy = atomic_load(&b->outstanding) > 0;
    pthread_mutex_unlock(&b->mu);
    if (busy)
        return MC_ERR_BUSY;
    if (!batch_take(te, batch, b))
        return MC_ERR_INVALID_PARAMS; /* freed concurrently */
    batch_delete(b);
    return MC_OK;
}

bool mc_te_batch_prefix_final(mc_te_batch_impl_t *b, size_t upto)
{
    for (size_t i = 0; i < upto; i++)
        if (!is_final(atomic_load(&b->reqs[i].state)))
            return false;
    return true;
}

/* Waits until requests [0, upto) are final (upto == b->n: the whole batch). */
static void batch_wait(mc_te_t *te, mc_te_batch_impl_t *b, size_t upto)
{
    uint64_t warn_at = mc_now_ns() + 2ull * te->timeout_ms * 1000000ull + 1000000000ull;
    pthread_mutex_lock(&b->mu);
    atomic_fetch_add(&b->waiters, 1);
    if (upto < b->n)
        b->wait_upto = upto;
    while (upto < b->n ? !mc_te_batch_prefix_final(b, upto) : atomic_load(&b->outstanding) > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_nsec -= 1000000000L;
            ts.tv_sec++;
        }
        pthread_cond_timedwait(&b->cv, &b->mu, &ts);
        if (warn_at && mc_now_ns() > warn_at) {
            MC_LOG_ERROR("te: transfer still outstanding long past its deadline");
            warn_at = 0;
        }
    }
    b->wait_upto = 0;
    atomic_fetch_sub(&b->waiters, 1);
    pthread_mutex_unlock(&b->mu);
}

static mc_status_t transfer_start(mc_te_t *te, const mc_te_request_t *reqs, size_t n,
                                  bool reserve, mc_te_read_hash_t *hashes,
                                  mc_te_transfer_t **xfer_p)
{
    if (!te || (!reqs && n) || !xfer_p)
        return MC_ERR_INVALID_PARAMS;
    *xfer_p = NULL;
    if (n == 0)
        return MC_OK;
    if (n > MC_TE_MAX_BATCH)
        return MC_ERR_TOO_LARGE;
    if (atomic_load(&te->stopping))
        return MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
    mc_te_batch_impl_t *b = batch_new(te, n);
    if (!b)
        return MC_ERR_NO_MEMORY;
    b->sync = true;
    b->reserve = reserve;
    for (size_t i = 0; hashes && i < n; i++)
        hashes[i] = (mc_te_read_hash_t){.cont = hashes[i].cont};
    mc_status_t st = batch_submit(te, b, reqs, n, hashes);
    if (st != MC_OK) {
        batch_delete(b);
        return st;
    }
    *xfer_p = (mc_te_transfer_t *)b;
    return MC_OK;
}

mc_status_t mc_te_transfer_start(mc_te_t *te, const mc_te_request_t *reqs, size_t n,
                                 mc_te_transfer_t **xfer_p)
{
    return transfer_start(te, reqs, n, false, NULL, xfer_p);
}

mc_status_t mc_te_transfer_start_reserved(mc_te_t *te, const mc_te_request_t *reqs,
                                          size_t n, mc_te_transfer_t **xfer_p)
{
    return transfer_start(te, reqs, n, true, NULL, xfer_p);
}

bool mc_te_segment_hashes_reads(mc_te_t *te, mc_te_segment_t seg)
{
    mc_te_peer_t *p = te ? mc_te_peer_by_handle(te, seg) : NULL;
    if (!p)
        return false;
    if (p->is_local)
        return true;
    mc_te_rdesc_t *r;
    int tp;
    if (mc_te_peer_get_desc(p, &r, &tp) != MC_OK)
        return false;
    mc_te_rdesc_put(r);
    if (tp == MC_TE_TP_SHM)
        return true;
    return g_tp[tp]->hashes_reads && g_tp[tp]->hashes_reads(tp_ctx(te, tp));
}

mc_status_t mc_te_transfer_start_hashed(mc_te_t *te, const mc_te_request_t *reqs, size_t n,
                                        bool reserved, mc_te_read_hash_t *hashes,
                                        mc_te_transfer_t **xfer_p)
{
    if (n && !hashes)
        return MC_ERR_INVALID_PARAMS;
    return transfer_start(te, reqs, n, reserved, hashes, xfer_p);
}

/* Drive (transport sync_wait) and wait until requests [0, upto) of b are final. */
static void transfer_drive(mc_te_batch_impl_t *b, size_t upto)
{
    for (int k = 0; k < MC_TE_TP_COUNT && b->n_held > 0; k++)
        if (g_tp[k] && g_tp[k]->sync_wait && tp_ctx(b->te, k))
            g_tp[k]->sync_wait(tp_ctx(b->te, k), b, upto);
    batch_wait(b->te, b, upto);
}

/* Statuses of requests [0, upto) into status_p (optional); the first error, MC_OK if all
 * COMPLETED. */
static mc_status_t transfer_report(mc_te_batch_impl_t *b, size_t upto,
                                   mc_te_xfer_status_t *status_p)
{
    mc_status_t first = MC_OK;
    for (size_t i = 0; i < upto; i++) {
        mc_te_xfer_status_t s;
        fill_status(&b->reqs[i], &s);
        if (status_p)
            status_p[i] = s;
        if (first == MC_OK && s.state != MC_TE_COMPLETED)
            first = s.error != MC_OK ? s.error : MC_ERR_TRANSFER_FAIL;
    }
    return first;
}

mc_status_t mc_te_transfer_wait_some(mc_te_t *te, mc_te_transfer_t *xfer, size_t upto,
                                     mc_te_xfer_status_t *status_p)
{
    mc_te_batch_impl_t *b = (mc_te_batch_impl_t *)xfer;
    if (!te || !b || upto > b->n)
        return MC_ERR_INVALID_PARAMS;
    transfer_drive(b, upto);
    return transfer_report(b, upto, status_p);
}

mc_status_t mc_te_transfer_wait(mc_te_t *te, mc_te_transfer_t *xfer,
                                mc_te_xfer_status_t *status_p)
{
    if (!xfer)
        return te ? MC_OK : MC_ERR_INVALID_PARAMS;
    mc_te_batch_impl_t *b = (mc_te_batch_impl_t *)xfer;
    transfer_drive(b, b->n);
    mc_status_t first = transfer_report(b, b->n, status_p);
    batch_delete(b);
    return first;
}

mc_status_t mc_te_transfer_sync(mc_te_t *te, const mc_te_request_t *reqs, size_t n,
                                mc_te_xfer_status_t *status_p)
{
    mc_te_transfer_t *x = NULL; /* reserved: the wait follows at once on this thread */
    mc_status_t st = mc_te_transfer_start_reserved(te, reqs, n, &x);
    return st != MC_OK ? st : mc_te_transfer_wait(te, x, status_p);
}

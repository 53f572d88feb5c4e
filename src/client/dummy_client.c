/* Dummy client of the standalone mode (mooncake/dummy.h): an mc_store_t whose operations are
 * served by a real client (real_service.c) on the same host, and the process-wide shared memory
 * pool its zero-copy buffers come from. Design: docs/internals/store-client.md, "Standalone real
 * client and dummy clients"; wire: rc_wire.h.
 *
 * Connections: a control connection (HELLO; it carries the 1 s pings and the region
 * (un)registrations, and its end tells the real client the dummy is gone) and up to
 * max_connections data connections (ATTACH), opened on demand and pooled; a call takes one,
 * sends, waits for the answer until its deadline, and puts it back. Any transport failure (EOF,
 * deadline, bad frame) or a failed ping marks the dummy broken: every call after it fails at
 * once with MC_ERR_RPC_FAIL (the real client's state for this dummy is gone or unreachable).
 *
 * Locking: d->mu guards the pool; d->ctrl_mu serialises the control connection; g_shm.mu guards
 * the shared memory pool, the list of live dummies and each dummy's registered bases, and is
 * taken before d->ctrl_mu (register, unregister, mc_shm_free). */
#include "client/dummy_int.h"

#include "client/rc_wire.h"
#include "client/store_int.h"
#include "common/alloc.h"
#include "common/auth.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/net.h"
#include "common/time.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define DUMMY_MAX_CONNS 64u
#define DUMMY_PING_DEADLINE_MS 3000u

struct mc_dummy {
    uint16_t port;
    mc_auth_t *auth;             /* cfg->auth_token_file's keyring, NULL = none */
    uint64_t id;
    uint32_t call_ms;
    unsigned max_conns;
    pthread_mutex_t mu;          /* the pool */
    pthread_cond_t cv;
    int free_fds[DUMMY_MAX_CONNS];
    unsigned n_free, n_open;
    atomic_int broken;
    atomic_ullong next_req;
    pthread_mutex_t ctrl_mu;
    int ctrl_fd;
    pthread_t ping;
    int ping_started;
    pthread_mutex_t ping_mu;
    pthread_cond_t ping_cv;
    bool ping_stop;              /* ping_mu */
    atomic_int ping_ok;
    void *local_buf;
    uint64_t *reg_base;          /* bases registered with the real client (g_shm.mu) */
    size_t n_reg, cap_reg;
    struct mc_dummy *next;       /* g_shm.dummies */
};

/* ---- process-wide shared memory ----------------------------------------------------------- */

typedef struct shm_seg {
    uint8_t *base;
    size_t size;
    int fd;
} shm_seg_t;

static struct {
    pthread_mutex_t mu;
    shm_seg_t *segs;
    size_t n, cap;
    mc_dummy_t *dummies;
} g_shm = {.mu = PTHREAD_MUTEX_INITIALIZER};

void *mc_shm_alloc(size_t size) { return mc_shm_alloc_pages(size, 0); }

void *mc_shm_alloc_pages(size_t size, size_t huge_page_size)
{
    if (size == 0 || size > MC_RC_MAX_REGION_SIZE)
        return NULL;
    size_t alen = 0;
    int fd = -1;
    void *p = mc_pages_shared_alloc("mooncake_shm", size, huge_page_size, 0, &alen, &fd);
    if (!p)
        return NULL;
    pthread_mutex_lock(&g_shm.mu);
    mc_status_t st = alen > MC_RC_MAX_REGION_SIZE
                         ? MC_ERR_INVALID_PARAMS /* rounded up past the cap */
                         : mc_array_reserve(&g_shm.segs, &g_shm.cap, g_shm.n + 1, 16);
    if (st == MC_OK)
        g_shm.segs[g_shm.n++] = (shm_seg_t){p, alen, fd};
    pthread_mutex_unlock(&g_shm.mu);
    if (st != MC_OK) {
        munmap(p, alen);
        close(fd);
        return NULL;
    }
    return p;
}

/* The allocation holding [addr, addr+len), or NULL (g_shm.mu held). */
static shm_seg_t *shm_find(const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr;
    for (size_t i = 0; i < g_shm.n; i++) {
        uintptr_t b = (uintptr_t)g_shm.segs[i].base;
        if (a >= b && len <= g_shm.segs[i].size && a - b <= g_shm.segs[i].size - len)
            return &g_shm.segs[i];
    }
    return NULL;
}

static mc_status_t dummy_unregister_locked(mc_dummy_t *d, uint64_t base);

int mc_shm_free(void *addr)
{
    pthread_mutex_lock(&g_shm.mu);
    size_t i = 0;
    while (i < g_shm.n && g_shm.segs[i].base != addr)
        i++;
    if (i == g_shm.n) {
        pthread_mutex_unlock(&g_shm.mu);
        MC_LOG_ERROR("shm: free of %p, which is not the start of a shared allocation", addr);
        return -1;
    }
    shm_seg_t seg = g_shm.segs[i];
    g_shm.segs[i] = g_shm.segs[--g_shm.n];
    for (mc_dummy_t *d = g_shm.dummies; d; d = d->next)
        for (size_t k = 0; k < d->n_reg; k++)
            if (d->reg_base[k] == (uint64_t)(uintptr_t)seg.base) {
                dummy_unregister_locked(d, d->reg_base[k]);
                break;
            }
    pthread_mutex_unlock(&g_shm.mu);
    munmap(seg.base, seg.size);
    close(seg.fd);
    return 0;
}

/* ---- calls -------------------------------------------------------------------------------- */

/* A connection to the real client on @port, through the cluster handshake (auth NULL: no
 * token; the real client may then refuse us with MC_ERR_AUTH). */
static mc_status_t dummy_connect(uint16_t port, const mc_auth_t *auth, uint32_t timeout_ms,
                                 int *fd_p)
{
    struct sockaddr_un sa;
    socklen_t sl;
    mc_rc_sockaddr(port, &sa, &sl);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return MC_ERR_IO;
    if (connect(fd, (struct sockaddr *)&sa, sl) != 0) {
        MC_LOG_ERROR("dummy: cannot connect to the real client on @" MC_RC_SOCK_FMT " (is "
                     "mooncake_client --port=%u running on this host?): %m", (unsigned)port,
                     (unsigned)port);
        close(fd);
        return MC_ERR_RPC_FAIL;
    }
    mc_status_t st = mc_auth_client_handshake(fd, auth, mc_now_ns() +
                                                        (uint64_t)timeout_ms * 1000000ull);
    if (st != MC_OK) {
        MC_LOG_ERROR("dummy: the real client on @" MC_RC_SOCK_FMT " %s (%s)", (unsigned)port,
                     st == MC_ERR_AUTH ? "refused our cluster token, or could not prove it"
                                       : "did not complete the handshake",
                     mc_status_str(st));
        close(fd);
        return st == MC_ERR_AUTH ? MC_ERR_AUTH : MC_ERR_RPC_FAIL;
    }
    *fd_p = fd;
    return MC_OK;
}

static void mark_broken(mc_dummy_t *d, const char *what, mc_status_t st)
{
    if (atomic_exchange(&d->broken, 1) == 0)
        MC_LOG_ERROR("dummy %" PRIu64 ": real client on @" MC_RC_SOCK_FMT " failed (%s: %s); "
                     "every call now fails with RPC_FAIL until the dummy is set up again",
                     d->id, (unsigned)d->port, what, mc_status_str(st));
}

/* One request/answer on fd. MC_OK with *status_p = the answer's status and, when it came,
 * *resp_p (free with mc_rc__rc_response__free_unpacked; NULL for a request over the cap, which
 * is refused here with *status_p = MC_ERR_TOO_LARGE); else a transport failure (the
 * connection is unusable). */
static mc_status_t transact(mc_dummy_t *d, int fd, uint16_t op, const McRc__RcRequest *rq,
                            int pass_fd, uint32_t timeout_ms, McRc__RcResponse **resp_p,
                            mc_status_t *status_p)
{
    *resp_p = NULL;
    size_t size = protobuf_c_message_get_packed_size(&rq->base);
    if (size > MC_RC_MAX_BODY) { /* refused here: the connection stays good */
        MC_LOG_ERROR("dummy %" PRIu64 ": %s request of %zu bytes is over the %u-byte cap", d->id,
                     mc_rc_op_name(op), size, MC_RC_MAX_BODY);
        *status_p = MC_ERR_TOO_LARGE;
        return MC_OK;
    }
    uint64_t deadline = mc_now_ns() + (uint64_t)timeout_ms * 1000000;
    uint64_t id = atomic_fetch_add(&d->next_req, 1) + 1;
    mc_status_t st = mc_rc_send(fd, op, 0, 0, id, &rq->base, pass_fd, deadline);
    if (st != MC_OK)
        return st;
    mc_rpc_hdr_t h;
    uint8_t *body = NULL;
    st = mc_rc_recv(fd, &h, &body, NULL, deadline, deadline);
    if (st != MC_OK)
        return st;
    if (!(h.flags & MC_RPC_FLAG_RESPONSE) || h.opcode != op || h.req_id != id) {
        mc_free(body);
        return MC_ERR_PROTOCOL;
    }
    McRc__RcResponse *resp = mc_rc__rc_response__unpack(NULL, h.body_len, body);
    mc_free(body);
    if (!resp)
        return MC_ERR_PROTOCOL;
    *resp_p = resp;
    *status_p = h.status;
    return MC_OK;
}

static mc_status_t attach_conn(mc_dummy_t *d, int *fd_p)
{
    int fd;
    mc_status_t st = dummy_connect(d->port, d->auth, d->call_ms, &fd);
    if (st != MC_OK)
        return st;
    McRc__RcRequest rq = MC_RC__RC_REQUEST__INIT;
    rq.client_id = d->id;
    McRc__RcResponse *resp;
    mc_status_t status;
    st = transact(d, fd, MC_RC_OP_ATTACH, &rq, -1, d->call_ms, &resp, &status);
    if (st == MC_OK) {
        if (resp)
            mc_rc__rc_response__free_unpacked(resp, NULL);
        st = status;
    }
    if (st != MC_OK) {
        close(fd);
        return st;
    }
    *fd_p = fd;
    return MC_OK;
}

/* A call on a pooled data connection (control = false) or the control connection. MC_OK with
 * *resp_p and *status_p, or MC_ERR_RPC_FAIL (logged; the dummy is broken). */
static mc_status_t dcall(mc_dummy_t *d, uint16_t op, const McRc__RcRequest *rq, int pass_fd,
                         bool control, McRc__RcResponse **resp_p, mc_status_t *status_p)
{
    *resp_p = NULL;
    if (atomic_load(&d->broken)) {
        MC_LOG_DEBUG("dummy %" PRIu64 ": %s refused: the real client failed", d->id,
                     mc_rc_op_name(op));
        return MC_ERR_RPC_FAIL;
    }
    mc_status_t st;
    if (control) {
        pthread_mutex_lock(&d->ctrl_mu);
        st = transact(d, d->ctrl_fd, op, rq, pass_fd,
                      op == MC_RC_OP_PING ? DUMMY_PING_DEADLINE_MS : d->call_ms, resp_p,
                      status_p);
        pthread_mutex_unlock(&d->ctrl_mu);
        if (st != MC_OK) {
            mark_broken(d, mc_rc_op_name(op), st);
            return MC_ERR_RPC_FAIL;
        }
        return MC_OK;
    }
    uint64_t deadline = mc_now_ns() + (uint64_t)d->call_ms * 1000000;
    int fd = -1;
    pthread_mutex_lock(&d->mu);
    while (d->n_free == 0 && d->n_open >= d->max_conns && !atomic_load(&d->broken)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&d->cv, &d->mu, &ts);
        if (mc_now_ns() > deadline)
            break;
    }
    bool open_new = false;
    if (d->n_free > 0) {
        fd = d->free_fds[--d->n_free];
    } else if (d->n_open < d->max_conns) {
        d->n_open++;
        open_new = true;
    }
    pthread_mutex_unlock(&d->mu);
    if (fd < 0 && !open_new) {
        st = atomic_load(&d->broken) ? MC_ERR_RPC_FAIL : MC_ERR_TIMEOUT;
        if (st == MC_ERR_TIMEOUT)
            mark_broken(d, "waiting for a connection", st);
        return MC_ERR_RPC_FAIL;
    }
    if (open_new && (st = attach_conn(d, &fd)) != MC_OK) {
        pthread_mutex_lock(&d->mu);
        d->n_open--;
        pthread_cond_signal(&d->cv);
        pthread_mutex_unlock(&d->mu);
        mark_broken(d, "attach", st);
        return MC_ERR_RPC_FAIL;
    }
    uint64_t now = mc_now_ns();
    uint32_t left = now >= deadline ? 1 : (uint32_t)((deadline - now) / 1000000 + 1);
    st = transact(d, fd, op, rq, pass_fd, left, resp_p, status_p);
    pthread_mutex_lock(&d->mu);
    if (st == MC_OK) {
        d->free_fds[d->n_free++] = fd;
    } else {
        close(fd);
        d->n_open--;
    }
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
    if (st != MC_OK) {
        mark_broken(d, mc_rc_op_name(op), st);
        return MC_ERR_RPC_FAIL;
    }
    return MC_OK;
}

/* A call whose answer has one result per key: results copied into r64 (n entries). Returns
 * the call's status (then r64 is filled with it) or MC_OK. */
static mc_status_t dcall_results(mc_dummy_t *d, uint16_t op, const McRc__RcRequest *rq,
                                 size_t n, int64_t *r64, McRc__RcResponse **resp_p)
{
    McRc__RcResponse *resp = NULL;
    mc_status_t status = MC_OK;
    mc_status_t st = dcall(d, op, rq, -1, false, &resp, &status);
    if (st == MC_OK && status == MC_OK && resp->n_results != n) {
        MC_LOG_ERROR("dummy %" PRIu64 ": %s: %zu results for %zu keys", d->id, mc_rc_op_name(op),
                     resp->n_results, n);
        status = MC_ERR_PROTOCOL;
    }
    if (st == MC_OK)
        st = status;
    for (size_t i = 0; i < n; i++)
        r64[i] = st == MC_OK ? resp->results[i] : st;
    if (resp_p && st == MC_OK)
        *resp_p = resp;
    else if (resp)
        mc_rc__rc_response__free_unpacked(resp, NULL);
    return st;
}

/* ---- ping --------------------------------------------------------------------------------- */

static void *ping_main(void *arg)
{
    mc_dummy_t *d = arg;
    pthread_mutex_lock(&d->ping_mu);
    while (!d->ping_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += MC_RC_PING_MS / 1000;
        pthread_cond_timedwait(&d->ping_cv, &d->ping_mu, &ts);
        if (d->ping_stop)
            break;
        pthread_mutex_unlock(&d->ping_mu);
        McRc__RcRequest rq = MC_RC__RC_REQUEST__INIT;
        McRc__RcResponse *resp = NULL;
        mc_status_t status;
        mc_status_t st = dcall(d, MC_RC_OP_PING, &rq, -1, true, &resp, &status);
        atomic_store(&d->ping_ok, st == MC_OK && status == MC_OK && resp->count == 0);
        if (resp)
            mc_rc__rc_response__free_unpacked(resp, NULL);
        pthread_mutex_lock(&d->ping_mu);
    }
    pthread_mutex_unlock(&d->ping_mu);
    return NULL;
}

/* ---- setup -------------------------------------------------------------------------------- */

/* Registers the shared allocation holding [addr, addr+len) with the real client (g_shm.mu
 * held). Already registered: MC_OK. */
static mc_status_t register_locked(mc_dummy_t *d, const void *addr, size_t len, bool local)
{
    shm_seg_t *seg = shm_find(addr, len);
    if (!seg) {
        MC_LOG_ERROR("dummy: register_buffer(%p, %zu): not inside memory from "
                     "alloc_from_mem_pool / MooncakeHostMemAllocator (only that memory is shared "
                     "with the real client)", addr, len);
        return MC_ERR_INVALID_PARAMS;
    }
    uint64_t base = (uint64_t)(uintptr_t)seg->base;
    for (size_t i = 0; i < d->n_reg; i++)
        if (d->reg_base[i] == base)
            return MC_OK;
    mc_status_t st = mc_array_reserve(&d->reg_base, &d->cap_reg, d->n_reg + 1, 8);
    if (st != MC_OK)
        return st;
    McRc__RcRequest rq = MC_RC__RC_REQUEST__INIT;
    rq.region_base = base;
    rq.region_size = seg->size;
    rq.is_local_buffer = local;
    McRc__RcResponse *resp = NULL;
    mc_status_t status = MC_OK;
    st = dcall(d, MC_RC_OP_REGISTER, &rq, seg->fd, true, &resp, &status);
    if (resp)
        mc_rc__rc_response__free_unpacked(resp, NULL);
    if (st == MC_OK)
        st = status;
    if (st == MC_OK)
        d->reg_base[d->n_reg++] = base;
    return st;
}

static mc_status_t dummy_unregister_locked(mc_dummy_t *d, uint64_t base)
{
    for (size_t i = 0; i < d->n_reg; i++) {
        if (d->reg_base[i] != base)
            continue;
        d->reg_base[i] = d->reg_base[--d->n_reg];
        McRc__RcRequest rq = MC_RC__RC_REQUEST__INIT;
        rq.region_base = base;
        McRc__RcResponse *resp = NULL;
        mc_status_t status = MC_OK;
        mc_status_t st = dcall(d, MC_RC_OP_UNREGISTER, &rq, -1, true, &resp, &status);
        if (resp)
            mc_rc__rc_response__free_unpacked(resp, NULL);
        return st == MC_OK ? status : st;
    }
    return MC_ERR_INVALID_PARAMS;
}

static uint16_t parse_port(const char *addr)
{
    if (!addr || !*addr)
        return MC_RC_DEFAULT_PORT;
    const char *colon = strrchr(addr, ':');
    const char *p = colon ? colon + 1 : addr;
    char *end;
    long v = strtol(p, &end, 10);
    if (!*p || *end || v < 1 || v > 65535)
        return 0;
    return (uint16_t)v;
}

mc_status_t mc_store_create_dummy(const mc_store_dummy_config_t *cfg, mc_store_t **store_p)
{
    *store_p = NULL;
    uint16_t port = parse_port(cfg ? cfg->server_address : NULL);
    if (!cfg || port == 0 || cfg->max_connections > DUMMY_MAX_CONNS ||
        cfg->local_buffer_size > MC_RC_MAX_REGION_SIZE) {
        MC_LOG_ERROR("setup_dummy: server_address must be host:port (got '%s'), "
                     "max_connections at most %u", cfg && cfg->server_address
                     ? cfg->server_address : "", DUMMY_MAX_CONNS);
        return MC_ERR_INVALID_PARAMS;
    }
    mc_store_t *s = MC_NEW(mc_store_t);
    mc_dummy_t *d = MC_NEW(mc_dummy_t);
    if (!s || !d) {
        mc_free(s);
        mc_free(d);
        return MC_ERR_NO_MEMORY;
    }
    s->dummy = d;
    d->port = port;
    d->call_ms = cfg->call_timeout_ms ? cfg->call_timeout_ms : MC_RC_CALL_MS;
    d->max_conns = cfg->max_connections ? cfg->max_connections : 4;
    d->ctrl_fd = -1;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    pthread_mutex_init(&d->ctrl_mu, NULL);
    pthread_mutex_init(&d->ping_mu, NULL);
    pthread_cond_init(&d->ping_cv, NULL);
    pthread_mutex_lock(&g_shm.mu);
    d->next = g_shm.dummies;
    g_shm.dummies = d;
    pthread_mutex_unlock(&g_shm.mu);
    mc_status_t st = mc_auth_load(cfg->auth_token_file, &d->auth);
    if (st != MC_OK) {
        MC_LOG_ERROR("setup_dummy: auth_token_file %s unusable (%s)", cfg->auth_token_file,
                     mc_status_str(st));
        goto fail;
    }
    st = dummy_connect(port, d->auth, d->call_ms, &d->ctrl_fd);
    if (st != MC_OK)
        goto fail;
    McRc__RcRequest rq = MC_RC__RC_REQUEST__INIT;
    McRc__RcResponse *resp = NULL;
    mc_status_t status = MC_OK;
    st = transact(d, d->ctrl_fd, MC_RC_OP_HELLO, &rq, -1, d->call_ms, &resp, &status);
    if (st == MC_OK) {
        d->id = resp ? resp->client_id : 0;
        if (resp)
            mc_rc__rc_response__free_unpacked(resp, NULL);
        st = status;
    } else {
        MC_LOG_ERROR("dummy: no answer from the real client on @" MC_RC_SOCK_FMT ": %s",
                     (unsigned)port, mc_status_str(st));
        st = MC_ERR_RPC_FAIL;
    }
    if (st != MC_OK)
        goto fail;
    if (cfg->local_buffer_size) {
        d->local_buf = mc_shm_alloc_pages(cfg->local_buffer_size, cfg->hugepage_size);
        if (!d->local_buf) {
            st = MC_ERR_NO_MEMORY;
            goto fail;
        }
        pthread_mutex_lock(&g_shm.mu);
        st = register_locked(d, d->local_buf, cfg->local_buffer_size, true);
        pthread_mutex_unlock(&g_shm.mu);
        if (st != MC_OK)
            goto fail;
    }
    atomic_store(&d->ping_ok, 1);
    if (mc_rc_thread_start(&d->ping, ping_main, d) != 0) {
        st = MC_ERR_INTERNAL;
        goto fail;
    }
    d->ping_started = 1;
    MC_LOG_INFO("dummy %" PRIu64 ": attached to the real client on @" MC_RC_SOCK_FMT, d->id,
                (unsigned)port);
    *store_p = s;
    return MC_OK;
fail:
    mc_store_destroy(s);
    return st;
}

bool mc_store_is_dummy(const mc_store_t *s)
{
    return s && s->dummy;
}

void mc_dummy_destroy(mc_dummy_t *d)
{
    if (d->ping_started) {
        pthread_mutex_lock(&d->ping_mu);
        d->ping_stop = true;
        pthread_cond_signal(&d->ping_cv);
        pthread_mutex_unlock(&d->ping_mu);
        pthread_join(d->ping, NULL);
    }
    pthread_mutex_lock(&g_shm.mu);
    for (mc_dummy_t **pp = &g_shm.dummies; *pp; pp = &(*pp)->next)
        if (*pp == d) {
            *pp = d->next;
            break;
        }
    pthread_mutex_unlock(&g_shm.mu);
    pthread_mutex_lock(&d->mu);
    for (unsigned i = 0; i < d->n_free; i++)
        close(d->free_fds[i]);
    d->n_free = 0;
    pthread_mutex_unlock(&d->mu);
    if (d->ctrl_fd >= 0)
        close(d->ctrl_fd); /* the real client unmaps this dummy's regions */
    if (d->local_buf)
        mc_shm_free(d->local_buf);
    mc_free(d->reg_base);
    mc_auth_free(d->auth);
    pthread_cond_destroy(&d->ping_cv);
    pthread_mutex_destroy(&d->ping_mu);
    pthread_mutex_destroy(&d->ctrl_mu);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    mc_free(d);
}

mc_store_health_t mc_dummy_health(mc_dummy_t *d)
{
    return !atomic_load(&d->broken) && atomic_load(&d->ping_ok) ? MC_STORE_HEALTHY
                                                                 : MC_STORE_MASTER_UNREACHABLE;
}

mc_status_t mc_dummy_register_buffer(mc_dummy_t *d, void *addr, size_t len)
{
    pthread_mutex_lock(&g_shm.mu);
    mc_status_t st = register_locked(d, addr, len, false);
    pthread_mutex_unlock(&g_shm.mu);
    return st;
}

mc_status_t mc_dummy_unregister_buffer(mc_dummy_t *d, void *addr)
{
    pthread_mutex_lock(&g_shm.mu);
    shm_seg_t *seg = shm_find(addr, 1);
    mc_status_t st = seg ? dummy_unregister_locked(d, (uint64_t)(uintptr_t)seg->base)
                         : MC_ERR_INVALID_PARAMS;
    pthread_mutex_unlock(&g_shm.mu);
    return st;
}

mc_status_t mc_store_dummy_server_stats(mc_store_t *s, mc_real_service_stats_t *out)
{
    *out = (mc_real_service_stats_t){0};
    if (!mc_store_is_dummy(s))
        return MC_ERR_INVALID_PARAMS;
    McRc__RcRequest rq = MC_RC__RC_REQUEST__INIT;
    McRc__RcResponse *resp = NULL;
    mc_status_t status = MC_OK;
    mc_status_t st = dcall(s->dummy, MC_RC_OP_STATS, &rq, -1, false, &resp, &status);
    if (st == MC_OK && (st = status) == MC_OK) {
        out->dummies = resp->dummies;
        out->regions = resp->regions;
        out->region_bytes = resp->region_bytes;
    }
    if (resp)
        mc_rc__rc_response__free_unpacked(resp, NULL);
    return st;
}

/* ---- operations --------------------------------------------------------------------------- */

/* The n keys of a request as bytes fields (*wk, freed by the caller with mc_free). Keys must
 * be present: a NULL among them refuses the whole call (INVALID_PARAMS); more than
 * MC_RC_MAX_KEYS, TOO_LARGE; the real client checks the rest (length, emptiness). */
static mc_status_t wire_keys(size_t n, const char *const *keys, ProtobufCBinaryData **wk)
{
    *wk = NULL;
    if (n > MC_RC_MAX_KEYS)
        return MC_ERR_TOO_LARGE;
    for (size_t i = 0; i < n; i++)
        if (!keys[i])
            return MC_ERR_INVALID_PARAMS;
    *wk = mc_wire_keys(keys, n);
    return *wk ? MC_OK : MC_ERR_NO_MEMORY;
}

static void cfg_to_wire(const mc_replicate_config_t *c, McRc__RcConfig *w)
{
    mc_rc__rc_config__init(w);
    w->replica_num = 1;
    if (!c)
        return;
    w->replica_num = c->replica_num ? c->replica_num : 1;
    w->with_soft_pin = c->with_soft_pin;
    w->soft_pin_ttl_ms = c->soft_pin_ttl_ms;
    w->with_hard_pin = c->with_hard_pin;
    w->soft_pin_disable = c->soft_pin_disable;
    if (c->n_preferred_segments) {
        w->preferred_segments = (char **)c->preferred_segments;
        w->n_preferred_segments = c->n_preferred_segments;
    } else if (c->preferred_segment && *c->preferred_segment) {
        w->preferred_segments = (char **)&c->preferred_segment;
        w->n_preferred_segments = 1;
    }
}

static size_t total_len(const struct iovec *parts, size_t n)
{
    size_t t = 0;
    for (size_t i = 0; i < n; i++)
        t += parts[i].iov_len;
    return t;
}

/* Byte puts: the values travel in the message. */
static mc_status_t put_inline(mc_dummy_t *d, size_t n, const char *const *keys,
                              const struct iovec *const *parts, const size_t *n_parts,
                              const mc_replicate_config_t *cfg, bool upsert, int32_t *results)
{
    if (n == 0)
        return MC_OK;
    ProtobufCBinaryData *wk;
    mc_status_t st = wire_keys(n, keys, &wk);
    if (st != MC_OK)
        return st;
    ProtobufCBinaryData *vals = mc_calloc(n, sizeof(*vals));
    uint8_t **owned = mc_calloc(n, sizeof(*owned));
    int64_t *r64 = mc_calloc(n, sizeof(*r64));
    st = MC_ERR_NO_MEMORY;
    if (!vals || !owned || !r64)
        goto out;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = total_len(parts[i], n_parts[i]);
        total += len;
        if (n_parts[i] == 1) {
            vals[i] = (ProtobufCBinaryData){len, parts[i][0].iov_base};
            continue;
        }
        owned[i] = mc_malloc(len ? len : 1);
        if (!owned[i])
            goto out;
        size_t off = 0;
        for (size_t k = 0; k < n_parts[i]; k++) {
            memcpy(owned[i] + off, parts[i][k].iov_base, parts[i][k].iov_len);
            off += parts[i][k].iov_len;
        }
        vals[i] = (ProtobufCBinaryData){len, owned[i]};
    }
    if (total > MC_RC_MAX_BODY - 8192 - 16 * n) {
        MC_LOG_ERROR("dummy: put of %" PRIu64 " bytes: byte puts ship the value to the real "
                     "client, at most %u bytes per call; use put_from on registered memory",
                     total, MC_RC_MAX_BODY);
        st = MC_ERR_TOO_LARGE;
        goto out;
    }
    McRc__RcConfig wc;
    cfg_to_wire(cfg, &wc);
    McRc__RcRequest rq = MC_RC__RC_REQUEST__INIT;
    rq.n_keys = n;
    rq.keys = wk;
    rq.n_values = n;
    rq.values = vals;
    rq.config = &wc;
    rq.upsert = upsert;
    st = dcall_results(d, MC_RC_OP_PUT, &rq, n, r64, NULL);
    for (size_t i = 0; i < n; i++)
        results[i] = (int32_t)r64[i];
    st = st == MC_ERR_RPC_FAIL ? MC_OK : st; /* per key results carry it, as a batch does */
out:
    if (owned)
        for (size_t i = 0; i < n; i++)
            mc_free(owned[i]);
    mc_free(owned);
    mc_free(vals);
    mc_free(r64);
    mc_free(wk);
    return st;
}

mc_status_t mc_dummy_put(mc_dummy_t *d, const char *key, const struct iovec *parts,
                         size_t n_parts, const mc_replicate_config_t *cfg, bool upsert)
{
    if (!key)
        return MC_ERR_INVALID_PARAMS;
    int32_t r = MC_ERR_INTERNAL;
    mc_status_t st = mc_dummy_batch_put(d, 1, &key, &parts, &n_parts, cfg, upsert, &r);
    return st != MC_OK ? st : r;
}

/* A request of n keys (and force) through dcall_results. The status of building it (MC_OK
 * for n == 0, which sends nothing); once sent MC_OK, the call's own failure being in every
 * r64[i]. *resp_p (when not NULL): the response to free when the call succeeded, else left
 * as it was. */
static mc_status_t keys_call(mc_dummy_t *d, uint16_t op, size_t n, const char *const *keys,
                             bool force, int64_t *r64, McRc__RcResponse **resp_p)
{
    if (n == 0)
        return MC_OK;
    ProtobufCBinaryData *wk;
    mc_status_t st = wire_keys(n, keys, &wk);
    if (st != MC_OK)
        return st;
    McRc__RcRequest rq = MC_RC__RC_REQUEST__INIT;
    rq.n_keys = n;
    rq.keys = wk;
    rq.force = force;
    dcall_results(d, op, &rq, n, r64, resp_p);
    mc_free(wk);
    return MC_OK;
}

mc_status_t mc_dummy_batch_get(mc_dummy_t *d, size_t n, const char *const *keys, void **values,
                               int64_t *results)
{
    for (size_t i = 0; i < n; i++)
        values[i] = NULL;
    McRc__RcResponse *resp = NULL;
    mc_status_t st = keys_call(d, MC_RC_OP_GET, n, keys, false, results, &resp);
    if (resp == NULL)
        return st; /* n == 0, not sent, or failed (results carry it) */
    for (size_t i = 0; i < n; i++) {
        if (results[i] < 0)
            continue;
        if (i >= resp->n_values || resp->values[i].len != (uint64_t)results[i]) {
            results[i] = MC_ERR_PROTOCOL;
            continue;
        }
        /* heap buffers of exactly the value's size, freed with free() */
        values[i] = malloc(resp->values[i].len ? resp->values[i].len : 1);
        if (!values[i]) {
            results[i] = MC_ERR_NO_MEMORY;
            continue;
        }
        memcpy(values[i], resp->values[i].data, resp->values[i].len);
    }
    mc_rc__rc_response__free_unpacked(resp, NULL);
    return MC_OK;
}

mc_status_t mc_dummy_get(mc_dummy_t *d, const char *key, void **value_p, size_t *len_p)
{
    *value_p = NULL;
    *len_p = 0;
    if (!key)
        return MC_ERR_INVALID_PARAMS;
    int64_t r;
    void *v;
    mc_dummy_batch_get(d, 1, &key, &v, &r);
    if (r < 0)
        return (mc_status_t)r;
    *value_p = v;
    *len_p = (size_t)r;
    return MC_OK;
}

/* PUT_FROM / GET_INTO: the pieces of every key as slices of this process's memory. */
static mc_status_t zero_copy(mc_dummy_t *d, uint16_t op, size_t n, const char *const *keys,
                             const struct iovec *const *parts, const size_t *n_parts,
                             const mc_replicate_config_t *cfg, bool upsert, int64_t *r64)
{
    if (n == 0)
        return MC_OK;
    size_t ns = 0;
    for (size_t i = 0; i < n; i++)
        ns += n_parts[i];
    if (ns > MC_RC_MAX_SLICES)
        return MC_ERR_TOO_LARGE;
    ProtobufCBinaryData *wk;
    mc_status_t st = wire_keys(n, keys, &wk);
    if (st != MC_OK)
        return st;
    McRc__RcSlice *sl = mc_calloc(ns ? ns : 1, sizeof(*sl));
    McRc__RcSlice **slp = mc_calloc(ns ? ns : 1, sizeof(*slp));
    uint32_t *counts = mc_calloc(n, sizeof(*counts));
    if (!sl || !slp || !counts) {
        mc_free(sl);
        mc_free(slp);
        mc_free(counts);
        mc_free(wk);
        return MC_ERR_NO_MEMORY;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n_parts[i]; j++) {
            if (parts[i][j].iov_len == 0)
                continue;
            mc_rc__rc_slice__init(&sl[k]);
            sl[k].addr = (uint64_t)(uintptr_t)parts[i][j].iov_base;
            sl[k].len = parts[i][j].iov_len;
            slp[k] = &sl[k];
            k++;
            counts[i]++;
        }
    }
    McRc__RcConfig wc;
    cfg_to_wire(cfg, &wc);
    McRc__RcRequest rq = MC_RC__RC_REQUEST__INIT;
    rq.n_keys = n;
    rq.keys = wk;
    rq.n_slices = k;
    rq.slices = slp;
    rq.n_slice_counts = n;
    rq.slice_counts = counts;
    rq.upsert = upsert;
    if (op == MC_RC_OP_PUT_FROM)
        rq.config = &wc;
    dcall_results(d, op, &rq, n, r64, NULL);
    mc_free(sl);
    mc_free(slp);
    mc_free(counts);
    mc_free(wk);
    return MC_OK;
}

int64_t mc_dummy_get_into(mc_dummy_t *d, const char *key, const struct iovec *parts,
                          size_t n_parts)
{
    if (!key)
        return MC_ERR_INVALID_PARAMS;
    int64_t r = MC_ERR_INTERNAL;
    mc_status_t st = zero_copy(d, MC_RC_OP_GET_INTO, 1, &key, &parts, &n_parts, NULL, false, &r);
    return st != MC_OK ? st : r;
}

mc_status_t mc_dummy_batch_get_into(mc_dummy_t *d, size_t n, const char *const *keys,
                                    const struct iovec *const *parts, const size_t *n_parts,
                                    int64_t *results)
{
    return zero_copy(d, MC_RC_OP_GET_INTO, n, keys, parts, n_parts, NULL, false, results);
}

/* Zero-copy puts: a put whose pieces all lie in memory registered with the real client goes
 * as slices; otherwise its bytes are shipped (put_inline). */
static bool all_registered(mc_dummy_t *d, size_t n, const struct iovec *const *parts,
                           const size_t *n_parts)
{
    bool ok = true;
    pthread_mutex_lock(&g_shm.mu);
    for (size_t i = 0; i < n && ok; i++)
        for (size_t j = 0; j < n_parts[i] && ok; j++) {
            if (parts[i][j].iov_len == 0)
                continue;
            shm_seg_t *seg = shm_find(parts[i][j].iov_base, parts[i][j].iov_len);
            bool reg = false;
            for (size_t k = 0; seg && k < d->n_reg && !reg; k++)
                reg = d->reg_base[k] == (uint64_t)(uintptr_t)seg->base;
            ok = reg;
        }
    pthread_mutex_unlock(&g_shm.mu);
    return ok;
}

mc_status_t mc_dummy_batch_put(mc_dummy_t *d, size_t n, const char *const *keys,
                               const struct iovec *const *parts, const size_t *n_parts,
                               const mc_replicate_config_t *cfg, bool upsert, int32_t *results)
{
    if (!all_registered(d, n, parts, n_parts))
        return put_inline(d, n, keys, parts, n_parts, cfg, upsert, results);
    int64_t *r64 = mc_calloc(n ? n : 1, sizeof(*r64));
    if (!r64)
        return MC_ERR_NO_MEMORY;
    mc_status_t st = zero_copy(d, MC_RC_OP_PUT_FROM, n, keys, parts, n_parts, cfg, upsert, r64);
    for (size_t i = 0; i < n; i++)
        results[i] = (int32_t)r64[i];
    mc_free(r64);
    return st;
}

/* One key through keys_call: its result (a value or a negative status). */
static int64_t key_call(mc_dummy_t *d, uint16_t op, const char *key, bool force)
{
    int64_t r = MC_ERR_INTERNAL;
    if (!key)
        return MC_ERR_INVALID_PARAMS;
    keys_call(d, op, 1, &key, force, &r, NULL);
    return r;
}

/* n keys through keys_call, the per-key results narrowed into results[n]. */
static mc_status_t keys_call_i32(mc_dummy_t *d, uint16_t op, size_t n, const char *const *keys,
                                 bool force, int32_t *results)
{
    int64_t *r = mc_calloc(n ? n : 1, sizeof(*r));
    if (!r)
        return MC_ERR_NO_MEMORY;
    mc_status_t st = keys_call(d, op, n, keys, force, r, NULL);
    for (size_t i = 0; i < n; i++)
        results[i] = (int32_t)r[i];
    mc_free(r);
    return st;
}

int mc_dummy_exists(mc_dummy_t *d, const char *key)
{
    return (int)key_call(d, MC_RC_OP_EXIST, key, false);
}

mc_status_t mc_dummy_batch_exists(mc_dummy_t *d, size_t n, const char *const *keys,
                                  int32_t *results)
{
    return keys_call_i32(d, MC_RC_OP_EXIST, n, keys, false, results);
}

int64_t mc_dummy_get_size(mc_dummy_t *d, const char *key)
{
    return key_call(d, MC_RC_OP_GET_SIZE, key, false);
}

mc_status_t mc_dummy_remove(mc_dummy_t *d, const char *key, bool force)
{
    return (mc_status_t)key_call(d, MC_RC_OP_REMOVE, key, force);
}

mc_status_t mc_dummy_batch_remove(mc_dummy_t *d, size_t n, const char *const *keys, bool force,
                                  int32_t *results)
{
    return keys_call_i32(d, MC_RC_OP_REMOVE, n, keys, force, results);
}

static int64_t count_call(mc_dummy_t *d, uint16_t op, const char *regex, bool force)
{
    McRc__RcRequest rq = MC_RC__RC_REQUEST__INIT;
    rq.regex = (char *)(regex ? regex : "");
    rq.force = force;
    McRc__RcResponse *resp = NULL;
    mc_status_t status = MC_OK;
    mc_status_t st = dcall(d, op, &rq, -1, false, &resp, &status);
    int64_t r = st != MC_OK ? st : status != MC_OK ? status : resp->count;
    if (resp)
        mc_rc__rc_response__free_unpacked(resp, NULL);
    return r;
}

int64_t mc_dummy_remove_by_regex(mc_dummy_t *d, const char *regex, bool force)
{
    return count_call(d, MC_RC_OP_REMOVE_REGEX, regex, force);
}

int64_t mc_dummy_remove_all(mc_dummy_t *d, bool force)
{
    return count_call(d, MC_RC_OP_REMOVE_ALL, NULL, force);
}

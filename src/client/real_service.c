/* The standalone real-client service: a storage server's store client serving dummy clients on
 * the same host (mooncake/dummy.h). Design: docs/internals/store-client.md, "Standalone real
 * client and dummy clients"; wire: rc_wire.h, src/rpc/proto/real_client.proto.
 *
 * Threads: an acceptor (polls the listening socket, 200 ms ticks for stop), a reaper (every
 * 500 ms: drops dummies silent for MC_RC_DUMMY_TTL_MS and joins finished connection threads) and
 * one thread per connection, which reads a frame, checks it, runs it on the shared store handle
 * and answers. A dummy is created by a HELLO connection (its control connection: when that one
 * closes the dummy is dropped) and joined by ATTACH connections. Its regions are mapped and
 * TE-registered by REGISTER; they are unregistered and unmapped when the dummy is dropped and
 * its last connection has ended (so no operation uses them any more).
 *
 * Locking: svc->mu guards the dummy and connection lists, refs and dead flags. Each dummy's
 * region table has a rwlock: operations translating addresses hold it shared for the whole
 * store call, (un)register hold it exclusively. Order: svc->mu before a dummy's rwlock is never
 * taken (they are never nested). */
#include "mooncake/dummy.h"

#include "client/rc_wire.h"
#include "client/store_int.h"
#include "common/alloc.h"
#include "common/auth.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/time.h"
#include "common/net.h"
#include "rpc/arena.h"
#include "te/te_auth.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct rc_region {
    uint64_t dummy_base, size;
    uint8_t *real;
} rc_region_t;

typedef struct rc_dummy {
    uint64_t id;
    pthread_rwlock_t lock;       /* the region table */
    rc_region_t *regions;
    size_t n_regions, cap_regions;
    atomic_ullong last_seen_ms;
    atomic_int busy;             /* operations in progress (never dropped as silent then) */
    int refs;                    /* connections (svc->mu) */
    bool dead;                   /* dropped: no new connection, no new op (svc->mu) */
    struct rc_dummy *next;
} rc_dummy_t;

typedef struct rc_conn {
    struct mc_real_service *svc;
    int fd;
    rc_dummy_t *d;               /* set once by the first frame (svc->mu) */
    bool control;
    pthread_t th;
    atomic_int done;
    struct rc_conn *next;
} rc_conn_t;

struct mc_real_service {
    mc_store_t *store;
    uint16_t port;
    int lfd;
    pthread_t acceptor, reaper;
    atomic_int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;           /* reaper tick / stop */
    rc_dummy_t *dummies;
    rc_conn_t *conns;
    size_t n_dummies, n_conns;
    uint64_t next_id;
    atomic_ullong n_regions, region_bytes;
};

/* ---- regions ------------------------------------------------------------------------------ */

static void region_drop(mc_real_service_t *svc, rc_dummy_t *d, rc_region_t *r, const char *why)
{
    mc_status_t st = mc_store_unregister_buffer(svc->store, r->real);
    if (st != MC_OK)
        MC_LOG_WARN("real client: dummy %" PRIu64 ": unregister of region 0x%" PRIx64 ": %s",
                    d->id, r->dummy_base, mc_status_str(st));
    munmap(r->real, r->size);
    uint64_t left = atomic_fetch_sub(&svc->n_regions, 1) - 1;
    atomic_fetch_sub(&svc->region_bytes, r->size);
    MC_LOG_INFO("real client: dummy %" PRIu64 ": unmapped region 0x%" PRIx64 " (%" PRIu64
                " bytes, %s); regions=%" PRIu64, d->id, r->dummy_base, r->size, why, left);
}

/* Translates [addr, addr+len) of dummy memory; NULL when not inside one region. Region lock held. */
static uint8_t *region_translate(const rc_dummy_t *d, uint64_t addr, uint64_t len)
{
    for (size_t i = 0; i < d->n_regions; i++) {
        const rc_region_t *r = &d->regions[i];
        if (addr >= r->dummy_base && len <= r->size && addr - r->dummy_base <= r->size - len)
            return r->real + (addr - r->dummy_base);
    }
    return NULL;
}

static mc_status_t do_register(mc_real_service_t *svc, rc_dummy_t *d, const McRc__RcRequest *rq,
                               int fd)
{
    if (fd < 0) {
        MC_LOG_WARN("real client: dummy %" PRIu64 ": register without a descriptor", d->id);
        return MC_ERR_INVALID_PARAMS;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size < rq->region_size) {
        MC_LOG_WARN("real client: dummy %" PRIu64 ": register: descriptor is not a file of at "
                    "least %" PRIu64 " bytes", d->id, rq->region_size);
        return MC_ERR_INVALID_PARAMS;
    }
    /* a region that could shrink under our mapping would fault here (SIGBUS) */
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        MC_LOG_WARN("real client: dummy %" PRIu64 ": register: the memfd must be sealed against "
                    "shrinking (F_SEAL_SHRINK)", d->id);
        return MC_ERR_INVALID_PARAMS;
    }
    void *real = mmap(NULL, rq->region_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (real == MAP_FAILED) {
        MC_LOG_WARN("real client: dummy %" PRIu64 ": mmap of %" PRIu64 " bytes: %m", d->id,
                    rq->region_size);
        return MC_ERR_NO_MEMORY;
    }
    mc_status_t st = mc_store_register_buffer(svc->store, real, rq->region_size);
    if (st != MC_OK) {
        munmap(real, rq->region_size);
        return st;
    }
    pthread_rwlock_wrlock(&d->lock);
    /* a region over the same dummy addresses replaces the old one (the dummy freed and
     * reallocated that memory) */
    for (size_t i = 0; i < d->n_regions;) {
        rc_region_t *r = &d->regions[i];
        if (r->dummy_base < rq->region_base + rq->region_size &&
            rq->region_base < r->dummy_base + r->size) {
            region_drop(svc, d, r, "replaced");
            d->regions[i] = d->regions[--d->n_regions];
        } else {
            i++;
        }
    }
    if (d->n_regions >= MC_RC_MAX_REGIONS)
        st = MC_ERR_TOO_LARGE;
    else
        st = mc_array_reserve(&d->regions, &d->cap_regions, d->n_regions + 1, 8);
    if (st == MC_OK)
        d->regions[d->n_regions++] =
            (rc_region_t){.dummy_base = rq->region_base, .size = rq->region_size, .real = real};
    pthread_rwlock_unlock(&d->lock);
    if (st != MC_OK) {
        MC_LOG_WARN("real client: dummy %" PRIu64 ": register: %s (at most %u regions)", d->id,
                    mc_status_str(st), MC_RC_MAX_REGIONS);
        mc_store_unregister_buffer(svc->store, real);
        munmap(real, rq->region_size);
        return st;
    }
    uint64_t n = atomic_fetch_add(&svc->n_regions, 1) + 1;
    atomic_fetch_add(&svc->region_bytes, rq->region_size);
    MC_LOG_INFO("real client: dummy %" PRIu64 ": mapped region 0x%" PRIx64 " (%" PRIu64
                " bytes%s); regions=%" PRIu64, d->id, rq->region_base, rq->region_size,
                rq->is_local_buffer ? ", local buffer" : "", n);
    return MC_OK;
}

static mc_status_t do_unregister(mc_real_service_t *svc, rc_dummy_t *d, uint64_t base)
{
    mc_status_t st = MC_ERR_INVALID_PARAMS;
    pthread_rwlock_wrlock(&d->lock);
    for (size_t i = 0; i < d->n_regions; i++) {
        if (d->regions[i].dummy_base == base) {
            region_drop(svc, d, &d->regions[i], "unregistered");
            d->regions[i] = d->regions[--d->n_regions];
            st = MC_OK;
            break;
        }
    }
    pthread_rwlock_unlock(&d->lock);
    return st;
}

/* ---- dummies ------------------------------------------------------------------------------ */

/* The last reference is gone: unmap everything and free. Called without svc->mu. */
static void dummy_free(mc_real_service_t *svc, rc_dummy_t *d)
{
    pthread_rwlock_wrlock(&d->lock);
    for (size_t i = 0; i < d->n_regions; i++)
        region_drop(svc, d, &d->regions[i], "dummy gone");
    d->n_regions = 0;
    pthread_rwlock_unlock(&d->lock);
    MC_LOG_INFO("real client: dummy %" PRIu64 " detached; regions=%" PRIu64, d->id,
                (uint64_t)atomic_load(&svc->n_regions));
    mc_free(d->regions);
    pthread_rwlock_destroy(&d->lock);
    mc_free(d);
}

/* Marks d dropped and shuts its connections down (svc->mu held). */
static void dummy_kill_locked(mc_real_service_t *svc, rc_dummy_t *d)
{
    if (d->dead)
        return;
    d->dead = true;
    for (rc_conn_t *c = svc->conns; c; c = c->next)
        if (c->d == d)
            shutdown(c->fd, SHUT_RDWR);
}

/* Drops one reference; frees d after the last (outside the lock). */
static void dummy_unref(mc_real_service_t *svc, rc_dummy_t *d)
{
    pthread_mutex_lock(&svc->mu);
    bool last = --d->refs == 0;
    if (last) {
        d->dead = true;
        rc_dummy_t **pp = &svc->dummies;
        while (*pp != d)
            pp = &(*pp)->next;
        *pp = d->next;
        svc->n_dummies--;
    }
    pthread_mutex_unlock(&svc->mu);
    if (last)
        dummy_free(svc, d);
}

/* ---- operations --------------------------------------------------------------------------- */

static void cfg_from_wire(const McRc__RcConfig *w, mc_replicate_config_t *c)
{
    memset(c, 0, sizeof(*c));
    c->replica_num = 1;
    if (!w)
        return;
    c->replica_num = w->replica_num ? w->replica_num : 1;
    c->with_soft_pin = w->with_soft_pin;
    c->soft_pin_ttl_ms = w->soft_pin_ttl_ms;
    c->with_hard_pin = w->with_hard_pin;
    c->soft_pin_disable = w->soft_pin_disable;
    c->preferred_segments = (const char *const *)w->preferred_segments;
    c->n_preferred_segments = w->n_preferred_segments;
}

typedef struct op_ctx {
    mc_real_service_t *svc;
    rc_dummy_t *d;
    const McRc__RcRequest *rq;
    const char *const *keys;     /* rq's keys, checked and NUL-terminated (request arena) */
    McRc__RcResponse *resp;
    int64_t *results;            /* n_keys entries, owned by the caller */
    void **heap;                 /* GET: values to free after the answer */
} op_ctx_t;

/* PUT_FROM / GET_INTO: the slices of every key translated into iovecs (region lock held
 * shared by the caller). Keys with a slice outside the dummy's regions get
 * MC_ERR_INVALID_PARAMS and are left out (ok[i] = 0). */
static mc_status_t slices_translate(op_ctx_t *o, struct iovec *iov, struct iovec **parts,
                                    size_t *nparts, bool *ok)
{
    const McRc__RcRequest *rq = o->rq;
    size_t s = 0;
    for (size_t i = 0; i < rq->n_keys; i++) {
        parts[i] = iov + s;
        nparts[i] = rq->slice_counts[i];
        ok[i] = true;
        for (uint32_t j = 0; j < rq->slice_counts[i]; j++, s++) {
            const McRc__RcSlice *sl = rq->slices[s];
            uint8_t *p = region_translate(o->d, sl->addr, sl->len);
            if (!p) {
                if (ok[i])
                    MC_LOG_WARN("real client: dummy %" PRIu64 ": key %s: range 0x%" PRIx64
                                "+%" PRIu64 " is outside its registered regions", o->d->id,
                                o->keys[i], sl->addr, sl->len);
                ok[i] = false;
                iov[s] = (struct iovec){NULL, 0};
                continue;
            }
            iov[s] = (struct iovec){p, sl->len};
        }
        if (!ok[i])
            o->results[i] = MC_ERR_INVALID_PARAMS;
    }
    return MC_OK;
}

static mc_status_t op_zero_copy(op_ctx_t *o, bool put)
{
    const McRc__RcRequest *rq = o->rq;
    size_t n = rq->n_keys;
    struct iovec *iov = mc_calloc(rq->n_slices ? rq->n_slices : 1, sizeof(*iov));
    struct iovec **parts = mc_calloc(n, sizeof(*parts));
    const struct iovec **cparts = mc_calloc(n, sizeof(*cparts));
    size_t *nparts = mc_calloc(n, sizeof(*nparts));
    bool *ok = mc_calloc(n, sizeof(*ok));
    const char **keys = mc_calloc(n, sizeof(*keys));
    int64_t *r64 = mc_calloc(n, sizeof(*r64));
    int32_t *r32 = mc_calloc(n, sizeof(*r32));
    size_t *idx = mc_calloc(n, sizeof(*idx));
    mc_status_t st = MC_ERR_NO_MEMORY;
    if (!iov || !parts || !cparts || !nparts || !ok || !keys || !r64 || !r32 || !idx)
        goto out;
    pthread_rwlock_rdlock(&o->d->lock);
    slices_translate(o, iov, parts, nparts, ok);
    size_t m = 0; /* the keys whose ranges are all inside regions, compacted */
    for (size_t i = 0; i < n; i++) {
        if (!ok[i])
            continue;
        keys[m] = o->keys[i];
        cparts[m] = parts[i];
        nparts[m] = nparts[i];
        idx[m++] = i;
    }
    st = MC_OK;
    mc_replicate_config_t cfg;
    cfg_from_wire(rq->config, &cfg);
    if (m == 1 && put) {
        r64[0] = rq->upsert ? mc_store_upsert(o->svc->store, keys[0], cparts[0], nparts[0], &cfg)
                            : mc_store_put(o->svc->store, keys[0], cparts[0], nparts[0], &cfg);
    } else if (m == 1) {
        r64[0] = mc_store_get_into(o->svc->store, keys[0], cparts[0], nparts[0]);
    } else if (m > 1 && put) {
        st = mc_store_batch_put(o->svc->store, m, keys, cparts, nparts, &cfg, rq->upsert, r32);
        for (size_t k = 0; k < m; k++)
            r64[k] = st == MC_OK ? r32[k] : st;
        st = MC_OK;
    } else if (m > 1) {
        st = mc_store_batch_get_into(o->svc->store, m, keys, cparts, nparts, r64);
        if (st != MC_OK)
            for (size_t k = 0; k < m; k++)
                r64[k] = st;
        st = MC_OK;
    }
    pthread_rwlock_unlock(&o->d->lock);
    for (size_t k = 0; k < m; k++)
        o->results[idx[k]] = r64[k];
out:
    mc_free(iov);
    mc_free(parts);
    mc_free(cparts);
    mc_free(nparts);
    mc_free(ok);
    mc_free(keys);
    mc_free(r64);
    mc_free(r32);
    mc_free(idx);
    return st;
}

static mc_status_t op_put(op_ctx_t *o)
{
    const McRc__RcRequest *rq = o->rq;
    size_t n = rq->n_keys;
    mc_replicate_config_t cfg;
    cfg_from_wire(rq->config, &cfg);
    if (n == 1) {
        struct iovec iov = {rq->values[0].data, rq->values[0].len};
        o->results[0] = rq->upsert ? mc_store_upsert(o->svc->store, o->keys[0], &iov, 1, &cfg)
                                   : mc_store_put(o->svc->store, o->keys[0], &iov, 1, &cfg);
        return MC_OK;
    }
    struct iovec *iov = mc_calloc(n, sizeof(*iov));
    const struct iovec **parts = mc_calloc(n, sizeof(*parts));
    size_t *np = mc_calloc(n, sizeof(*np));
    int32_t *r = mc_calloc(n, sizeof(*r));
    mc_status_t st = MC_ERR_NO_MEMORY;
    if (iov && parts && np && r) {
        for (size_t i = 0; i < n; i++) {
            iov[i] = (struct iovec){rq->values[i].data, rq->values[i].len};
            parts[i] = &iov[i];
            np[i] = 1;
        }
        st = mc_store_batch_put(o->svc->store, n, o->keys, parts, np, &cfg,
                                rq->upsert, r);
        for (size_t i = 0; i < n; i++)
            o->results[i] = st == MC_OK ? r[i] : st;
        st = MC_OK;
    }
    mc_free(iov);
    mc_free(parts);
    mc_free(np);
    mc_free(r);
    return st;
}

static mc_status_t op_get(op_ctx_t *o, ProtobufCBinaryData *vals)
{
    const McRc__RcRequest *rq = o->rq;
    size_t n = rq->n_keys;
    mc_status_t st = MC_OK;
    if (n == 1) {
        size_t len = 0;
        void *v = NULL;
        st = mc_store_get(o->svc->store, o->keys[0], &v, &len);
        o->results[0] = st == MC_OK ? (int64_t)len : st;
        o->heap[0] = v;
        st = MC_OK;
    } else {
        st = mc_store_batch_get(o->svc->store, n, o->keys, o->heap,
                                o->results);
        if (st != MC_OK) {
            for (size_t i = 0; i < n; i++)
                o->results[i] = st;
            st = MC_OK;
        }
    }
    /* everything must fit one answer: values past the budget are refused */
    uint64_t budget = MC_RC_MAX_BODY - 16 * (uint64_t)n - 4096;
    for (size_t i = 0; i < n; i++) {
        vals[i] = (ProtobufCBinaryData){0, NULL};
        if (o->results[i] < 0 || !o->heap[i])
            continue;
        uint64_t len = (uint64_t)o->results[i];
        if (len > budget) {
            MC_LOG_WARN("real client: dummy %" PRIu64 ": get %s: %" PRIu64 " bytes do not fit "
                        "one answer (%u bytes in all): use get_into", o->d->id, o->keys[i],
                        len, MC_RC_MAX_BODY);
            o->results[i] = MC_ERR_TOO_LARGE;
            free(o->heap[i]);
            o->heap[i] = NULL;
            continue;
        }
        budget -= len;
        vals[i] = (ProtobufCBinaryData){(size_t)len, o->heap[i]};
    }
    o->resp->n_values = n;
    o->resp->values = vals;
    return st;
}

static void op_keys(op_ctx_t *o, uint16_t op)
{
    const McRc__RcRequest *rq = o->rq;
    mc_store_t *s = o->svc->store;
    size_t n = rq->n_keys;
    if (op == MC_RC_OP_GET_SIZE || n == 1) {
        for (size_t i = 0; i < n; i++)
            o->results[i] = op == MC_RC_OP_GET_SIZE ? mc_store_get_size(s, o->keys[i])
                            : op == MC_RC_OP_EXIST  ? mc_store_exists(s, o->keys[i])
                                                    : mc_store_remove(s, o->keys[i], rq->force);
        return;
    }
    int32_t *r = mc_calloc(n, sizeof(*r));
    mc_status_t st = MC_ERR_NO_MEMORY;
    if (r)
        st = op == MC_RC_OP_EXIST
                 ? mc_store_batch_exists(s, n, o->keys, r)
                 : mc_store_batch_remove(s, n, o->keys, rq->force, r);
    for (size_t i = 0; i < n; i++)
        o->results[i] = st == MC_OK ? r[i] : st;
    mc_free(r);
}

/* ---- connections -------------------------------------------------------------------------- */

static mc_status_t reply(rc_conn_t *c, const mc_rpc_hdr_t *h, mc_status_t status,
                         const McRc__RcResponse *resp)
{
    return mc_rc_send(c->fd, h->opcode, MC_RPC_FLAG_RESPONSE, status, h->req_id, &resp->base, -1,
                      mc_now_ns() + (uint64_t)MC_RC_FRAME_MS * 1000000);
}

/* The first frame: HELLO (a new dummy) or ATTACH (one more connection of a dummy). */
static mc_status_t conn_hello(rc_conn_t *c)
{
    mc_real_service_t *svc = c->svc;
    mc_rpc_hdr_t h;
    uint8_t *body = NULL;
    mc_status_t st = mc_rc_recv(c->fd, &h, &body, NULL,
                                mc_now_ns() + (uint64_t)MC_RC_FRAME_MS * 1000000, 0);
    if (st != MC_OK)
        return st;
    McRc__RcRequest *rq = mc_rc__rc_request__unpack(NULL, h.body_len, body);
    mc_free(body);
    McRc__RcResponse resp = MC_RC__RC_RESPONSE__INIT;
    st = MC_OK;
    if (!rq || (h.opcode != MC_RC_OP_HELLO && h.opcode != MC_RC_OP_ATTACH)) {
        MC_LOG_WARN("real client: a connection did not start with hello/attach (op %u)",
                    h.opcode);
        st = MC_ERR_PROTOCOL;
    } else {
        pthread_mutex_lock(&svc->mu);
        if (h.opcode == MC_RC_OP_HELLO) {
            rc_dummy_t *d = svc->n_dummies >= MC_RC_MAX_DUMMIES ? NULL : MC_NEW(rc_dummy_t);
            if (!d) {
                st = MC_ERR_TOO_LARGE;
            } else {
                pthread_rwlock_init(&d->lock, NULL);
                d->id = ++svc->next_id;
                d->refs = 1;
                atomic_store(&d->last_seen_ms, mc_now_ms());
                d->next = svc->dummies;
                svc->dummies = d;
                svc->n_dummies++;
                c->d = d;
                c->control = true;
                resp.client_id = d->id;
            }
        } else {
            rc_dummy_t *d = svc->dummies;
            while (d && d->id != rq->client_id)
                d = d->next;
            if (!d || d->dead) {
                st = MC_ERR_CLIENT_NOT_FOUND;
            } else {
                d->refs++;
                c->d = d;
                resp.client_id = d->id;
            }
        }
        pthread_mutex_unlock(&svc->mu);
        if (st == MC_OK && c->control)
            MC_LOG_INFO("real client: dummy %" PRIu64 " attached", c->d->id);
    }
    if (rq)
        mc_rc__rc_request__free_unpacked(rq, NULL);
    mc_status_t sst = reply(c, &h, st, &resp);
    return st != MC_OK ? st : sst;
}

/* One request on an attached connection. Returns non-OK when the connection must close. */
static mc_status_t conn_serve_one(rc_conn_t *c, mc_rpc_arena_t *arena)
{
    mc_real_service_t *svc = c->svc;
    rc_dummy_t *d = c->d;
    mc_rpc_hdr_t h;
    uint8_t *body = NULL;
    int fd = -1;
    mc_status_t st = mc_rc_recv(c->fd, &h, &body, &fd, 0, 0);
    if (st != MC_OK) {
        if (st == MC_ERR_PROTOCOL || st == MC_ERR_TOO_LARGE)
            MC_LOG_WARN("real client: dummy %" PRIu64 ": bad frame (%s); closing its connection",
                        d->id, mc_status_str(st));
        return st;
    }
    atomic_store(&d->last_seen_ms, mc_now_ms());
    atomic_fetch_add(&d->busy, 1);
    McRc__RcResponse resp = MC_RC__RC_RESPONSE__INIT;
    McRc__RcRequest *rq = mc_rc__rc_request__unpack(&arena->pb, h.body_len, body);
    int64_t *results = NULL;
    void **heap = NULL;
    ProtobufCBinaryData *vals = NULL;
    if (!rq) {
        MC_LOG_WARN("real client: dummy %" PRIu64 ": undecodable %s request (%u bytes)", d->id,
                    mc_rc_op_name(h.opcode), h.body_len);
        st = MC_ERR_PROTOCOL;
    } else if ((st = mc_rc_request_check(h.opcode, rq)) != MC_OK) {
        MC_LOG_WARN("real client: dummy %" PRIu64 ": refused %s request: %s", d->id,
                    mc_rc_op_name(h.opcode), mc_status_str(st));
    } else if (h.opcode == MC_RC_OP_HELLO || h.opcode == MC_RC_OP_ATTACH) {
        st = MC_ERR_PROTOCOL;
    } else {
        size_t n = rq->n_keys;
        op_ctx_t o = {.svc = svc, .d = d, .rq = rq, .resp = &resp};
        char **keys = n ? mc_rpc_arena_alloc(arena, n * sizeof(*keys)) : NULL;
        for (size_t i = 0; keys && i < n; i++) /* checked by mc_rc_request_check */
            if (!(keys[i] = mc_wire_key_dup(arena, rq->keys[i])))
                keys = NULL;
        o.keys = (const char *const *)keys;
        if (n && !keys)
            st = MC_ERR_NO_MEMORY;
        if (n) {
            results = mc_calloc(n, sizeof(*results));
            heap = mc_calloc(n, sizeof(*heap));
            vals = mc_calloc(n, sizeof(*vals));
            if (!results || !heap || !vals)
                st = MC_ERR_NO_MEMORY;
            o.results = results;
            o.heap = heap;
        }
        if (st == MC_OK) {
            switch (h.opcode) {
            case MC_RC_OP_REGISTER:
                st = do_register(svc, d, rq, fd);
                break;
            case MC_RC_OP_UNREGISTER:
                st = do_unregister(svc, d, rq->region_base);
                break;
            case MC_RC_OP_PING:
                resp.count = atomic_load(&svc->store->master_reachable) ? 0 : 2;
                break;
            case MC_RC_OP_PUT:
                st = op_put(&o);
                break;
            case MC_RC_OP_GET:
                st = op_get(&o, vals);
                break;
            case MC_RC_OP_PUT_FROM:
                st = op_zero_copy(&o, true);
                break;
            case MC_RC_OP_GET_INTO:
                st = op_zero_copy(&o, false);
                break;
            case MC_RC_OP_EXIST:
            case MC_RC_OP_GET_SIZE:
            case MC_RC_OP_REMOVE:
                op_keys(&o, h.opcode);
                break;
            case MC_RC_OP_REMOVE_REGEX:
                resp.count = mc_store_remove_by_regex(svc->store, rq->regex, rq->force);
                break;
            case MC_RC_OP_REMOVE_ALL:
                resp.count = mc_store_remove_all(svc->store, rq->force);
                break;
            case MC_RC_OP_STATS: {
                mc_real_service_stats_t s;
                mc_real_service_stats(svc, &s);
                resp.dummies = s.dummies;
                resp.regions = s.regions;
                resp.region_bytes = s.region_bytes;
                break;
            }
            default:
                st = MC_ERR_INVALID_PARAMS;
            }
            if (results && h.opcode != MC_RC_OP_REGISTER && h.opcode != MC_RC_OP_UNREGISTER) {
                resp.n_results = n;
                resp.results = results;
            }
        }
    }
    if (fd >= 0)
        close(fd); /* mapped (or refused): the mapping keeps the memory */
    mc_status_t sst = reply(c, &h, st, &resp);
    if (heap)
        for (size_t i = 0; i < rq->n_keys; i++)
            free(heap[i]);
    mc_free(results);
    mc_free(heap);
    mc_free(vals);
    mc_free(body);
    mc_rpc_arena_reset(arena);
    atomic_store(&d->last_seen_ms, mc_now_ms());
    atomic_fetch_sub(&d->busy, 1);
    return sst;
}

/* The cluster handshake (common/auth.h), server side, before the first frame: HELLO, the
 * dummy's PROOF within MC_AUTH_HANDSHAKE_TIMEOUT_MS, RESULT. With a keyring (the store
 * engine's, from its auth_token_file) only a dummy proving one of its secrets passes. */
static mc_status_t conn_auth(rc_conn_t *c)
{
    const mc_auth_t *auth = mc_te_keyring(c->svc->store->te);
    uint8_t hello[MC_AUTH_HELLO_SIZE], proof[MC_AUTH_PROOF_SIZE], result[MC_AUTH_RESULT_SIZE];
    mc_auth_server_hs_t hs;
    uint64_t deadline = mc_now_ns() + (uint64_t)MC_AUTH_HANDSHAKE_TIMEOUT_MS * 1000000ull;
    mc_auth_server_hello(auth, &hs, hello);
    mc_status_t st = mc_net_send_all(c->fd, hello, sizeof(hello), deadline);
    if (st == MC_OK)
        st = mc_net_recv_all(c->fd, proof, sizeof(proof), deadline);
    if (st == MC_OK) {
        st = mc_auth_server_check(auth, &hs, proof, result, NULL);
        mc_status_t sent = mc_net_send_all(c->fd, result, sizeof(result), deadline);
        if (st == MC_OK)
            st = sent;
    }
    if (st != MC_OK)
        MC_LOG_WARN("real client: refused a dummy connection: %s", st == MC_ERR_AUTH
                    ? "no or wrong cluster token" : "no handshake in time");
    return st;
}

static void *conn_main(void *arg)
{
    rc_conn_t *c = arg;
    mc_real_service_t *svc = c->svc;
    if (conn_auth(c) == MC_OK && conn_hello(c) == MC_OK) {
        mc_rpc_arena_t arena;
        mc_rpc_arena_init(&arena, 64 << 10);
        while (!atomic_load(&svc->stop)) {
            pthread_mutex_lock(&svc->mu);
            bool dead = c->d->dead;
            pthread_mutex_unlock(&svc->mu);
            if (dead)
                break;
            struct pollfd p = {.fd = c->fd, .events = POLLIN};
            int r = poll(&p, 1, 500);
            if (r < 0 && errno != EINTR)
                break;
            if (r <= 0)
                continue;
            if (conn_serve_one(c, &arena) != MC_OK)
                break;
        }
        mc_rpc_arena_destroy(&arena);
    }
    rc_dummy_t *d = c->d;
    if (d) {
        if (c->control) {
            pthread_mutex_lock(&svc->mu);
            if (!d->dead)
                MC_LOG_INFO("real client: dummy %" PRIu64 " closed its control connection",
                            d->id);
            dummy_kill_locked(svc, d);
            pthread_mutex_unlock(&svc->mu);
        }
        dummy_unref(svc, d);
    }
    pthread_mutex_lock(&svc->mu);
    shutdown(c->fd, SHUT_RDWR);
    atomic_store(&c->done, 1);
    pthread_mutex_unlock(&svc->mu);
    return NULL;
}

/* ---- acceptor and reaper ------------------------------------------------------------------ */

static void *acceptor_main(void *arg)
{
    mc_real_service_t *svc = arg;
    while (!atomic_load(&svc->stop)) {
        struct pollfd p = {.fd = svc->lfd, .events = POLLIN};
        int r = poll(&p, 1, 200);
        if (r <= 0)
            continue;
        int fd = accept4(svc->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        /* same user (or root) only: the socket is abstract, any local process could connect;
         * then the cluster handshake, in the connection's thread (conn_auth) */
        struct ucred cr = {.uid = (uid_t)-1};
        socklen_t crl = sizeof(cr);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) != 0 ||
            (cr.uid != getuid() && cr.uid != 0)) {
            MC_LOG_WARN("real client: refused a connection from uid %u", (unsigned)cr.uid);
            close(fd);
            continue;
        }
        pthread_mutex_lock(&svc->mu);
        rc_conn_t *c = svc->n_conns < MC_RC_MAX_CONNS ? MC_NEW(rc_conn_t) : NULL;
        if (c) {
            c->svc = svc;
            c->fd = fd;
            if (mc_rc_thread_start(&c->th, conn_main, c) != 0) {
                mc_free(c);
                c = NULL;
            } else {
                c->next = svc->conns;
                svc->conns = c;
                svc->n_conns++;
            }
        }
        pthread_mutex_unlock(&svc->mu);
        if (!c) {
            MC_LOG_WARN("real client: refused a connection (at most %u at once)",
                        MC_RC_MAX_CONNS);
            close(fd);
        }
    }
    return NULL;
}

/* Joins finished connection threads (svc->mu held; released around the joins). */
static void reap_conns(mc_real_service_t *svc)
{
    rc_conn_t *done = NULL;
    for (rc_conn_t **pp = &svc->conns; *pp;) {
        rc_conn_t *c = *pp;
        if (atomic_load(&c->done)) {
            *pp = c->next;
            svc->n_conns--;
            c->next = done;
            done = c;
        } else {
            pp = &c->next;
        }
    }
    pthread_mutex_unlock(&svc->mu);
    while (done) {
        rc_conn_t *c = done;
        done = c->next;
        pthread_join(c->th, NULL);
        close(c->fd);
        mc_free(c);
    }
    pthread_mutex_lock(&svc->mu);
}

static void *reaper_main(void *arg)
{
    mc_real_service_t *svc = arg;
    pthread_mutex_lock(&svc->mu);
    while (!atomic_load(&svc->stop)) {
        uint64_t now = mc_now_ms();
        for (rc_dummy_t *d = svc->dummies; d; d = d->next) {
            uint64_t seen = atomic_load(&d->last_seen_ms);
            if (!d->dead && atomic_load(&d->busy) == 0 && now > seen + MC_RC_DUMMY_TTL_MS) {
                MC_LOG_WARN("real client: dummy %" PRIu64 " silent for %" PRIu64 " ms: dropping "
                            "it", d->id, now - seen);
                dummy_kill_locked(svc, d);
            }
        }
        reap_conns(svc);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 500 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (!atomic_load(&svc->stop))
            pthread_cond_timedwait(&svc->cv, &svc->mu, &ts);
    }
    pthread_mutex_unlock(&svc->mu);
    return NULL;
}

/* ---- public ------------------------------------------------------------------------------- */

mc_status_t mc_real_service_start(mc_store_t *store, uint16_t port, mc_real_service_t **svc_p)
{
    *svc_p = NULL;
    if (!store || mc_store_is_dummy(store) || port == 0)
        return MC_ERR_INVALID_PARAMS;
    mc_real_service_t *svc = MC_NEW(mc_real_service_t);
    if (!svc)
        return MC_ERR_NO_MEMORY;
    svc->store = store;
    svc->port = port;
    pthread_mutex_init(&svc->mu, NULL);
    pthread_cond_init(&svc->cv, NULL);
    svc->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa;
    socklen_t sl;
    mc_rc_sockaddr(port, &sa, &sl);
    if (svc->lfd < 0 || bind(svc->lfd, (struct sockaddr *)&sa, sl) != 0 ||
        listen(svc->lfd, 128) != 0) {
        bool taken = errno == EADDRINUSE; /* another real client on this host: the caller says */
        if (taken)
            MC_LOG_INFO("real client: @" MC_RC_SOCK_FMT " is taken", (unsigned)port);
        else
            MC_LOG_ERROR("real client: cannot listen on @" MC_RC_SOCK_FMT ": %m", (unsigned)port);
        if (svc->lfd >= 0)
            close(svc->lfd);
        pthread_cond_destroy(&svc->cv);
        pthread_mutex_destroy(&svc->mu);
        mc_free(svc);
        return taken ? MC_ERR_BUSY : MC_ERR_IO;
    }
    if (mc_rc_thread_start(&svc->acceptor, acceptor_main, svc) != 0) {
        close(svc->lfd);
        mc_free(svc);
        return MC_ERR_INTERNAL;
    }
    if (mc_rc_thread_start(&svc->reaper, reaper_main, svc) != 0) {
        atomic_store(&svc->stop, 1);
        pthread_join(svc->acceptor, NULL);
        close(svc->lfd);
        mc_free(svc);
        return MC_ERR_INTERNAL;
    }
    MC_LOG_INFO("real client: serving dummy clients on @" MC_RC_SOCK_FMT, (unsigned)port);
    *svc_p = svc;
    return MC_OK;
}

void mc_real_service_stop(mc_real_service_t *svc)
{
    if (!svc)
        return;
    pthread_mutex_lock(&svc->mu);
    atomic_store(&svc->stop, 1);
    pthread_cond_broadcast(&svc->cv);
    pthread_mutex_unlock(&svc->mu);
    pthread_join(svc->acceptor, NULL);
    pthread_join(svc->reaper, NULL);
    close(svc->lfd);
    pthread_mutex_lock(&svc->mu);
    for (rc_dummy_t *d = svc->dummies; d; d = d->next)
        dummy_kill_locked(svc, d);
    for (rc_conn_t *c = svc->conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    while (svc->conns) {
        for (rc_conn_t *c = svc->conns; c; c = c->next)
            shutdown(c->fd, SHUT_RDWR);
        reap_conns(svc);
        if (svc->conns) {
            pthread_mutex_unlock(&svc->mu);
            mc_sleep_ms(10);
            pthread_mutex_lock(&svc->mu);
        }
    }
    pthread_mutex_unlock(&svc->mu);
    pthread_cond_destroy(&svc->cv);
    pthread_mutex_destroy(&svc->mu);
    mc_free(svc);
}

void mc_real_service_stats(mc_real_service_t *svc, mc_real_service_stats_t *out)
{
    *out = (mc_real_service_stats_t){0};
    if (!svc)
        return;
    pthread_mutex_lock(&svc->mu);
    out->dummies = svc->n_dummies;
    pthread_mutex_unlock(&svc->mu);
    out->regions = atomic_load(&svc->n_regions);
    out->region_bytes = atomic_load(&svc->region_bytes);
}

/* shm transport: same-host peers copy directly through mapped memfds (design: transport.h).
 *
 * Owner side: one control memfd of MC_TE_SHM_SLOTS slots; each registered buffer gets a slot
 * {state = gen << 1 | registered, inflight, serve_until_ns}, published in transport_info as
 *   {"shm_ctl_fd":N,"shm_ctl_slots":S,"slots":[[addr,slot,gen],...]}.
 * Initiator side (per peer, cached until the peer's pid changes): the control mapping and one
 * mapping per peer buffer, made on first use from /proc/<pid>/fd/<shm_fd>. Buffers that are
 * not memfd-backed go to the fallback transport the engine hands us at init (tcp), as CMA
 * requests the owner serves (or as plain requests if CMA is not permitted).
 */

#include "te/te_hashed.h"
#include "te/transport.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/payload.h"
#include "common/time.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define SHM_MAX_SLICE (64ull << 20)

typedef struct shm_slot {
    _Atomic uint64_t state;
    _Atomic uint64_t inflight;
    _Atomic uint64_t serve_until_ns; /* CLOCK_MONOTONIC (one clock per host); 0 = no limit */
} shm_slot_t;

typedef struct shm_ctx {
    mc_te_t *te;
    const mc_te_transport_t *fallback; /* takes the slices we cannot copy (transport.h) */
    int ctl_fd;
    shm_slot_t *ctl;
    size_t ctl_size;
    pthread_mutex_t mu;
    uint64_t next_gen;
    uint8_t used[MC_TE_SHM_SLOTS];
} shm_ctx_t;

/* One peer buffer as we know it: from the descriptor plus transport_info. */
typedef struct shm_rbuf {
    uint64_t addr, len, shm_offset;
    int32_t shm_fd;
    int32_t slot;   /* -1 if unknown */
    uint64_t gen;
    uint8_t *base;  /* our mapping of [addr, addr+len), NULL until first use */
    void *map;
    size_t map_len;
    bool map_failed;
} shm_rbuf_t;

typedef struct shm_peer {
    pthread_rwlock_t lock;
    mc_te_rdesc_t *desc; /* the descriptor rbufs were built from (referenced) */
    int32_t pid;
    int pidfd;
    shm_slot_t *ctl;
    size_t ctl_size;
    uint32_t ctl_slots;
    bool cma_ok;
    shm_rbuf_t *bufs;
    size_t n_bufs;
} shm_peer_t;

/* ===================================== owner ========================================== */

static mc_status_t shm_init(mc_te_t *te, const mc_te_transport_t *fallback,
                            void **ctx_p)
{
    if (!fallback || !fallback->ops || !fallback->ops->submit)
        return MC_ERR_INVALID_PARAMS; /* it could not serve buffers without a memfd */
    shm_ctx_t *c = mc_calloc(1, sizeof(*c));
    if (!c)
        return MC_ERR_NO_MEMORY;
    c->te = te;
    c->fallback = fallback;
    c->ctl_size = MC_TE_SHM_SLOTS * sizeof(shm_slot_t);
    c->ctl_fd = memfd_create("mc-te-ctl", MFD_CLOEXEC);
    if (c->ctl_fd < 0 || ftruncate(c->ctl_fd, (off_t)c->ctl_size) != 0) {
        MC_LOG_WARN("shm: control memfd failed: %m");
        if (c->ctl_fd >= 0)
            close(c->ctl_fd);
        mc_free(c);
        return MC_ERR_IO;
    }
    c->ctl = mmap(NULL, c->ctl_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                  c->ctl_fd, 0);
    if (c->ctl == MAP_FAILED) {
        MC_LOG_WARN("shm: control mmap failed: %m");
        close(c->ctl_fd);
        mc_free(c);
        return MC_ERR_IO;
    }
    pthread_mutex_init(&c->mu, NULL);
    *ctx_p = c;
    return MC_OK;
}

static void shm_fini(void *vctx)
{
    shm_ctx_t *c = vctx;
    if (!c)
        return;
    munmap(c->ctl, c->ctl_size);
    close(c->ctl_fd);
    pthread_mutex_destroy(&c->mu);
    mc_free(c);
}

static mc_status_t shm_on_register(void *vctx, mc_te_lbuf_t *b)
{
    shm_ctx_t *c = vctx;
    b->slot = -1;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < MC_TE_SHM_SLOTS; i++) {
        if (c->used[i] || atomic_load(&c->ctl[i].inflight) != 0)
            continue;
        c->used[i] = 1;
        b->slot = i;
        b->gen = ++c->next_gen;
        atomic_store(&c->ctl[i].serve_until_ns, atomic_load(&b->serve_until_ns));
        atomic_store(&c->ctl[i].state, (b->gen << 1) | 1);
        break;
    }
    pthread_mutex_unlock(&c->mu);
    return b->slot >= 0 ? MC_OK : MC_ERR_NO_AVAILABLE_HANDLE;
}

static mc_status_t shm_on_unregister(void *vctx, mc_te_lbuf_t *b, uint64_t deadline_ns)
{
    shm_ctx_t *c = vctx;
    shm_slot_t *s = &c->ctl[b->slot];
    atomic_store(&s->state, b->gen << 1); /* seq_cst: initiators that look now see it */
    uint32_t spin = 0;
    while (atomic_load(&s->inflight) != 0) {
        if (mc_now_ns() >= deadline_ns)
            return MC_ERR_BUSY;
        if (++spin < 100)
            sched_yield();
        else
            usleep(200);
    }
    return MC_OK;
}

/* The owner's mc_te_set_serve_until, for initiators that copy without asking it. */
static void shm_on_serve_until(void *vctx, mc_te_lbuf_t *b)
{
    shm_ctx_t *c = vctx;
    if (b->slot >= 0)
        atomic_store(&c->ctl[b->slot].serve_until_ns, atomic_load(&b->serve_until_ns));
}

static void shm_on_unregister_abort(void *vctx, mc_te_lbuf_t *b)
{
    shm_ctx_t *c = vctx;
    atomic_store(&c->ctl[b->slot].state, (b->gen << 1) | 1);
}

static void shm_on_unregister_done(void *vctx, mc_te_lbuf_t *b)
{
    shm_ctx_t *c = vctx;
    pthread_mutex_lock(&c->mu);
    c->used[b->slot] = 0;
    pthread_mutex_unlock(&c->mu);
    b->slot = -1;
}

static char *shm_transport_info(void *vctx)
{
    shm_ctx_t *c = vctx;
    mc_te_table_t *t = &c->te->table;
    json_t *o = json_object();
    json_t *a = json_array();
    json_object_set_new(o, "shm_ctl_fd", json_integer(c->ctl_fd));
    json_object_set_new(o, "shm_ctl_slots", json_integer(MC_TE_SHM_SLOTS));
    pthread_rwlock_rdlock(&t->lock);
    for (size_t i = 0; i < t->n; i++) {
        const mc_te_lbuf_t *b = t->bufs[i];
        if (b->slot < 0)
            continue;
        json_t *e = json_array();
        json_array_append_new(e, json_integer((json_int_t)b->addr));
        json_array_append_new(e, json_integer(b->slot));
        json_array_append_new(e, json_integer((json_int_t)b->gen));
        json_array_append_new(a, e);
    }
    pthread_rwlock_unlock(&t->lock);
    json_object_set_new(o, "slots", a);
    /* jansson allocates with malloc; mc_free (free) releases it like our own strings */
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* ==================================== initiator ======================================= */

typedef struct shm_info {
    int ctl_fd;
    uint32_t ctl_slots;
    json_t *root; /* slots array inside */
} shm_info_t;

static bool parse_info(const char *ti, shm_info_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!ti)
        return false;
    json_error_t err;
    json_t *o = json_loads(ti, 0, &err);
    json_t *fd = o ? json_object_get(o, "shm_ctl_fd") : NULL;
    json_t *ns = o ? json_object_get(o, "shm_ctl_slots") : NULL;
    if (!json_is_integer(fd) || !json_is_integer(ns) || json_integer_value(fd) < 0 ||
        json_integer_value(fd) > 1 << 24 || json_integer_value(ns) <= 0 ||
        json_integer_value(ns) > MC_TE_SHM_SLOTS || !json_is_array(json_object_get(o, "slots"))) {
        json_decref(o);
        return false;
    }
    out->ctl_fd = (int)json_integer_value(fd);
    out->ctl_slots = (uint32_t)json_integer_value(ns);
    out->root = o;
    return true;
}

static bool shm_can_reach(void *vctx, const mc_segment_desc_t *d)
{
    shm_info_t info;
    if (!parse_info(d->transport_info, &info))
        return false;
    json_decref(info.root);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)d->pid, info.ctl_fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        MC_LOG_DEBUG("shm: cannot open %s (%m); using tcp", path);
        return false;
    }
    close(fd);
    return true;
}

static void rbufs_free(shm_rbuf_t *bufs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (bufs[i].map)
            munmap(bufs[i].map, bufs[i].map_len);
    mc_free(bufs);
}

static void peer_drop(shm_peer_t *sp)
{
    rbufs_free(sp->bufs, sp->n_bufs);
    sp->bufs = NULL;
    sp->n_bufs = 0;
    if (sp->ctl)
        munmap(sp->ctl, sp->ctl_size);
    sp->ctl = NULL;
    if (sp->pidfd >= 0)
        close(sp->pidfd);
    sp->pidfd = -1;
    mc_te_rdesc_put(sp->desc);
    sp->desc = NULL;
    sp->pid = 0;
}

/* Rebuild sp for descriptor r (under the write lock). Keeps mappings of unchanged buffers
 * when the owner process is the same. */
static mc_status_t peer_rebuild(shm_peer_t *sp, mc_te_rdesc_t *r)
{
    const mc_segment_desc_t *d = &r->d;
    shm_info_t info;
    if (!parse_info(d->transport_info, &info))
        return MC_ERR_PROTOCOL;
    if (sp->pid != d->pid)
        peer_drop(sp);
    mc_status_t st = MC_OK;
    if (!sp->ctl) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)d->pid, info.ctl_fd);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        struct stat sb;
        size_t need = (size_t)info.ctl_slots * sizeof(shm_slot_t);
        if (fd < 0 || fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < need) {
            MC_LOG_WARN("shm: control memfd of pid %d unusable: %m", (int)d->pid);
            st = MC_ERR_CONNECTION;
        } else {
            void *m = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (m == MAP_FAILED) {
                st = MC_ERR_IO;
            } else {
                sp->ctl = m;
                sp->ctl_size = need;
                sp->ctl_slots = info.ctl_slots;
            }
        }
        if (fd >= 0)
            close(fd);
        if (st == MC_OK) {
            sp->pid = d->pid;
            sp->pidfd = (int)syscall(SYS_pidfd_open, (pid_t)d->pid, 0);
            /* CMA needs ptrace-like permission; probe it once with a 1-byte read */
            sp->cma_ok = true;
            if (d->n_buffers > 0) {
                uint8_t x;
                struct iovec l = {&x, 1}, rr = {(void *)(uintptr_t)d->buffers[0].addr, 1};
                if (process_vm_readv(d->pid, &l, 1, &rr, 1, 0) < 0 && errno == EPERM)
                    sp->cma_ok = false;
            }
        }
    }
    shm_rbuf_t *nb = NULL;
    if (st == MC_OK && d->n_buffers > 0) {
        nb = mc_calloc(d->n_buffers, sizeof(*nb));
        if (!nb)
            st = MC_ERR_NO_MEMORY;
    }
    if (st != MC_OK) {
        json_decref(info.root);
        peer_drop(sp);
        return st;
    }
    json_t *slots = json_object_get(info.root, "slots");
    for (size_t i = 0; i < d->n_buffers; i++) {
        shm_rbuf_t *b = &nb[i];
        b->addr = d->buffers[i].addr;
        b->len = d->buffers[i].length;
        b->shm_fd = d->buffers[i].shm_fd;
        b->shm_offset = d->buffers[i].shm_offset;
        b->slot = -1;
        size_t k;
        json_t *e;
        json_array_foreach(slots, k, e) {
            json_t *ja = json_array_get(e, 0), *js = json_array_get(e, 1), *jg = json_array_get(e, 2);
            if (json_is_integer(ja) && json_is_integer(js) && json_is_integer(jg) &&
                (uint64_t)json_integer_value(ja) == b->addr && json_integer_value(js) >= 0 &&
                json_integer_value(js) < (json_int_t)sp->ctl_slots) {
                b->slot = (int32_t)json_integer_value(js);
                b->gen = (uint64_t)json_integer_value(jg);
                break;
            }
        }
        /* reuse an existing mapping of the same registration */
        for (size_t j = 0; j < sp->n_bufs; j++) {
            shm_rbuf_t *o = &sp->bufs[j];
            if (o->map && o->addr == b->addr && o->len == b->len && o->gen == b->gen &&
                o->slot == b->slot && o->shm_fd == b->shm_fd) {
                b->map = o->map;
                b->map_len = o->map_len;
                b->base = o->base;
                o->map = NULL;
            }
        }
    }
    json_decref(info.root);
    rbufs_free(sp->bufs, sp->n_bufs);
    sp->bufs = nb;
    sp->n_bufs = d->n_buffers;
    atomic_fetch_add(&r->refs, 1);
    mc_te_rdesc_put(sp->desc);
    sp->desc = r;
    return MC_OK;
}

/* Map one peer buffer (under the write lock). */
static void rbuf_map(shm_peer_t *sp, shm_rbuf_t *b)
{
    if (b->map || b->map_failed || b->shm_fd < 0 || b->slot < 0)
        return;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)sp->pid, b->shm_fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat sb;
    b->map_failed = true;
    if (fd < 0 || fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < b->shm_offset ||
        (uint64_t)sb.st_size - b->shm_offset < b->len) {
        MC_LOG_WARN("shm: cannot use %s for buffer 0x%llx: %m", path, (unsigned long long)b->addr);
    } else {
        /* from the memfd page at or below the buffer to the page end at or above its end (not
         * past the file's): pages of the memfd's own size (st_blksize), 2 MiB or 1 GiB for
         * one on huge pages (mc_te_alloc_shareable), whose mappings must start and end on
         * them */
        uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
        if ((uint64_t)sb.st_blksize > pg)
            pg = (uint64_t)sb.st_blksize;
        uint64_t aoff = b->shm_offset & ~(pg - 1), delta = b->shm_offset - aoff;
        uint64_t end = (b->shm_offset + b->len + pg - 1) & ~(pg - 1);
        if (end > (uint64_t)sb.st_size)
            end = (uint64_t)sb.st_size;
        size_t map_len = (size_t)(end - aoff);
        /* the fd number is only trustworthy if the registration is still the one we saw */
        shm_slot_t *s = &sp->ctl[b->slot];
        void *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)aoff);
        if (m != MAP_FAILED && mc_pages_populate_write(m, map_len) != 0) {
            /* old kernel: at least read-populate the page tables */
            madvise(m, map_len, MADV_WILLNEED);
        }
        if (m == MAP_FAILED) {
            MC_LOG_WARN("shm: mmap of peer buffer failed: %m");
        } else if (atomic_load(&s->state) != ((b->gen << 1) | 1)) {
            munmap(m, map_len);
            b->map_failed = false; /* stale descriptor: caller refreshes */
        } else {
            b->map = m;
            b->map_len = map_len;
            b->base = (uint8_t *)m + delta;
            b->map_failed = false;
        }
    }
    if (fd >= 0)
        close(fd);
}

static shm_peer_t *peer_state(mc_te_peer_t *peer)
{
    /* created under the peer's mutex so two submitters cannot race */
    pthread_mutex_lock(&peer->mu);
    shm_peer_t *sp = peer->tp_state[MC_TE_TP_SHM];
    if (!sp) {
        sp = mc_calloc(1, sizeof(*sp));
        if (sp) {
            pthread_rwlock_init(&sp->lock, NULL);
            sp->pidfd = -1;
            peer->tp_state[MC_TE_TP_SHM] = sp;
        }
    }
    pthread_mutex_unlock(&peer->mu);
    return sp;
}

static bool owner_exited(shm_peer_t *sp)
{
    if (sp->pidfd < 0)
        return kill(sp->pid, 0) != 0 && errno == ESRCH;
    struct pollfd p = {.fd = sp->pidfd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

enum { C_DONE, C_CMA, C_TCP, C_STALE, C_MAP, C_FENCED };

/* Try one slice under the read lock. next: the slice the caller copies after it, or NULL (a
 * hashed read prefetches its start if it lies in the same buffer: mc_te_copy_hashed). */
static int copy_slice(shm_peer_t *sp, mc_te_slice_t *s, const mc_te_slice_t *next,
                      mc_status_t *st_p)
{
    ptrdiff_t i = mc_segment_desc_find(&sp->desc->d, s->remote, s->len);
    if (i < 0)
        return C_STALE;
    shm_rbuf_t *b = &sp->bufs[i];
    if (b->shm_fd < 0 || b->slot < 0 || b->map_failed)
        return sp->cma_ok ? C_CMA : C_TCP;
    if (!b->map)
        return C_MAP;
    shm_slot_t *sl = &sp->ctl[b->slot];
    atomic_fetch_add(&sl->inflight, 1);
    if (atomic_load(&sl->state) != ((b->gen << 1) | 1)) {
        atomic_fetch_sub(&sl->inflight, 1);
        return C_STALE;
    }
    uint64_t until = atomic_load(&sl->serve_until_ns); /* the owner's, on the same clock */
    if (until && mc_now_ns() > until) {
        atomic_fetch_sub(&sl->inflight, 1);
        *st_p = MC_ERR_SEGMENT_FENCED;
        return C_FENCED;
    }
    uint8_t *remote = b->base + (s->remote - b->addr);
    if (s->opcode == MC_TE_READ && s->hash_out) { /* te_hashed.h: one pass, copy and XXH3 */
        bool ahead = next && next->remote - b->addr < b->len; /* unsigned: below addr too */
        mc_te_copy_hashed(s->hash_out, s->local, remote, s->len,
                          ahead ? b->base + (next->remote - b->addr) : NULL);
    } else if (s->opcode == MC_TE_READ)
        mc_payload_copy(s->local, remote, s->len);
    else
        mc_payload_copy(remote, s->local, s->len);
    atomic_fetch_sub(&sl->inflight, 1);
    *st_p = MC_OK;
    return C_DONE;
}

/* Drop *cur (the descriptor this submit works with) from the peer's cache, fetch the current
 * one and rebuild sp for it; *cur is then the new one. MC_OK, or why not (*cur unchanged when
 * the fetch failed). Not under sp->lock (the fetch may go to the network). */
static mc_status_t refresh_desc(mc_te_peer_t *peer, shm_peer_t *sp, mc_te_rdesc_t **cur)
{
    mc_te_peer_invalidate(peer, *cur);
    mc_te_rdesc_t *nr;
    int tp;
    mc_status_t st = mc_te_peer_get_desc(peer, &nr, &tp);
    if (st != MC_OK)
        return st;
    mc_te_rdesc_put(*cur);
    *cur = nr;
    pthread_rwlock_wrlock(&sp->lock);
    st = peer_rebuild(sp, nr);
    pthread_rwlock_unlock(&sp->lock);
    return st;
}

static void shm_submit(void *vctx, mc_te_peer_t *peer, mc_te_rdesc_t *desc,
                       mc_te_slice_t **slices, size_t n)
{
    shm_ctx_t *c = vctx;
    shm_peer_t *sp = peer_state(peer);
    mc_te_slice_t **fwd = mc_calloc(n, sizeof(*fwd));
    if (!sp || !fwd) {
        mc_free(fwd);
        for (size_t i = 0; i < n; i++)
            mc_te_slice_done(slices[i], MC_ERR_NO_MEMORY, 0);
        return;
    }
    size_t nfwd = 0, ncma = 0;
    mc_te_rdesc_t *cur = desc;
    atomic_fetch_add(&cur->refs, 1);
    bool refreshed = false;
    pthread_rwlock_wrlock(&sp->lock);
    mc_status_t st = sp->desc == cur ? MC_OK : peer_rebuild(sp, cur);
    int32_t dead = 0;
    if (st == MC_OK && owner_exited(sp)) {
        MC_LOG_INFO("shm: owner of %s (pid %d) exited; fetching its descriptor again",
                    peer->name, (int)sp->pid);
        dead = sp->pid;
        peer_drop(sp);
    }
    pthread_rwlock_unlock(&sp->lock);
    if (dead) {
        /* The process our descriptor came from is gone; a new one may serve the segment on the
         * same host:port with a registration of its own. Fetch once (this counts as the
         * submit's one refresh): only a descriptor of another, living process is used. */
        refreshed = true;
        st = refresh_desc(peer, sp, &cur);
        pthread_rwlock_wrlock(&sp->lock);
        if (st == MC_OK && (cur->d.pid == dead || owner_exited(sp))) {
            peer_drop(sp);
            mc_te_peer_invalidate(peer, cur);
            st = MC_ERR_CONNECTION;
        }
        pthread_rwlock_unlock(&sp->lock);
        if (st != MC_OK) {
            MC_LOG_WARN("shm: owner of %s (pid %d) exited and no new one serves it: %s",
                        peer->name, (int)dead, mc_status_name(st));
            st = MC_ERR_CONNECTION;
        }
    }
    for (size_t i = 0; i < n && st != MC_OK; i++)
        mc_te_slice_done(slices[i], st, 0);
    if (st != MC_OK)
        n = 0;
    for (size_t i = 0; i < n; i++) {
        mc_te_slice_t *s = slices[i];
        for (int attempt = 0;; attempt++) {
            mc_status_t cst = MC_ERR_OUT_OF_RANGE;
            pthread_rwlock_rdlock(&sp->lock);
            int r = sp->desc ? copy_slice(sp, s, i + 1 < n ? slices[i + 1] : NULL, &cst)
                             : C_STALE;
            pthread_rwlock_unlock(&sp->lock);
            if (r == C_DONE || r == C_FENCED) {
                mc_te_slice_done(s, cst, r == C_DONE ? s->len : 0);
                break;
            }
            if (r == C_CMA || r == C_TCP) {
                s->cma = r == C_CMA;
                fwd[nfwd++] = s;
                ncma++;
                break;
            }
            if (attempt >= 3) {
                mc_te_slice_done(s, cst, 0);
                break;
            }
            if (r == C_MAP) {
                pthread_rwlock_wrlock(&sp->lock);
                if (sp->desc) {
                    ptrdiff_t k = mc_segment_desc_find(&sp->desc->d, s->remote, s->len);
                    if (k >= 0)
                        rbuf_map(sp, &sp->bufs[k]);
                }
                pthread_rwlock_unlock(&sp->lock);
                continue;
            }
            /* C_STALE: the range is not in our copy of the descriptor, or its registration
             * changed. Fetch the descriptor once more and retry. */
            if (refreshed) {
                mc_te_slice_done(s, MC_ERR_OUT_OF_RANGE, 0);
                break;
            }
            refreshed = true;
            if (refresh_desc(peer, sp, &cur) != MC_OK) {
                mc_te_slice_done(s, MC_ERR_TRANSFER_FAIL, 0);
                break;
            }
        }
    }
    if (nfwd > 0)
        c->fallback->ops->submit(c->fallback->ctx, peer, cur, fwd, nfwd);
    (void)ncma;
    mc_te_rdesc_put(cur);
    mc_free(fwd);
}

static void shm_peer_free(void *vctx, mc_te_peer_t *peer)
{
    shm_peer_t *sp = peer->tp_state[MC_TE_TP_SHM];
    if (!sp)
        return;
    peer_drop(sp);
    pthread_rwlock_destroy(&sp->lock);
    mc_free(sp);
    peer->tp_state[MC_TE_TP_SHM] = NULL;
}

static uint64_t shm_max_slice(void *vctx)
{
    return SHM_MAX_SLICE;
}

const mc_te_transport_ops_t mc_te_shm_ops = {
    .name = "shm",
    .init = shm_init,
    .fini = shm_fini,
    .max_slice = shm_max_slice,
    .can_reach = shm_can_reach,
    .submit = shm_submit,
    .on_register = shm_on_register,
    .on_unregister = shm_on_unregister,
    .on_unregister_abort = shm_on_unregister_abort,
    .on_unregister_done = shm_on_unregister_done,
    .on_serve_until = shm_on_serve_until,
    .transport_info = shm_transport_info,
    .peer_free = shm_peer_free,
};
